// Evaluation off the JS thread and within a memory budget.
//
// evalInBackground runs MLX's eval on a native worker thread, one per stream, so the event loop
// keeps turning while MLX computes. MLX evaluates a stream's work only on the thread that made the
// stream, unless it was made with `newStream(device, { anyThread: true })`: arrays evaluated in the
// background must be built on such a stream.
//
// Both forms take limits: before anything is computed, every array the evaluation would allocate is
// counted (native code walks the graph); over a limit, nothing runs and an MlxError names the
// largest array, its shape, dtype, bytes and the primitive that makes it.
import type { Array } from './array.js';
import { makeVector } from './call.js';
import { flushDisposed } from './lifetime.js';
import { MlxError, check, fn } from './native.js';
import { resolveStream, type StreamLike } from './stream.js';
import { Socket } from 'node:net';
import { isMainThread } from 'node:worker_threads';

export interface EvalLimits {
  /** The most bytes one array may take (0 or undefined: no limit). */
  maxArrayBytes?: number;
  /**
   * The most bytes the evaluation may hold at once: the new arrays computed in a topological order,
   * each freed after its last reader (the results kept), as MLX frees intermediates as it goes.
   */
  maxTotalBytes?: number;
}

const size = (n: number | undefined): number => {
  if (n === undefined) return 0;
  if (!Number.isFinite(n) || n < 0) throw new RangeError(`memory limit must be a non-negative number of bytes, got ${n}`);
  return Math.floor(n);
};

/** Evaluates arrays on this thread, within the limits. */
export function evaluateWithin(arrays: readonly Array[], limits: EvalLimits = {}): void {
  flushDisposed();
  const list = addresses(arrays);
  check(fn.mlxc_eval_arrays(list, arrays.length, size(limits.maxArrayBytes), size(limits.maxTotalBytes)), 'mlxc_eval_arrays');
}

// The addresses of the arrays of one call (JS is single-threaded: the native side copies them).
let list = new BigUint64Array(64);
function addresses(arrays: readonly Array[]): BigUint64Array {
  if (arrays.length > list.length) list = new BigUint64Array(Math.max(arrays.length, 2 * list.length));
  for (let i = 0; i < arrays.length; i++) list[i] = arrays[i].address;
  return list;
}

// Background evaluations in flight, by id. The native side reports each end as a 16-byte record
// (id, error length) on a pipe this thread reads in its event loop: no native thread waits for the
// JS thread, and the socket keeps the process alive only while something is in flight. Each JS
// thread (the main thread, every worker thread: each has its own instance of this module) has a
// channel of its own (mlxc_eval_channel), named in the high bits of its ids, so that no thread
// reads another's reports; a worker's channel is closed when the worker ends.
const pending = new Map<bigint, { resolve: () => void; reject: (e: unknown) => void; stream: StreamLike }>();
let nextSeq = 1n;
let channelBits = 0n;
let reports: Socket | undefined;
let partial: Buffer | undefined;

function onReports(chunk: Buffer): void {
  let data = partial ? Buffer.concat([partial, chunk]) : chunk;
  partial = undefined;
  const whole = data.length - (data.length % 16);
  if (whole < data.length) partial = Buffer.from(data.subarray(whole));
  data = data.subarray(0, whole);
  for (let at = 0; at < data.length; at += 16) {
    const id = data.readBigUInt64LE(at);
    const errorBytes = Number(data.readBigUInt64LE(at + 8));
    const p = pending.get(id);
    if (!p) continue;
    pending.delete(id);
    if (errorBytes) {
      const buf = Buffer.alloc(errorBytes + 1);
      check(fn.mlxc_eval_take_error(buf, buf.length, id as never), 'mlxc_eval_take_error');
      // Kernel errors MLX recorded on a CPU stream come back here too (the native side checks the stream).
      p.reject(new MlxError(buf.subarray(0, errorBytes).toString('utf8'), 'mlxc_eval_arrays_async'));
    } else p.resolve();
  }
  if (!pending.size) reports?.unref();
}

