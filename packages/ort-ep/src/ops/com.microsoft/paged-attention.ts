// com.microsoft PagedAttention: attention over a block-based KV cache, for continuous batching.
// Q, K and V hold the new tokens of every sequence packed ([num_tokens, heads · head_size], or one
// packed QKV); cumulative_sequence_length splits them into sequences, past_seqlens says how many
// tokens each sequence already has in the cache, and block_table maps each sequence's logical
// blocks to physical blocks of key_cache / value_cache ([num_blocks, block_size, kv_heads,
// head_size]). The new K/V rows are written at their slots (block · block_size + offset, or
// slot_mapping's, -1 skipping a token), then each sequence's queries attend to its cache through
// the block table: causal (bottom-right aligned) or bidirectional with is_causal 0, within
// local_window_size, with softcap, head_sink, Q/K RMSNorm and rotary at the absolute positions.
//
// onnxruntime has only a CUDA kernel; the spec (docs/ContribOperators.md) is the reference, and the
// tests compare with a float64 implementation of it. int8, float8e4m3fn, and int4 / float4e2m1
// (two a byte in a uint8 cache of ceil(head_size / 2) bytes a head) caches are quantized
// symmetrically with PER_TENSOR or PER_CHANNEL scales (see CacheCodec). The LATENT layout
// (absorbed multi-head latent attention, DeepSeek's MLA): one cache of one KV head, whose rows
// give K whole and V as their leading v_head_size channels; rotary_offset puts the rotated
// channels at [rotary_offset, rotary_offset + rotary_dim) of each head (MLA: the positional suffix
// after the latent part). The updated caches are new arrays (MLX has no in-place update of a feed);
// donating the cache feeds lets MLX reuse their buffers.
import * as mx from '@mlx/core';
import { fromHeads, rotaryEmbedding, rotaryFactors, scaledDotProductAttention } from '@mlx/kernels';
import { OnnxDataType } from '../../onnx/index.js';
import type { Attrs } from '../../registry/attrs.js';
import type { CheckContext, OpContext, OpEntry, OpResult } from '../../registry/types.js';
import { msOp } from '../../registry/op.js';
import { checkHostElements } from '../helpers/bounds.js';
import { hostNumbers } from '../helpers/util.js';
import { headRmsNorm, quantizeCacheE4M3, sinkAttention } from './attention.js';
import { decodeMiniFloatArray, encodeE2M1OnDevice } from '../helpers/minifloat.js';
import { optionalQuantInput, packNibbles, typed, unpackFields } from '../helpers/quant-math.js';
import { rotaryTables } from './rotary.js';

interface PagedParams {
  heads: number;
  kvHeads: number;
  scale?: number;
  softcap: number;
  localWindow: number;
  causal: boolean;
  doRotary: boolean;
  rotaryInterleaved: boolean;
  qkNormEpsilon: number;
  layout: string;
  kQuant: string;
  vQuant: string;
  kCacheDtype: string;
  vCacheDtype: string;
  rotaryOffset: number;
  vHeadSize: number;
}

const parse = (a: Attrs): PagedParams => ({
  heads: a.int('num_heads'),
  kvHeads: a.int('kv_num_heads'),
  scale: a.has('scale') ? a.float('scale') : undefined,
  softcap: a.float('softcap', 0),
  localWindow: a.int('local_window_size', -1),
  causal: a.int('is_causal', 1) !== 0,
  doRotary: a.int('do_rotary', 0) !== 0,
  rotaryInterleaved: a.int('rotary_interleaved', 0) !== 0,
  qkNormEpsilon: a.float('qk_norm_epsilon', 1e-6),
  layout: a.string('kv_cache_layout', 'SEPARATE'),
  kQuant: a.string('k_quant_type', 'NONE'),
  vQuant: a.string('v_quant_type', 'NONE'),
  kCacheDtype: a.string('k_cache_dtype', ''),
  vCacheDtype: a.string('v_cache_dtype', ''),
  rotaryOffset: a.int('rotary_offset', 0),
  vHeadSize: a.int('v_head_size', 0),
});

