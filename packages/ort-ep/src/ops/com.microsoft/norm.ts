// onnxruntime's fused normalisations: SkipLayerNormalization, SkipSimplifiedLayerNormalization,
// GatedRMSNorm and EmbedLayerNormalization (com.microsoft), and the two onnxruntime registers in the ONNX domain:
// LayerNormalization for opsets 1-16 (ops/norm.ts has 17+) and SimplifiedLayerNormalization (RMSNorm).
import * as mx from '@mlx/core';
import { checkedIndices } from '../helpers/bounds.js';
import type { Attrs } from '../../registry/attrs.js';
import type { OpContext, OpEntry, OpResult } from '../../registry/types.js';
import { msOp, onnxOp } from '../../registry/op.js';
import { normAxis } from '../helpers/util.js';
import { layerNorm, layerNormWithStats, rmsNorm, rmsNormWithStats, silu } from '@mlx/kernels';
import { layerNormalization, parseLayerNorm, statsIn, type LayerNormParams } from '../norm.js';

/** onnxruntime's fused ops (Skip*, EmbedLayerNormalization) default epsilon to 1e-12. */
const fusedEpsilon = (attrs: Attrs): number => attrs.float('epsilon', 1e-12);

// ---------------------------------------------------------------------------------------------
// Skip(Simplified)LayerNormalization: s = input + skip (+ bias); y = norm(s) over the last axis.
// Outputs: output, mean, inv_std_var (float32, last axis kept as 1), input_skip_bias_sum.

function skipNorm(simplified: boolean) {
  return (ctx: OpContext<number>): OpResult[] => {
    const x = ctx.input(0);
    const betaIndex = simplified ? -1 : 3;
    const biasIndex = simplified ? 3 : 4;
    // gamma, beta and bias are [hidden] (onnxruntime refuses other ranks); X is [batch, seq, hidden] or [tokens, hidden].
    const hidden = x.shape[x.ndim - 1];
    for (const [i, what] of [
      [2, 'gamma'],
      [betaIndex, 'beta'],
      [biasIndex, 'bias'],
    ] as const) {
      const p = i > 0 ? ctx.optional(i) : undefined;
      if (p && (p.ndim !== 1 || p.shape[0] !== hidden))
        throw new RangeError(
          `${ctx.node.opType}: ${what} is expected to have shape [${hidden}] (X's last axis), got [${p.shape.join(', ')}]`,
        );
    }
    let s = mx.add(x, ctx.input(1));
    const bias = ctx.optional(biasIndex);
    if (bias) s = mx.add(s, bias);
    const gamma = ctx.input(2);
    const beta = betaIndex > 0 ? ctx.optional(betaIndex) : undefined;
    // onnxruntime's fused norms compute their statistics in float32 whatever the input type.
    const options = { eps: ctx.params, upcast: true };
    let out: { y: mx.Array; mean?: mx.Array; invStd?: mx.Array };
    if (ctx.wants(1) || ctx.wants(2)) out = simplified ? rmsNormWithStats(s, gamma, options) : layerNormWithStats(s, gamma, beta, options);
    else out = { y: simplified ? rmsNorm(s, gamma, options) : layerNorm(s, gamma, beta, options) };
    const f32 = (a: mx.Array | undefined) => (a ? mx.astype(a, 'float32') : undefined);
    return [
      out.y,
      ctx.wants(1) ? f32(out.mean ?? mx.mean(s, -1, { keepdims: true })) : undefined,
      ctx.wants(2) ? f32(out.invStd) : undefined,
      ctx.wants(3) ? mx.astype(s, x.dtype) : undefined,
    ];
  };
}

function skipCheck(simplified: boolean) {
  return (ctx: { node: { outputs: string[] } }): string | undefined =>
    simplified && ctx.node.outputs[1]
      ? 'SkipSimplifiedLayerNormalization has no mean (RMSNorm subtracts none); the mean output is not supported'
      : undefined;
}

// ---------------------------------------------------------------------------------------------
// LayerNormalization (ONNX domain, opsets 1-16 as onnxruntime registers it: the same op as
// opset 17's, so norm.ts's translation) and SimplifiedLayerNormalization (RMSNorm, outputs Y and
// InvStdDev), with LayerNormalization's attributes.

function simplifiedLayerNorm(ctx: OpContext<LayerNormParams>): OpResult[] {
  const x = ctx.input(0);
  const gamma = ctx.input(1);
  const options = { axis: normAxis(ctx.params.axis, x.ndim), eps: ctx.params.epsilon, upcast: ctx.params.stashFloat };
  const out = ctx.wants(1) ? rmsNormWithStats(x, gamma, options) : { y: rmsNorm(x, gamma, options), invStd: undefined };
  // Y has the scale's type (V in onnxruntime's schema), which may differ from X's (T).
  const y = out.y.dtype === gamma.dtype ? out.y : mx.astype(out.y, gamma.dtype);
  return [y, statsIn(ctx.params, out.invStd, 'SimplifiedLayerNormalization')];
}

