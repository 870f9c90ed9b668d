// Masks in the grouped layout. Every strategy computes scores as [b, hk, g, sq, sk] (g query
// heads per key/value head), so a user mask broadcastable to [b, hq, sq, w] is viewed as
// [b | 1, hk | 1, g | 1, sq | 1, w] and sliced per block; columns past its width w are masked
// out, which is the ONNX rule for masks shorter than the key sequence.
import { add, arange, astype, expandDims, greaterEqual, pad, reshape, scalar, slice, sum, where, type Array, type Dtype } from '@mlx/core';
import type { AttentionMaskKind, AttentionShape } from './config.js';

/** A mask in the grouped layout, with its real (unpadded) width. */
export interface GroupedMask {
  kind: Exclude<AttentionMaskKind, 'none'>;
  /** [mb, mh, mg, msq, width] with each of mb, mh, mg, msq either 1 or the full size. */
  values: Array;
  width: number;
}

export const negativeInfinity = (dtype: Dtype): Array => scalar(-Infinity, dtype);

/** A user mask as [mb, mh, msq, width] after validating it against the attention shape. */
function maskDims(mask: Array, shape: AttentionShape): number[] {
  const ms = mask.shape;
  if (ms.length < 1 || ms.length > 4) throw new RangeError(`attention mask must have rank 1 to 4, got shape [${ms}]`);
  const dims = [...new globalThis.Array<number>(4 - ms.length).fill(1), ...ms];
  const [mb, mh, msq, width] = dims;
  const fits = (n: number, full: number) => n === 1 || n === full;
  if (!fits(mb, shape.batch) || !fits(mh, shape.queryHeads) || !fits(msq, shape.querySeq) || width > shape.keySeq) {
    throw new RangeError(
      `attention mask of shape [${ms}] does not broadcast to [${shape.batch}, ${shape.queryHeads}, ${shape.querySeq}, ≤${shape.keySeq}]`,
    );
  }
  return dims;
}

/** An additive mask takes the scores' dtype so that adding it never promotes them. */
function typedMask(mask: Array, shape: AttentionShape): Array {
  return mask.dtype !== 'bool' && mask.dtype !== shape.dtype ? astype(mask, shape.dtype) : reshape(mask, mask.shape);
}

/** Validates a user mask against the attention shape and views it in the grouped layout. */
export function groupedMask(mask: Array, shape: AttentionShape): GroupedMask {
  const [mb, mh, msq, width] = maskDims(mask, shape);
  using typed = typedMask(mask, shape);
  const grouped = mh === 1 ? [mb, 1, 1, msq, width] : [mb, shape.kvHeads, shape.groupSize, msq, width];
  return { kind: mask.dtype === 'bool' ? 'boolean' : 'additive', values: reshape(typed, grouped), width };
}

/**
 * A user mask as a rank-4 view [mb, mh, msq, width] (mb, mh, msq each 1 or full; width ≤ sk), an
 * additive one in the scores' dtype: the layout of the native CPU kernel, which masks the keys
 * past the width itself and reads broadcast axes in place.
 */
export function rank4Mask(mask: Array, shape: AttentionShape): Array {
  const dims = maskDims(mask, shape);
  using typed = typedMask(mask, shape);
  return reshape(typed, dims);
}

/** A user mask as a rank-4 array padded to the full key length (the layout MLX's fused op takes). */
export function paddedMask(mask: Array, shape: AttentionShape): Array {
  const dims = maskDims(mask, shape);
  using typed = typedMask(mask, shape);
  const m4 = reshape(typed, dims);
  const missing = shape.keySeq - dims[3];
  if (missing === 0) return m4;
  using fill = mask.dtype === 'bool' ? scalar(false, 'bool') : negativeInfinity(shape.dtype);
  using owned = m4;
  return pad(owned, [3], [0], [missing], fill, 'constant');
}

/**
 * The mask's block for queries [q0, q1) and keys [k0, k1), padded past its width; 'masked' when
 * the block lies entirely past the width (every score in it is masked out).
 */
