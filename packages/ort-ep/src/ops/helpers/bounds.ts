// Index checks for ops that hand data-dependent indices to MLX's take/gather/scatter, which read
// and write memory wherever an index points. Every such index goes through checkedIndices: indices
// in [-dim, dim) become positions in [0, dim) (negative ones count from the end, as the spec says);
// any other index is clamped into range, so the op stays memory-safe, and reported through
// ctx.guard, so the run fails naming the node and the index. The check costs a few elementwise
// ops and reductions on the device, evaluated with the results; no host round trip per node.
import * as mx from '@mlx/core';
import { ResourceLimitError } from '../../errors.js';
import type { OpContext } from '../../registry/types.js';

/** Index dtypes compare in their own type (int64 indices past 2^31 must not wrap into range). */
const wideInt = (a: mx.Array): mx.Array => (a.dtype === 'int64' || a.dtype === 'int32' ? a : mx.astype(a, 'int64'));

/**
 * `idx` (integers) checked against an axis of `dim` positions: returns int32 positions in
 * [0, dim). `dim` may be one size per index component (the last axis of `idx`: GatherND and
 * ScatterND check each component against its own axis), as numbers or an array; `label` names
 * what is indexed in the message. With `negative: false` only [0, dim) is valid (class labels,
 * token ids, flat indices). Sizes known here (numbers) take one native primitive
 * (mx.ext.boundedIndices: positions, flag and offender in one pass, and take trusts its positions).
 */
export function checkedIndices(
  ctx: OpContext<unknown>,
  idx: mx.Array,
  dim: number | readonly number[] | mx.Array,
  label: string,
  opts: { negative?: boolean } = {},
): mx.Array {
  const negative = opts.negative ?? true;
  // A size that is not one (an axis the data does not have) is the caller's bug, named here
  // rather than failing inside the check.
  if (dim === undefined || (typeof dim === 'number' && !(Number.isSafeInteger(dim) && dim >= 0)))
    throw new RangeError(`${label}: there is no axis of that size to index (size ${String(dim)})`);
  const single = typeof dim === 'number';
  const low = negative && single ? -dim : 0;
  const range = single ? `[${low}, ${dim - 1}]` : 'the range of its axis';
  // The offending value: the smallest index when one is below range, else the largest.
  const describe = ([min, max]: number[]) => {
    const v = single ? (min < low ? min : max) : min < 0 ? min : max;
    return `${label}: index ${v} is out of range ${range}`;
  };
  const native =
    typeof dim === 'number' ||
    (!(dim instanceof mx.Array) && dim.length > 0 && idx.ndim > 0 && (dim.length === 1 || idx.shape[idx.ndim - 1] === dim.length));
  if (native && mx.isInteger(idx.dtype)) {
    const [positions, bad, detail] = mx.ext.boundedIndices(idx, typeof dim === 'number' ? [dim] : (dim as readonly number[]), negative);
    if (idx.size > 0) ctx.guard(bad, describe, detail);
    return positions;
  }
  const i = wideInt(idx);
  const n = typeof dim === 'number' ? dim : mx.astype(dim instanceof mx.Array ? dim : mx.array(Int32Array.from(dim), 'int32'), i.dtype);
  const lo = !negative ? 0 : typeof n === 'number' ? -n : mx.negative(n);
  const wrapped = negative ? mx.where(mx.less(i, 0), mx.add(i, n), i) : i;
  if (i.size > 0) {
    const bad = mx.any(mx.logicalOr(mx.less(i, lo), mx.greaterEqual(i, n)));
    const below = mx.min(typeof n === 'number' && negative ? i : mx.where(mx.less(i, lo), i, mx.zerosLike(i)));
    const above = mx.max(typeof n === 'number' ? i : mx.where(mx.greaterEqual(i, n), i, mx.zerosLike(i)));
    ctx.guard(bad, describe, mx.stack([below, above]));
  }
  const top = typeof n === 'number' ? Math.max(n - 1, 0) : mx.maximum(mx.subtract(n, 1), 0);
  return mx.astype(mx.clip(wrapped, 0, top), 'int32');
}

/** Float coordinates (sampling positions) made safe to floor into indices: NaN becomes `fill`. */
export function finiteOr(x: mx.Array, fill: number): mx.Array {
  return mx.where(mx.isnan(x), fill, x);
}

/**
 * Results that an op computes element by element on the host (windows, filter banks, host
 * twins) are bounded before the loop starts: a size from the data (2^31, 10^12) would otherwise
 * loop for hours or exhaust the heap.
 */
export const MAX_HOST_ELEMENTS = 2 ** 27;

export function checkHostElements(count: number, what: string): void {
  if (!Number.isSafeInteger(count) || count < 0)
    throw new RangeError(`${what} has ${count} elements, which is not a count (a negative or non-integer size)`);
  if (count > MAX_HOST_ELEMENTS) throw new RangeError(`${what} has ${count} elements, over the ${MAX_HOST_ELEMENTS} computed on the host`);
}

/** The largest dimension MLX holds (its shapes are int32). */
export const MAX_DIM = 2 ** 31 - 1;

/**
 * An output shape an op computed from data or attributes (pads, repeats, target sizes), checked
 * before anything is built from it: every dim a non-negative integer MLX can hold (a RangeError
 * naming `what` and the dim otherwise), and, with the run's per-tensor limit set, the result's
 * bytes (`itemsize` per element) within it (a ResourceLimitError naming the node, the shape and
 * the bytes). Sizes are multiplied in floating point, which cannot wrap.
 */
export function checkResultShape(ctx: OpContext<unknown>, dims: readonly number[], itemsize: number, what: string): void {
  dims.forEach((d, axis) => {
    if (!Number.isSafeInteger(d) || d < 0)
      throw new RangeError(`${what}: axis ${axis} of the result [${dims.join(', ')}] has size ${d}, not a non-negative integer`);
    if (d > MAX_DIM)
      throw new RangeError(`${what}: axis ${axis} of the result [${dims.join(', ')}] has size ${d}, past the largest dimension ${MAX_DIM}`);
  });
  const limit = ctx.limits.maxTensorBytes;
  const bytes = dims.reduce((a, b) => a * b, itemsize);
  if (limit && bytes > limit)
    throw new ResourceLimitError(
      `model ${ctx.modelName}, ${ctx.where}: its result of shape [${dims.join(', ')}] needs ${bytes} bytes, over the limit of ${limit} bytes per tensor (maxTensorBytes)`,
    );
}
