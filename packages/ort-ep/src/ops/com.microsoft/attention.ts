// com.microsoft Attention (BERT/GPT-2 style, packed QKV projection) and GroupQueryAttention
// (KV cache in BNSH, per-batch lengths from seqlens_k), on @mlx/kernels' scaled-dot-product
// attention, which takes grouped K/V heads without repeating them.
//
// Masks follow onnxruntime's CPU kernels: Attention adds mask_filter_value (default -10000) where
// a key is masked; GroupQueryAttention hides keys past each sequence's length, after the query
// (causal) and outside local_window_size. Per-batch lengths are read on the host (small inputs).
import * as mx from '@mlx/core';
import { OnnxDataType } from '../../onnx/index.js';
import { fromHeads, rmsNorm, rotaryEmbedding, rotaryFactors, scaledDotProductAttention, toHeads, type RotaryFactors } from '@mlx/kernels';
import type { Attrs } from '../../registry/attrs.js';
import type { CheckContext, OpContext, OpEntry, OpResult } from '../../registry/types.js';
import { invalidNode, msOp } from '../../registry/op.js';
import { rotaryPositions, rotaryTables } from './rotary.js';
import { hostNumbers, intsIfGiven } from '../helpers/util.js';
import { decodeMiniFloatArray, encodeE4M3FNOnDevice } from '../helpers/minifloat.js';
import { optionalQuantInput, packNibbles, typed, unpackFields } from '../helpers/quant-math.js';
import { checkResultShape, MAX_DIM } from '../helpers/bounds.js';
import { slidingCache, slidingLayout } from './gqa-sliding-cache.js';

const lowest = (d: mx.Dtype) => (d === 'float16' ? -65504 : d === 'bfloat16' ? -3.38e38 : -3.4028234663852886e38);

/**
 * The scale attribute of the contrib attention ops: absent or 0 means the default 1/sqrt(head
 * size), as onnxruntime reads it (a literal 0 would make every key equally likely).
 */
export function scaleAttr(attrs: Attrs): number | undefined {
  if (!attrs.has('scale')) return undefined;
  const scale = attrs.float('scale');
  if (!Number.isFinite(scale)) throw new RangeError(`scale ${scale} is not a finite number`);
  return scale === 0 ? undefined : scale;
}

// ---------------------------------------------------------------------------------------------
// Attention

interface AttentionParams {
  heads: number;
  /** Q, K, V widths of the packed projection; default three equal parts. */
  qkvHiddenSizes?: number[];
  maskFilterValue: number;
  unidirectional: boolean;
  /** Default 1/sqrt(head size). */
  scale?: number;
  doRotary: boolean;
  pastPresentShareBuffer: boolean;
}

const parseAttention = (attrs: Attrs): AttentionParams => ({
  heads: attrs.int('num_heads'),
  qkvHiddenSizes: intsIfGiven(attrs, 'qkv_hidden_sizes'),
  maskFilterValue: attrs.float('mask_filter_value', -10000),
  unidirectional: attrs.int('unidirectional', 0) === 1,
  scale: scaleAttr(attrs),
  doRotary: attrs.int('do_rotary', 0) === 1,
  pastPresentShareBuffer: attrs.int('past_present_share_buffer', 0) === 1,
});

function attentionCheck(ctx: CheckContext<AttentionParams>): string | undefined {
  if (ctx.params.doRotary) return 'Attention with do_rotary is not supported';
  if (ctx.params.pastPresentShareBuffer) return 'Attention with past_present_share_buffer is not supported';
  const mask = ctx.node.inputs[3] ? ctx.constantInput(3) : undefined;
  if (mask && mask.dims.length === 4) return 'Attention with a 4-D (Megatron) mask_index is not supported';
  return undefined;
}

/** mask_index as an additive mask broadcastable to [B, N, S, T]. */
export function attentionMask(m: mx.Array, batch: number, _seq: number, total: number, filter: number, dtype: mx.Dtype): mx.Array {
  const keys = mx.reshape(mx.arange(0, total, 1, 'int32'), [1, total]);
  let valid: mx.Array;
  if (m.ndim === 1 && m.shape[0] === batch)
    valid = mx.less(keys, mx.reshape(mx.astype(m, 'int32'), [batch, 1])); // right padding: lengths
  else if (m.ndim === 1 && m.shape[0] === 2 * batch) {
    // Left padding: exclusive ends, then inclusive starts.
    const [end, start] = mx.split(mx.astype(m, 'int32'), 2, 0).map((a) => mx.reshape(a, [batch, 1]));
    valid = mx.logicalAnd(mx.less(keys, end), mx.greaterEqual(keys, start));
  } else if (m.ndim === 2 || m.ndim === 3)
    valid = mx.notEqual(m, 0); // raw 0/1 mask [B, T] or [B, S, T]
  else throw new RangeError(`Attention mask_index of shape [${m.shape.join(', ')}] is not supported`);
  const add = mx.where(valid, mx.scalar(0, dtype), mx.scalar(filter, dtype));
  // -> [B, 1, S or 1, T]
  return add.ndim === 2 ? mx.reshape(add, [batch, 1, 1, total]) : mx.expandDims(add, 1);
}

function attention(ctx: OpContext<AttentionParams>): OpResult[] {
  const p = ctx.params;
  const x = ctx.input(0);
  const [B, S] = x.shape;
  const N = p.heads;
  let qkv = mx.matmul(x, ctx.input(1));
  const bias = ctx.optional(2);
  if (bias) qkv = mx.add(qkv, bias);
  const total = qkv.shape[2];
  const sizes = p.qkvHiddenSizes ?? [total / 3, total / 3, total / 3];
  const [q, k, v] = mx.splitSections(qkv, [sizes[0], sizes[0] + sizes[1]], 2).map((a) => toHeads(a, N));
  let keys = k;
  let values = v;
  let past = 0;
  const pastKv = ctx.optional(4);
  if (pastKv) {
    const [pk, pv] = mx.split(pastKv, 2, 0).map((a) => mx.squeeze(a, 0));
    past = pk.shape[2];
    keys = mx.concatenate([pk, k], 2);
    values = mx.concatenate([pv, v], 2);
  }
  const T = past + S;
  const filter = p.maskFilterValue;
  const maskIndex = ctx.optional(3);
  let mask: mx.Array | null = maskIndex ? attentionMask(maskIndex, B, S, T, filter, q.dtype) : null;
  if (p.unidirectional) {
    const i = mx.reshape(mx.arange(0, S, 1, 'int32'), [S, 1]);
    const j = mx.reshape(mx.arange(0, T, 1, 'int32'), [1, T]);
    const causal = mx.where(mx.lessEqual(j, mx.add(i, past)), mx.scalar(0, q.dtype), mx.scalar(filter, q.dtype));
    mask = mask ? mx.add(mask, causal) : causal;
  }
  const relativeBias = ctx.optional(5);
  if (relativeBias) mask = mask ? mx.add(mask, relativeBias) : relativeBias;
  const scale = p.scale ?? 1 / Math.sqrt(sizes[0] / N);
  const y = scaledDotProductAttention(q, keys, values, { scale, mask, vjp: ctx.attentionVjp });
  const out: OpResult[] = [fromHeads(y)];
  if (ctx.wants(1)) out.push(mx.stack([keys, values], 0));
  return out;
}

