// The attention forward, two ways: MLX's fused fast.scaledDotProductAttention and a composite of
// plain ops in the grouped layout. They agree within float32 rounding; the fused op is used where
// MLX's semantics match ours, and its empty rows are zeroed (MLX gives the mean of V, or NaN).
import {
  any,
  expandDims,
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
import { causalKeep, groupedMask, maskScores, negativeInfinity, paddedMask } from './mask.js';
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
