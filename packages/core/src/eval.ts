// Evaluation off the JS thread and within a memory budget.
//
// evalInBackground runs MLX's eval on a worker thread (koffi's asynchronous calls), so the event
// loop keeps turning while MLX computes. MLX evaluates a stream's work only on the thread that made
// the stream, unless it was made with `newStream(device, { anyThread: true })`: arrays evaluated in
// the background must be built on such a stream, and one evaluation at a time may use it.
//
// Both forms take limits: before anything is computed, every array the evaluation would allocate is
// counted (native code walks the graph); over a limit, nothing runs and an MlxError names the
// largest array, its shape, dtype, bytes and the primitive that makes it.
import type { Array } from './array.js';
import { makeVector } from './call.js';
import { check, fn, throwLastError } from './native.js';
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
  const v = makeVector(arrays);
  try {
    check(fn.mlxc_eval_within(v, size(limits.maxArrayBytes), size(limits.maxTotalBytes)), 'mlxc_eval_within');
  } finally {
    fn.mlx_vector_array_free(v);
  }
}

/**
 * Evaluates arrays on a worker thread; resolves when they are computed. `stream` is the stream they
 * were built on: after the evaluation, errors MLX recorded on it (a kernel that failed) are raised.
 */
export function evalInBackground(arrays: readonly Array[], limits: EvalLimits = {}, stream?: StreamLike): Promise<void> {
  if (!arrays.length) return Promise.resolve();
  const v = makeVector(arrays);
  const maxArray = size(limits.maxArrayBytes);
  const maxTotal = size(limits.maxTotalBytes);
  return new Promise<void>((resolve, reject) => {
    (fn.mlxc_eval_within as unknown as { async: (...a: unknown[]) => void }).async(v, maxArray, maxTotal, (err: unknown, rc: number) => {
      fn.mlx_vector_array_free(v);
      try {
        if (err) throw err;
        if (rc !== 0) throwLastError('mlxc_eval_within');
        // Kernel errors on MLX's stream threads surface at the next enqueue from this thread.
        check(fn.mlx_synchronize(resolveStream(stream).handle), 'mlx_synchronize');
        resolve();
      } catch (e) {
        reject(e);
      }
    });
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
