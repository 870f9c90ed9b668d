// com.microsoft MultiHeadAttention (and PackedMultiHeadAttention, its packed-token form): attention on already-projected Q, K, V (BERT, T5, Whisper
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
import { attentionMask, scaleAttr } from './attention.js';

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
  unidirectional: attrs.int('unidirectional', 0) === 1,
  scale: scaleAttr(attrs),
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
  const y = scaledDotProductAttention(q, k, v, { scale: p.scale ?? 1 / Math.sqrt(H), mask, vjp: ctx.attentionVjp });
  const out: OpResult[] = [fromHeads(y)];
  out.push(ctx.wants(1) ? k : undefined, ctx.wants(2) ? v : undefined);
  return out;
}

// ---------------------------------------------------------------------------------------------
// PackedMultiHeadAttention: MultiHeadAttention on packed tokens (no padding). token_offset [B, S]
// lists each real token's position in the padded [B·S] layout, then the padding positions;
// cumulative_sequence_length [B + 1] gives each sequence's token count. The tokens are scattered
// into the padded layout (through the inverse of token_offset), attend within their sequence
// (padding keys get mask_filter_value), and are gathered back.

/** Packed rows [T, D] laid out padded [B·S, D] (zeros at padding), by the inverse of token_offset. */
function toPadded(x: mx.Array, inverse: mx.Array, padRows: number): mx.Array {
  const ext = padRows > 0 ? mx.concatenate([x, mx.zeros([padRows, x.shape[1]], x.dtype)], 0) : x;
  return mx.take(ext, inverse, 0);
}

/**
 * token_offset [B, S] (flattened, int32 positions in [0, B·S)) and the sequence lengths, checked on
 * the device against cumulative_sequence_length [B + 1] and the T packed tokens: the lengths must
 * rise from 0 to T by at most S a sequence, token_offset must list every padded position once, and
 * token i of sequence b (cu[b] <= i < cu[b + 1]) must sit at b·S + i - cu[b]. A run whose data
 * fail fails naming the value; meanwhile every index stays in range (clamped).
 */
function packedLayout(ctx: OpContext<MhaParams>, B: number, S: number, T: number): { offsets: mx.Array; lengths: mx.Array } {
  const n = B * S;
  const cuShape = ctx.shape(5);
  if (cuShape.length !== 1 || cuShape[0] !== B + 1)
    throw new RangeError(
      `${ctx.where}: cumulative_sequence_length has shape [${cuShape.join(', ')}], not [${B + 1}] for token_offset [${B}, ${S}]`,
    );
  // Compared in their own width: an int64 offset of 2^32 must not wrap into range.
  const wide = (a: mx.Array) => (a.dtype === 'int64' || a.dtype === 'int32' ? a : mx.astype(a, 'int64'));
  const raw = wide(mx.flatten(ctx.input(4)));
  const cuRaw = wide(mx.flatten(ctx.input(5)));
  const it = raw.dtype;
  const lengths = mx.subtract(mx.slice(cuRaw, [1], [B + 1], [1]), mx.slice(cuRaw, [0], [B], [1]));
  ctx.guard(
    mx.logicalOr(
      mx.logicalOr(mx.notEqual(mx.slice(cuRaw, [0], [1], [1]), 0), mx.notEqual(mx.slice(cuRaw, [B], [B + 1], [1]), T)),
      mx.any(mx.logicalOr(mx.less(lengths, 0), mx.greater(lengths, S))),
    ),
    (d) =>
      `cumulative_sequence_length [${d.join(', ')}] must rise from 0 to the ${T} packed tokens by at most the sequence length ${S} a sequence`,
    cuRaw,
  );
  // A permutation of [0, n): sorted, it is 0, 1, ..., n - 1.
  const sorted = mx.sort(raw, 0);
  const misplaced = mx.notEqual(sorted, mx.arange(0, n, 1, it));
  ctx.guard(
    mx.any(misplaced),
    ([lo, hi, missing]) =>
      lo < 0 || hi >= n
        ? `token_offset holds ${lo < 0 ? lo : hi}, outside the ${n} padded positions [0, ${n - 1}] of [${B}, ${S}]`
        : `token_offset must list each of the ${n} padded positions of [${B}, ${S}] once; position ${missing} is missing`,
    mx.stack([mx.min(raw), mx.max(raw), mx.astype(mx.argmax(mx.astype(misplaced, 'int32'), 0), it)]),
  );
  if (T > 0) {
    // Token i of sequence b = #{k >= 1 : cu[k] <= i} belongs at b·S + i - cu[b].
    const i = mx.arange(0, T, 1, it);
    const ends = mx.reshape(mx.slice(cuRaw, [1], [B + 1], [1]), [1, B]);
    const b = mx.minimum(mx.sum(mx.astype(mx.lessEqual(ends, mx.reshape(i, [T, 1])), it), 1), B - 1);
    const cuAt = mx.take(cuRaw, mx.astype(b, 'int32'), 0);
    const expected = mx.add(mx.multiply(b, S), mx.subtract(i, cuAt));
    const given = mx.slice(raw, [0], [T], [1]);
    const wrong = mx.notEqual(given, expected);
    const first = mx.argmax(mx.astype(wrong, 'int32'), 0);
    ctx.guard(
      mx.any(wrong),
      ([k, got, want]) => `token_offset[${k}] = ${got}, but packed token ${k} is position ${want} of the padded [${B}, ${S}] layout`,
      mx.stack([mx.astype(first, it), mx.take(given, first), mx.take(expected, first)]),
    );
  }
  const offsets = mx.astype(mx.clip(raw, 0, Math.max(n - 1, 0)), 'int32');
  return { offsets, lengths: mx.astype(mx.clip(lengths, 0, S), 'int32') };
}

