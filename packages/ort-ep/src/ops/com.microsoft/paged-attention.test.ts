// com.microsoft PagedAttention against a float64 implementation of its spec written here
// (onnxruntime has only a CUDA kernel, so onnxruntime-node cannot run it): ragged batches mixing
// decode and prefill over scattered blocks, GQA heads, packed QKV, local window, softcap, scale,
// bidirectional (is_causal 0), slot_mapping with skipped writes, rotary, head_sink, Q/K norms, and
// float16, int8, float8e4m3fn, int4 and float4e2m1 caches (PER_TENSOR, PER_CHANNEL, an odd head
// size); the updated caches are compared too.
import { describe, expect, it } from 'vitest';
import * as P from '../../../test/helpers/proto.js';
import { seeded } from '../../../test/helpers/ort.js';
import { NodeExecutionError, UnsupportedOperatorError } from '../../errors.js';
import { OnnxDataType as T, type HostTensor } from '../../onnx/index.js';
import { MlxSession } from '../../session.js';

const MS = 'com.microsoft';

interface Case {
  N: number;
  Nkv: number;
  H: number;
  numBlocks: number;
  blockSize: number;
  /** Per sequence: past length and new tokens. */
  past: number[];
  lens: number[];
  table: number[][];
  attrs?: Record<string, number>;
  packed?: boolean;
  rotary?: boolean;
  sink?: boolean;
  norms?: boolean;
  /** slot per token, -1 to skip its write. */
  slots?: number[];
  half?: boolean;
  /** A quantized cache (both K and V): its element type and scale granularity. */
  quant?: { type: 'int8' | 'float8e4m3fn' | 'int4' | 'float4e2m1'; mode: 'PER_TENSOR' | 'PER_CHANNEL' };
  /** Overrides of the quantization attributes (for the declined forms). */
  quantAttrs?: Record<string, string>;
  /** kv_cache_layout LATENT (Nkv 1, no value or value cache), with this v_head_size (0: the head size). */
  latent?: { vHeadSize: number };
  /** Rotary over `dim` channels from `offset` (default: all of them), interleaved or not. */
  rope?: { dim?: number; offset?: number; interleaved?: boolean };
}
const rotaryDim = (c: Case) => c.rope?.dim ?? c.H;
const valueHead = (c: Case) => (c.latent?.vHeadSize ? c.latent.vHeadSize : c.H);

// Quantized caches, in float64 from the spec: symmetric, q = quantize(x / scale), read as q · scale.
function e4m3Value(code: number): number {
  const sgn = code & 0x80 ? -1 : 1;
  const e = (code >> 3) & 15,
    m = code & 7;
  return sgn * (e === 0 ? (m / 8) * 2 ** -6 : (1 + m / 8) * 2 ** (e - 7));
}
/** Round half to even. */
const rne = (x: number) => {
  const f = Math.floor(x);
  const d = x - f;
  return d > 0.5 || (d === 0.5 && f % 2 !== 0) ? f + 1 : f;
};
/** x rounded to e4m3fn, nearest even, saturating at ±448. */
function e4m3Round(x: number): number {
  const a = Math.min(Math.abs(x), 448);
  if (a === 0) return 0;
  const e = Math.max(Math.floor(Math.log2(a)), -6);
  return Math.sign(x) * Math.min(rne(a / 2 ** (e - 3)) * 2 ** (e - 3), 448);
}
const E2M1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6];
/** x rounded to e2m1 (nearest, ties to the even code, saturating at ±6). */
function e2m1Round(x: number): number {
  const a = Math.min(Math.abs(x), 6);
  let best = 0;
  for (let c = 1; c < 8; c++) {
    const d = Math.abs(a - E2M1[c]) - Math.abs(a - E2M1[best]);
    if (d < 0 || (d === 0 && c % 2 === 0)) best = c;
  }
  return Math.sign(x) * E2M1[best];
}
const packed = (c: Case) => c.quant?.type === 'int4' || c.quant?.type === 'float4e2m1';
const cacheHead = (c: Case) => (packed(c) ? Math.ceil(c.H / 2) : c.H);
/** The 4-bit field of a stored value v (in scale units). */
const nibbleOf = (c: Case, v: number) => (c.quant!.type === 'int4' ? v & 15 : (v < 0 ? 8 : 0) | E2M1.indexOf(Math.abs(v)));
const nibbleValue = (c: Case, n: number) => (c.quant!.type === 'int4' ? (n >= 8 ? n - 16 : n) : (n & 8 ? -1 : 1) * E2M1[n & 7]);
/** e4m3fn code of an exactly representable value. */
function e4m3Code(v: number): number {
  for (let c = 0; c < 256; c++) if ((c & 0x7f) !== 0x7f && e4m3Value(c) === v && (v !== 0 || c === 0)) return c;
  throw new Error(`${v} is not an e4m3fn value`);
}
function cacheScales(c: Case, seed: number): Float64Array {
  const n = c.quant?.mode === 'PER_CHANNEL' ? c.Nkv * c.H : 1;
  // Scales that spread values of about ±1 over each type's range (int8 ±127, e4m3 ±448, int4 ±7, e2m1 ±6).
  const base = packed(c) ? 0.2 : 0.01;
  return Float64Array.from(seeded(n, seed), (x) => Math.fround(base + base * 0.4 * x));
}
const scaleAt = (c: Case, sc: Float64Array, n: number, h: number) => (sc.length === 1 ? sc[0] : sc[n * c.H + h]);
/** The value a quantized cache stores for x at head n, channel h. */
function quantized(c: Case, sc: Float64Array, x: number, n: number, h: number): number {
  const s = scaleAt(c, sc, n, h);
  const y = x / s;
  const t = c.quant!.type;
  const q =
    t === 'int8'
      ? Math.max(-128, Math.min(127, rne(y)))
      : t === 'int4'
        ? Math.max(-8, Math.min(7, rne(y)))
        : t === 'float4e2m1'
          ? e2m1Round(y)
          : e4m3Round(y);
  return q * s;
}