// ---------------------------------------------------------------------------------------------
// EmbedLayerNormalization: word + position (+ segment) embeddings, then LayerNorm over the hidden
// axis. Inputs: input_ids, segment_ids?, word, position, segment?, gamma, beta, mask?, position_ids?.
// Outputs: output, mask_index (int32 [B]: the number of unmasked tokens), embedding_sum.

function embedLayerNorm(ctx: OpContext<number>): OpResult[] {
  const rows = (table: mx.Array, idx: mx.Array, what: string) =>
    mx.take(table, checkedIndices(ctx, idx, table.shape[0], `${what} (a table of ${table.shape[0]} rows)`, { negative: false }), 0);
  const ids = ctx.input(0);
  // onnxruntime's shape checks: 2-D ids, 2-D tables of one hidden size.
  if (ids.ndim !== 2) throw new RangeError(`EmbedLayerNormalization: input_ids shall be 2 dimensions, got shape [${ids.shape.join(', ')}]`);
  const tables: [number, string][] = [
    [2, 'word_embedding'],
    [3, 'position_embedding'],
    [4, 'segment_embedding'],
  ];
  const hidden = ctx.shape(2)[1];
  for (const [i, name] of tables) {
    if (!ctx.has(i)) continue;
    const t = ctx.shape(i);
    if (t.length !== 2 || t[1] !== hidden)
      throw new RangeError(
        `EmbedLayerNormalization: ${name} shall be 2 dimensions [rows, hidden] with word_embedding's hidden size, got shape [${t.join(', ')}]`,
      );
  }
  const [B, S] = ids.shape;
  let sum = rows(ctx.input(2), ids, 'input_ids');
  const pos = ctx.optional(8) ?? mx.reshape(mx.arange(0, S, 1, 'int32'), [1, S]);
  sum = mx.add(sum, rows(ctx.input(3), pos, 'position ids'));
  const segments = ctx.optional(1);
  const segmentTable = ctx.optional(4);
  if (segments && segmentTable) sum = mx.add(sum, rows(segmentTable, segments, 'segment_ids'));
  const y = layerNorm(sum, ctx.input(5), ctx.optional(6), { eps: ctx.params, upcast: true });
  const mask = ctx.optional(7);
  const maskIndex = mask ? mx.astype(mx.sum(mx.notEqual(mask, 0), 1), 'int32') : mx.zeros([B], 'int32');
  return [y, ctx.wants(1) ? maskIndex : undefined, ctx.wants(2) ? sum : undefined];
}

// ---------------------------------------------------------------------------------------------
// GatedRMSNorm (Mamba2 / gated DeltaNet outputs): Y = X · rsqrt(mean(X²) + ε) · scale · SiLU(gate),
// the mean over each group of C = len(scale) trailing elements, all in float32.

function gatedRmsNorm(ctx: OpContext<number>): OpResult[] {
  const x = ctx.input(0);
  const scale = ctx.input(1);
  const C = scale.size;
  const last = x.shape[x.ndim - 1] ?? 1;
  if (C === 0 || last % C !== 0) throw new RangeError(`${ctx.where}: the last axis ${last} is not a multiple of scale's ${C} elements`);
  const grouped = [...x.shape.slice(0, -1), last / C, C];
  const f32 = (a: mx.Array, shape: number[]) => mx.reshape(mx.astype(a, 'float32'), shape);
  // The statistics spelled out, as onnxruntime's kernel computes them.
  const normed = rmsNorm(f32(x, grouped), f32(scale, [C]), { eps: ctx.params, implementation: 'composite' });
  const y = mx.multiply(normed, silu(f32(ctx.input(2), grouped)));
  return [mx.astype(mx.reshape(y, x.shape), x.dtype)];
}

export const msNormOps: OpEntry[] = [
  msOp('GatedRMSNorm', 1, { parse: (attrs) => attrs.float('epsilon', 1e-6), run: gatedRmsNorm }),
  msOp('EmbedLayerNormalization', 1, { parse: fusedEpsilon, run: embedLayerNorm }),
  msOp('SkipLayerNormalization', 1, { parse: fusedEpsilon, run: skipNorm(false) }),
  msOp('SkipSimplifiedLayerNormalization', 1, { parse: fusedEpsilon, check: skipCheck(true), run: skipNorm(true) }),
  onnxOp('LayerNormalization', 1, {
    until: 16,
    parse: parseLayerNorm,
    run: layerNormalization,
    note: "onnxruntime's pre-17 LayerNormalization in the ONNX domain",
  }),
  onnxOp('SimplifiedLayerNormalization', 1, {
    parse: parseLayerNorm,
    run: simplifiedLayerNorm,
    note: "onnxruntime's RMSNorm, registered in the ONNX domain",
  }),
  msOp('SimplifiedLayerNormalization', 1, {
    parse: parseLayerNorm,
    run: simplifiedLayerNorm,
    note: 'the same RMSNorm under com.microsoft, as exporters for other providers write it',
  }),
];
