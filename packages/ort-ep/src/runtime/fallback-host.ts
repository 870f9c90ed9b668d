// The process that runs a session's fallback partitions. onnxruntime-node's InferenceSession.run
// runs on the JS thread (its promise resolves a synchronous native call made in a setImmediate),
// so a fallback partition in this process blocked the event loop for as long as it ran, and a
// fallback Loop of 2^40 iterations could neither finish nor be stopped. A worker thread keeps the
// event loop turning but cannot be stopped either: Worker.terminate() waits for the native call
// to return (and so does the process's exit). So the onnxruntime sessions live in a child process
// of their own, one per session program, started on the first use: runs are asynchronous, a
// terminated run kills the child if the partition does not end within a grace period, and a crash
// of onnxruntime on some input ends the child, not the application.
//
// Tensors cross as copies through the IPC channel (Node's 'advanced' serialization, which keeps
// typed arrays); the child speaks onnxruntime's JavaScript API to the module this process resolved.
import { type ChildProcess, spawn } from 'node:child_process';
import { OrtMlxError } from '../errors.js';
import type { CpuBackend, OrtModule, OrtSession, OrtTensor } from './onnxruntime.js';

/**
 * The child's program: a CommonJS script run with `node -e`, given the module's path. While
 * onnxruntime runs, the child's JS thread is in native code and sees no 'disconnect': a watchdog
 * thread ends the child when its parent is gone (it was re-parented).
 */
const HOST_SOURCE = `
const { Worker } = require('node:worker_threads');
new Worker('const ppid = ' + process.ppid + '; setInterval(() => { if (process.ppid !== ppid) process.kill(process.pid, "SIGKILL"); }, 200);', { eval: true }).unref();
const ort = require(process.argv[1]);
if (ort.env) ort.env.logLevel = 'error';
const sessions = new Map();
const plain = (t) => ({ type: t.type, dims: Array.from(t.dims), data: t.data });
process.on('disconnect', () => process.exit(0));
process.on('message', async (m) => {
  try {
    if (m.op === 'create') {
      sessions.set(m.id, await ort.InferenceSession.create(m.bytes, m.options));
      process.send({ id: m.id, ok: true });
    } else if (m.op === 'run') {
      const s = sessions.get(m.session);
      const feeds = {};
      for (const [k, t] of Object.entries(m.feeds)) feeds[k] = new ort.Tensor(t.type, t.data, t.dims);
      const out = await s.run(feeds, m.fetches);
      const res = {};
      for (const [k, t] of Object.entries(out)) res[k] = plain(t);
      process.send({ id: m.id, ok: true, outputs: res });
    } else if (m.op === 'release') {
      const s = sessions.get(m.session);
      sessions.delete(m.session);
      if (s) await s.release();
    }
  } catch (e) {
    if (m.id !== undefined) process.send({ id: m.id, ok: false, message: e && e.message ? e.message : String(e) });
  }
});
`;

/** A tensor as the host process gets it: the parts onnxruntime-common's Tensor is made of. */
class PlainTensor implements OrtTensor {
  constructor(
    readonly type: string,
    readonly data: unknown,
    readonly dims: readonly number[],
  ) {}
}

/** A typed array's own bytes: the serializer would copy a view's whole underlying buffer. */
function own(data: unknown): unknown {
  if (ArrayBuffer.isView(data) && data.byteLength !== data.buffer.byteLength) return (data as unknown as { slice(): unknown }).slice();
  return data;
}

interface Pending {
  resolve(v: unknown): void;
  reject(e: unknown): void;
}

/** The children started and not yet ended, killed when this process exits. */
const live = new Set<ChildProcess>();
let exitHook = false;

/** How long a terminated run's partition may still take before its process is killed (ms). */
export const TERMINATE_GRACE_MS = 50;

export class FallbackHost {
  /** The module the partitions' runners are given: onnxruntime's API, answered by the child. */
  readonly module: OrtModule;
  private child?: ChildProcess;
  /** Why the child is gone for good (it crashed or was killed): every later request fails with it. */
  private dead?: string;
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;
  private sessions = 0;