// ---------------------------------------------------------------------------------------------
// GroupQueryAttention

interface GqaParams {
  heads: number;
  kvHeads: number;
  doRotary: boolean;
  rotaryInterleaved: boolean;
  causal: boolean;
  /**
   * local_window_size: query i sees keys j with positions[i] - W < j <= positions[i] (W keys,
   * itself included); a negative value: no window. 0 (every key hidden: onnxruntime outputs
   * zeros) is left to the fallback by check().
   */
  localWindow: number;
  /** Default 1/sqrt(head size). */
  scale?: number;
  softcap: number;
  /** An extra logit of 0 in every softmax (head_sink gives one per head instead). */
  smoothSoftmax: boolean;
  /** Epsilon of the RMSNorm of Q and K per head (q_norm_weight, k_norm_weight). */
  qkNormEpsilon: number;
  /** output_qk: 0 none, 1 the scaled scores before softmax, 2 the probabilities after it. */
  qkOutput: number;
  /** past_key and past_value hold the last local_window_size tokens (gqa-sliding-cache.ts). */
  slidingWindowCache: boolean;
  /** KV cache quantization (k_quant_type, v_quant_type): 'NONE', 'PER_TENSOR' or 'PER_CHANNEL'. */
  kQuant: string;
  vQuant: string;
  /** kv_cache_bit_width: 8 (int8 cache) or 4 (two values per uint8). */
  cacheBits: number;
}

function parseGqa(attrs: Attrs): GqaParams {
  const heads = attrs.int('num_heads');
  const kvHeads = attrs.int('kv_num_heads');
  // Head counts the contrib spec rules out make the node invalid: never handed to onnxruntime,
  // whose kernel crashed on a negative num_heads (fuzz seed 2405).
  if (!(heads > 0)) throw invalidNode(`GroupQueryAttention num_heads ${heads} must be positive`);
  if (!(kvHeads > 0) || heads % kvHeads !== 0)
    throw invalidNode(`GroupQueryAttention kv_num_heads ${kvHeads} must be positive and divide num_heads ${heads}`);
  const causal = attrs.int('causal', 1);
  if (causal !== 0 && causal !== 1) throw new RangeError(`GroupQueryAttention causal must be 0 or 1, got ${causal}`);
  const localWindow = attrs.int('local_window_size', -1);
  // onnxruntime's kernel narrows the attribute to an int: 2^32 + 2 would be a window of 2 there,
  // 2^32 one of 0. No model means that, so such a node is refused rather than given either window.
  if (!(localWindow >= -(2 ** 31) && localWindow < 2 ** 31))
    throw invalidNode(`GroupQueryAttention local_window_size ${localWindow} does not fit in an int32`);
  // onnxruntime refuses the session (its message); a window only narrows the causal mask.
  if (causal === 0 && localWindow !== -1)
    throw invalidNode(`GroupQueryAttention local_window_size must be -1 when causal is 0, got ${localWindow}`);
  // Flags are on at 1 only, as onnxruntime reads them (2 or -1 is off there).
  const flag = (name: string) => attrs.int(name, 0) === 1;
  const slidingWindowCache = flag('sliding_window_cache');
  if (slidingWindowCache && !(localWindow > 0))
    throw invalidNode(`GroupQueryAttention sliding_window_cache=1 requires local_window_size > 0, got ${localWindow}`);
  return {
    heads,
    kvHeads,
    doRotary: flag('do_rotary'),
    rotaryInterleaved: flag('rotary_interleaved'),
    causal: causal === 1,
    localWindow,
    scale: scaleAttr(attrs),
    softcap: attrs.float('softcap', 0),
    smoothSoftmax: flag('smooth_softmax'),
    qkNormEpsilon: attrs.float('qk_norm_epsilon', 1e-6),
    qkOutput: attrs.int('qk_output', 0),
    slidingWindowCache,
    kQuant: attrs.string('k_quant_type', 'NONE'),
    vQuant: attrs.string('v_quant_type', 'NONE'),
    cacheBits: attrs.int('kv_cache_bit_width', 8),
  };
}

const QUANT_TYPES = ['NONE', 'PER_TENSOR', 'PER_CHANNEL'];

function gqaCheck(ctx: CheckContext<GqaParams>): string | undefined {
  const a = ctx.params;
  if (a.qkOutput < 0 || a.qkOutput > 2) return `GroupQueryAttention qk_output ${a.qkOutput} is not 0, 1 or 2`;
  if (ctx.node.outputs[3] && a.qkOutput === 0) return 'GroupQueryAttention output_qk needs qk_output 1 or 2';
  if (a.slidingWindowCache) {
    if (a.kQuant !== 'NONE' || a.vQuant !== 'NONE')
      return 'GroupQueryAttention with sliding_window_cache and a quantized KV cache is not supported';
    if (ctx.node.outputs[3]) return 'GroupQueryAttention with sliding_window_cache and output_qk is not supported';
    if (ctx.node.inputs[10]) return 'GroupQueryAttention with sliding_window_cache and attention_bias is not supported';
  }
  if (a.localWindow === 0) return 'GroupQueryAttention local_window_size 0 hides every key (onnxruntime outputs zeros); -1 means no window';
  for (const [what, t] of [
    ['k_quant_type', a.kQuant],
    ['v_quant_type', a.vQuant],
  ])
    if (!QUANT_TYPES.includes(t)) return `GroupQueryAttention ${what} '${t}' is not one of ${QUANT_TYPES.join(', ')}`;
  const quantized = a.kQuant !== 'NONE' || a.vQuant !== 'NONE';
  if (quantized) {
    if (a.kQuant === 'NONE' || a.vQuant === 'NONE') return 'GroupQueryAttention with only one of K and V quantized is not supported';
    if (a.cacheBits !== 8 && a.cacheBits !== 4) return `GroupQueryAttention kv_cache_bit_width ${a.cacheBits} is not 8 or 4`;
    if (!ctx.node.inputs[12] || !ctx.node.inputs[13]) return 'GroupQueryAttention with a quantized KV cache needs k_scale and v_scale';
    // The past carries the cache's element type (a first prompt passes an empty one).
    if (!ctx.node.inputs[3] || !ctx.node.inputs[4])
      return 'GroupQueryAttention with a quantized KV cache needs past_key and past_value (empty for a first prompt)';
    const wants = a.cacheBits === 8 ? [OnnxDataType.INT8, OnnxDataType.FLOAT8E4M3FN] : [OnnxDataType.UINT8];
    const t = ctx.inputType(3);
    if (t !== undefined && !wants.includes(t))
      return `GroupQueryAttention with a ${a.cacheBits}-bit cache takes a ${a.cacheBits === 8 ? 'int8 or float8e4m3fn' : 'uint8 (two 4-bit values a byte)'} past_key, got element type ${t}`;
    const tv = ctx.inputType(4);
    if (t !== undefined && tv !== undefined && tv !== t)
      return `GroupQueryAttention past_key and past_value must share one cache type, got ${t} and ${tv}`;
  } else if (ctx.node.inputs[12] || ctx.node.inputs[13])
    return 'GroupQueryAttention k_scale and v_scale need k_quant_type and v_quant_type';
  if (!ctx.node.inputs[14] !== !ctx.node.inputs[15]) return 'GroupQueryAttention needs both q_norm_weight and k_norm_weight, or neither';
  return undefined;
}

