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
import { MlxError, check, fn, koffi, native } from './native.js';
import { resolveStream, type StreamLike } from './stream.js';

export interface EvalLimits {
  /** The most bytes one array may take (0 or undefined: no limit). */
  maxArrayBytes?: number;
  /** The most bytes the evaluation may allocate in all, counting every new array once. */
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
  const v = makeVector(arrays);
  try {
    check(fn.mlxc_eval_within(v, size(limits.maxArrayBytes), size(limits.maxTotalBytes)), 'mlxc_eval_within');
  } finally {
    fn.mlx_vector_array_free(v);
  }
}

// Background evaluations in flight, by the address of their payload buffer; one registered
// callback serves them all (koffi runs it on the JS thread, queued from the native worker).
const pending = new Map<bigint, { resolve: () => void; reject: (e: unknown) => void; keep: Buffer; stream: StreamLike | undefined }>();
let onDone: unknown;
// A native thread's callback does not keep Node's event loop alive, as koffi's asynchronous calls
// do: a timer does, while anything is in flight (else the process could exit before the result).
let keepAlive: ReturnType<typeof setInterval> | undefined;
const settle = () => {
  if (!pending.size && keepAlive) {
    clearInterval(keepAlive);
    keepAlive = undefined;
  }
};

function doneCallback(): unknown {
  onDone ??= koffi.register(
    (error: string | null, payload: unknown) => {
      const key = koffi.address(payload);
      const p = pending.get(key);
      if (!p) return;
      pending.delete(key);
      settle();
      if (error) {
        p.reject(new MlxError(error, 'mlxc_eval_background'));
        return;
      }
      try {
        // Kernel errors MLX recorded on a CPU stream surface at the next enqueue from this thread.
        const s = resolveStream(p.stream);
        if (s.device.type === 'cpu') check(fn.mlx_synchronize(s.handle), 'mlx_synchronize');
        p.resolve();
      } catch (e) {
        p.reject(e);
      }
    },
    koffi.pointer(native().types.callbacks.mlxc_eval_done as never),
  );
  return onDone;
}

/**
 * Evaluates arrays on a thread of the native library's own, one per stream (a stream is always
 * evaluated on the same thread, as MLX's CUDA backend needs); resolves when they are computed.
 * `stream` is the stream they were built on, made with `newStream(device, { anyThread: true })`.
 */
export function evalInBackground(arrays: readonly Array[], limits: EvalLimits = {}, stream?: StreamLike): Promise<void> {
  if (!arrays.length) return Promise.resolve();
  flushDisposed();
  const maxArray = size(limits.maxArrayBytes);
  const maxTotal = size(limits.maxTotalBytes);
  const s = resolveStream(stream);
  const keep = Buffer.alloc(1);
  return new Promise<void>((resolve, reject) => {
    pending.set(koffi.address(keep), { resolve, reject, keep, stream: s });
    keepAlive ??= setInterval(() => {}, 1 << 30);
    // The worker holds its own references to the arrays: the vector can go at once.
    const v = makeVector(arrays);
    try {
      check(fn.mlxc_eval_background(v, s.handle, maxArray, maxTotal, doneCallback(), keep), 'mlxc_eval_background');
    } catch (e) {
      pending.delete(koffi.address(keep));
      settle();
      reject(e);
    } finally {
      fn.mlx_vector_array_free(v);
    }
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