interface Data {
  q: Float64Array;
  k: Float64Array;
  v: Float64Array;
  kc: Float64Array;
  vc: Float64Array;
  cos: Float64Array;
  sin: Float64Array;
  sink: Float64Array;
  qn: Float64Array;
  kn: Float64Array;
  /** Quantized caches: scales, and the caches' codes (d.kc / d.vc then hold their values). */
  ks?: Float64Array;
  vs?: Float64Array;
  kq?: Int8Array | Uint8Array;
  vq?: Int8Array | Uint8Array;
}

const maxPos = 32;
const roundHalf = (x: number) => {
  // float16 rounding of a value, for the float16 case's inputs (so both sides see the same numbers)
  const f = new Float32Array([x]);
  const u = new Uint32Array(f.buffer)[0];
  const sign = u >>> 31 ? -1 : 1;
  const a = Math.abs(x);
  if (a < 2 ** -14) return sign * Math.round(a / 2 ** -24) * 2 ** -24;
  const e = Math.floor(Math.log2(a));
  const step = 2 ** (e - 10);
  return sign * Math.round(a / step) * step;
};

function dataOf(c: Case): Data {
  const T_ = c.lens.reduce((a, b) => a + b, 0);
  const r = (n: number, seed: number, scale = 1) =>
    Float64Array.from(seeded(n, seed), (x) => (c.half ? roundHalf(x * scale) : Math.fround(x * scale)));
  const cache = c.numBlocks * c.blockSize * c.Nkv * c.H;
  const half = rotaryDim(c) / 2;
  const cos = new Float64Array(maxPos * half);
  const sin = new Float64Array(maxPos * half);
  for (let p = 0; p < maxPos; p++)
    for (let i = 0; i < half; i++) {
      const a = p / 10000 ** ((2 * i) / rotaryDim(c));
      cos[p * half + i] = c.half ? roundHalf(Math.cos(a)) : Math.fround(Math.cos(a));
      sin[p * half + i] = c.half ? roundHalf(Math.sin(a)) : Math.fround(Math.sin(a));
    }
  const d: Data = {
    q: r(T_ * c.N * c.H, 1),
    k: r(T_ * c.Nkv * c.H, 2),
    v: r(T_ * c.Nkv * c.H, 3),
    kc: r(cache, 4),
    vc: r(cache, 5),
    cos,
    sin,
    sink: r(c.N, 6),
    qn: r(c.H, 7),
    kn: r(c.H, 8),
  };
  if (c.quant) {
    d.ks = cacheScales(c, 9);
    d.vs = cacheScales(c, 10);
    // Cache contents: the quantization of values of about ±1 (int8 codes near ±100, float8 up to 448).
    const codes = (src: Float64Array, sc: Float64Array) => {
      const vals = Array.from(src, (x, i) => quantized(c, sc, x * 0.9, Math.floor(i / c.H) % c.Nkv, i % c.H));
      const q = vals.map((v, i) => Math.round(v / scaleAt(c, sc, Math.floor(i / c.H) % c.Nkv, i % c.H)));
      if (packed(c)) {
        const Hp = cacheHead(c);
        const bytes = new Uint8Array((vals.length / c.H) * Hp);
        vals.forEach((v, i) => {
          const row = Math.floor(i / c.H),
            h = i % c.H;
          const u = v / scaleAt(c, sc, row % c.Nkv, h);
          bytes[row * Hp + (h >> 1)] |= nibbleOf(c, c.quant!.type === 'int4' ? Math.round(u) : u) << ((h & 1) * 4);
        });
        return { q: bytes, v: Float64Array.from(vals) };
      }
      return c.quant!.type === 'int8'
        ? { q: Int8Array.from(q), v: Float64Array.from(vals) }
        : {
            q: Uint8Array.from(vals, (v, i) => e4m3Code(v / scaleAt(c, sc, Math.floor(i / c.H) % c.Nkv, i % c.H))),
            v: Float64Array.from(vals),
          };
    };
    const kk = codes(d.kc, d.ks);
    const vv = codes(d.vc, d.vs);
    d.kq = kk.q;
    d.vq = vv.q;
    d.kc = kk.v;
    d.vc = vv.v;
  }
  return d;
}