interface GqaShape {
  B: number;
  S: number;
  N: number;
  Nkv: number;
  H: number;
  /** Total length (past + new) of each batch entry: seqlens_k + 1. */
  lens: number[];
  /** Where each batch entry's new tokens start in the cache. */
  starts: number[];
  total: number;
}

/** Q [B, S, N * H], K and V [B, S, Nkv * H] as ONNX has them: separate inputs, or the slices of one packed QKV. */
function gqaFlatProjections(ctx: OpContext, N: number, Nkv: number): Flat {
  const q = ctx.input(0);
  const key = ctx.optional(1);
  if (key) return [q, key, ctx.input(2)];
  const H = q.shape[2] / (N + 2 * Nkv);
  return mx.splitSections(q, [N * H, (N + Nkv) * H], 2) as Flat;
}

/** The new rows of a step as ONNX has them, [B, S, heads * H] (q, k, v). */
type Flat = [mx.Array, mx.Array, mx.Array];

/** Rotates the new Q and K at their absolute positions. */
function gqaRotary(
  ctx: OpContext<GqaParams>,
  q: mx.Array,
  k: mx.Array,
  g: Pick<GqaShape, 'B' | 'S' | 'H' | 'starts'>,
  first: boolean,
  at?: mx.Array,
): [mx.Array, mx.Array] {
  const given = first ? undefined : ctx.optional(9);
  const source = given ?? at;
  const interleaved = ctx.params.rotaryInterleaved;
  const cosCache = ctx.input(7);
  const sinCache = ctx.input(8);
  // Every layer of a step rotates at the same positions by the same tables: made once per run
  // (positions from the host's starts are keyed by their numbers).
  const made = (): RotaryFactors => {
    const positions =
      source ??
      mx.Array.fromTypedArray(
        Int32Array.from({ length: g.B * g.S }, (_, i) => g.starts[Math.floor(i / g.S)] + (i % g.S)),
        [g.B, g.S],
        'int32',
      );
    const [cos, sin] = rotaryTables(ctx, positions, cosCache, sinCache, g.S).map((t) => mx.expandDims(t, 1)); // [B, 1, S, rd/2]
    return rotaryFactors(cos, sin, { interleaved });
  };
  const key = source ?? `${g.B}x${g.S}@${g.starts.join(',')}`;
  const factors = ctx.shared(['gqa-rotary', key, cosCache, sinCache, g.S, interleaved], made);
  const rotaryDim = cosCache.shape[1] * 2;
  return [rotaryEmbedding(q, { factors, rotaryDim }), rotaryEmbedding(k, { factors, rotaryDim })];
}

/**
 * The present cache [B, Nkv, L, H]: each entry's past rows up to its start, then its new rows, then
 * zeros (as onnxruntime's CPU kernel leaves a present buffer that is not the past's own).
 */
function gqaCache(past: mx.Array | undefined, fresh: mx.Array, g: GqaShape, length: number): mx.Array {
  if (past && past.shape[2] === length) return gqaCacheInPlace(past, fresh, g);
  const rows: mx.Array[] = [];
  for (let b = 0; b < g.B; b++) {
    const one = (a: mx.Array, from: number, to: number) => mx.slice(a, [b, 0, from, 0], [b + 1, g.Nkv, to, g.H], [1, 1, 1, 1]);
    const parts: mx.Array[] = [];
    const start = g.starts[b];
    // The whole past of a batch of one (a decode step on a growing cache) needs no slice.
    if (start > 0 && past) parts.push(g.B === 1 && start === past.shape[2] ? past : one(past, 0, start));
    parts.push(one(fresh, 0, g.S));
    const end = start + g.S;
    if (end < length) parts.push(mx.zeros([1, g.Nkv, length - end, g.H], fresh.dtype));
    rows.push(parts.length === 1 ? parts[0] : mx.concatenate(parts, 2));
  }
  return rows.length === 1 ? rows[0] : mx.concatenate(rows, 0);
}

/**
 * Shared-buffer mode (the past is a buffer of fixed capacity, at least the total length, and the
 * present is the same buffer): each entry's new rows are written over the past at its start with a
 * slice update, so that the step costs its new rows, not the cache. When the run holds the past's
 * only reference (a donated feed, MlxRunOptions.donate), MLX writes into the past's own buffer;
 * otherwise it copies the past once. Rows past each entry's end keep the past's contents, as in
 * onnxruntime's shared buffer (attention never reads them).
 */
function gqaCacheInPlace(past: mx.Array, fresh: mx.Array, g: GqaShape): mx.Array {
  let out = past;
  for (let b = 0; b < g.B; b++) {
    const rows = g.B === 1 ? fresh : mx.slice(fresh, [b, 0, 0, 0], [b + 1, g.Nkv, g.S, g.H], [1, 1, 1, 1]);
    const start = g.starts[b];
    if (start < 0 || start + g.S > past.shape[2])
      throw new RangeError(
        `seqlens_k puts batch entry ${b}'s new tokens at ${start}..${start + g.S}, outside the KV buffer of ${past.shape[2]}`,
      );
    out = mx.sliceUpdate(
      out,
      rows.dtype === past.dtype ? rows : mx.astype(rows, past.dtype),
      [b, 0, start, 0],
      [b + 1, g.Nkv, start + g.S, g.H],
      [1, 1, 1, 1],
    );
  }
  return out;
}

