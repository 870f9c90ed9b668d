// Fallback partitions run off the JS thread: onnxruntime-node's run is a synchronous native call
// on the JS thread, so a partition blocked the event loop for as long as it ran (a 90 ms gap for a
// 91 ms run), and a fallback Loop of 2^40 iterations could neither finish nor be stopped. They now
// run in a child process of the session (runtime/fallback-host.ts): the event loop turns, and
// RunOptions.terminate stops the run (the child is killed if the partition does not end).
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { type HostTensor, MlxSession, OrtMlxError, RunTerminatedError } from '../../src/index.js';
import { model, node, v, type GraphSpec } from '../helpers/build.js';
import { i64 as ortI64, runOn } from '../helpers/ort.js';

/** Loop(M) counting its iterations; with disabledOps ['Loop'] the whole Loop runs on onnxruntime. */
function counter(): Uint8Array {
  const body: GraphSpec = {
    name: 'body',
    inputs: [v('iter', 'int64', []), v('cond_in', 'bool', []), v('c', 'int64', [])],
    outputs: [v('cond_out', 'bool', []), v('c_out', 'int64', [])],
    initializers: [{ name: 'one', type: 'int64', dims: [], values: [1n] }],
    nodes: [node('Identity', ['cond_in'], ['cond_out']), node('Add', ['c', 'one'], ['c_out'])],
  };
  return model({
    opsets: { '': 13 },
    inputs: [v('M', 'int64', [])],
    outputs: [v('count', 'int64', [])],
    initializers: [
      { name: 'cond0', type: 'bool', dims: [], values: [1] },
      { name: 'c0', type: 'int64', dims: [], values: [0n] },
    ],
    nodes: [node('Loop', ['M', 'cond0', 'c0'], ['count'], { name: 'count', attrs: { body: { g: body } } })],
  });
}

const pkgDir = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The pids of the processes whose parent is `ppid` (/proc). */
function childrenOf(ppid: number): number[] {
  const out: number[] = [];
  for (const d of readdirSync('/proc').filter((x) => /^\d+$/.test(x))) {
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === ppid) out.push(Number(d));
    } catch {
      // gone
    }
  }
  return out;
}
/** Whether `pid` runs (a zombie, killed and not yet reaped by whoever adopted it, does not). */
const alive = (pid: number) => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
};

const i64 = (n: number | bigint): HostTensor => ({ dtype: 7, dims: [], data: BigInt64Array.of(BigInt(n)) });
const open = () => MlxSession.create(counter(), { device: 'cpu', fallback: 'cpu', disabledOps: ['Loop'] });

/** Ticks of a 2 ms timer and the longest gap between two of them while `body` runs. */
async function ticking<T>(body: () => Promise<T>): Promise<{ result: T; ticks: number; gap: number; ms: number }> {
  let ticks = 0;
  let last = performance.now();
  let gap = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    gap = Math.max(gap, now - last);
    last = now;
    ticks++;
  }, 2);
  const t0 = performance.now();
  try {
    const result = await body();
    const ms = performance.now() - t0;
    gap = Math.max(gap, performance.now() - last);
    return { result, ticks, gap, ms };
  } finally {
    clearInterval(timer);
  }
}