/** The spec, in float64. */
function reference(c: Case, d: Data): { y: Float64Array; kc: Float64Array; vc: Float64Array } {
  const { N, Nkv, H, blockSize } = c;
  const G = N / Nkv;
  const cu = [0];
  for (const l of c.lens) cu.push(cu[cu.length - 1] + l);
  const Tn = cu[cu.length - 1];
  const kc = Float64Array.from(d.kc);
  const vc = Float64Array.from(d.vc);
  const eps = 1e-6;
  const norm = (x: Float64Array, w: Float64Array) => {
    const ms = x.reduce((a, b) => a + b * b, 0) / x.length;
    return x.map((e, i) => (e / Math.sqrt(ms + eps)) * w[i]);
  };
  // Channels [off, off + rd) rotate: pairs (i, i + rd/2), or (2i, 2i + 1) interleaved.
  const rope = (x: Float64Array, pos: number) => {
    const rd = rotaryDim(c);
    const off = c.rope?.offset ?? 0;
    const h = rd / 2;
    const out = Float64Array.from(x);
    for (let i = 0; i < h; i++) {
      const co = d.cos[pos * h + i];
      const si = d.sin[pos * h + i];
      const [a, b] = c.rope?.interleaved ? [off + 2 * i, off + 2 * i + 1] : [off + i, off + i + h];
      out[a] = x[a] * co - x[b] * si;
      out[b] = x[b] * co + x[a] * si;
    }
    return out;
  };
  const headOf = (src: Float64Array, t: number, n: number, heads: number) => src.slice((t * heads + n) * H, (t * heads + n + 1) * H);
  const qs: Float64Array[][] = [];
  const ks: Float64Array[][] = [];
  const pos: number[] = [];
  for (let b = 0; b < c.lens.length; b++) for (let t = cu[b]; t < cu[b + 1]; t++) pos[t] = c.past[b] + t - cu[b];
  for (let t = 0; t < Tn; t++) {
    qs[t] = [];
    ks[t] = [];
    for (let n = 0; n < N; n++) {
      let x = headOf(d.q, t, n, N);
      if (c.norms) x = norm(x, d.qn);
      if (c.rotary) x = rope(x, pos[t]);
      qs[t][n] = x;
    }
    for (let n = 0; n < Nkv; n++) {
      let x = headOf(d.k, t, n, Nkv);
      if (c.norms) x = norm(x, d.kn);
      if (c.rotary) x = rope(x, pos[t]);
      ks[t][n] = x;
    }
  }
  const slotOf = (b: number, p: number) => c.table[b][Math.floor(p / blockSize)] * blockSize + (p % blockSize);
  // Writes.
  for (let b = 0; b < c.lens.length; b++)
    for (let t = cu[b]; t < cu[b + 1]; t++) {
      const s = c.slots ? c.slots[t] : slotOf(b, pos[t]);
      if (s < 0) continue;
      for (let n = 0; n < Nkv; n++)
        for (let h = 0; h < H; h++) {
          const kx = ks[t][n][h];
          const vx = d.v[(t * Nkv + n) * H + h];
          kc[(s * Nkv + n) * H + h] = c.quant ? quantized(c, d.ks!, kx, n, h) : kx;
          if (!c.latent) vc[(s * Nkv + n) * H + h] = c.quant ? quantized(c, d.vs!, vx, n, h) : vx;
        }
    }
  const scale = c.attrs?.scale ?? 1 / Math.sqrt(H);
  const softcap = c.attrs?.softcap ?? 0;
  const window = c.attrs?.local_window_size ?? -1;
  const causal = (c.attrs?.is_causal ?? 1) !== 0;
  // LATENT: V is the leading Hv channels of the (updated) key cache's rows.
  const Hv = valueHead(c);
  const vsrc = c.latent ? kc : vc;
  const y = new Float64Array(Tn * N * Hv);
  for (let b = 0; b < c.lens.length; b++) {
    const L = c.past[b] + c.lens[b];
    for (let t = cu[b]; t < cu[b + 1]; t++)
      for (let n = 0; n < N; n++) {
        const kvh = Math.floor(n / G);
        const scores: number[] = [];
        const keep: number[] = [];
        for (let i = 0; i < L; i++) {
          let ok = !causal || i <= pos[t];
          if (window > 0) ok &&= i > pos[t] - window;
          if (!ok) continue;
          const s = slotOf(b, i);
          let dot = 0;
          for (let h = 0; h < H; h++) dot += qs[t][n][h] * kc[(s * Nkv + kvh) * H + h];
          let sc = dot * scale;
          if (softcap > 0) sc = softcap * Math.tanh(sc / softcap);
          scores.push(sc);
          keep.push(s);
        }
        const extra = c.sink ? d.sink[n] : -Infinity;
        const m = Math.max(...scores, extra);
        const e = scores.map((x) => Math.exp(x - m));
        const z = e.reduce((a, x) => a + x, 0) + Math.exp(extra - m);
        for (let h = 0; h < Hv; h++) {
          let acc = 0;
          keep.forEach((s, j) => {
            acc += (e[j] / z) * vsrc[(s * Nkv + kvh) * H + h];
          });
          y[(t * N + n) * Hv + h] = acc;
        }
      }
  }
  return { y, kc, vc };
}