/**
 * Key visibility [B, 1, S, T]: key j < the entry's length, j ≤ the query's position, inside the
 * window. Built on the device from the per-entry lengths and starts (B values each): a host table
 * of B x S x T flags would be sized by total_sequence_length, a number from the feeds.
 */
function gqaMask(p: GqaParams, g: GqaShape): mx.Array {
  const perEntry = (xs: number[]) => mx.Array.fromTypedArray(Int32Array.from(xs), [g.B, 1, 1, 1], 'int32');
  const j = mx.reshape(mx.arange(0, g.total, 1, 'int32'), [1, 1, 1, g.total]);
  let ok = mx.less(j, perEntry(g.lens));
  if (p.causal) {
    const pos = mx.add(perEntry(g.starts), mx.reshape(mx.arange(0, g.S, 1, 'int32'), [1, 1, g.S, 1])); // [B, 1, S, 1]
    ok = mx.logicalAnd(ok, mx.lessEqual(j, pos));
    // A window at least as long as the keys hides nothing: no ops for it.
    if (p.localWindow > 0 && p.localWindow < g.total)
      ok = mx.logicalAnd(ok, mx.greater(j, mx.subtract(pos, mx.scalar(p.localWindow, 'int32'))));
  }
  return mx.broadcastTo(ok, [g.B, 1, g.S, g.total]);
}

/** RMSNorm of each head's vector (the last axis), in float32 with the statistics spelled out as onnxruntime's kernel has them, times `weight` [H]. */
export function headRmsNorm(x: mx.Array, weight: mx.Array, eps: number): mx.Array {
  const f32 = (a: mx.Array) => mx.astype(a, 'float32');
  return mx.astype(rmsNorm(f32(x), f32(weight), { eps, implementation: 'composite' }), x.dtype);
}

/**
 * Attention whose softmax has one more logit per head that takes probability but no value:
 * head_sink[n], or 0 for smooth_softmax. Composite, in float32: q [B, N, S, H], k and v
 * [B, Nkv, T, H], `visible` [B, 1, S, T], `bias` additive (broadcast to [B, N, S, T]).
 */
export function sinkAttention(
  q: mx.Array,
  k: mx.Array,
  v: mx.Array,
  sink: mx.Array,
  visible: mx.Array,
  bias: mx.Array | undefined,
  scale: number,
  softcap: number,
): mx.Array {
  const [B, N, S, H] = q.shape;
  const Nkv = k.shape[1];
  const T = k.shape[2];
  const G = N / Nkv;
  const f32 = (a: mx.Array) => mx.astype(a, 'float32');
  const qg = mx.reshape(f32(q), [B, Nkv, G, S, H]);
  let scores = mx.multiply(mx.matmul(qg, mx.expandDims(mx.swapaxes(f32(k), 2, 3), 2)), scale); // [B, Nkv, G, S, T]
  if (softcap > 0) scores = mx.multiply(mx.tanh(mx.divide(scores, softcap)), softcap);
  if (bias) scores = mx.add(scores, mx.reshape(mx.broadcastTo(f32(bias), [B, N, S, T]), [B, Nkv, G, S, T]));
  scores = mx.where(mx.expandDims(visible, 2), scores, mx.scalar(-Infinity, 'float32'));
  const sinks = mx.reshape(f32(sink), [1, Nkv, G, 1, 1]);
  const top = mx.maximum(mx.max(scores, -1, { keepdims: true }), sinks);
  const e = mx.exp(mx.subtract(scores, top));
  const denom = mx.add(mx.sum(e, -1, { keepdims: true }), mx.exp(mx.subtract(sinks, top)));
  const y = mx.matmul(mx.divide(e, denom), mx.expandDims(f32(v), 2)); // [B, Nkv, G, S, H]
  return mx.astype(mx.reshape(y, [B, N, S, H]), q.dtype);
}

/**
 * Whether @mlx/sys's decode step (mx.ext.gqaStep) takes this one: float32 on the CPU, no attention
 * bias or softcap, rotary tables (if any) float32 [P, R/2] with R at most the head size, not while
 * differentiating, and the CPU kernels not turned off (MLXC_CPU_KERNELS=off).
 */
function nativeStepApplies(ctx: OpContext<GqaParams>, arrays: mx.Array[], H: number): boolean {
  const p = ctx.params;
  if (mx.differentiating() || process.env.MLXC_CPU_KERNELS === 'off' || mx.defaultStream().device.type !== 'cpu') return false;
  if (ctx.has(10) || p.softcap > 0 || !arrays.every((a) => a.dtype === 'float32')) return false;
  if (!p.doRotary) return true;
  const [cos, sin] = [ctx.shape(7), ctx.shape(8)];
  return (
    ctx.elemType(7) === OnnxDataType.FLOAT &&
    ctx.elemType(8) === OnnxDataType.FLOAT &&
    cos.length === 2 &&
    sin.length === 2 &&
    cos[0] === sin[0] &&
    cos[1] === sin[1] &&
    cos[0] > 0 &&
    2 * cos[1] <= H
  );
}

/**
 * The shared-buffer decode step as one native primitive on the CPU: the rotary embedding of the new
 * queries and keys, their rows written into the caches at each sequence's length (in place when the
 * caches are donated) and attention over the keys each query sees, which only the sequence's own
 * rows (not the bucket's padding) are read for. The checks of seqlens_k and of the rotary positions
 * are the composed path's (guards on the device).
 */
function gqaNativeStep(
  ctx: OpContext<GqaParams>,
  [q, k, v]: Flat,
  pastK: mx.Array,
  pastV: mx.Array,
  len: mx.Array,
  positions: mx.Array,
  total: number,
  first: boolean,
): OpResult[] {
  const p = ctx.params;
  const [B, S] = q.shape;
  const H = pastK.shape[3];
  let rope: { at: mx.Array; cos: mx.Array; sin: mx.Array } | undefined;
  if (p.doRotary) {
    const cos = ctx.input(7);
    // A first prompt rotates at 0 .. S - 1 (position_ids is not read), as the general path does.
    const src = (first ? undefined : ctx.optional(9)) ?? positions;
    const at = ctx.shared(['gqa-step-rope', src, cos.shape[0], B, S], () =>
      mx.astype(mx.broadcastTo(rotaryPositions(ctx, src, cos.shape[0], S), [B, S]), 'int32'),
    );
    rope = { at, cos, sin: ctx.input(8) };
  }
  const window = p.causal && p.localWindow > 0 && p.localWindow < total ? p.localWindow : -1;
  // A packed QKV input goes in whole: the kernel reads each part at its columns (no split in the graph).
  const packed = ctx.has(1) ? undefined : ctx.input(0);
  const [y, presentK, presentV] = mx.ext.gqaStep(
    packed ?? q,
    packed ? null : k,
    packed ? null : v,
    pastK,
    pastV,
    len,
    rope?.at ?? null,
    rope?.cos ?? null,
    rope?.sin ?? null,
    p.rotaryInterleaved,
    p.causal,
    window,
    total,
    p.scale ?? 1 / Math.sqrt(H),
    first,
  );
  // y is [B, S, N * H] already: the kernel reads and writes ONNX's layout (no heads' views).
  return [y, presentK, presentV];
}