describe('fallback partitions run off the JS thread', () => {
  it('the event loop keeps turning while a long fallback Loop runs, and the result is onnxruntime-node’s', async () => {
    const s = await open();
    try {
      expect(s.fallbackStats.map((f) => f.ops)).toEqual([['Loop']]);
      // Find a trip count that keeps onnxruntime busy for at least 300 ms.
      let M = 50_000;
      let r: Awaited<ReturnType<typeof ticking<Record<string, unknown>>>>;
      for (;;) {
        r = await ticking(() => s.run({ M: i64(M) }));
        if (r.ms >= 300 || M > 2 ** 26) break;
        M *= 4;
      }
      expect(Number(((r.result.count as HostTensor).data as BigInt64Array)[0])).toBe(M);
      // Before, the partition ran on this thread: one gap as long as the run, and no tick in it.
      expect(r.ticks).toBeGreaterThanOrEqual(20);
      expect(r.gap).toBeLessThan(r.ms / 2);
      const want = await runOn('cpu', counter(), { M: ortI64([M], []) });
      expect(Number((want.count.data as BigInt64Array)[0])).toBe(M);
    } finally {
      await s.release();
    }
  }, 60_000);

  it('RunOptions.terminate stops a fallback Loop of 2^40 iterations, within a bound', async () => {
    const s = await open();
    try {
      const options = { terminate: false };
      let ticks = 0;
      // Set by the timer's 10th tick: only reached if the event loop turns while the Loop runs.
      const timer = setInterval(() => {
        if (++ticks === 10) options.terminate = true;
      }, 5);
      const t0 = performance.now();
      const e = await s.run({ M: i64(2n ** 40n) }, undefined, options).then(
        () => 'ran',
        (err: unknown) => err,
      );
      clearInterval(timer);
      expect(e).toBeInstanceOf(RunTerminatedError);
      expect((e as Error).message).toMatch(
        /^model <bytes>: the run was terminated \(RunOptions\.terminate\) while onnxruntime partition 0 \(1 node\(s\)\) ran$/,
      );
      expect(performance.now() - t0).toBeLessThan(10_000);
      // The partition could not end, so its process was killed: later runs say so.
      await new Promise((resolve) => setTimeout(resolve, 200));
      const again = await s.run({ M: i64(3) }).then(
        () => 'ran',
        (err: unknown) => err,
      );
      expect(again).toBeInstanceOf(OrtMlxError);
      expect((again as Error).message).toMatch(/was killed: a run was terminated \(RunOptions\.terminate\) while a partition ran/);
    } finally {
      await s.release();
    }
  }, 60_000);

  it('a terminated run leaves the session usable', async () => {
    const s = await open();
    try {
      const options = { terminate: true };
      await expect(s.run({ M: i64(5) }, undefined, options)).rejects.toBeInstanceOf(RunTerminatedError);
      const out = await s.run({ M: i64(7) });
      expect(Number(((out.count as HostTensor).data as BigInt64Array)[0])).toBe(7);
    } finally {
      await s.release();
    }
  }, 60_000);

  it('runSync with a fallback partition still gives its clear error', async () => {
    const s = await open();
    try {
      expect(() => s.runSync({ M: i64(3) })).toThrow(
        /onnxruntime partition 0 \(1 node\(s\)\) runs on onnxruntime, whose runs are asynchronous: use run\(\), not runSync\(\)/,
      );
      // and run() still works after it
      const out = await s.run({ M: i64(3) });
      expect(Number(((out.count as HostTensor).data as BigInt64Array)[0])).toBe(3);
    } finally {
      await s.release();
    }
  }, 60_000);

  it('release() while a fallback Loop of 2^40 iterations runs stops it: the run fails, no process is left', async () => {
    const before = new Set(childrenOf(process.pid));
    const s = await open();
    const run = s.run({ M: i64(2n ** 40n) }).then(
      () => 'ran',
      (err: unknown) => err,
    );
    await new Promise((resolve) => setTimeout(resolve, 300));
    const hosts = childrenOf(process.pid).filter((p) => !before.has(p));
    expect(hosts).toHaveLength(1);
    s.release();
    const e = await run;
    expect(e).toBeInstanceOf(OrtMlxError);
    expect((e as Error).message).toMatch(/\(onnxruntime: Loop\): the session was released/);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(hosts.filter(alive)).toEqual([]);
  }, 60_000);

  it('a process that exits while a fallback Loop runs leaves no onnxruntime process behind', async () => {
    const code = `
      import { MlxSession } from '@mlx/ort-ep';
      import { readdirSync, readFileSync } from 'node:fs';
      const model = Buffer.from(process.env.MODEL, 'base64');
      const s = await MlxSession.create(model, { device: 'cpu', fallback: 'cpu', disabledOps: ['Loop'] });
      void s.run({ M: { dtype: 7, dims: [], data: BigInt64Array.of(2n ** 40n) } }).catch(() => {});
      await new Promise((r) => setTimeout(r, 500));
      const kids = readdirSync('/proc').filter((d) => /^\\d+$/.test(d)).filter((d) => {
        try {
          const st = readFileSync('/proc/' + d + '/stat', 'utf8');
          // onnxruntime's process (runtime/fallback-host.ts), not tsx's esbuild service
          return Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[1]) === process.pid && readFileSync('/proc/' + d + '/cmdline', 'utf8').includes('InferenceSession');
        } catch { return false; }
      });
      console.log(JSON.stringify(kids.map(Number)));
      process.exit(Number(process.env.HOW));`;
    for (const how of ['0', '3']) {
      const { stdout } = await promisify(execFile)(
        process.execPath,
        ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', code],
        { cwd: pkgDir, env: { ...process.env, MODEL: Buffer.from(counter()).toString('base64'), HOW: how }, timeout: 60_000 },
      ).catch((e: { stdout: string }) => e);
      const kids = JSON.parse(stdout.trim().split('\n').pop()!) as number[];
      expect(kids.length).toBeGreaterThanOrEqual(1);
      await new Promise((resolve) => setTimeout(resolve, 1000));
      expect(kids.filter(alive)).toEqual([]);
    }
  }, 120_000);
});