function reportSocket(): Socket {
  if (reports) return reports;
  const fd = [0];
  const channel = [0n];
  check(fn.mlxc_eval_channel(fd as never, channel as never), 'mlxc_eval_channel');
  const c = BigInt(channel[0]);
  channelBits = c << 40n;
  const sock = new Socket({ fd: fd[0], readable: true, writable: false });
  sock.on('data', onReports);
  sock.on('error', (e) => {
    for (const p of pending.values()) p.reject(e);
    pending.clear();
  });
  sock.unref();
  // A worker thread's channel ends with it (the main thread's lives as long as the process).
  if (!isMainThread) process.once('exit', () => void fn.mlxc_eval_channel_close(c as never));
  reports = sock;
  return sock;
}

export interface BackgroundOptions {
  /**
   * On a CPU stream, a graph of at most this many arrays to compute is queued from the calling
   * thread rather than by the worker (one thread hop less; MLX's CPU primitives only allocate and
   * queue their work there). Leave it 0 (the default) where queueing may block: the first
   * evaluation of a compiled function builds its fused kernels while queueing. Ignored where the
   * inline CPU mode works (see inlineEvalTasks): the worker then computes the whole graph on its
   * own thread, one hop against one per primitive.
   */
  inlineNodes?: number;
}

const inlineNodes = (o: BackgroundOptions): number => {
  const n = o.inlineNodes ?? 0;
  if (!Number.isInteger(n) || n < 0) throw new RangeError(`inlineNodes must be a non-negative integer, got ${n}`);
  return n;
};

/**
 * Evaluates arrays on a thread of the native library's own, one per stream (a stream is always
 * evaluated on the same thread, as MLX's CUDA backend needs); resolves when they are computed.
 * `stream` is the stream they were built on, made with `newStream(device, { anyThread: true })`.
 */
export function evalInBackground(
  arrays: readonly Array[],
  limits: EvalLimits = {},
  stream?: StreamLike,
  options: BackgroundOptions = {},
): Promise<void> {
  if (!arrays.length) return Promise.resolve();
  flushDisposed();
  const maxArray = size(limits.maxArrayBytes);
  const maxTotal = size(limits.maxTotalBytes);
  const s = resolveStream(stream);
  const sock = reportSocket();
  const id = channelBits | nextSeq++;
  return new Promise<void>((resolve, reject) => {
    // The worker holds its own references to the arrays: the list can be reused at once.
    try {
      check(
        fn.mlxc_eval_arrays_async(addresses(arrays), arrays.length, s.handle, maxArray, maxTotal, inlineNodes(options), id as never),
        'mlxc_eval_arrays_async',
      );
    } catch (e) {
      reject(e);
      return;
    }
    pending.set(id, { resolve, reject, stream: s });
    if (pending.size === 1) sock.ref();
  });
}

/**
 * @internal Starts a native job that reports its end as an id on this thread's channel
 * (mlxc_eval_channel), as mlxc_eval_arrays_async does: `start(id)` queues it and returns whether
 * it did. The promise settles with the report (rejected with its error); undefined when nothing
 * was queued.
 */
export function whenReported(start: (id: bigint) => boolean, stream: StreamLike): Promise<void> | undefined {
  const sock = reportSocket();
  const id = channelBits | nextSeq++;
  if (!start(id)) return undefined;
  // The report is read in the event loop: it cannot come before the promise is registered.
  return new Promise<void>((resolve, reject) => {
    pending.set(id, { resolve, reject, stream });
    if (pending.size === 1) sock.ref();
  });
}

/** The bytes evaluating `arrays` would allocate (every array not computed yet, once) and the largest. */
export function graphBytes(arrays: readonly Array[]): { total: number; largest: number } {
  const v = makeVector(arrays);
  try {
    const total = [0];
    const largest = [0];
    check(fn.mlxc_graph_bytes(total as never, largest as never, v), 'mlxc_graph_bytes');
    return { total: Number(total[0]), largest: Number(largest[0]) };
  } finally {
    fn.mlx_vector_array_free(v);
  }
}

/**
 * How many tasks of MLX's CPU streams have run on the evaluating thread so far (process-wide).
 * evaluateWithin and the background worker run a CPU stream's work on their own thread instead of
 * handing each primitive to the stream's thread, which costs a thread wake-up per primitive; 0
 * where that mode is off (MLXC_INLINE_EVAL=0) or did not engage.
 */
export function inlineEvalTasks(): number {
  const n = [0];
  check(fn.mlxc_inline_eval_tasks(n as never), 'mlxc_inline_eval_tasks');
  return Number(n[0]);
}