  constructor(
    readonly backend: CpuBackend & { modulePath: string },
    /** The partitions in messages. */
    private readonly what: string,
  ) {
    const host = this;
    this.module = {
      InferenceSession: {
        async create(bytes: Uint8Array, options?: object): Promise<OrtSession> {
          const { id, done } = host.request({ op: 'create', bytes: own(bytes), options });
          await done;
          host.sessions++;
          return {
            run: async (feeds, fetches) => {
              const plainFeeds: Record<string, { type: string; data: unknown; dims: readonly number[] }> = {};
              for (const [k, t] of Object.entries(feeds)) plainFeeds[k] = { type: t.type, data: own(t.data), dims: [...t.dims] };
              const r = (await host.request({ op: 'run', session: id, feeds: plainFeeds, fetches }).done) as {
                outputs: Record<string, OrtTensor>;
              };
              const out: Record<string, OrtTensor> = {};
              for (const [k, t] of Object.entries(r.outputs)) out[k] = new PlainTensor(t.type, t.data, t.dims);
              return out;
            },
            release: async () => {
              host.send({ op: 'release', session: id });
              if (--host.sessions <= 0) host.close();
            },
          };
        },
      },
      Tensor: PlainTensor,
    };
  }

  private start(): ChildProcess {
    if (this.child) return this.child;
    const child = spawn(process.execPath, ['-e', HOST_SOURCE, this.backend.modulePath], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      serialization: 'advanced',
    });
    child.on('message', (m: { id: number; ok: boolean; message?: string }) => {
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      this.idle();
      if (m.ok) p.resolve(m);
      else p.reject(new Error(m.message));
    });
    child.on('exit', (code, signal) => {
      if (this.child !== child) return;
      this.child = undefined;
      this.dead ??= `onnxruntime's process for the fallback partitions (${this.what}) ended (${signal ? `signal ${signal}` : `exit code ${code}`})`;
      this.failAll(new OrtMlxError(this.dead));
    });
    child.on('error', (e) => {
      this.dead ??= `onnxruntime's process for the fallback partitions could not run: ${e.message}`;
      this.failAll(new OrtMlxError(this.dead, { cause: e }));
    });
    this.child = child;
    live.add(child);
    child.once('exit', () => live.delete(child));
    if (!exitHook) {
      // A partition still running when this process exits would keep its child busy.
      exitHook = true;
      process.once('exit', () => {
        for (const c of live) c.kill('SIGKILL');
      });
    }
    this.idle();
    return child;
  }

  /** The child keeps this process alive only while a request is in flight. */
  private idle(): void {
    const c = this.child;
    if (!c) return;
    const channel = c.channel as { ref?(): void; unref?(): void } | undefined;
    if (this.pending.size) {
      c.ref();
      channel?.ref?.();
    } else {
      c.unref();
      channel?.unref?.();
    }
  }

  private failAll(e: Error): void {
    const all = [...this.pending.values()];
    this.pending.clear();
    for (const p of all) p.reject(e);
  }

  private send(m: object): void {
    if (this.child?.connected) this.child.send(m);
  }

  /** Sends a request; its id (a session's id is that of its 'create') and its answer. */
  private request(m: { op: string } & Record<string, unknown>): { id: number; done: Promise<unknown> } {
    const id = this.nextId++;
    if (this.dead) return { id, done: Promise.reject(new OrtMlxError(`${this.dead}: create the session again to run them`)) };
    const child = this.start();
    const done = new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.idle();
      child.send({ ...m, id }, (e) => {
        if (e && this.pending.delete(id)) {
          this.idle();
          reject(e);
        }
      });
    });
    return { id, done };
  }

  /**
   * A run was terminated while a partition ran here: the partition may end within the grace
   * period (the sessions stay), else the child is killed and later runs of these partitions fail.
   */
  cancel(): void {
    if (!this.pending.size || !this.child) return;
    const child = this.child;
    const timer = setTimeout(() => {
      if (!this.pending.size || this.child !== child) return;
      this.dead = `onnxruntime's process for the fallback partitions (${this.what}) was killed: a run was terminated (RunOptions.terminate) while a partition ran`;
      this.child = undefined;
      live.delete(child);
      child.kill('SIGKILL');
      this.failAll(new OrtMlxError(this.dead));
    }, TERMINATE_GRACE_MS);
    timer.unref();
  }

  /**
   * Ends the child (every session released, or the session program dropped): it disconnects, or,
   * while a partition runs there (its JS thread is in native code and would not see that), is killed.
   */
  close(): void {
    const child = this.child;
    this.child = undefined;
    this.dead ??= 'the session was released';
    const busy = this.pending.size > 0;
    this.failAll(new OrtMlxError(this.dead));
    if (!child) return;
    live.delete(child);
    if (busy) child.kill('SIGKILL');
    else if (child.connected) child.disconnect();
  }
}
