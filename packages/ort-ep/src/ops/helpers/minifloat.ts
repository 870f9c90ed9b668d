// Mini floats: the 8-bit and 4-bit float formats (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, E2M1), which
// MLX has no dtypes for. A value of one is its code (a byte): decodeMiniFloat/encodeMiniFloat
// convert one code on the host; the ...Array forms convert MLX arrays of codes (uint8) for the
// quantizers, decoding through a 256-entry table (a take) and encoding on the host, where the
// rounding rules are easiest exact. Encoding rounds to nearest, ties to even, by search over the
// format's finite values, with the ONNX saturation rules.
import * as mx from '@mlx/core';
import { OnnxDataType } from '../../onnx/index.js';

interface Format {
  bits: 8 | 4;
  exp: number;
  mant: number;
  bias: number;
  /** Whether the all-ones exponent encodes inf/NaN (IEEE-like), else only the NaN pattern. */
  ieee: boolean;
  /** 'uz' formats: NaN is the negative-zero pattern and there is no -0. */
  uz: boolean;
  /** E4M3FN: only S.1111.111 is NaN. */
  fn: boolean;
}

const formats: Record<number, Format> = {
  [OnnxDataType.FLOAT8E4M3FN]: { bits: 8, exp: 4, mant: 3, bias: 7, ieee: false, uz: false, fn: true },
  [OnnxDataType.FLOAT8E4M3FNUZ]: { bits: 8, exp: 4, mant: 3, bias: 8, ieee: false, uz: true, fn: true },
  [OnnxDataType.FLOAT8E5M2]: { bits: 8, exp: 5, mant: 2, bias: 15, ieee: true, uz: false, fn: false },
  [OnnxDataType.FLOAT8E5M2FNUZ]: { bits: 8, exp: 5, mant: 2, bias: 16, ieee: false, uz: true, fn: true },
  [OnnxDataType.FLOAT4E2M1]: { bits: 4, exp: 2, mant: 1, bias: 1, ieee: false, uz: false, fn: false },
};

/** Whether ONNX element type `t` is a mini float (float8 or float4). */
export const isMiniFloat = (t: number): boolean => t in formats;

function decodeWith(f: Format, code: number): number {
  const signBit = 1 << (f.bits - 1);
  const sign = code & signBit ? -1 : 1;
  const e = (code >> f.mant) & ((1 << f.exp) - 1);
  const m = code & ((1 << f.mant) - 1);
  const maxE = (1 << f.exp) - 1;
  if (f.uz && code === signBit) return NaN;
  if (f.ieee && e === maxE) return m ? NaN : sign * Infinity;
  if (f.fn && !f.uz && e === maxE && m === (1 << f.mant) - 1) return NaN;
  if (e === 0) return sign * m * 2 ** (1 - f.bias - f.mant);
  return sign * (1 + m / (1 << f.mant)) * 2 ** (e - f.bias);
}

const tables = new Map<number, { values: number[]; codes: number[]; max: number; nan: number; inf?: number }>();
function table(type: number) {
  let t = tables.get(type);
  if (t) return t;
  const f = formats[type];
  const pos: [number, number][] = [];
  for (let c = 0; c < 1 << (f.bits - 1); c++) {
    const v = decodeWith(f, c);
    if (Number.isFinite(v)) pos.push([v, c]);
  }
  pos.sort((a, b) => a[0] - b[0]);
  // NaN codes as the ONNX reference writes them: 0x80 for the 'uz' formats, 0x7E for E5M2, 0x7F for E4M3FN.
  const nan = f.uz ? 1 << (f.bits - 1) : f.ieee ? (1 << (f.exp + f.mant)) - 2 : (1 << (f.bits - 1)) - 1;
  t = {
    values: pos.map((p) => p[0]),
    codes: pos.map((p) => p[1]),
    max: pos[pos.length - 1][0],
    nan,
    inf: f.ieee ? ((1 << f.exp) - 1) << f.mant : undefined,
  };
  tables.set(type, t);
  return t;
}

/** The value of one code of mini-float type `type`. */
export function decodeMiniFloat(code: number, type: number): number {
  return decodeWith(formats[type], code);
}

/** The code of `x` in mini-float type `type`; `negative` carries the sign of a NaN input (not observable on a JS number). */
export function encodeMiniFloat(x: number, type: number, saturate = true, negative = false): number {
  const f = formats[type];
  const t = table(type);
  const signBit = 1 << (f.bits - 1);
  if (Number.isNaN(x)) return f.bits === 4 ? signBit : f.uz ? t.nan : t.nan | (negative ? signBit : 0);
  const neg = x < 0 || Object.is(x, -0);
  const signed = (c: number) => (neg && !(f.uz && c === 0) ? c | signBit : c);
  const a = Math.abs(x);
  if (!Number.isFinite(a) || a > t.max) {
    if (f.bits === 4) return signed(t.codes[t.codes.length - 1]);
    if (!Number.isFinite(a)) {
      if (saturate) return signed(t.codes[t.codes.length - 1]);
      return t.inf !== undefined ? signed(t.inf) : f.uz ? t.nan : signed(t.nan);
    }
    // Finite but above the largest value: rounding may still land on it.
    const halfUlp = (t.max - t.values[t.values.length - 2]) / 2;
    if (a >= t.max + halfUlp && !saturate) return t.inf !== undefined ? signed(t.inf) : f.uz ? t.nan : signed(t.nan);
    return signed(t.codes[t.codes.length - 1]);
  }
  let lo = 0,
    hi = t.values.length - 1;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (t.values[mid] <= a) lo = mid;
    else hi = mid;
  }
  const dl = a - t.values[lo],
    dh = t.values[hi] - a;
  const pick = dl < dh ? lo : dh < dl ? hi : t.codes[lo] & 1 ? hi : lo;
  return signed(t.codes[pick]);
}