const FLOATS = [OnnxDataType.FLOAT, OnnxDataType.FLOAT16, OnnxDataType.BFLOAT16];
const QUANTIZED: number[] = [OnnxDataType.INT8, OnnxDataType.FLOAT8E4M3FN];
const QUANTS = ['NONE', 'PER_TENSOR', 'PER_CHANNEL'];
const CACHE_DTYPES = ['float', 'float16', 'bfloat16', 'int8', 'float8e4m3fn', 'int4', 'float4e2m1'];
const QUANTIZED_NAMES = ['int8', 'float8e4m3fn', 'int4', 'float4e2m1'];
/** Sub-byte logical types, packed two a byte into a uint8 cache (element 2i in the low bits of byte i). */
const PACKED = ['int4', 'float4e2m1'];
const CACHE_TYPE_OF: Record<string, number> = {
  float: OnnxDataType.FLOAT,
  float16: OnnxDataType.FLOAT16,
  bfloat16: OnnxDataType.BFLOAT16,
  int8: OnnxDataType.INT8,
  float8e4m3fn: OnnxDataType.FLOAT8E4M3FN,
  int4: OnnxDataType.UINT8,
  float4e2m1: OnnxDataType.UINT8,
};

/**
 * How one cache stores rows. A quantized cache (int8, float8e4m3fn held as its codes, or int4 /
 * float4e2m1 packed two a byte) stores q = quantize(x / scale), symmetric with no zero point (int8
 * and int4: round half to even, clamped to [-128, 127] / [-8, 7]; float8: nearest even, saturating
 * at ±448; float4: nearest, ties to the even code, saturating at ±6), and reads back q · scale. The scale
 * ([1] PER_TENSOR, [kv_heads, 1, head_size] PER_CHANNEL) is flattened to the [slots, kv_heads ·
 * head_size] rows the op works on.
 */
interface CacheCodec {
  float8: boolean;
  /** Stored row width: kv_heads · head_size, or kv_heads · ceil(head_size / 2) bytes when packed. */
  width: number;
  scale?: mx.Array;
  store(x: mx.Array, dtype: mx.Dtype): mx.Array;
  load(c: mx.Array): mx.Array;
}

function cacheCodec(
  ctx: OpContext<PagedParams>,
  at: number,
  scaleAt: number,
  quant: string,
  dtypeName: string,
  Nkv: number,
  H: number,
  side: string,
): CacheCodec {
  const float8 = ctx.elemType(at) === OnnxDataType.FLOAT8E4M3FN;
  const packed = PACKED.includes(dtypeName);
  const Hp = Math.ceil(H / 2);
  if (quant === 'NONE') return { float8, width: Nkv * H, store: (x, dtype) => mx.astype(x, dtype), load: (c) => c };
  const s = mx.astype(ctx.input(scaleAt), 'float32');
  const want = quant === 'PER_TENSOR' ? [1] : [Nkv, 1, H];
  if (s.size !== want.reduce((a, b) => a * b, 1) || (quant === 'PER_CHANNEL' && s.ndim !== 3))
    throw new RangeError(`${side}_scale must be [${want.join(', ')}] for ${quant}, got [${s.shape.join(', ')}]`);
  const scale = mx.reshape(s, quant === 'PER_TENSOR' ? [1, 1] : [1, Nkv * H]);
  if (packed) {
    const int4 = dtypeName === 'int4';
    return {
      float8,
      width: Nkv * Hp,
      scale,
      store: (x) => {
        const y = mx.divide(mx.astype(x, 'float32'), scale); // [W, Nkv · H]
        const n = int4 ? mx.bitwiseAnd(mx.astype(mx.clip(mx.round(y, 0), -8, 7), 'int32'), 15) : encodeE2M1OnDevice(y);
        const W = y.shape[0];
        return mx.reshape(packNibbles(mx.reshape(n, [W, Nkv, H])), [W, Nkv * Hp]);
      },
      load: (c) => {
        const S = c.shape[0];
        const bytes = mx.reshape(c, [S, Nkv, Hp]);
        const fields = unpackFields(bytes, 4); // [S, Nkv, 2 · Hp]
        const used = 2 * Hp === H ? fields : mx.slice(fields, [0, 0, 0], [S, Nkv, H], [1, 1, 1]);
        const values = int4
          ? mx.subtract(mx.astype(used, 'float32'), mx.multiply(mx.astype(mx.greaterEqual(used, 8), 'float32'), 16))
          : decodeMiniFloatArray(used, OnnxDataType.FLOAT4E2M1);
        return mx.multiply(mx.reshape(values, [S, Nkv * H]), scale);
      },
    };
  }
  return {
    float8,
    width: Nkv * H,
    scale,
    store: (x) =>
      float8 ? quantizeCacheE4M3(x, scale) : mx.astype(mx.clip(mx.round(mx.divide(mx.astype(x, 'float32'), scale), 0), -128, 127), 'int8'),
    load: (c) => mx.multiply(float8 ? decodeMiniFloatArray(c, OnnxDataType.FLOAT8E4M3FN) : mx.astype(c, 'float32'), scale),
  };
}

