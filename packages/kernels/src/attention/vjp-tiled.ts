// The tiled pullback: the same gradients as the dense one, computed over blocks of queries and
// keys so that no score buffer is larger than one block. A first pass over key blocks gives each
// query row's logsumexp; the second recomputes each block's probabilities from it. Every block
// step is evaluated before the next is built, so the lazy graph never holds more than one block,
// and the JS handles of a step's intermediates are released before it is evaluated, so MLX frees
// each buffer as soon as its last consumer has run.
import { add, concatenate, evaluate, matmul, multiply, reshape, scope, sum, zeros, type Array } from '@mlx/core';
import { logaddexp, logsumexp } from '../accurate-math.js';
import { attentionShape, mayHaveEmptyRows, resolvedScale, type AttentionConfig, type AttentionShape } from './config.js';
import type { AttentionBlockSizes } from './budget.js';
import { groupedKv, groupedQuery } from './forward.js';
import { groupedMask, maskBlockAdjoint, userMaskAdjoint, type BlockMasks } from './mask.js';
import { blockProbabilities, rows4, rows5, safeLogsumexp, scoreBlock, scoreGradients, transposeLast } from './probabilities.js';
import { groupedRows, hasAdditiveMask, zeroGradients } from './vjp-dense.js';
import type { AttentionGradients, AttentionVjpInputs } from './vjp-types.js';

type Range = [number, number];
const ranges = (n: number, block: number): Range[] => {
  const out: Range[] = [];
  for (let s = 0; s < n; s += block) out.push([s, Math.min(n, s + block)]);
  return out;
};

/**
 * old + part. Both handles are released at once: the sum's graph keeps what it needs, and MLX
 * frees (or reuses in place) the old accumulator as soon as the sum is evaluated.
 */
function accumulate(old: Array | null, part: Array): Array {
  if (old === null) return part;
  const next = add(old, part);
  old.dispose();
  part.dispose();
  return next;
}

interface Operands {
  shape: AttentionShape;
  qs5: Array; // q·scale, grouped
  kT: Array[]; // per key block: [b, hk, 1, d, bk]
  k5: Array[]; // per key block: [b, hk, 1, bk, d]
  vT: Array[]; // per key block: [b, hk, 1, dv, bk]
  v5: Array[]; // per key block: [b, hk, 1, bk, dv]
  masks: BlockMasks;
  softcap: number;
}

/** Each query block's safe logsumexp (null where the whole block is masked out). */
function rowLogsumexp(ops: Operands, qRanges: Range[], kRanges: Range[], emptyRows: boolean): (Array | null)[] {
  return qRanges.map(([q0, q1]) => {
    let lse: Array | null = null;
    kRanges.forEach(([k0, k1], j) => {
      const next = scope(() => {
        const block = scoreBlock(rows5(ops.qs5, q0, q1), ops.kT[j], ops.softcap, ops.masks, q0, q1, k0, k1);
        if (block === null) return null;
        const part = logsumexp(block.scores, -1, { keepdims: true });
        return lse === null ? part : logaddexp(lse, part);
      });
      if (next === null) return;
      evaluate(next);
      lse?.dispose();
      lse = next;
    });
    if (lse === null || !emptyRows) return lse;
    const safe = safeLogsumexp(lse);
    (lse as Array).dispose();
    evaluate(safe);
    return safe;
  });
}

/** The forward output of one query block, recomputed from its logsumexp (when `out` was not given). */
function blockOutput(ops: Operands, lse: Array, q0: number, q1: number, kRanges: Range[]): Array {
  let o: Array | null = null;
  kRanges.forEach(([k0, k1], j) => {
    const part = scope(() => {
      const block = scoreBlock(rows5(ops.qs5, q0, q1), ops.kT[j], ops.softcap, ops.masks, q0, q1, k0, k1);
      return block === null ? null : matmul(blockProbabilities(block, lse), ops.v5[j]);
    });
    if (part === null) return;
    o = accumulate(o, part);
    evaluate(o);
  });
  const { batch: b, kvHeads: hk, groupSize: g, valueDim: dv, dtype } = ops.shape;
  return o ?? zeros([b, hk, g, q1 - q0, dv], dtype);
}

