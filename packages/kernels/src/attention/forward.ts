// The attention forward, two ways: MLX's fused fast.scaledDotProductAttention and a composite of
// plain ops in the grouped layout. They agree within float32 rounding; the fused op is used where
// MLX's semantics match ours, and its empty rows are zeroed (MLX gives the mean of V, or NaN).
import {
  any,
  defaultStream,
  expandDims,
  ext,
  fast,
  greater,
  logicalAnd,
  matmul,
  max,
  multiply,
  reshape,
  scalar,
  scope,
  swapaxes,
  where,
  zeros,
  type Array,
  type Dtype,
} from '@mlx/core';
import { attentionShape, mayHaveEmptyRows, resolvedScale, type AttentionConfig, type AttentionShape } from './config.js';
import { causalKeep, groupedMask, maskScores, negativeInfinity, paddedMask, rank4Mask } from './mask.js';
import { softmax } from '../softmax.js';
import { cappedScores, rowSoftmax } from './probabilities.js';

/** q as [b, hk, g, sq, d], so that each group of query heads meets its key/value head by broadcasting. */
export function groupedQuery(q: Array, shape: AttentionShape): Array {
  return reshape(q, [shape.batch, shape.kvHeads, shape.groupSize, shape.querySeq, shape.headDim]);
}

/** k or v as [b, hk, 1, s, d]: broadcast over the group axis, never repeated in memory. */
export function groupedKv(x: Array): Array {
  return expandDims(x, 2);
}

function emptyOutput(shape: AttentionShape): Array {
  return zeros([shape.batch, shape.queryHeads, shape.querySeq, shape.valueDim], shape.dtype);
}

/** The composite forward: scores, masks, a softmax that leaves empty rows at zero, and P·V. */
export function attentionComposite(q: Array, k: Array, v: Array, mask: Array | null, config: AttentionConfig): Array {
  const shape = attentionShape(q, k, v);
  if (shape.keySeq === 0 || shape.querySeq === 0) return emptyOutput(shape);
  return scope(() => {
    const q5 = multiply(groupedQuery(q, shape), resolvedScale(config, shape));
    const { scores } = cappedScores(q5, swapaxes(groupedKv(k), -1, -2), config.softcap);
    const masks = { causal: config.causal, causalOffset: config.causalOffset, mask: mask ? groupedMask(mask, shape) : null };
    const masked = maskScores(scores, masks, 0, shape.querySeq, 0, shape.keySeq);
    if (masked === null) return emptyOutput(shape);
    const p = rowSoftmax(masked, mayHaveEmptyRows(config));
    const o5 = matmul(p, groupedKv(v));
    return reshape(o5, [shape.batch, shape.queryHeads, shape.querySeq, shape.valueDim]);
  });
}

/**
 * Whether MLX's fused op computes this configuration: it has no softcap, and in float64 its CPU
 * softmax is only float32-accurate (see accurate-math.ts), so float64 takes the composite.
 */
export function fusedSupports(config: AttentionConfig, dtype?: Dtype): boolean {
  return config.softcap <= 0 && dtype !== 'float64';
}

/** The forward through MLX's fast.scaledDotProductAttention. */
export function attentionFused(q: Array, k: Array, v: Array, mask: Array | null, config: AttentionConfig): Array {
  if (config.softcap > 0) throw new RangeError('MLX fast.scaledDotProductAttention has no softcap; use the composite implementation');
  const shape = attentionShape(q, k, v);
  if (shape.keySeq === 0 || shape.querySeq === 0) return emptyOutput(shape);
  const scale = resolvedScale(config, shape);
  const { querySeq: sq, keySeq: sk } = shape;
  return scope(() => {
    // MLX's 'causal' mode is bottom-right aligned, offset max(0, sk − sq): usable only when ours matches.
    if (mask === null && (!config.causal || config.causalOffset === Math.max(0, sk - sq))) {
      return fast.scaledDotProductAttention(q, k, v, scale, config.causal ? 'causal' : '');
    }
    let combined = mask ? paddedMask(mask, shape) : null;
    if (config.causal) {
      const keep = causalKeep(0, sq, 0, sk, config.causalOffset);
      if (combined === null) combined = keep;
      else if (combined.dtype === 'bool') combined = logicalAnd(combined, keep);
      else combined = where(keep, combined, negativeInfinity(shape.dtype));
    }
    const m = combined as Array;
    const out = fast.scaledDotProductAttention(q, k, v, scale, 'array', m);
    if (!mayHaveEmptyRows(config)) return out;
    const valid =
      m.dtype === 'bool' ? any(m, -1, { keepdims: true }) : greater(max(m, -1, { keepdims: true }), negativeInfinity(shape.dtype));
    return where(valid, out, scalar(0, shape.dtype));
  });
}