function check(ctx: CheckContext<PagedParams>): string | undefined {
  const p = ctx.params;
  if (!(p.heads > 0 && p.kvHeads > 0 && p.heads % p.kvHeads === 0))
    return `num_heads ${p.heads} must be a positive multiple of kv_num_heads ${p.kvHeads}`;
  if (p.layout !== 'SEPARATE' && p.layout !== 'LATENT') return `kv_cache_layout '${p.layout}' is not one of SEPARATE, LATENT`;
  const latent = p.layout === 'LATENT';
  if (latent) {
    if (ctx.node.inputs[2] || ctx.node.inputs[4] || ctx.node.outputs[2])
      return 'kv_cache_layout LATENT takes neither value, value_cache nor value_cache_out (V is read from key_cache)';
    if (p.kvHeads !== 1) return `kv_cache_layout LATENT needs kv_num_heads 1, got ${p.kvHeads}`;
    if (!ctx.node.inputs[1]) return 'kv_cache_layout LATENT needs key as its own input (packed QKV has no LATENT form)';
    if (p.vQuant !== 'NONE' || p.vCacheDtype || ctx.node.inputs[15])
      return 'kv_cache_layout LATENT has no value cache to quantize (v_quant_type, v_cache_dtype, v_scale)';
    if (p.vHeadSize < 0) return `v_head_size must not be negative, got ${p.vHeadSize}`;
  } else if (p.vHeadSize !== 0) return 'v_head_size is only valid with kv_cache_layout LATENT';
  if (!(p.rotaryOffset >= 0 && p.rotaryOffset % 8 === 0))
    return `rotary_offset must be a non-negative multiple of 8, got ${p.rotaryOffset}`;
  for (const [side, quant, dtype, at, scaleAt] of [
    ['k', p.kQuant, p.kCacheDtype, 3, 14],
    ...(latent ? [] : ([['v', p.vQuant, p.vCacheDtype, 4, 15]] as const)),
  ] as const) {
    if (!QUANTS.includes(quant)) return `${side}_quant_type '${quant}' is not one of ${QUANTS.join(', ')}`;
    if (dtype && !CACHE_DTYPES.includes(dtype)) return `${side}_cache_dtype '${dtype}' is not supported (${CACHE_DTYPES.join(', ')})`;
    const t = ctx.inputType(at);
    if (dtype && t !== undefined && CACHE_TYPE_OF[dtype] !== undefined && CACHE_TYPE_OF[dtype] !== t)
      return `${side}_cache_dtype '${dtype}' does not agree with the cache's element type ${t}`;
    const quantizedType = dtype ? QUANTIZED_NAMES.includes(dtype) : t !== undefined ? QUANTIZED.includes(t) : undefined;
    if (quantizedType === true && quant === 'NONE') return `a quantized ${side} cache needs ${side}_quant_type PER_TENSOR or PER_CHANNEL`;
    if (quantizedType === false && quant !== 'NONE')
      return `${side}_quant_type ${quant} needs an int8, float8e4m3fn, int4 or float4e2m1 ${side} cache`;
    if ((quant !== 'NONE') !== !!ctx.node.inputs[scaleAt])
      return quant !== 'NONE' ? `${side}_quant_type ${quant} needs ${side}_scale` : `${side}_scale needs ${side}_quant_type`;
  }
  if (!latent && PACKED.includes(p.kCacheDtype) !== PACKED.includes(p.vCacheDtype))
    return 'PagedAttention needs both caches packed (int4 / float4e2m1) or neither';
  if (!latent && !ctx.node.inputs[4]) return 'PagedAttention needs value_cache (the SEPARATE layout)';
  if (!ctx.node.inputs[12] !== !ctx.node.inputs[13]) return 'PagedAttention needs both q_norm_weight and k_norm_weight, or neither';
  if (p.doRotary && (!ctx.node.inputs[8] || !ctx.node.inputs[9])) return 'PagedAttention with do_rotary needs cos_cache and sin_cache';
  for (const i of latent ? [3] : [3, 4]) {
    const t = ctx.inputType(i);
    const packed = PACKED.includes(i === 3 ? p.kCacheDtype : p.vCacheDtype);
    if (t !== undefined && (packed ? t !== OnnxDataType.UINT8 : !FLOATS.includes(t) && !QUANTIZED.includes(t)))
      return `PagedAttention with a cache of element type ${t} is not supported (float, int8 or float8e4m3fn caches; uint8 for int4 / float4e2m1)`;
  }
  return undefined;
}