const cacheElem = (c: Case) =>
  c.quant ? (c.quant.type === 'int8' ? T.INT8 : packed(c) ? T.UINT8 : T.FLOAT8E4M3FN) : c.half ? T.FLOAT16 : T.FLOAT;

function modelOf(c: Case): Uint8Array {
  const elem = c.half ? T.FLOAT16 : T.FLOAT;
  const Tn = c.lens.reduce((a, b) => a + b, 0);
  const B = c.lens.length;
  const cacheDims = [c.numBlocks, c.blockSize, c.Nkv, cacheHead(c)];
  const inputs = [
    P.valueInfo('q', P.tensorType(elem, [Tn, (c.packed ? c.N + 2 * c.Nkv : c.N) * c.H])),
    ...(c.packed ? [] : [P.valueInfo('k', P.tensorType(elem, [Tn, c.Nkv * c.H]))]),
    ...(c.packed || c.latent ? [] : [P.valueInfo('v', P.tensorType(elem, [Tn, c.Nkv * c.H]))]),
    P.valueInfo('kc', P.tensorType(cacheElem(c), cacheDims)),
    ...(c.latent ? [] : [P.valueInfo('vc', P.tensorType(cacheElem(c), cacheDims))]),
    P.valueInfo('cu', P.tensorType(T.INT32, [B + 1])),
    P.valueInfo('ps', P.tensorType(T.INT32, [B])),
    P.valueInfo('bt', P.tensorType(T.INT32, [B, c.table[0].length])),
  ];
  const names = [
    'q',
    c.packed ? '' : 'k',
    c.packed || c.latent ? '' : 'v',
    'kc',
    c.latent ? '' : 'vc',
    'cu',
    'ps',
    'bt',
    '',
    '',
    '',
    '',
    '',
    '',
  ];
  if (c.rotary) {
    const rd = rotaryDim(c) / 2;
    inputs.push(P.valueInfo('cos', P.tensorType(elem, [maxPos, rd])), P.valueInfo('sin', P.tensorType(elem, [maxPos, rd])));
    names[8] = 'cos';
    names[9] = 'sin';
  }
  if (c.slots) {
    inputs.push(P.valueInfo('slots', P.tensorType(T.INT32, [Tn])));
    names[10] = 'slots';
  }
  if (c.sink) {
    inputs.push(P.valueInfo('sink', P.tensorType(elem, [c.N])));
    names[11] = 'sink';
  }
  if (c.norms) {
    inputs.push(P.valueInfo('qn', P.tensorType(elem, [c.H])), P.valueInfo('kn', P.tensorType(elem, [c.H])));
    names[12] = 'qn';
    names[13] = 'kn';
  }
  if (c.quant) {
    const sd = c.quant.mode === 'PER_TENSOR' ? [1] : [c.Nkv, 1, c.H];
    inputs.push(P.valueInfo('ks', P.tensorType(T.FLOAT, sd)));
    names[14] = 'ks';
    if (!c.latent) {
      inputs.push(P.valueInfo('vs', P.tensorType(T.FLOAT, sd)));
      names[15] = 'vs';
    }
  }
  while (names[names.length - 1] === '') names.pop();
  const attrs = [
    ...(c.quant
      ? Object.entries({
          k_quant_type: c.quant.mode,
          v_quant_type: c.quant.mode,
          k_cache_dtype: c.quant.type,
          v_cache_dtype: c.quant.type,
          ...c.quantAttrs,
        }).map(([k, x]) => P.attr.string(k, x))
      : []),
    P.attr.int('num_heads', c.N),
    P.attr.int('kv_num_heads', c.Nkv),
    ...(c.rotary ? [P.attr.int('do_rotary', 1)] : []),
    ...(c.rope?.interleaved ? [P.attr.int('rotary_interleaved', 1)] : []),
    ...(c.rope?.offset ? [P.attr.int('rotary_offset', c.rope.offset)] : []),
    ...(c.latent
      ? [P.attr.string('kv_cache_layout', 'LATENT'), ...(c.latent.vHeadSize ? [P.attr.int('v_head_size', c.latent.vHeadSize)] : [])]
      : []),
    ...Object.entries(c.attrs ?? {}).map(([k, x]) =>
      Number.isInteger(x) && k !== 'scale' && k !== 'softcap' ? P.attr.int(k, x) : P.attr.float(k, x),
    ),
  ];
  return P.modelBytes(
    {
      inputs,
      outputs: [
        P.valueInfo('y', P.tensorType(elem)),
        P.valueInfo('kc_out', P.tensorType(cacheElem(c))),
        ...(c.latent ? [] : [P.valueInfo('vc_out', P.tensorType(cacheElem(c)))]),
      ],
      nodes: [P.node('PagedAttention', names, c.latent ? ['y', 'kc_out'] : ['y', 'kc_out', 'vc_out'], attrs, { domain: MS })],
    },
    {
      opsets: [
        ['', 17],
        [MS, 1],
      ],
    },
  );
}

