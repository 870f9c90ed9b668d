// ai.onnx Attention (opsets 23, 24), RMSNormalization and RotaryEmbedding (opset 23), on the
// kernels of @mlx/kernels: grouped-query attention without repeating K/V, causal masking aligned
// after the past cache, masks shorter than the keys padded with -inf, softcap, empty rows as zeros.
import * as mx from '@mlx/core';
import { checkedIndices } from './helpers/bounds.js';
import { fromHeads, rmsNorm, rotaryEmbedding, rotaryEmbeddingComposite, scaledDotProductAttention, toHeads } from '@mlx/kernels';
import type { Attrs } from '../registry/attrs.js';
import type { OpContext, OpEntry, OpResult } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { RefusedNodeError } from '../errors.js';
import { normAxis } from './helpers/util.js';
import { parseLayerNorm } from './norm.js';

/** Q, K or V as [B, H, S, d]: 4-D inputs are, 3-D ones [B, S, H*d] split into the attribute's head count. */
function headsOf(x: mx.Array, heads: number, where: string, what: string): mx.Array {
  if (x.ndim === 4) return x;
  if (x.ndim !== 3) throw new RangeError(`${where}: ${what} must be 3-D or 4-D, got shape [${x.shape.join(', ')}]`);
  if (!heads) throw new RangeError(`${where}: a 3-D ${what} needs the q_num_heads/kv_num_heads attributes`);
  return toHeads(x, heads);
}

/** nonpad_kv_seqlen (opset 24): keys at positions ≥ the batch's length are masked out. */
function lengthMask(lengths: mx.Array, keys: number): mx.Array {
  const pos = mx.reshape(mx.arange(0, keys, 1, 'int64'), [1, 1, 1, keys]);
  return mx.less(pos, mx.reshape(mx.astype(lengths, 'int64'), [-1, 1, 1, 1]));
}

/** Combines boolean/additive masks into one the kernel takes (additive where any is float). */
function combineMasks(a: mx.Array | null, b: mx.Array | null, dtype: mx.Dtype): mx.Array | null {
  if (!a || !b) return a ?? b;
  // A mask narrower than the keys is padded as masked-out (ONNX's rule), so both cover every key.
  const widen = (m: mx.Array, w: number) => {
    const have = m.shape[m.ndim - 1];
    if (have >= w) return m;
    const fill = m.dtype === 'bool' ? mx.scalar(false, 'bool') : mx.scalar(-Infinity, m.dtype);
    return mx.pad(m, [m.ndim - 1], [0], [w - have], fill, 'constant');
  };
  const w = Math.max(a.shape[a.ndim - 1], b.shape[b.ndim - 1]);
  a = widen(a, w);
  b = widen(b, w);
  if (a.dtype === 'bool' && b.dtype === 'bool') return mx.logicalAnd(a, b);
  const add = (m: mx.Array) => (m.dtype === 'bool' ? mx.where(m, mx.scalar(0, dtype), mx.scalar(-Infinity, dtype)) : m);
  return mx.add(add(a), add(b));
}

/** Q·Kᵀ at the stage qk_matmul_output_mode names: 0 scaled, 1 + mask, 2 softcapped, 3 softmaxed. */
function qkOutput(
  q: mx.Array,
  k: mx.Array,
  mask: mx.Array | null,
  scale: number,
  softcap: number,
  causalOffset: number | undefined,
  mode: number,
): mx.Array {
  const group = q.shape[1] / k.shape[1];
  const kk = group > 1 ? mx.repeat(k, group, 1) : k;
  let s = mx.multiply(mx.matmul(q, mx.transpose(kk, [0, 1, 3, 2])), scale);
  if (mode === 0) return s;
  // The reference caps the scores before it adds the mask (as the kernel does); with a softcap,
  // mode 1 reports the capped scores without the mask, mode 2 the capped, masked ones.
  if (softcap > 0) s = mx.multiply(mx.tanh(mx.divide(s, softcap)), softcap);
  if (mode === 1 && softcap > 0) return s;
  const [sq, sk] = [s.shape[2], s.shape[3]];
  let add: mx.Array | null = null;
  if (mask) {
    let m = mask.dtype === 'bool' ? mx.where(mask, mx.scalar(0, s.dtype), mx.scalar(-Infinity, s.dtype)) : mx.astype(mask, s.dtype);
    const w = m.shape[m.ndim - 1];
    if (w < sk) m = mx.pad(m, [m.ndim - 1], [0], [sk - w], mx.scalar(-Infinity, s.dtype), 'constant');
    add = m;
  }
  if (causalOffset !== undefined) {
    const i = mx.reshape(mx.arange(0, sq, 1, 'int32'), [sq, 1]);
    const j = mx.reshape(mx.arange(0, sk, 1, 'int32'), [1, sk]);
    const c = mx.where(mx.lessEqual(j, mx.add(i, causalOffset)), mx.scalar(0, s.dtype), mx.scalar(-Infinity, s.dtype));
    add = add ? mx.add(add, c) : c;
  }
  if (add) s = mx.add(s, add);
  if (mode === 1 || mode === 2) return s;
  return mx.softmax(s, -1);
}

