// Dtypes: names as in MLX, codes as in mlx-c's mlx_dtype, and the TypedArray that holds each.
import { MlxDtype } from '@mlx/sys';

export type Dtype =
  | 'bool'
  | 'uint8'
  | 'uint16'
  | 'uint32'
  | 'uint64'
  | 'int8'
  | 'int16'
  | 'int32'
  | 'int64'
  | 'float16'
  | 'float32'
  | 'float64'
  | 'bfloat16'
  | 'complex64';

/** In mlx_dtype order, so the index is the C enum value. */
export const dtypes: readonly Dtype[] = [
  'bool',
  'uint8',
  'uint16',
  'uint32',
  'uint64',
  'int8',
  'int16',
  'int32',
  'int64',
  'float16',
  'float32',
  'float64',
  'bfloat16',
  'complex64',
];

const codes = new Map(dtypes.map((d, i) => [d, i]));
if (codes.get('bfloat16') !== MlxDtype.BFLOAT16) throw new Error('dtype table out of sync with mlx_dtype');

export function dtypeCode(d: Dtype): number {
  const c = codes.get(d);
  if (c === undefined) throw new TypeError(`unknown dtype '${String(d)}' (expected one of ${dtypes.join(', ')})`);
  return c;
}

export function dtypeFromCode(c: number): Dtype {
  const d = dtypes[c];
  if (!d) throw new TypeError(`unknown mlx_dtype code ${c}`);
  return d;
}

const sizes: Record<Dtype, number> = {
  bool: 1,
  uint8: 1,
  uint16: 2,
  uint32: 4,
  uint64: 8,
  int8: 1,
  int16: 2,
  int32: 4,
  int64: 8,
  float16: 2,
  float32: 4,
  float64: 8,
  bfloat16: 2,
  complex64: 8,
};
export const itemsize = (d: Dtype): number => sizes[d];
export const isFloating = (d: Dtype): boolean => d === 'float16' || d === 'float32' || d === 'float64' || d === 'bfloat16';
export const isInteger = (d: Dtype): boolean => /int/.test(d);
export const isUnsigned = (d: Dtype): boolean => d.startsWith('uint');

export type TypedArray =
  | Float32Array
  | Float64Array
  | Int8Array
  | Int16Array
  | Int32Array
  | BigInt64Array
  | Uint8Array
  | Uint16Array
  | Uint32Array
  | BigUint64Array;

/** The TypedArray for each dtype: float16/bfloat16 as their uint16 bits, bool as 0/1 bytes, complex64 interleaved. */
export type TypedArrayFor<D extends Dtype> = D extends 'float32' | 'complex64'
  ? Float32Array
  : D extends 'float64'
    ? Float64Array
    : D extends 'int8'
      ? Int8Array
      : D extends 'int16'
        ? Int16Array
        : D extends 'int32'
          ? Int32Array
          : D extends 'int64'
            ? BigInt64Array
            : D extends 'uint8' | 'bool'
              ? Uint8Array
              : D extends 'uint16' | 'float16' | 'bfloat16'
                ? Uint16Array
                : D extends 'uint32'
                  ? Uint32Array
                  : D extends 'uint64'
                    ? BigUint64Array
                    : TypedArray;

type Ctor = { new (buf: ArrayBuffer, off?: number, len?: number): TypedArray; new (n: number): TypedArray; BYTES_PER_ELEMENT: number };
const ctors: Record<Dtype, Ctor> = {
  bool: Uint8Array,
  uint8: Uint8Array,
  uint16: Uint16Array,
  uint32: Uint32Array,
  uint64: BigUint64Array,
  int8: Int8Array,
  int16: Int16Array,
  int32: Int32Array,
  int64: BigInt64Array,
  float16: Uint16Array,
  float32: Float32Array,
  float64: Float64Array,
  bfloat16: Uint16Array,
  complex64: Float32Array,
} as unknown as Record<Dtype, Ctor>;
export const typedArrayCtor = (d: Dtype): Ctor => ctors[d];

/** The dtype a TypedArray holds when none is given. */
export function dtypeOfTypedArray(a: ArrayBufferView): Dtype {
  if (a instanceof Float32Array) return 'float32';
  if (a instanceof Float64Array) return 'float64';
  if (a instanceof Int32Array) return 'int32';
  if (a instanceof BigInt64Array) return 'int64';
  if (a instanceof Uint8Array || a instanceof Uint8ClampedArray) return 'uint8';
  if (a instanceof Int8Array) return 'int8';
  if (a instanceof Int16Array) return 'int16';
  if (a instanceof Uint16Array) return 'uint16';
  if (a instanceof Uint32Array) return 'uint32';
  if (a instanceof BigUint64Array) return 'uint64';
  throw new TypeError(`unsupported TypedArray ${a.constructor.name}`);
}

// float16 / bfloat16 bit conversions (round to nearest even), for item() and construction from numbers.
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
export function float32ToBfloat16Bits(x: number): number {
  f32[0] = x;
  const b = u32[0];
  if ((b & 0x7f800000) === 0x7f800000 && b & 0x7fffff) return ((b >>> 16) | 0x40) & 0xffff; // NaN stays NaN
  return ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
}
export function bfloat16BitsToNumber(h: number): number {
  u32[0] = h << 16;
  return f32[0];
}
export function float16BitsToNumber(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}
export function numberToFloat16Bits(x: number): number {
  f32[0] = x;
  const b = u32[0];
  const sign = (b >>> 16) & 0x8000;
  const exp = (b >>> 23) & 0xff;
  let mant = b & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let h = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    if (rem > half || (rem === half && h & 1)) h++;
    return sign | h;
  }
  let h = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && h & 1)) h++;
  return sign | h;
}