const toHalfBits = (x: number) => {
  const f = new Float32Array([x]);
  const u = new Uint32Array(f.buffer)[0];
  const sign = (u >>> 16) & 0x8000;
  const a = Math.abs(x);
  if (a === 0) return sign;
  if (a < 2 ** -14) return sign | Math.round(a / 2 ** -24);
  const e = Math.floor(Math.log2(a));
  const m = Math.round((a / 2 ** e - 1) * 1024);
  return m === 1024 ? sign | ((e + 16) << 10) : sign | ((e + 15) << 10) | m;
};
const fromHalfBits = (b: number) => {
  const s = b & 0x8000 ? -1 : 1;
  const e = (b >> 10) & 31;
  const m = b & 1023;
  return e === 0 ? s * m * 2 ** -24 : s * (1 + m / 1024) * 2 ** (e - 15);
};

function feedsOf(c: Case, d: Data): Record<string, HostTensor> {
  const Tn = c.lens.reduce((a, b) => a + b, 0);
  const B = c.lens.length;
  const f = (x: Float64Array, dims: number[]): HostTensor =>
    c.half
      ? { dtype: T.FLOAT16, dims, data: Uint16Array.from(x, toHalfBits) as never }
      : { dtype: T.FLOAT, dims, data: Float32Array.from(x) };
  const i = (x: number[], dims: number[]): HostTensor => ({ dtype: T.INT32, dims, data: Int32Array.from(x) });
  const cacheDims = [c.numBlocks, c.blockSize, c.Nkv, cacheHead(c)];
  const cu = [0];
  for (const l of c.lens) cu.push(cu[cu.length - 1] + l);
  const feeds: Record<string, HostTensor> = {
    kc: f(d.kc, cacheDims),
    ...(c.latent ? {} : { vc: f(d.vc, cacheDims) }),
    cu: i(cu, [B + 1]),
    ps: i(c.past, [B]),
    bt: i(c.table.flat(), [B, c.table[0].length]),
  };
  if (c.packed) {
    const row = (c.N + 2 * c.Nkv) * c.H;
    const packed = new Float64Array(Tn * row);
    for (let t = 0; t < Tn; t++) {
      packed.set(d.q.subarray(t * c.N * c.H, (t + 1) * c.N * c.H), t * row);
      packed.set(d.k.subarray(t * c.Nkv * c.H, (t + 1) * c.Nkv * c.H), t * row + c.N * c.H);
      packed.set(d.v.subarray(t * c.Nkv * c.H, (t + 1) * c.Nkv * c.H), t * row + (c.N + c.Nkv) * c.H);
    }
    feeds.q = f(packed, [Tn, row]);
  } else {
    feeds.q = f(d.q, [Tn, c.N * c.H]);
    feeds.k = f(d.k, [Tn, c.Nkv * c.H]);
    if (!c.latent) feeds.v = f(d.v, [Tn, c.Nkv * c.H]);
  }
  if (c.rotary) {
    feeds.cos = f(d.cos, [maxPos, rotaryDim(c) / 2]);
    feeds.sin = f(d.sin, [maxPos, rotaryDim(c) / 2]);
  }
  if (c.quant) {
    feeds.kc = { dtype: cacheElem(c), dims: cacheDims, data: d.kq! };
    if (!c.latent) feeds.vc = { dtype: cacheElem(c), dims: cacheDims, data: d.vq! };
    const sd = c.quant.mode === 'PER_TENSOR' ? [1] : [c.Nkv, 1, c.H];
    feeds.ks = { dtype: T.FLOAT, dims: sd, data: Float32Array.from(d.ks!) };
    if (!c.latent) feeds.vs = { dtype: T.FLOAT, dims: sd, data: Float32Array.from(d.vs!) };
  }
  if (c.slots) feeds.slots = i(c.slots, [Tn]);
  if (c.sink) feeds.sink = f(d.sink, [c.N]);
  if (c.norms) {
    feeds.qn = f(d.qn, [c.H]);
    feeds.kn = f(d.kn, [c.H]);
  }
  return feeds;
}