interface AttentionParams {
  /** Head counts of 3-D Q and K/V (0: not given). */
  qHeads: number;
  kvHeads: number;
  /** Default 1/sqrt(head size). */
  scale?: number;
  softcap: number;
  causal: boolean;
  /** What the optional 4th output holds: 0 scaled Q·Kᵀ, 1 + mask, 2 softcapped, 3 softmaxed. */
  qkMode: number;
}

function parseAttention(attrs: Attrs): AttentionParams {
  const qkMode = attrs.int('qk_matmul_output_mode', 0);
  // onnxruntime's CPU kernel reads past its buffers for other values (SIGSEGV), so no fallback.
  if (qkMode < 0 || qkMode > 3) throw new RefusedNodeError(`qk_matmul_output_mode ${qkMode} is not one of 0-3`);
  return {
    qHeads: attrs.int('q_num_heads', 0),
    kvHeads: attrs.int('kv_num_heads', 0),
    scale: attrs.has('scale') ? attrs.float('scale') : undefined,
    softcap: attrs.float('softcap', 0),
    causal: attrs.int('is_causal', 0) === 1,
    qkMode,
  };
}

function attention(ctx: OpContext<AttentionParams>): OpResult[] {
  const w = ctx.where;
  const p = ctx.params;
  const qIn = ctx.input(0);
  const threeD = qIn.ndim === 3;
  const q = headsOf(qIn, p.qHeads, w, 'Q');
  let k = headsOf(ctx.input(1), p.kvHeads, w, 'K');
  let v = headsOf(ctx.input(2), p.kvHeads, w, 'V');
  const pastKey = ctx.optional(4);
  const pastValue = ctx.optional(5);
  const past = pastKey ? pastKey.shape[2] : 0;
  if (pastKey) k = mx.concatenate([pastKey, k], 2);
  if (pastValue) v = mx.concatenate([pastValue, v], 2);
  const scale = p.scale ?? 1 / Math.sqrt(q.shape[3]);
  const { softcap, causal } = p;
  let mask: mx.Array | null = ctx.optional(3) ?? null;
  const lengths = ctx.opset >= 24 ? ctx.optional(6) : undefined;
  if (lengths) mask = combineMasks(mask, lengthMask(lengths, k.shape[2]), q.dtype);
  const kernelMask = mask && mask.dtype !== 'bool' ? mx.astype(mask, q.dtype) : mask;
  // Differentiated, the kernel's VJP gives an additive mask its gradient (a learned bias).
  let y = scaledDotProductAttention(q, k, v, { scale, softcap, causal, causalOffset: past, mask: kernelMask, vjp: ctx.attentionVjp });
  if (threeD) y = fromHeads(y);
  const outs: OpResult[] = [y, k, v];
  if (ctx.wants(3)) outs.push(qkOutput(q, k, mask, scale, softcap, causal ? past : undefined, p.qkMode));
  return outs;
}

const attentionEntry = onnxOp('Attention', 23, { parse: parseAttention, run: attention });

const rmsNormalization = onnxOp('RMSNormalization', 23, {
  parse: parseLayerNorm,
  run: (ctx) => {
    const x = ctx.input(0);
    const scale = ctx.input(1);
    const axis = normAxis(ctx.params.axis, x.ndim);
    // stash_type 1 computes in float32, as the reference does for lower precisions (and 0 in X's type).
    const xf = ctx.params.stashFloat && x.dtype !== 'float64' ? mx.astype(x, 'float32') : x;
    const y = rmsNorm(xf, null, { eps: ctx.params.epsilon, axis, upcast: ctx.params.stashFloat });
    // Y has the scale's type (V in the schema), which may differ from X's (T).
    return [mx.astype(mx.multiply(y, scale), scale.dtype)];
  },
});

const rotary = onnxOp('RotaryEmbedding', 23, {
  parse: (attrs) => ({
    heads: attrs.int('num_heads', 0),
    /** 0: the whole head. */
    rotaryDim: attrs.int('rotary_embedding_dim', 0),
    interleaved: attrs.int('interleaved', 0) === 1,
  }),
  run: (ctx) => {
    const xIn = ctx.input(0);
    const x = headsOf(xIn, ctx.params.heads, ctx.where, 'X');
    const d = x.shape[3];
    const cos = ctx.input(1);
    const ids = ctx.optional(3);
    // take() reads wherever a position points: positions index the cache's rows.
    if (ids && cos.ndim !== 2)
      throw new RangeError(
        `RotaryEmbedding: with position_ids, cos_cache must be 2-D [max_position, rotary_dim / 2], got shape [${cos.shape.join(', ')}]`,
      );
    const positionIds = ids
      ? checkedIndices(ctx, ids, cos.shape[0], `position_ids (a cos/sin cache of ${cos.shape[0]} rows)`, { negative: false })
      : null;
    // The fused rotation's VJP treats the caches as constants; while differentiating (the caches
    // are inputs, which a caller may differentiate) the composite runs instead.
    const rotate = mx.differentiating() ? rotaryEmbeddingComposite : rotaryEmbedding;
    const y = rotate(x, {
      cos,
      sin: ctx.input(2),
      positionIds,
      interleaved: ctx.params.interleaved,
      rotaryDim: ctx.params.rotaryDim || d,
    });
    return [xIn.ndim === 3 ? fromHeads(y) : y];
  },
});

export const attentionOps: OpEntry[] = [attentionEntry, rmsNormalization, rotary];