export function attentionVjpTiled(inputs: AttentionVjpInputs, config: AttentionConfig, blocks: AttentionBlockSizes): AttentionGradients {
  const { q, k, v, gradOut } = inputs;
  const shape = attentionShape(q, k, v);
  if (shape.querySeq === 0 || shape.keySeq === 0) return zeroGradients(shape, inputs.mask);
  const { batch: b, kvHeads: hk, groupSize: g, headDim: d, valueDim: dvDim, dtype } = shape;
  const qRanges = ranges(shape.querySeq, blocks.queryBlock);
  const kRanges = ranges(shape.keySeq, blocks.keyBlock);
  const scale = resolvedScale(config, shape);
  return scope(() => {
    const qs5 = multiply(groupedQuery(q, shape), scale);
    evaluate(qs5);
    const kBlocks = kRanges.map(([k0, k1]) => groupedKv(rows4(k, k0, k1)));
    const vBlocks = kRanges.map(([k0, k1]) => groupedKv(rows4(v, k0, k1)));
    const ops: Operands = {
      shape,
      qs5,
      k5: kBlocks,
      kT: kBlocks.map(transposeLast),
      v5: vBlocks,
      vT: vBlocks.map(transposeLast),
      masks: { causal: config.causal, causalOffset: config.causalOffset, mask: inputs.mask ? groupedMask(inputs.mask, shape) : null },
      softcap: config.softcap,
    };
    const lse = rowLogsumexp(ops, qRanges, kRanges, mayHaveEmptyRows(config));
    const do5 = groupedRows(gradOut, shape);
    // rowsum(O ∘ dO) per query block, from the given output or one recomputed block by block.
    const out5 = inputs.out ? groupedRows(inputs.out, shape) : null;
    const delta = qRanges.map(([q0, q1], i) => {
      const l = lse[i];
      if (l === null) return null;
      const r = scope(() => {
        const o = out5 ? rows5(out5, q0, q1) : blockOutput(ops, l, q0, q1, kRanges);
        return sum(multiply(o, rows5(do5, q0, q1)), -1, { keepdims: true });
      });
      evaluate(r);
      return r;
    });

    const dq: (Array | null)[] = qRanges.map(() => null);
    const dk: Array[] = [];
    const dv: Array[] = [];
    // An additive mask's gradient, per key block within its width: one [mb, mh, msq, kw] piece,
    // summed over the query blocks when the mask broadcasts over queries, else their concatenation.
    const additive = ops.masks.mask?.kind === 'additive' ? ops.masks.mask : null;
    const maskRows = additive?.values.shape[3] ?? 0;
    const maskHeads = additive ? additive.values.shape[1] * additive.values.shape[2] : 0;
    const dmask: Array[] = [];
    kRanges.forEach(([k0, k1], j) => {
      let dkj: Array | null = null;
      let dvj: Array | null = null;
      const maskWidth = additive ? Math.min(k1, additive.width) - k0 : 0;
      const dmRows: Array[] = [];
      let dmj: Array | null = null;
      const noMask = (q0: number, q1: number) =>
        zeros([additive!.values.shape[0], maskHeads, maskRows === 1 ? 1 : q1 - q0, maskWidth], dtype);
      qRanges.forEach(([q0, q1], i) => {
        const l = lse[i];
        const dl = delta[i];
        const missing = () => {
          if (maskWidth > 0 && maskRows !== 1) dmRows.push(noMask(q0, q1));
        };
        if (l === null || dl === null) return missing();
        const step = scope(() => {
          const qRows = rows5(qs5, q0, q1);
          const block = scoreBlock(qRows, ops.kT[j], ops.softcap, ops.masks, q0, q1, k0, k1);
          if (block === null) return null;
          const p = blockProbabilities(block, l);
          const doRows = rows5(do5, q0, q1);
          const dvPart = sum(matmul(transposeLast(p), doRows), 2);
          const { ds, masked } = scoreGradients(p, doRows, ops.vT[j], dl, block.tanh, maskWidth > 0);
          const dm = masked && additive ? maskBlockAdjoint(masked, additive, k0, k1) : null;
          return { dq: matmul(ds, ops.k5[j]), dk: sum(matmul(transposeLast(ds), qRows), 2), dv: dvPart, dm };
        });
        if (step === null) return missing();
        dq[i] = accumulate(dq[i], step.dq);
        dkj = accumulate(dkj, step.dk);
        dvj = accumulate(dvj, step.dv);
        const evaluated = [dq[i] as Array, dkj, dvj];
        if (step.dm && maskRows === 1) {
          dmj = accumulate(dmj, step.dm);
          evaluated.push(dmj);
        } else if (step.dm) {
          dmRows.push(step.dm);
          evaluated.push(step.dm);
        }
        evaluate(...evaluated);
      });
      dk.push(dkj ?? zeros([b, hk, k1 - k0, d], dtype));
      dv.push(dvj ?? zeros([b, hk, k1 - k0, dvDim], dtype));
      if (maskWidth > 0) dmask.push(maskRows === 1 ? (dmj ?? noMask(0, 1)) : concatenate(dmRows, 2));
    });
    const dqBlocks = dq.map((x, i) => x ?? zeros([b, hk, g, qRanges[i][1] - qRanges[i][0], d], dtype));
    const dqAll = reshape(multiply(concatenate(dqBlocks, 3), scale), q.shape);
    const grads: AttentionGradients = { dq: dqAll, dk: concatenate(dk, 2), dv: concatenate(dv, 2) };
    if (hasAdditiveMask(inputs.mask))
      grads.dmask = dmask.length ? userMaskAdjoint(concatenate(dmask, 3), inputs.mask) : zeros(inputs.mask.shape, inputs.mask.dtype);
    return grads;
  });
}