const values = (t: HostTensor, half: boolean): number[] =>
  half ? Array.from(t.data as Uint16Array, fromHalfBits) : Array.from(t.data as Float32Array);

function expectClose(have: number[], want: Float64Array, tol: number, what: string): void {
  expect(have.length).toBe(want.length);
  let worst = 0;
  let at = -1;
  have.forEach((x, i) => {
    const e = Math.abs(x - want[i]) / (1 + Math.abs(want[i]));
    if (!(e <= worst)) {
      worst = e;
      at = i;
    }
  });
  expect(worst <= tol ? 'ok' : `${what}[${at}]: mlx ${have[at]} vs reference ${want[at]}`).toBe('ok');
}

/** A cache output's values: its floats, or its codes times the scales. */
function cacheValues(c: Case, sc: Float64Array | undefined, t: HostTensor): number[] {
  if (!c.quant) return values(t, !!c.half);
  expect(t.dtype).toBe(cacheElem(c));
  let codes = Array.from(t.data as ArrayLike<number>);
  if (packed(c)) {
    const Hp = cacheHead(c);
    const rows = codes.length / Hp;
    const out: number[] = [];
    for (let r = 0; r < rows; r++) for (let h = 0; h < c.H; h++) out.push(nibbleValue(c, (codes[r * Hp + (h >> 1)] >> ((h & 1) * 4)) & 15));
    codes = out;
  }
  return codes.map((q, i) => {
    const s = scaleAt(c, sc!, Math.floor(i / c.H) % c.Nkv, i % c.H);
    return (c.quant!.type === 'float8e4m3fn' ? e4m3Value(q) : q) * s;
  });
}

async function check(c: Case): Promise<void> {
  const d = dataOf(c);
  const want = reference(c, d);
  const tol = c.half ? 4e-3 : 2e-5;
  for (const compiled of [false, true]) {
    const s = await MlxSession.create(modelOf(c), { compiled });
    try {
      for (let r = 0; r < (compiled ? 3 : 1); r++) {
        const out = (await s.run(feedsOf(c, d))) as Record<string, HostTensor>;
        expectClose(values(out.y, !!c.half), want.y, tol, 'y');
        expectClose(cacheValues(c, d.ks, out.kc_out), want.kc, tol, 'key_cache_out');
        if (c.latent) expect(out.vc_out).toBeUndefined();
        else expectClose(cacheValues(c, d.vs, out.vc_out), want.vc, tol, 'value_cache_out');
      }
    } finally {
      s.release();
    }
  }
}