/**
 * A decode step into a shared buffer, with each sequence's length left on the device: seqlens_k is
 * not read on the host, so the node needs no evaluation mid-run and a compiled signature traces it
 * with the rest of the step (one program for every step whose total_sequence_length, a shape, is
 * the same). One sequence's new rows go in with a dynamic slice update at its length; a batch's
 * (each entry at its own length, as continuous batching feeds them) with a scatter of those rows
 * alone. The mask and rotary positions are computed from the lengths on the device.
 */
function gqaSharedStep(
  ctx: OpContext<GqaParams>,
  q: mx.Array,
  k: mx.Array,
  v: mx.Array,
  flat: Flat,
  pastK: mx.Array,
  pastV: mx.Array,
  total: number,
  fromZero = false,
): OpResult[] {
  const p = ctx.params;
  const [B, , S, H] = q.shape;
  const capacity = pastK.shape[2];
  const Nkv = pastK.shape[1];
  // What every layer of the step derives from seqlens_k alike (its check too) is made once per run.
  const seqlens = ctx.input(5);
  const { len, start, positions } = ctx.shared(['gqa-step', seqlens, B, S, total, capacity, fromZero], () => {
    // Checked before adding 1, in the feed's own width: 2^31 - 1 must not wrap into range. The
    // range is onnxruntime's, [0, the present buffer's length). A message names the first entry
    // that fails.
    const room = Math.max(total, capacity);
    const raw = mx.reshape(seqlens.dtype === 'int64' ? seqlens : mx.astype(seqlens, 'int32'), [B]);
    const first = (d: number[], bad: (n: number) => boolean) => Math.max(0, d.findIndex(bad));
    ctx.guard(
      mx.any(mx.logicalOr(mx.less(raw, 0), mx.greaterEqual(raw, room))),
      (d) => {
        const b = first(d, (n) => n < 0 || n >= room);
        return `seqlens_k[${b}] = ${d[b]} is out of range [0, ${room})`;
      },
      raw,
    );
    const len = mx.add(mx.astype(mx.clip(raw, 0, room - 1), 'int32'), mx.scalar(1, 'int32'));
    // A first prompt's tokens start at 0 in every entry (a right-padded entry is shorter than S);
    // a later step's at len - S.
    const start = fromZero ? mx.zeros([B], 'int32') : mx.subtract(len, mx.scalar(S, 'int32'));
    if (!fromZero)
      ctx.guard(
        mx.any(mx.less(start, mx.scalar(0, 'int32'))),
        (d) => {
          const b = first(d, (n) => n < S);
          return `seqlens_k[${b}] = ${d[b] - 1} is too small for sequence_length ${S}`;
        },
        len,
      );
    ctx.guard(
      mx.any(mx.greater(len, mx.scalar(total, 'int32'))),
      (d) => {
        const b = first(d, (n) => n > total);
        return pastTotal(b, d[b], total);
      },
      len,
    );
    const positions = mx.add(mx.reshape(start, [B, 1]), mx.reshape(mx.arange(0, S, 1, 'int32'), [1, S]));
    return { len, start, positions };
  });
  if (nativeStepApplies(ctx, [q, k, v, pastK, pastV], H)) return gqaNativeStep(ctx, flat, pastK, pastV, len, positions, total, fromZero);
  if (p.doRotary) [q, k] = gqaRotary(ctx, q, k, { B, S, H, starts: [] }, fromZero, positions);
  let write: (past: mx.Array, rows: mx.Array) => mx.Array;
  const cast = (rows: mx.Array, past: mx.Array) => (rows.dtype === past.dtype ? rows : mx.astype(rows, past.dtype));
  if (B === 1) {
    // MLX's dynamic slice update does not bound its start: a start the check rejects (it fails the
    // run) is clamped into the buffer first, so that the write stays inside it meanwhile.
    const at = ctx.shared(['gqa-write-start', start, capacity - S], () =>
      mx.clip(start, mx.scalar(0, 'int32'), mx.scalar(capacity - S, 'int32')),
    );
    write = (past, rows) => mx.sliceUpdateDynamic(past, cast(rows, past), at, [2]);
  } else {
    // Each entry's rows at its own positions: a scatter along the sequence axis of those rows alone
    // (in place when the buffer is donated), its row indices clamped into the buffer likewise.
    const rowsAt = ctx.shared(['gqa-write-rows', positions, Nkv, H, capacity], () =>
      mx.broadcastTo(mx.reshape(mx.clip(positions, mx.scalar(0, 'int32'), mx.scalar(capacity - 1, 'int32')), [B, 1, S, 1]), [B, Nkv, S, H]),
    );
    write = (past, rows) => mx.putAlongAxis(past, rowsAt, cast(rows, past), 2);
  }
  const presentK = write(pastK, k);
  const presentV = write(pastV, v);
  const view = (a: mx.Array) => (capacity === total ? a : mx.slice(a, [0, 0, 0, 0], [B, Nkv, total, H], [1, 1, 1, 1]));
  // Key j is visible to query i (at positions[i]) when j < len, j <= positions[i] and inside the
  // window. One mask a run for all layers of a window (and one for those of none: a window at least
  // total_sequence_length long hides nothing), built from the positions on the device.
  const window = p.causal && p.localWindow > 0 && p.localWindow < total ? p.localWindow : -1;
  let mask = ctx.shared(['gqa-mask', positions, total, p.causal, window], () => {
    const j = mx.reshape(mx.arange(0, total, 1, 'int32'), [1, 1, 1, total]);
    const pos = mx.reshape(positions, [B, 1, S, 1]);
    let visible = mx.less(j, mx.reshape(len, [B, 1, 1, 1]));
    if (p.causal) visible = mx.logicalAnd(visible, mx.lessEqual(j, pos));
    if (window > 0) visible = mx.logicalAnd(visible, mx.greater(j, mx.subtract(pos, mx.scalar(window, 'int32'))));
    return visible;
  });
  const attentionBias = ctx.optional(10);
  if (attentionBias) mask = mx.add(mx.where(mask, mx.scalar(0, q.dtype), mx.scalar(lowest(q.dtype), q.dtype)), attentionBias);
  // Each query sees its own key (positions[i] < len, inside any window), so without a bias no row
  // is empty: the attention skips zeroing empty rows (a reduction and two selects per layer). A
  // seqlens_k the guards reject fails the run, whatever the rows hold. Not so for a first prompt's
  // padding rows (at or past len) under a window, which may see no key.
  const y = scaledDotProductAttention(q, view(presentK), view(presentV), {
    scale: p.scale ?? 1 / Math.sqrt(H),
    mask,
    softcap: p.softcap,
    rowsNeverEmpty: !attentionBias && !(fromZero && window > 0),
    vjp: ctx.attentionVjp,
  });
  return [fromHeads(y), presentK, presentV];
}

