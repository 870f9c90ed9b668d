// com.microsoft MultiHeadAttention: attention on already-projected Q, K, V (BERT, T5, Whisper
// decoders; self- and cross-attention), with an optional packed bias, key padding mask, additive
// attention bias and a KV cache (past_key/past_value in BNSH, concatenated into present_*).
//
// Layouts, as onnxruntime's CPU kernel takes them: Q [B, S, D]; K/V [B, L, D] (projected, bias
// added), or [B, N, L, H] (cross-attention keys reused as they are: no bias, no cache); packed
// KV in key [B, L, N, 2, H]; packed QKV in query [B, S, N, 3, H]. Masked keys get
// mask_filter_value added (default -10000), as the reference does, not -inf.
import * as mx from '@mlx/core';
import { fromHeads, scaledDotProductAttention, toHeads } from '@mlx/kernels';
import type { Attrs } from '../../registry/attrs.js';
import type { CheckContext, OpContext, OpEntry, OpResult } from '../../registry/types.js';
import { msOp } from '../../registry/op.js';
import { attentionMask } from './attention.js';

interface MhaParams {
  heads: number;
  maskFilterValue: number;
  unidirectional: boolean;
  /** Default 1/sqrt(head size). */
  scale?: number;
}

const parseMha = (attrs: Attrs): MhaParams => ({
  heads: attrs.int('num_heads'),
  maskFilterValue: attrs.float('mask_filter_value', -10000),
  unidirectional: attrs.int('unidirectional', 0) !== 0,
  scale: attrs.has('scale') ? attrs.float('scale') : undefined,
});

function check(ctx: CheckContext<MhaParams>): string | undefined {
  if (ctx.node.inputs[8]) return 'MultiHeadAttention with past_sequence_length (a shared KV buffer) is not supported';
  if (ctx.node.inputs[9]) return 'MultiHeadAttention with cache_indirection (beam search) is not supported';
  if (ctx.node.outputs[3]) return 'MultiHeadAttention with the qk output is not supported';
  return undefined;
}

/** [B, L, N, k, H] split on axis 3 into k arrays [B, N, L, H]. */
function unpack(x: mx.Array, k: number): mx.Array[] {
  return mx.split(x, k, 3).map((a) => mx.transpose(mx.squeeze(a, 3), [0, 2, 1, 3]));
}

function mha(ctx: OpContext<MhaParams>): OpResult[] {
  const p = ctx.params;
  const N = p.heads;
  const query = ctx.input(0);
  const key = ctx.optional(1);
  const value = ctx.optional(2);
  const bias = ctx.optional(3);
  let q: mx.Array;
  let k: mx.Array;
  let v: mx.Array;
  // Cross-attention keys given per head ([B, N, L, H]) are used as they are, without the cache.
  let fixedKv = false;
  if (query.ndim === 5) {
    if (key || value) throw new RangeError(`${ctx.where}: a packed QKV query takes no key or value`);
    if (bias) throw new RangeError(`${ctx.where}: bias with a packed QKV query is not supported`);
    [q, k, v] = unpack(query, 3);
  } else {
    if (!key) throw new RangeError(`${ctx.where}: needs key (or a packed QKV query)`);
    const D = query.shape[2];
    const parts = bias ? mx.splitSections(bias, [D, 2 * D], 0) : undefined;
    q = toHeads(parts ? mx.add(query, parts[0]) : query, N);
    if (key.ndim === 5) {
      if (value) throw new RangeError(`${ctx.where}: a packed KV key takes no value`);
      if (bias) throw new RangeError(`${ctx.where}: bias with a packed KV key is not supported`);
      [k, v] = unpack(key, 2);
    } else if (key.ndim === 4) {
      if (value?.ndim !== 4) throw new RangeError(`${ctx.where}: a per-head [B, N, L, H] key needs a value of the same layout`);
      k = key;
      v = value;
      fixedKv = true;
    } else {
      if (!value) throw new RangeError(`${ctx.where}: needs value with a 3-D key`);
      k = toHeads(parts ? mx.add(key, parts[1]) : key, N);
      v = toHeads(parts ? mx.add(value, parts[2]) : value, N);
    }
  }
  const [B, , S, H] = q.shape;
  const pastK = ctx.optional(6);
  const pastV = ctx.optional(7);
  if (pastK && pastV && !fixedKv) {
    k = mx.concatenate([pastK, k], 2);
    v = mx.concatenate([pastV, v], 2);
  }
  const T = k.shape[2];
  const filter = p.maskFilterValue;
  const padding = ctx.optional(4);
  let mask: mx.Array | null = null;
  if (padding) {
    if (padding.ndim === 1 && padding.shape[0] !== B)
      throw new RangeError(`${ctx.where}: a key_padding_mask of shape [${padding.shape.join(', ')}] is not supported`);
    if (padding.ndim >= 2 && padding.shape[padding.ndim - 1] !== T)
      throw new RangeError(`${ctx.where}: key_padding_mask's last axis is ${padding.shape.at(-1)}, not the total length ${T}`);
    mask = attentionMask(padding, B, S, T, filter, q.dtype);
  }
  if (p.unidirectional) {
    const i = mx.reshape(mx.arange(0, S, 1, 'int32'), [S, 1]);
    const j = mx.reshape(mx.arange(0, T, 1, 'int32'), [1, T]);
    const offset = T - S; // the past's length in self-attention
    const causal = mx.where(mx.lessEqual(j, mx.add(i, offset)), mx.scalar(0, q.dtype), mx.scalar(filter, q.dtype));
    mask = mask ? mx.add(mask, causal) : causal;
  }
  const attentionBias = ctx.optional(5);
  if (attentionBias) mask = mask ? mx.add(mask, attentionBias) : attentionBias;
  const y = scaledDotProductAttention(q, k, v, { scale: p.scale ?? 1 / Math.sqrt(H), mask });
  const out: OpResult[] = [fromHeads(y)];
  out.push(ctx.wants(1) ? k : undefined, ctx.wants(2) ? v : undefined);
  return out;
}

export const msMultiHeadAttentionOps: OpEntry[] = [
  msOp('MultiHeadAttention', 1, {
    parse: parseMha,
    check,
    run: mha,
    note: 'no past_sequence_length (shared buffers), cache_indirection or qk output',
  }),
];
