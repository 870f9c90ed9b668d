// The dense pullback: the [b, hq, sq, sk] probabilities are materialised once (recomputed from q
// and k by one softmax), and every gradient is one batched matmul against them.
import { matmul, multiply, reshape, scope, sum, zeros, type Array } from '@mlx/core';
import { attentionShape, mayHaveEmptyRows, resolvedScale, type AttentionConfig, type AttentionShape } from './config.js';
import { groupedKv, groupedQuery } from './forward.js';
import { groupedMask, maskBlockAdjoint, userMaskAdjoint } from './mask.js';
import { rowSoftmax, scoreBlock, scoreGradients, transposeLast } from './probabilities.js';
import type { AttentionGradients, AttentionVjpInputs } from './vjp-types.js';

export function zeroGradients(shape: AttentionShape, mask?: Array | null): AttentionGradients {
  const { batch: b, queryHeads: hq, kvHeads: hk, querySeq: sq, keySeq: sk, headDim: d, valueDim: dv, dtype } = shape;
  const g: AttentionGradients = { dq: zeros([b, hq, sq, d], dtype), dk: zeros([b, hk, sk, d], dtype), dv: zeros([b, hk, sk, dv], dtype) };
  if (hasAdditiveMask(mask)) g.dmask = zeros(mask.shape, mask.dtype);
  return g;
}

/** Whether `mask` is an additive (float) mask, the kind that has a gradient. */
export function hasAdditiveMask(mask: Array | null | undefined): mask is Array {
  return !!mask && mask.dtype !== 'bool';
}

/** out or gradOut ([b, hq, sq, dv]) in the grouped layout [b, hk, g, sq, dv]. */
export function groupedRows(x: Array, shape: AttentionShape): Array {
  return reshape(x, [shape.batch, shape.kvHeads, shape.groupSize, shape.querySeq, shape.valueDim]);
}

export function attentionVjpDense(inputs: AttentionVjpInputs, config: AttentionConfig): AttentionGradients {
  const { q, k, v, gradOut } = inputs;
  const shape = attentionShape(q, k, v);
  if (shape.querySeq === 0 || shape.keySeq === 0) return zeroGradients(shape, inputs.mask);
  const scale = resolvedScale(config, shape);
  return scope(() => {
    const q5 = multiply(groupedQuery(q, shape), scale);
    const k5 = groupedKv(k);
    const v5 = groupedKv(v);
    const masks = { causal: config.causal, causalOffset: config.causalOffset, mask: inputs.mask ? groupedMask(inputs.mask, shape) : null };
    const block = scoreBlock(q5, transposeLast(k5), config.softcap, masks, 0, shape.querySeq, 0, shape.keySeq);
    if (block === null) return zeroGradients(shape, inputs.mask);
    const p = rowSoftmax(block.scores, mayHaveEmptyRows(config));
    block.scores.dispose(); // its last consumer is built; let MLX free it as soon as P exists
    const do5 = groupedRows(gradOut, shape);
    // dV sums P ᵀ·dO over the query heads of each group (axis 2).
    const dv = sum(matmul(transposeLast(p), do5), 2);
    const delta = inputs.out
      ? sum(multiply(groupedRows(inputs.out, shape), do5), -1, { keepdims: true })
      : sum(multiply(p, matmul(do5, transposeLast(v5))), -1, { keepdims: true });
    const { ds, masked } = scoreGradients(p, do5, transposeLast(v5), delta, block.tanh, masks.mask?.kind === 'additive');
    const dq = reshape(multiply(matmul(ds, k5), scale), q.shape);
    // q5 already carries the scale, so dSᵀ·q5 is dK = dSᵀ·Q·scale.
    const dk = sum(matmul(transposeLast(ds), q5), 2);
    const g: AttentionGradients = { dq, dk, dv };
    // The mask is added to the (softcapped) scores: its gradient is theirs, before tanh′.
    if (masked && masks.mask && inputs.mask) {
      const adjoint = maskBlockAdjoint(masked, masks.mask, 0, shape.keySeq);
      g.dmask = adjoint ? userMaskAdjoint(adjoint, inputs.mask) : zeros(inputs.mask.shape, inputs.mask.dtype);
    }
    return g;
  });
}