/**
 * The KV cache quantization of onnxruntime's CPU kernel (measured against onnxruntime-node 1.30):
 * 8 bits: int8 q = clamp(round(x / scale), -128, 127), x = q · scale; 4 bits: q = clamp(round(x /
 * scale) + 8, 0, 15), two a byte (the even element in the low nibble), x = (q - 8) · scale. `scale`
 * broadcasts against [B, Nkv, L, H] (PER_TENSOR [1], PER_CHANNEL [1, Nkv, 1, H]).
 */
function quantizeCache(x: mx.Array, scale: mx.Array, bits: number): mx.Array {
  const r = mx.round(mx.divide(mx.astype(x, 'float32'), scale), 0);
  if (bits === 8) return mx.astype(mx.clip(r, -128, 127), 'int8');
  return packNibbles(mx.clip(mx.add(r, 8), 0, 15));
}

/** x / scale as float8e4m3fn codes (uint8): nearest even, saturating at ±448. */
export function quantizeCacheE4M3(x: mx.Array, scale: mx.Array): mx.Array {
  return encodeE4M3FNOnDevice(mx.divide(mx.astype(x, 'float32'), scale));
}

function dequantizeCache(q: mx.Array, scale: mx.Array, bits: number, dtype: mx.Dtype, float8 = false): mx.Array {
  let v: mx.Array;
  if (float8) v = decodeMiniFloatArray(q, OnnxDataType.FLOAT8E4M3FN);
  else if (bits === 8) v = mx.astype(q, 'float32');
  else v = mx.subtract(mx.astype(unpackFields(q, 4), 'float32'), 8);
  return mx.astype(mx.multiply(v, scale), dtype);
}

/** k_scale or v_scale as float32, checked to broadcast against [B, Nkv, L, H]. */
function cacheScale(ctx: OpContext<GqaParams>, i: number, Nkv: number, H: number, what: string): mx.Array {
  const s = mx.astype(ctx.input(i), 'float32');
  const dims = s.shape;
  const ok =
    dims.length <= 4 &&
    dims.every((d, j) => {
      const full = [0, Nkv, 0, H][4 - dims.length + j];
      return d === 1 || (full !== 0 && d === full);
    });
  if (!ok)
    throw new RangeError(
      `${what} of shape [${dims.join(', ')}] does not broadcast to the cache [B, ${Nkv}, L, ${H}] (PER_TENSOR [1], PER_CHANNEL [1, ${Nkv}, 1, ${H}])`,
    );
  return s;
}

/** A sequence longer than total_sequence_length (onnxruntime attends past it within a larger shared buffer; the result here is sized by it). */
const pastTotal = (b: number, len: number, total: number) =>
  `seqlens_k[${b}] + 1 = ${len} is past total_sequence_length ${total}: the keys attended are sized by total_sequence_length`;

/**
 * past_key and past_value [B, kv_num_heads, L, head size (packed two to a byte for a 4-bit cache)],
 * checked as onnxruntime checks them and with its messages. transformers.js feeds a past of batch 0
 * for a graph whose batch dimension is not named batch_size: an error there, not an empty cache.
 */
function checkGqaPast(ctx: OpContext<GqaParams>, B: number, Nkv: number, packedH: number): void {
  if (ctx.has(3) !== ctx.has(4)) throw new RangeError("Input 'past_key' and 'past_value' shall be both present or both absent");
  if (!ctx.has(3)) return;
  const dims = [ctx.shape(3), ctx.shape(4)];
  const names = ['past_key', 'past_value'];
  dims.forEach((d, i) => {
    if (d.length !== 4) throw new RangeError(`Input '${names[i]}' is expected to have 4 dimensions, got ${d.length}`);
  });
  dims.forEach((d, i) => {
    if (d[0] !== B) throw new RangeError(`Input '${names[i]}' dimension 0 should be batch_size, got ${d[0]}`);
  });
  if (dims[0][2] !== dims[1][2])
    throw new RangeError(
      `BNSH Input 'past_key' and 'past_value' should have same dimension 2 (max sequencelength or past sequence length), got ${dims[0][2]} and ${dims[1][2]}`,
    );
  dims.forEach((d, i) => {
    if (d[1] !== Nkv) throw new RangeError(`Input '${names[i]}' shall have kv_num_heads`);
  });
  dims.forEach((d, i) => {
    if (d[3] !== packedH)
      throw new RangeError(`Input '${names[i]}' dimension 3 should match the packed KV head dimension, got ${d[3]} expected ${packedH}`);
  });
}

/**
 * Whether a step appends S rows to pasts of total - S rows for a batch of one whose seqlens_k,
 * known on the host, is total - 1 (every token visible): the shared-buffer step then computes
 * what the general path does, over the past grown by S rows.
 */
function growingStep(ctx: OpContext<GqaParams>, B: number, S: number, total: number): boolean {
  if (B !== 1 || S >= total || !ctx.has(3) || !ctx.has(4)) return false;
  if (ctx.shape(3)[2] + S !== total || ctx.shape(4)[2] + S !== total) return false;
  const seqlens = ctx.hostIfKnown(5);
  return seqlens !== undefined && seqlens.data.length === 1 && Number(seqlens.data[0]) === total - 1;
}