// Two sequences: one decoding after 5 cached tokens, one prefilling 3; blocks scattered.
const base: Case = {
  N: 4,
  Nkv: 2,
  H: 16,
  numBlocks: 6,
  blockSize: 4,
  past: [5, 0],
  lens: [1, 3],
  table: [
    [4, 1],
    [2, 5],
  ],
};

describe('PagedAttention against a float64 reference of the spec', () => {
  it('decode and prefill in one batch, GQA heads, scattered blocks', () => check(base));
  it('packed QKV', () => check({ ...base, packed: true }));
  it('local window, softcap and a custom scale', () =>
    check({ ...base, past: [6, 2], lens: [2, 3], attrs: { local_window_size: 3, softcap: 0.5, scale: 0.3 } }));
  it('bidirectional (is_causal 0)', () => check({ ...base, past: [3, 0], lens: [3, 4], attrs: { is_causal: 0 } }));
  it('slot_mapping: explicit slots, -1 skipping a write', () =>
    check({ ...base, past: [5, 0], lens: [1, 3], slots: [4 * 4 + 1, -1, 2 * 4 + 1, 2 * 4 + 2] }));
  it('rotary at the absolute positions', () => check({ ...base, rotary: true }));
  it('head_sink and Q/K norms', () => check({ ...base, sink: true, norms: true }));
  it('float16', () => check({ ...base, half: true, rotary: true }));
  for (const type of ['int8', 'float8e4m3fn', 'int4', 'float4e2m1'] as const)
    for (const mode of ['PER_TENSOR', 'PER_CHANNEL'] as const)
      it(`${type} cache, ${mode} scales`, () => check({ ...base, quant: { type, mode } }));
  it('float8e4m3fn cache with slot_mapping, rotary and a local window', () =>
    check({
      ...base,
      quant: { type: 'float8e4m3fn', mode: 'PER_CHANNEL' },
      rotary: true,
      slots: [21, 8, -1, 10],
      attrs: { local_window_size: 3 },
    }));
  it('int4 cache with an odd head size (a padding nibble a head), packed QKV', () =>
    check({ ...base, H: 15, packed: true, quant: { type: 'int4', mode: 'PER_CHANNEL' } }));
  it('interleaved rotary', () => check({ ...base, rotary: true, rope: { interleaved: true } }));
  it('rotary over part of each head: rotary_offset 8, 8 rotated channels, the rest passed through', () =>
    check({ ...base, H: 24, rotary: true, rope: { offset: 8, dim: 8 } }));
  it('rotary_offset with interleaved rotary reaching the end of the head', () =>
    check({ ...base, H: 24, rotary: true, rope: { offset: 16, dim: 8, interleaved: true } }));
  // MLA-shaped (DeepSeek-V3: head_size 576, v_head_size 512, RoPE on the last 64): scaled down.
  const latent: Case = { ...base, N: 4, Nkv: 1, H: 24, latent: { vHeadSize: 16 }, attrs: { scale: 0.2 } };
  it('LATENT layout: one cache, V the leading v_head_size channels, RoPE on the suffix (MLA)', () =>
    check({ ...latent, rotary: true, rope: { offset: 16, dim: 8 } }));
  it('LATENT layout with v_head_size omitted (V is the whole row), a window', () =>
    check({ ...latent, latent: { vHeadSize: 0 }, attrs: { local_window_size: 3 } }));
  it('LATENT layout with an int8 PER_TENSOR key cache', () =>
    check({ ...latent, quant: { type: 'int8', mode: 'PER_TENSOR' }, quantAttrs: { v_quant_type: 'NONE', v_cache_dtype: '' } }));
});

