// FlexAttention (ai.onnx.preview 1): attention whose scores and probabilities pass through
// subgraphs: scores = scale · Q·Kᵀ → score_mod → mask_mod → softmax → prob_mod → · V. Q is
// [B, Hq, L, E], K and V [B, Hkv, S, ·] with Hq a multiple of Hkv (query head h reads KV head
// ⌊h / (Hq / Hkv)⌋). Each modifier maps the [B, Hq, L, S] tensor to one of the same shape; the
// scores are composed with MLX ops (no fused kernel takes arbitrary modifiers), in float32 for
// half-precision inputs.
import * as mx from '@mlx/core';
import type { GraphIR } from '../onnx/index.js';
import type { Attrs } from '../registry/attrs.js';
import type { OpContext, OpEntry, OpResult } from '../registry/types.js';
import { DOMAINS } from '../registry/op.js';

interface FlexParams {
  scale?: number;
  scoreMod?: GraphIR;
  maskMod?: GraphIR;
  probMod?: GraphIR;
}

const graphIf = (attrs: Attrs, name: string) => (attrs.has(name) ? attrs.graph(name) : undefined);

function parse(attrs: Attrs): FlexParams {
  return {
    scale: attrs.has('scale') ? attrs.float('scale') : undefined,
    scoreMod: graphIf(attrs, 'score_mod'),
    maskMod: graphIf(attrs, 'mask_mod'),
    probMod: graphIf(attrs, 'prob_mod'),
  };
}

function flexAttention(ctx: OpContext<FlexParams>): OpResult[] {
  const p = ctx.params;
  const q = ctx.input(0);
  const k = ctx.input(1);
  const v = ctx.input(2);
  if (q.ndim !== 4 || k.ndim !== 4 || v.ndim !== 4) throw new RangeError(`${ctx.where}: Q, K and V must be 4-D [B, H, L, E]`);
  const [, Hq, , E] = q.shape;
  const Hkv = k.shape[1];
  if (Hkv === 0 || Hq % Hkv !== 0 || v.shape[1] !== Hkv)
    throw new RangeError(`${ctx.where}: ${Hq} query heads cannot share ${Hkv} key heads (and V's ${v.shape[1]})`);
  const work: mx.Dtype = q.dtype === 'float16' || q.dtype === 'bfloat16' ? 'float32' : q.dtype;
  const expand = (a: mx.Array) => mx.astype(Hq === Hkv ? a : mx.repeat(a, Hq / Hkv, 1), work);
  let scores = mx.multiply(mx.matmul(mx.astype(q, work), mx.swapaxes(expand(k), 2, 3)), p.scale ?? 1 / Math.sqrt(E));
  const apply = (g: GraphIR | undefined, x: mx.Array): mx.Array => {
    if (!g) return x;
    const [out] = ctx.runSubgraph(g, [{ kind: 'device', array: mx.astype(x, q.dtype), onnxType: ctx.elemType(0) }]);
    const y = ctx.toArray(out);
    if (y.shape.length !== x.shape.length || y.shape.some((d, i) => d !== x.shape[i]))
      throw new RangeError(`${ctx.where}: a modifier returned shape [${y.shape.join(', ')}] for [${x.shape.join(', ')}]`);
    return mx.astype(y, work);
  };
  scores = apply(p.maskMod, apply(p.scoreMod, scores));
  const probs = apply(p.probMod, mx.softmax(scores, -1, { precise: true }));
  return [mx.astype(mx.matmul(probs, expand(v)), q.dtype)];
}

export const flexAttentionOps: OpEntry[] = [{ domain: DOMAINS.preview, opType: 'FlexAttention', since: 1, parse, run: flexAttention }];