function gqa(ctx: OpContext<GqaParams>): OpResult[] {
  const p = ctx.params;
  const N = p.heads;
  const Nkv = p.kvHeads;
  const flat = gqaFlatProjections(ctx, N, Nkv);
  let [q, k, v] = flat.map((a, i) => toHeads(a, i === 0 ? N : Nkv));
  const [B, , S, H] = q.shape;
  const total = hostNumbers(ctx.host(6))[0];
  if (!(total > 0)) throw new RangeError(`total_sequence_length must be positive, got ${total}.`);
  if (!Number.isSafeInteger(total) || total > MAX_DIM)
    throw new RangeError(`total_sequence_length ${total} is past the largest dimension ${MAX_DIM}`);
  if (p.qkOutput !== 0 && !ctx.wants(3)) throw new RangeError('qk_output attribute was configured but output buffer was not provided');
  checkGqaPast(ctx, B, Nkv, p.kQuant !== 'NONE' && p.cacheBits === 4 ? H / 2 : H);
  // The present cache and the attention scores have total_sequence_length rows (a window-sized
  // buffer's and the new tokens' with sliding_window_cache): sized before anything is built.
  const pastLength = ctx.has(3) ? ctx.shape(3)[2] : 0;
  const itemsize = q.dtype === 'float32' ? 4 : 2;
  const sliding = p.slidingWindowCache;
  checkResultShape(ctx, [B, Nkv, sliding ? pastLength : Math.max(total, pastLength), H], itemsize, 'GroupQueryAttention present_key');
  checkResultShape(ctx, [B, N, S, sliding ? pastLength + S : total], 4, 'GroupQueryAttention attention scores');
  if (sliding) return gqaSlidingStep(ctx, q, k, v, total);
  // The device-side decode step covers plain attention: sinks, Q/K norms and output_qk take the general path.
  const quantized = p.kQuant !== 'NONE';
  const plain = !quantized && !p.smoothSoftmax && !ctx.has(11) && !ctx.has(14) && !ctx.has(15) && !ctx.wants(3);
  const onDevice = plain && ctx.has(3) && ctx.has(4) && !ctx.hostIfKnown(5);
  if (onDevice && S <= total && pastLength >= total)
    // A step into a shared buffer; with S = total a first prompt, its tokens from 0 in every entry.
    return gqaSharedStep(ctx, q, k, v, flat, ctx.input(3), ctx.input(4), total, S === total);
  if (onDevice && S === total && pastLength === 0 && ctx.shape(4)[2] === 0) {
    // A first prompt into an empty growing cache: the same step into S rows of zeros (the present
    // is its S rows), with seqlens_k left on the device (the general path reads it mid-run).
    const empty = (i: number) => mx.zeros([B, Nkv, S, ctx.shape(i)[3]], ctx.input(i).dtype);
    return gqaSharedStep(ctx, q, k, v, flat, empty(3), empty(4), total, true);
  }
  if (plain && growingStep(ctx, B, S, total)) {
    // A growing cache fed whole (transformers.js's loop: past T rows, present T + S), one sequence
    // that sees all of its tokens: the shared-buffer step over the past padded with S rows writes
    // the new rows at T and attends (one native primitive on the CPU), where the general path
    // composes rotary, concatenation, mask and attention (some forty MLX ops a layer more).
    const grown = (i: number) => {
      const past = ctx.input(i);
      const [, n, , h] = past.shape;
      return mx.concatenate([past, mx.zeros([B, n, S, h], past.dtype)], 2);
    };
    return gqaSharedStep(ctx, q, k, v, flat, grown(3), grown(4), total);
  }
  const seqlensK = hostNumbers(ctx.host(5));
  if (seqlensK.length !== B) throw new RangeError(`seqlens_k has ${seqlensK.length} entries for a batch of ${B}`);
  // The first prompt (no cached tokens) may be right-padded: its tokens start at 0 in every entry.
  const first = S === total;
  const room = Math.max(total, pastLength);
  seqlensK.forEach((n, b) => {
    if (!(n >= 0 && n < room)) throw new RangeError(`seqlens_k[${b}] = ${n} is out of range [0, ${room})`);
    if (!first && n + 1 < S) throw new RangeError(`seqlens_k[${b}] = ${n} is too small for sequence_length ${S}`);
    if (n + 1 > total) throw new RangeError(pastTotal(b, n + 1, total));
  });
  const lens = seqlensK.map((n) => n + 1);
  const starts = lens.map((l) => (first ? 0 : l - S));
  const g: GqaShape = { B, S, N, Nkv, H, lens, starts, total };
  const qNorm = ctx.optional(14);
  const kNorm = ctx.optional(15);
  if (qNorm && kNorm) {
    q = headRmsNorm(q, qNorm, p.qkNormEpsilon);
    k = headRmsNorm(k, kNorm, p.qkNormEpsilon);
  }
  if (p.doRotary) [q, k] = gqaRotary(ctx, q, k, g, first);
  // A float8 cache arrives as its codes (MLX has no float8 dtype).
  const cacheInput = (i: number) => (ctx.elemType(i) === OnnxDataType.FLOAT8E4M3FN ? optionalQuantInput(ctx, i) : ctx.optional(i));
  const pastK = cacheInput(3);
  const pastV = cacheInput(4);
  const length = Math.max(total, pastK ? pastK.shape[2] : 0);
  let presentK: OpResult, presentV: OpResult, keys: mx.Array, values: mx.Array;
  const upTo = (a: mx.Array) => (length === total ? a : mx.slice(a, [0, 0, 0, 0], [B, Nkv, total, H], [1, 1, 1, 1]));
  if (quantized) {
    // The cache holds quantized rows: the new rows are quantized into it, and attention reads the
    // whole cache dequantized (the new rows too, as onnxruntime does).
    const bits = p.cacheBits;
    const packedH = bits === 4 ? H / 2 : H;
    if (!Number.isInteger(packedH)) throw new RangeError(`a 4-bit KV cache needs an even head size, got ${H}`);
    const kScale = cacheScale(ctx, 12, Nkv, H, 'k_scale');
    const vScale = cacheScale(ctx, 13, Nkv, H, 'v_scale');
    // A float8e4m3fn cache holds its codes as uint8.
    const float8 = ctx.elemType(3) === OnnxDataType.FLOAT8E4M3FN;
    if (float8 && bits !== 8) throw new RangeError(`a float8e4m3fn KV cache needs kv_cache_bit_width 8, got ${bits}`);
    if ((ctx.elemType(4) === OnnxDataType.FLOAT8E4M3FN) !== float8)
      throw new RangeError('past_key and past_value must share one cache type');
    const storage = bits === 8 && !float8 ? 'int8' : 'uint8';
    const cacheName = float8 ? 'float8e4m3fn' : storage;
    for (const past of [pastK, pastV])
      if (past && (past.dtype !== storage || past.ndim !== 4 || past.shape[3] !== packedH))
        throw new RangeError(
          `the ${bits}-bit past cache must be ${cacheName} [B, ${Nkv}, L, ${packedH}], got ${past.dtype} [${past.shape.join(', ')}]`,
        );
    const gq = { ...g, H: packedH };
    const quantize = (x: mx.Array, scale: mx.Array) => (float8 ? quantizeCacheE4M3(x, scale) : quantizeCache(x, scale, bits));
    const codesK = gqaCache(pastK, quantize(k, kScale), gq, length);
    const codesV = gqaCache(pastV, quantize(v, vScale), gq, length);
    keys = upTo(dequantizeCache(codesK, kScale, bits, q.dtype, float8));
    values = upTo(dequantizeCache(codesV, vScale, bits, q.dtype, float8));
    presentK = float8 ? typed(codesK, OnnxDataType.FLOAT8E4M3FN) : codesK;
    presentV = float8 ? typed(codesV, OnnxDataType.FLOAT8E4M3FN) : codesV;
  } else {
    presentK = gqaCache(pastK, k, g, length);
    presentV = gqaCache(pastV, v, g, length);
    keys = upTo(presentK);
    values = upTo(presentV);
  }
  // Every layer of a step sees the same keys: the mask is made once per run.
  const visible = ctx.shared(['gqa-mask-host', p.causal, p.localWindow, B, S, total, g.lens.join(','), g.starts.join(',')], () =>
    gqaMask(p, g),
  );
  const attentionBias = ctx.optional(10);
  const scale = p.scale ?? 1 / Math.sqrt(H);
  const headSink = ctx.optional(11);
  const sink = headSink ?? (p.smoothSoftmax ? mx.zeros([N], 'float32') : undefined);
  if (sink) {
    if (sink.size !== N) throw new RangeError(`${ctx.where}: head_sink has ${sink.size} values for ${N} heads`);
    const y = sinkAttention(q, keys, values, sink, visible, attentionBias, scale, p.softcap);
    return [fromHeads(y), presentK, presentV];
  }
  const mask = attentionBias
    ? mx.add(mx.where(visible, mx.scalar(0, q.dtype), mx.scalar(lowest(q.dtype), q.dtype)), attentionBias)
    : visible;
  // Every query sees a key (its own, or with right padding the entry's first) unless a window can
  // hide them all from a padded row, or a bias masks them: without either the attention skips
  // zeroing empty rows (a reduction and two selects per layer).
  const windowed = p.causal && p.localWindow > 0 && p.localWindow < total;
  const y = scaledDotProductAttention(q, keys, values, {
    scale,
    mask,
    softcap: p.softcap,
    rowsNeverEmpty: !attentionBias && !windowed,
    vjp: ctx.attentionVjp,
  });
  return [fromHeads(y), presentK, presentV, ctx.wants(3) ? gqaScores(q, keys, visible, attentionBias, scale, p) : undefined];
}