function run(ctx: OpContext<PagedParams>): OpResult[] {
  const p = ctx.params;
  const N = p.heads;
  const Nkv = p.kvHeads;
  const query = ctx.input(0);
  if (query.ndim !== 2) throw new RangeError(`query must be [num_tokens, hidden], got [${query.shape.join(', ')}]`);
  const T = query.shape[0];
  // A float8 cache arrives as its codes (MLX has no float8 dtype).
  const cacheInput = (i: number) => (ctx.elemType(i) === OnnxDataType.FLOAT8E4M3FN ? optionalQuantInput(ctx, i) : ctx.input(i));
  const latent = p.layout === 'LATENT';
  const keyCache = cacheInput(3) as mx.Array;
  // LATENT: no value cache; V is read from key_cache's rows.
  const valueCache = latent ? keyCache : (cacheInput(4) as mx.Array);
  if (keyCache.ndim !== 4 || keyCache.shape[2] !== Nkv || valueCache.shape.some((d, i) => d !== keyCache.shape[i]))
    throw new RangeError(
      `key_cache and value_cache must be one shape [num_blocks, block_size, ${Nkv}, head_size], got [${keyCache.shape.join(', ')}] and [${valueCache.shape.join(', ')}]`,
    );
  const [numBlocks, blockSize, , cacheH] = keyCache.shape;
  // A packed (int4 / float4e2m1) cache holds ceil(head_size / 2) bytes a head: the head size comes from the query.
  const packedCache = PACKED.includes(p.kCacheDtype);
  const H = packedCache ? (ctx.has(1) ? query.shape[1] / N : query.shape[1] / (N + 2 * Nkv)) : cacheH;
  if (!Number.isInteger(H) || (packedCache && Math.ceil(H / 2) !== cacheH))
    throw new RangeError(`the query's head size ${H} does not fit the packed cache's ${cacheH} bytes a head`);
  // The value head: v_head_size channels in LATENT (the leading ones of a key row), else the head size.
  const Hv = latent && p.vHeadSize ? p.vHeadSize : H;
  if (Hv > H) throw new RangeError(`v_head_size ${Hv} is wider than the head size ${H}`);
  if (Hv !== H && p.scale === undefined)
    throw new RangeError(`v_head_size ${Hv} differs from the head size ${H}: the scale attribute is required`);
  let q: mx.Array, k: mx.Array, v: mx.Array | undefined; // [T, heads, H]
  const key = ctx.optional(1);
  if (key) {
    q = query;
    k = key;
    v = latent ? undefined : ctx.input(2);
  } else {
    [q, k, v] = mx.splitSections(query, [N * H, (N + Nkv) * H], 1);
  }
  const heads = (x: mx.Array, n: number, what: string) => {
    if (x.ndim !== 2 || x.shape[0] !== T || x.shape[1] !== n * H)
      throw new RangeError(`${what} must be [${T}, ${n * H}] (head size ${H} from the cache), got [${x.shape.join(', ')}]`);
    return mx.reshape(x, [T, n, H]);
  };
  q = heads(q, N, 'query');
  k = heads(k, Nkv, 'key');
  if (v) v = heads(v, Nkv, 'value');

  const cu = hostNumbers(ctx.host(5));
  const past = hostNumbers(ctx.host(6));
  const table = ctx.host(7);
  const B = past.length;
  if (cu.length !== B + 1 || cu[0] !== 0 || cu[B] !== T || cu.some((c, i) => i > 0 && c < cu[i - 1]))
    throw new RangeError(`cumulative_sequence_length must rise from 0 to num_tokens ${T} in ${B + 1} entries, got [${cu.join(', ')}]`);
  if (table.dims.length !== 2 || table.dims[0] !== B)
    throw new RangeError(`block_table must be [${B}, max_blocks], got [${table.dims.join(', ')}]`);
  const maxBlocks = table.dims[1];
  const blocks = hostNumbers(table);
  // Positions of the new tokens, and the slot of position `pos` of sequence b through the block table.
  const positions = new Int32Array(T);
  const slotOf = (b: number, pos: number): number => {
    const logical = Math.floor(pos / blockSize);
    if (logical >= maxBlocks) throw new RangeError(`sequence ${b} reaches position ${pos}, past its ${maxBlocks} blocks of ${blockSize}`);
    const block = blocks[b * maxBlocks + logical];
    if (!(block >= 0 && block < numBlocks))
      throw new RangeError(`block_table[${b}, ${logical}] = ${block} is not a block of the cache (0..${numBlocks - 1})`);
    return block * blockSize + (pos % blockSize);
  };
  for (let b = 0; b < B; b++) {
    if (!(past[b] >= 0)) throw new RangeError(`past_seqlens[${b}] = ${past[b]} is negative`);
    // Every position up to past + new tokens is read through the block table: the sequence must fit
    // its blocks before the host tables (positions, each sequence's slots and mask) are sized by it.
    const end = past[b] + cu[b + 1] - cu[b];
    if (cu[b + 1] > cu[b] && end > maxBlocks * blockSize)
      throw new RangeError(
        `past_seqlens[${b}] = ${past[b]} with ${cu[b + 1] - cu[b]} new token(s) reaches position ${end - 1}, past its ${maxBlocks} blocks of ${blockSize}`,
      );
    for (let t = cu[b]; t < cu[b + 1]; t++) positions[t] = past[b] + t - cu[b];
  }
  let writeSlots: number[];
  const writeTokens: number[] = [];
  if (ctx.has(10)) {
    const m = hostNumbers(ctx.host(10));
    if (m.length !== T) throw new RangeError(`slot_mapping has ${m.length} entries for ${T} tokens`);
    writeSlots = [];
    m.forEach((s, t) => {
      if (s === -1) return;
      if (!(s >= 0 && s < numBlocks * blockSize))
        throw new RangeError(`slot_mapping[${t}] = ${s} is outside the cache's ${numBlocks * blockSize} slots`);
      writeTokens.push(t);
      writeSlots.push(s);
    });
  } else {
    writeSlots = [];
    for (let b = 0; b < B; b++)
      for (let t = cu[b]; t < cu[b + 1]; t++) {
        writeTokens.push(t);
        writeSlots.push(slotOf(b, positions[t]));
      }
  }

  const qNorm = ctx.optional(12);
  const kNorm = ctx.optional(13);
  if (qNorm && kNorm) {
    q = headRmsNorm(q, qNorm, p.qkNormEpsilon);
    k = headRmsNorm(k, kNorm, p.qkNormEpsilon);
  }
  if (p.doRotary) {
    const pos = mx.Array.fromTypedArray(positions, [1, T], 'int32');
    const [cos, sin] = rotaryTables(ctx, pos, ctx.input(8), ctx.input(9), T).map((t) => mx.reshape(t, [T, 1, t.shape[2]]));
    const rd = cos.shape[2] * 2;
    const off = p.rotaryOffset;
    if (off + rd > H) throw new RangeError(`rotary_offset ${off} + rotary dim ${rd} (cos_cache's width x 2) exceeds the head size ${H}`);
    // Channels [off, off + rd) rotate; those before and after pass through.
    const factors = rotaryFactors(cos, sin, { interleaved: p.rotaryInterleaved });
    q = rotaryEmbedding(q, { factors, rotaryDim: rd, rotaryOffset: off });
    k = rotaryEmbedding(k, { factors, rotaryDim: rd, rotaryOffset: off });
  }

  const kCodec = cacheCodec(ctx, 3, 14, p.kQuant, p.kCacheDtype, Nkv, H, 'k');
  const vCodec = latent ? kCodec : cacheCodec(ctx, 4, 15, p.vQuant, p.vCacheDtype, Nkv, H, 'v');
  if (packedCache && (p.kQuant === 'NONE' || (!latent && p.vQuant === 'NONE')))
    throw new RangeError('a packed int4 / float4e2m1 cache needs a quant type and a scale');
  // Write the new rows at their slots.
  const flat = (c: mx.Array) => mx.reshape(c, [numBlocks * blockSize, Nkv * cacheH]);
  let flatK = flat(keyCache);
  let flatV = flat(valueCache);
  if (writeTokens.length) {
    const idx = mx.broadcastTo(
      mx.reshape(mx.Array.fromTypedArray(Int32Array.from(writeSlots), [writeSlots.length], 'int32'), [writeSlots.length, 1]),
      [writeSlots.length, kCodec.width],
    );
    const rows = (x: mx.Array, c: mx.Array, codec: CacheCodec) => {
      const sel =
        writeTokens.length === T ? x : mx.take(x, mx.Array.fromTypedArray(Int32Array.from(writeTokens), [writeTokens.length], 'int32'), 0);
      return codec.store(mx.reshape(sel, [writeTokens.length, Nkv * H]), c.dtype);
    };
    flatK = mx.putAlongAxis(flatK, idx, rows(k, keyCache, kCodec), 0);
    if (v) flatV = mx.putAlongAxis(flatV, idx, rows(v, valueCache, vCodec), 0);
  }
  if (latent) flatV = flatK;

  // Each sequence's attention over its cache, read through the block table.
  const scale = p.scale ?? 1 / Math.sqrt(H);
  const sink = ctx.optional(11);
  if (sink && sink.size !== N) throw new RangeError(`head_sink has ${sink.size} values for ${N} heads`);
  const readK = kCodec.load(flatK);
  const readV = vCodec.load(flatV);
  const outs: mx.Array[] = [];
  for (let b = 0; b < B; b++) {
    const qlen = cu[b + 1] - cu[b];
    if (qlen === 0) continue;
    const L = past[b] + qlen;
    checkHostElements(qlen * L, `the mask of sequence ${b} (${qlen} new token(s) over ${L} positions)`);
    const slots = Int32Array.from({ length: L }, (_, i) => slotOf(b, i));
    const read = (c: mx.Array, width: number) => {
      let rows = mx.reshape(mx.take(c, mx.Array.fromTypedArray(slots, [L], 'int32'), 0), [L, Nkv, H]);
      if (width < H) rows = mx.slice(rows, [0, 0, 0], [L, Nkv, width], [1, 1, 1]);
      return mx.expandDims(mx.transpose(rows, [1, 0, 2]), 0);
    };
    const keys = mx.astype(read(readK, H), q.dtype);
    const values = mx.astype(read(readV, Hv), q.dtype);
    const qb = mx.expandDims(mx.transpose(mx.slice(q, [cu[b], 0, 0], [cu[b + 1], N, H], [1, 1, 1]), [1, 0, 2]), 0); // [1, N, qlen, H]
    const visible = new Uint8Array(qlen * L);
    for (let j = 0; j < qlen; j++) {
      const pos = past[b] + j;
      for (let i = 0; i < L; i++) {
        let ok = !p.causal || i <= pos;
        if (p.localWindow > 0) ok &&= i > pos - p.localWindow;
        visible[j * L + i] = ok ? 1 : 0;
      }
    }
    const mask = mx.Array.fromTypedArray(visible, [1, 1, qlen, L], 'bool');
    const y = sink
      ? sinkAttention(qb, keys, values, sink, mask, undefined, scale, p.softcap)
      : scaledDotProductAttention(qb, keys, values, { scale, mask, softcap: p.softcap, vjp: ctx.attentionVjp });
    outs.push(mx.reshape(fromHeads(y), [qlen, N * Hv]));
  }
  const y = outs.length === 1 ? outs[0] : outs.length ? mx.concatenate(outs, 0) : mx.zeros([0, N * Hv], query.dtype);
  const out = (c: mx.Array, codec: CacheCodec) => (codec.float8 ? typed(c, OnnxDataType.FLOAT8E4M3FN) : c);
  const kOut = out(mx.reshape(flatK, keyCache.shape), kCodec);
  return latent ? [y, kOut] : [y, kOut, out(mx.reshape(flatV, valueCache.shape), vCodec)];
}

export const pagedAttentionOps: OpEntry[] = [
  msOp('PagedAttention', 1, {
    parse,
    check,
    run,
    note: 'float, int8, float8e4m3fn, int4 or float4e2m1 (packed) caches (PER_TENSOR, PER_CHANNEL scales), SEPARATE and LATENT (MLA, v_head_size) layouts; slot_mapping, is_causal, local window, softcap, head_sink, Q/K norms, rotary (interleaved, rotary_offset)',
  }),
];