/** Whether the native CPU kernel computes this configuration: float32 q, k, v on the CPU, no softcap. */
export function nativeCpuSupports(q: Array, k: Array, v: Array, config: AttentionConfig): boolean {
  if (q.dtype !== 'float32' || k.dtype !== 'float32' || v.dtype !== 'float32' || config.softcap > 0) return false;
  return defaultStream().device.type === 'cpu';
}

/**
 * The forward as one native primitive on the CPU (ext.fusedAttention): per block of query rows of
 * one key/value head, the scores against the keys the block sees stay in a thread-local buffer
 * through the masks and the row softmax, and their product with V goes straight into the output.
 * The composite instead runs OpenBLAS once per batch entry and head for each product, copies the
 * scaled Kᵀ view and passes over the scores in memory for each mask and the softmax. Under
 * rowsNeverEmpty a row that sees no key after all is NaN, as the composite's softmax makes it.
 */
export function attentionNativeCpu(q: Array, k: Array, v: Array, mask: Array | null, config: AttentionConfig): Array {
  const shape = attentionShape(q, k, v);
  if (shape.keySeq === 0 || shape.querySeq === 0) return emptyOutput(shape);
  using m = mask ? rank4Mask(mask, shape) : null;
  return ext.fusedAttention(q, k, v, m, resolvedScale(config, shape), config.causal, config.causalOffset, config.rowsNeverEmpty);
}

/** Query rows per key/value head up to which the CPU decoding path runs (the native small-row products' limit). */
export const FEW_ROWS_MAX = 4;

/**
 * Whether the few-rows CPU path computes this configuration: one query position (decoding) on the
 * CPU in float32, with at most FEW_ROWS_MAX query heads per key/value head.
 */
export function fewRowsSupports(q: Array, k: Array, v: Array, config: AttentionConfig): boolean {
  if (q.dtype !== 'float32' || k.dtype !== 'float32' || v.dtype !== 'float32' || config.softcap > 0) return false;
  if (q.ndim !== 4 || k.ndim !== 4 || q.shape[2] !== 1 || k.shape[1] === 0 || q.shape[1] % k.shape[1] !== 0) return false;
  return q.shape[1] / k.shape[1] <= FEW_ROWS_MAX && defaultStream().device.type === 'cpu';
}

/**
 * (No longer chosen by 'auto': the native kernel, attentionNativeCpu, measured twice as fast for one
 * row; kept as the reference its tests and measurements compare against.)
 * One query position on the CPU: the g query heads of each key/value head are the rows of two
 * native small-row products (ext.smallMatmul: q·Kᵀ reads K in place as a transposed view, P·V reads V
 * row by row) around the fused softmax kernel. MLX's fused op on the CPU is a composition that packs
 * K and V for OpenBLAS on every call and evaluates its softmax's exp one float at a time.
 */
export function attentionFewRows(q: Array, k: Array, v: Array, mask: Array | null, config: AttentionConfig): Array {
  const shape = attentionShape(q, k, v);
  if (shape.keySeq === 0) return emptyOutput(shape);
  const { batch: b, kvHeads: hk, groupSize: g, keySeq: sk } = shape;
  return scope(() => {
    const rows = multiply(reshape(q, [b, hk, g, shape.headDim]), resolvedScale(config, shape));
    const scores = reshape(ext.smallMatmul(rows, swapaxes(k, -1, -2)), [b, hk, g, 1, sk]);
    const masks = { causal: config.causal, causalOffset: config.causalOffset, mask: mask ? groupedMask(mask, shape) : null };
    const masked = maskScores(scores, masks, 0, 1, 0, sk);
    if (masked === null) return emptyOutput(shape);
    const s = reshape(masked, [b, hk, g, sk]);
    let p: Array;
    if (!mayHaveEmptyRows(config)) p = softmax(s, -1);
    else {
      // A row with no visible key: finite scores for the softmax, zero weights after.
      const valid = greater(max(s, -1, { keepdims: true }), scalar(-Infinity, 'float32'));
      const zero = scalar(0, 'float32');
      p = where(valid, softmax(where(valid, s, zero), -1), zero);
    }
    return reshape(ext.smallMatmul(p, v), [b, shape.queryHeads, 1, shape.valueDim]);
  });
}