/**
 * A step over window-sized KV buffers (sliding_window_cache): the layout of the buffer, the new
 * rows and the present comes from seqlens_k on the device (gqa-sliding-cache.ts).
 */
function gqaSlidingStep(ctx: OpContext<GqaParams>, q: mx.Array, k: mx.Array, v: mx.Array, total: number): OpResult[] {
  const p = ctx.params;
  const [B, N, S, H] = q.shape;
  if (!ctx.has(3) || !ctx.has(4)) throw new RangeError('sliding_window_cache=1 requires past_key and past_value to be present.');
  const seqlensShape = ctx.shape(5);
  if (seqlensShape.length !== 1 || seqlensShape[0] !== B)
    throw new RangeError(`seqlens_k of shape [${seqlensShape.join(', ')}] is not [${B}], one length a batch entry`);
  const pastK = ctx.input(3);
  const pastV = ctx.input(4);
  const capacity = pastK.shape[2];
  const W = p.localWindow;
  if (capacity < W)
    throw new RangeError(`sliding_window_cache: KV cache capacity (${capacity}) must be at least local_window_size (${W}).`);
  if (capacity > W)
    throw new RangeError(
      `sliding_window_cache with KV buffers of ${capacity} rows for local_window_size ${W} is not supported: only buffers of the window's length (onnxruntime's CPU kernel keeps rows past the window that follow no rule)`,
    );
  const layout = slidingLayout(ctx, S, total, capacity, W);
  const qNorm = ctx.optional(14);
  const kNorm = ctx.optional(15);
  if (qNorm && kNorm) {
    q = headRmsNorm(q, qNorm, p.qkNormEpsilon);
    k = headRmsNorm(k, kNorm, p.qkNormEpsilon);
  }
  if (p.doRotary) [q, k] = gqaRotary(ctx, q, k, { B, S, H, starts: [] }, false, layout.positions);
  const keys = slidingCache(layout, pastK, k);
  const values = slidingCache(layout, pastV, v);
  const scale = p.scale ?? 1 / Math.sqrt(H);
  const headSink = ctx.optional(11);
  const sink = headSink ?? (p.smoothSoftmax ? mx.zeros([N], 'float32') : undefined);
  if (sink && sink.size !== N) throw new RangeError(`${ctx.where}: head_sink has ${sink.size} values for ${N} heads`);
  const y = sink
    ? sinkAttention(q, keys.all, values.all, sink, layout.visible, undefined, scale, p.softcap)
    : scaledDotProductAttention(q, keys.all, values.all, { scale, mask: layout.visible, softcap: p.softcap, vjp: ctx.attentionVjp });
  return [fromHeads(y), keys.present, values.present];
}

/** output_qk [B, N, S, T]: the scaled scores (qk_output 1) or the probabilities (2). */
function gqaScores(q: mx.Array, keys: mx.Array, visible: mx.Array, bias: mx.Array | undefined, scale: number, p: GqaParams): mx.Array {
  const G = q.shape[1] / keys.shape[1];
  const k = G === 1 ? keys : mx.repeat(keys, G, 1);
  let s = mx.multiply(mx.matmul(mx.astype(q, 'float32'), mx.swapaxes(mx.astype(k, 'float32'), 2, 3)), scale);
  if (p.qkOutput === 2) {
    if (p.softcap > 0) s = mx.multiply(mx.tanh(mx.divide(s, p.softcap)), p.softcap);
    if (bias) s = mx.add(s, mx.astype(bias, 'float32'));
    s = mx.softmax(mx.where(visible, s, mx.scalar(-Infinity, 'float32')), -1, { precise: true });
  }
  return mx.astype(s, q.dtype);
}

export const msAttentionOps: OpEntry[] = [
  msOp('Attention', 1, {
    parse: parseAttention,
    check: attentionCheck,
    run: attention,
    note: 'no do_rotary, past_present_share_buffer or 4-D masks',
  }),
  msOp('GroupQueryAttention', 1, {
    parse: parseGqa,
    check: gqaCheck,
    run: gqa,
    note: 'float, int8, float8e4m3fn or 4-bit KV cache (PER_TENSOR, PER_CHANNEL); local_window_size (0 falls back); sliding_window_cache with float buffers of the window',
  }),
];