export function maskBlock(m: GroupedMask, q0: number, q1: number, k0: number, k1: number): Array | 'masked' {
  if (k0 >= m.width) return 'masked';
  const s = m.values.shape;
  const start = [0, 0, 0, s[3] === 1 ? 0 : q0, k0];
  const stop = [s[0], s[1], s[2], s[3] === 1 ? 1 : q1, Math.min(k1, m.width)];
  const full = start.every((x, i) => x === 0 && stop[i] === s[i]);
  const cut = full ? reshape(m.values, s) : slice(m.values, start, stop, [1, 1, 1, 1, 1]);
  const missing = k1 - Math.min(k1, m.width);
  if (missing === 0) return cut;
  using fill = m.kind === 'boolean' ? scalar(false, 'bool') : negativeInfinity(m.values.dtype);
  const padded = pad(cut, [4], [0], [missing], fill, 'constant');
  cut.dispose();
  return padded;
}

/** Whether query rows [q0, q1) may see keys [k0, k1) under `j ≤ i + offset`: a [q1−q0, k1−k0] bool. */
export function causalKeep(q0: number, q1: number, k0: number, k1: number, offset: number): Array {
  using rows = arange(q0 + offset, q1 + offset, 1, 'int32');
  using cols = arange(k0, k1, 1, 'int32');
  using r = expandDims(rows, 1);
  using c = expandDims(cols, 0);
  return greaterEqual(r, c);
}

/** How causal masking affects a block: no key visible, every key visible, or some. */
export function causalCoverage(q0: number, q1: number, k0: number, k1: number, offset: number): 'none' | 'all' | 'partial' {
  if (k0 > q1 - 1 + offset) return 'none';
  if (k1 - 1 <= q0 + offset) return 'all';
  return 'partial';
}

export interface BlockMasks {
  causal: boolean;
  causalOffset: number;
  mask: GroupedMask | null;
}

/**
 * Applies causal masking and the user mask to a score block (scores for queries [q0, q1), keys
 * [k0, k1)); returns null when every score of the block is masked out (the block contributes
 * nothing). Takes ownership of `scores`.
 */
export function maskScores(scores: Array, masks: BlockMasks, q0: number, q1: number, k0: number, k1: number): Array | null {
  let s = scores;
  const swap = (next: Array) => {
    s.dispose();
    s = next;
  };
  if (masks.causal) {
    const coverage = causalCoverage(q0, q1, k0, k1, masks.causalOffset);
    if (coverage === 'none') {
      s.dispose();
      return null;
    }
    if (coverage === 'partial') {
      using keep = causalKeep(q0, q1, k0, k1, masks.causalOffset);
      using ninf = negativeInfinity(s.dtype);
      swap(where(keep, s, ninf));
    }
  }
  if (masks.mask) {
    const block = maskBlock(masks.mask, q0, q1, k0, k1);
    if (block === 'masked') {
      s.dispose();
      return null;
    }
    if (masks.mask.kind === 'boolean') {
      using ninf = negativeInfinity(s.dtype);
      swap(where(block, s, ninf));
    } else {
      swap(add(s, block));
    }
    block.dispose();
  }
  return s;
}

/**
 * The cotangent of an additive user mask from the gradient of a block of masked scores `ds`
 * ([b, hk, g, q1 − q0, k1 − k0], keys from k0): the columns within the mask's width, summed over
 * the axes the mask broadcasts along, as [mb, mh, msq === 1 ? 1 : q1 − q0, min(k1, width) − k0]
 * (mh: 1 or the query heads). Null when the block lies past the width.
 */
export function maskBlockAdjoint(ds: Array, m: GroupedMask, k0: number, k1: number): Array | null {
  const end = Math.min(k1, m.width);
  if (end <= k0) return null;
  const d = ds.shape;
  const cut = end === k1 ? reshape(ds, d) : slice(ds, [0, 0, 0, 0, 0], [d[0], d[1], d[2], d[3], end - k0], [1, 1, 1, 1, 1]);
  const vs = m.values.shape;
  const axes = [0, 1, 2, 3].filter((i) => vs[i] === 1 && d[i] !== 1);
  const summed = axes.length ? sum(cut, axes, { keepdims: true }) : cut;
  if (summed !== cut) cut.dispose();
  const s = summed.shape;
  const out = reshape(summed, [s[0], s[1] * s[2], s[3], s[4]]);
  summed.dispose();
  return out;
}

/** The rank-4 adjoint [mb, mh, msq, width] back in the user mask's own shape and dtype. */
export function userMaskAdjoint(adjoint: Array, mask: Array): Array {
  using shaped = reshape(adjoint, mask.shape);
  return shaped.dtype === mask.dtype ? reshape(shaped, mask.shape) : astype(shaped, mask.dtype);
}