function packedMha(ctx: OpContext<MhaParams>): OpResult[] {
  const p = ctx.params;
  const N = p.heads;
  const toShape = ctx.shape(4);
  if (toShape.length !== 2) throw new RangeError(`${ctx.where}: token_offset has shape [${toShape.join(', ')}], not [batch, sequence]`);
  const [B, S] = toShape;
  const query = ctx.input(0);
  const T = query.shape[0];
  if (T > B * S) throw new RangeError(`${ctx.where}: ${T} tokens do not fit token_offset [${B}, ${S}]`);
  const { offsets, lengths } = packedLayout(ctx, B, S, T);
  const inverse = mx.argsort(offsets, 0); // offsets is a permutation of [0, B·S) (checked)
  const pad = (x: mx.Array) => mx.reshape(toPadded(x, inverse, B * S - T), [B, S, x.shape[1]]);
  let q: mx.Array;
  let k: mx.Array;
  let v: mx.Array;
  const bias = ctx.optional(3);
  if (query.ndim === 4) {
    // [T, N, 3, H]
    const H = query.shape[3];
    const parts = mx.split(query, 3, 2).map((a) => pad(mx.reshape(a, [T, N * H])));
    [q, k, v] = parts.map((a) => toHeads(a, N));
  } else {
    const D = query.shape[1];
    const parts = bias ? mx.splitSections(bias, [D, 2 * D], 0) : undefined;
    const withBias = (x: mx.Array, i: number) => (parts ? mx.add(x, parts[i]) : x);
    q = toHeads(pad(withBias(query, 0)), N);
    k = toHeads(pad(withBias(ctx.input(1), 1)), N);
    v = toHeads(pad(withBias(ctx.input(2), 2)), N);
  }
  let mask: mx.Array = attentionMask(lengths, B, S, S, p.maskFilterValue, q.dtype);
  const attentionBias = ctx.optional(6);
  if (attentionBias) mask = mx.add(mask, attentionBias);
  const y = fromHeads(scaledDotProductAttention(q, k, v, { scale: p.scale ?? 1 / Math.sqrt(q.shape[3]), mask, vjp: ctx.attentionVjp })); // [B, S, Dv]
  const flat = mx.reshape(y, [B * S, y.shape[2]]);
  return [mx.take(flat, mx.slice(offsets, [0], [T], [1]), 0)];
}

export const msMultiHeadAttentionOps: OpEntry[] = [
  msOp('PackedMultiHeadAttention', 1, {
    parse: parseMha,
    run: packedMha,
    note: 'token_offset must list every padded position (a permutation of [0, B·S))',
  }),
  msOp('MultiHeadAttention', 1, {
    parse: parseMha,
    check,
    run: mha,
    note: 'no past_sequence_length (shared buffers), cache_indirection or qk output',
  }),
];