// ---------------------------------------------------------------------------------------------
// MLX arrays of codes

const luts = new Map<number, Float32Array>();
function lut(type: number): Float32Array {
  let t = luts.get(type);
  if (!t) {
    // A float4 code sits in the low nibble of its byte.
    const mask = formats[type].bits === 4 ? 0x0f : 0xff;
    t = Float32Array.from({ length: 256 }, (_, c) => decodeMiniFloat(c & mask, type));
    luts.set(type, t);
  }
  return t;
}

/** Codes (uint8) of mini-float type `type` -> float32 values. */
export function decodeMiniFloatArray(codes: mx.Array, type: number): mx.Array {
  const table = mx.array(lut(type), { shape: [256] });
  return mx.take(table, mx.astype(codes, 'int32'), 0);
}

/** float values -> codes (uint8) of mini-float type `type`, rounding to nearest even, with the ONNX saturation rules. */
export function encodeMiniFloatArray(values: mx.Array, type: number, saturate: boolean): mx.Array {
  const v = mx.astype(values, 'float32');
  const data = v.toTypedArray() as Float32Array;
  const codes = Uint8Array.from(data, (x) => encodeMiniFloat(x, type, saturate));
  return mx.Array.fromTypedArray(codes, v.shape, 'uint8');
}

/**
 * float32 values -> float8e4m3fn codes (uint8) with MLX ops, for codes computed inside a traced
 * graph (a KV cache written on the device): nearest even, saturating at ±448, NaN -> 0x7f. With E
 * the exponent of |y| (at least -6, the subnormal one), q = round(|y| / 2^(E - 3)) counts steps of
 * that binade, and the code is (E + 6) · 8 + q (a q of 16 carries into the next binade's code, and
 * E = -6 gives the subnormal codes 0..7).
 */
export function encodeE4M3FNOnDevice(y: mx.Array): mx.Array {
  const a = mx.minimum(mx.abs(y), 448);
  const e = mx.clip(mx.floor(mx.log2(a)), -6, 8);
  const q = mx.round(mx.divide(a, mx.power(mx.scalar(2, 'float32'), mx.subtract(e, 3))), 0);
  const code = mx.minimum(mx.add(mx.multiply(mx.add(e, 6), 8), q), 126);
  const signed = mx.where(mx.less(y, 0), mx.add(code, 128), code);
  return mx.astype(mx.where(mx.isnan(y), mx.scalar(0x7f, 'float32'), signed), 'uint8');
}

/** float32 values -> float4e2m1 codes (uint8, 0..15) with MLX ops: nearest, ties to the even code, saturating at ±6. */
export function encodeE2M1OnDevice(y: mx.Array): mx.Array {
  const a = mx.abs(y);
  // The code counts the rounding boundaries below |y|; a tie goes to the even code.
  const above = (t: number, tieUp: boolean) => mx.astype(tieUp ? mx.greaterEqual(a, t) : mx.greater(a, t), 'float32');
  let code = above(0.25, false);
  for (const [t, up] of [
    [0.75, true],
    [1.25, false],
    [1.75, true],
    [2.5, false],
    [3.5, true],
    [5, false],
  ] as const)
    code = mx.add(code, above(t, up));
  return mx.astype(mx.where(mx.less(y, 0), mx.add(code, 8), code), 'uint8');
}

// ---------------------------------------------------------------------------------------------
// float8e8m0: an exponent alone (a scale of 2^(code - 127)); 0xFF is NaN. Encoding keeps the
// float32 exponent of |x| and rounds by its mantissa as the ONNX reference does: 'up' (the
// default) when any mantissa bit is set, 'nearest' by the guard/round/sticky bits, 'down' never;
// saturation stops rounding past the largest exponent (0xFE).

export type E8M0Rounding = 'up' | 'down' | 'nearest';

export function decodeE8M0(code: number): number {
  return code === 0xff ? Number.NaN : 2 ** (code - 127);
}

/** float8e8m0 codes (an MLX array) -> float32 scales 2^(code - 127), NaN for 0xff. */
export function decodeE8M0Array(codes: mx.Array): mx.Array {
  const c = mx.astype(codes, 'float32');
  return mx.where(mx.equal(c, 0xff), mx.scalar(Number.NaN, 'float32'), mx.power(mx.scalar(2, 'float32'), mx.subtract(c, 127)));
}

const e8m0Bits = new Uint32Array(1);
const e8m0Float = new Float32Array(e8m0Bits.buffer);

export function encodeE8M0(x: number, saturate: boolean, rounding: E8M0Rounding): number {
  e8m0Float[0] = x;
  const bits = e8m0Bits[0];
  const exponent = (bits >>> 23) & 0xff;
  if (exponent === 0xff) return 0xff;
  let up = false;
  if (rounding === 'up') up = (bits & 0x7fffff) !== 0;
  else if (rounding === 'nearest') {
    const g = (bits & 0x400000) !== 0;
    const r = (bits & 0x200000) !== 0;
    const s = (bits & 0x1fffff) !== 0;
    up = g && (r || s || exponent > 0);
  }
  if (up && saturate && exponent === 0xfe) up = false;
  return (exponent + (up ? 1 : 0)) & 0xff;
}