describe('PagedAttention: bad input and what is declined', () => {
  it('a block table pointing outside the cache fails naming the entry', () => {
    const c: Case = {
      ...base,
      table: [
        [4, 9],
        [2, 5],
      ],
      past: [5, 0],
    };
    const s = MlxSession.createSync(modelOf(c), {});
    try {
      expect(() => s.runSync(feedsOf(c, dataOf(c)))).toThrow(NodeExecutionError);
      expect(() => s.runSync(feedsOf(c, dataOf(c)))).toThrow(/block_table\[0, 1\] = 9/);
    } finally {
      s.release();
    }
  });

  it('quantized caches: a quant type that disagrees with the cache, or one packed cache of two, is declined', () => {
    const q = { ...base, quant: { type: 'int8', mode: 'PER_TENSOR' } } as Case;
    const none = modelOf({ ...q, quantAttrs: { k_quant_type: 'NONE' } });
    expect(() => MlxSession.createSync(none, { fallback: 'none' })).toThrow(UnsupportedOperatorError);
    expect(() => MlxSession.createSync(none, { fallback: 'none' })).toThrow(/quantized k cache needs k_quant_type/);
    const int4 = modelOf({ ...q, quantAttrs: { v_cache_dtype: 'int4' } });
    // The v cache's type (int8) is known before any run: the attribute that disagrees with it is the reason.
    expect(() => MlxSession.createSync(int4, { fallback: 'none' })).toThrow(
      /v_cache_dtype 'int4' does not agree with the cache's element type 3/,
    );
  });

  it('what the spec forbids around LATENT, v_head_size and rotary_offset is declined with the reason', () => {
    const declined = (names: string[], outputs: string[], attrs: ReturnType<typeof P.attr.int>[], reason: RegExp) => {
      const bytes = P.modelBytes(
        {
          inputs: [P.valueInfo('q', P.tensorType(T.FLOAT, [1, 64]))],
          outputs: outputs.map((o) => P.valueInfo(o, P.tensorType(T.FLOAT))),
          nodes: [P.node('PagedAttention', names, outputs, [P.attr.int('num_heads', 4), ...attrs], { domain: MS })],
        },
        {
          opsets: [
            ['', 17],
            [MS, 1],
          ],
        },
      );
      expect(() => MlxSession.createSync(bytes, { fallback: 'none' })).toThrow(UnsupportedOperatorError);
      expect(() => MlxSession.createSync(bytes, { fallback: 'none' })).toThrow(reason);
    };
    const LATENT = P.attr.string('kv_cache_layout', 'LATENT');
    const one = P.attr.int('kv_num_heads', 1);
    declined(['q', 'q', 'q', 'q', '', 'q', 'q', 'q'], ['y'], [one, LATENT], /LATENT takes neither value/);
    declined(['q', 'q', '', 'q', 'q', 'q', 'q', 'q'], ['y'], [one, LATENT], /LATENT takes neither value/);
    declined(['q', 'q', '', 'q', '', 'q', 'q', 'q'], ['y', 'k', 'v'], [one, LATENT], /LATENT takes neither value/);
    declined(['q', 'q', '', 'q', '', 'q', 'q', 'q'], ['y'], [P.attr.int('kv_num_heads', 2), LATENT], /LATENT needs kv_num_heads 1/);
    declined(['q', '', '', 'q', '', 'q', 'q', 'q'], ['y'], [one, LATENT], /LATENT needs key as its own input/);
    declined(
      ['q', 'q', 'q', 'q', 'q', 'q', 'q', 'q'],
      ['y'],
      [one, P.attr.int('v_head_size', 8)],
      /v_head_size is only valid with kv_cache_layout LATENT/,
    );
    declined(
      ['q', 'q', 'q', 'q', 'q', 'q', 'q', 'q'],
      ['y'],
      [one, P.attr.int('rotary_offset', 4)],
      /rotary_offset must be a non-negative multiple of 8/,
    );
    declined(
      ['q', 'q', 'q', 'q', 'q', 'q', 'q', 'q'],
      ['y'],
      [one, P.attr.string('kv_cache_layout', 'FUSED')],
      /not one of SEPARATE, LATENT/,
    );
  });

  it('LATENT: a v_head_size other than the head size without a scale, or wider than the head, fails the run naming it', () => {
    for (const [vHeadSize, attrs, reason] of [
      [16, {}, /v_head_size 16 differs from the head size 24: the scale attribute is required/],
      [32, { scale: 0.2 }, /v_head_size 32 is wider than the head size 24/],
    ] as const) {
      const c: Case = { ...base, Nkv: 1, H: 24, latent: { vHeadSize }, attrs };
      const s = MlxSession.createSync(modelOf(c), {});
      try {
        expect(() => s.runSync(feedsOf(c, dataOf(c)))).toThrow(NodeExecutionError);
        expect(() => s.runSync(feedsOf(c, dataOf(c)))).toThrow(reason);
      } finally {
        s.release();
      }
    }
  });
});
