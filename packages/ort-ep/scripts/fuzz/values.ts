// Tensors for fuzz cases: random and edge values of every element type a feed can have, in the
// host layout (HostTensor: float16 as bits, int64 as BigInt64Array, bool as 0/1), and a JSON form
// of a tensor for the corpus files.
import type { HostTensor, TypedArray } from '../../src/onnx/index.js';
import { OnnxDataType as T } from '../../src/onnx/index.js';
import { toHalfBits } from '../../test/helpers/encode.js';
import type { Rng } from './rng.js';

/** Element types onnxruntime-common's Tensor holds (so a feed can have them). */
export const FEED_TYPES: readonly number[] = [
  T.FLOAT,
  T.UINT8,
  T.INT8,
  T.UINT16,
  T.INT16,
  T.INT32,
  T.INT64,
  T.STRING,
  T.BOOL,
  T.FLOAT16,
  T.DOUBLE,
  T.UINT32,
  T.UINT64,
];

export const isFloat = (t: number) => t === T.FLOAT || t === T.DOUBLE || t === T.FLOAT16;

/** Edge values: zero, signs, the int32 and int64 limits, 2^31, NaN, infinities, the largest floats. */
export const EDGE_FLOATS = [
  0,
  -0,
  1,
  -1,
  0.5,
  Number.NaN,
  Infinity,
  -Infinity,
  3.4e38,
  -3.4e38,
  1e-40,
  65504,
  2 ** 31,
  -(2 ** 31),
  1e10,
  -1e10,
];
export const EDGE_INTS: readonly bigint[] = [
  0n,
  1n,
  -1n,
  2n,
  -2n,
  127n,
  -128n,
  255n,
  65535n,
  2n ** 31n - 1n,
  -(2n ** 31n),
  2n ** 31n,
  2n ** 32n,
  2n ** 32n + 2n,
  2n ** 53n,
  2n ** 63n - 1n,
  -(2n ** 63n),
  1000000000n,
];
/** Dimensions and sizes for shape-like data: mostly small, sometimes impossible. */
export const EDGE_DIMS: readonly bigint[] = [0n, 1n, 2n, 3n, 4n, -1n, -2n, 2n ** 31n, 2n ** 32n + 2n, 1000000000n, 2n ** 40n, 2n ** 62n];
// No NUL: onnxruntime-node's string tensors end at one.
export const EDGE_STRINGS = [
  '',
  'a',
  'abc',
  'Hello World',
  ' ',
  '\u00c4\u00d6\u00fc',
  'x'.repeat(300),
  '12',
  'a,b,,c',
  '  lead',
  '\u{1F642}',
  'ß',
  'İ',
];

export type Mode = 'normal' | 'edge' | 'mixed' | 'index' | 'dims';

const INT_RANGE: Record<number, [bigint, bigint]> = {
  [T.UINT8]: [0n, 255n],
  [T.INT8]: [-128n, 127n],
  [T.UINT16]: [0n, 65535n],
  [T.INT16]: [-32768n, 32767n],
  [T.INT32]: [-(2n ** 31n), 2n ** 31n - 1n],
  [T.INT64]: [-(2n ** 63n), 2n ** 63n - 1n],
  [T.UINT32]: [0n, 2n ** 32n - 1n],
  [T.UINT64]: [0n, 2n ** 64n - 1n],
};

function arrayFor(type: number, n: number): TypedArray | string[] {
  switch (type) {
    case T.FLOAT:
      return new Float32Array(n);
    case T.DOUBLE:
      return new Float64Array(n);
    case T.FLOAT16:
      return new Uint16Array(n);
    case T.UINT8:
    case T.BOOL:
      return new Uint8Array(n);
    case T.INT8:
      return new Int8Array(n);
    case T.UINT16:
      return new Uint16Array(n);
    case T.INT16:
      return new Int16Array(n);
    case T.INT32:
      return new Int32Array(n);
    case T.UINT32:
      return new Uint32Array(n);
    case T.INT64:
      return new BigInt64Array(n);
    case T.UINT64:
      return new BigUint64Array(n);
    case T.STRING:
      return new Array<string>(n).fill('');
    default:
      throw new Error(`fuzz: no host array for element type ${type}`);
  }
}

/** Stores a logical value (wrapping integers to the type, as a typed array does). */
export function put(t: HostTensor, i: number, x: number | bigint | string): void {
  const d = t.data as unknown as (number | bigint | string)[];
  switch (t.dtype) {
    case T.STRING:
      d[i] = String(x);
      return;
    case T.FLOAT16:
      d[i] = toHalfBits(Number(x));
      return;
    case T.BOOL:
      d[i] = Number(x) ? 1 : 0;
      return;
    case T.FLOAT:
    case T.DOUBLE:
      d[i] = Number(x);
      return;
    case T.INT64:
      d[i] = BigInt.asIntN(64, typeof x === 'bigint' ? x : BigInt(Math.trunc(Number.isFinite(x as number) ? (x as number) : 0)));
      return;
    case T.UINT64:
      d[i] = BigInt.asUintN(64, typeof x === 'bigint' ? x : BigInt(Math.trunc(Number.isFinite(x as number) ? (x as number) : 0)));
      return;
    default:
      d[i] = Number(typeof x === 'bigint' ? BigInt.asIntN(64, x) : Number.isFinite(x as number) ? Math.trunc(x as number) : 0);
  }
}

/** One value of the element type. */
export function value(rng: Rng, type: number, mode: Mode, extent = 4): number | bigint | string {
  if (type === T.STRING) return rng.chance(0.5) ? rng.pick(EDGE_STRINGS) : rng.pick(['a', 'b', 'ab', 'abc', 'Abc', 'xyz', '1']);
  if (type === T.BOOL) return rng.int(0, 1);
  const edge = mode === 'edge' || (mode === 'mixed' && rng.chance(0.15));
  if (isFloat(type)) {
    if (edge) return rng.pick(EDGE_FLOATS);
    if (mode === 'index' || mode === 'dims') return rng.int(-extent, extent);
    return Math.round((rng.float() * 6 - 3) * 1000) / 1000;
  }
  if (mode === 'dims') return rng.chance(0.85) ? BigInt(rng.int(0, 4)) : rng.pick(EDGE_DIMS);
  if (mode === 'index') return rng.chance(0.85) ? BigInt(rng.int(-extent, extent)) : rng.pick(EDGE_INTS);
  if (edge) return rng.pick(EDGE_INTS);
  const [lo] = INT_RANGE[type] ?? [0n];
  return BigInt(rng.int(lo < 0n ? -3 : 0, 5));
}

/** A tensor of the element type and dims with values drawn by `mode`. */
export function tensorOf(rng: Rng, type: number, dims: number[], mode: Mode, extent = 4): HostTensor {
  const n = dims.reduce((a, b) => a * b, 1);
  const t: HostTensor = { dtype: type, dims, data: arrayFor(type, n) };
  for (let i = 0; i < n; i++) put(t, i, value(rng, type, mode, extent));
  return t;
}

/**
 * Whether a tensor holds values whose results legitimately differ between implementations:
 * NaN, infinities or magnitudes past 1e30 in floats (evaluation order, float-to-int casts), and
 * integers of magnitude 100 or more (the edge values: sums and products overflow).
 */
export function extreme(t: HostTensor): boolean {
  if (t.dtype === T.STRING || t.dtype === T.BOOL) return false;
  if (t.dtype === T.FLOAT16) return (t.data as Uint16Array).some((h) => (h & 0x7c00) === 0x7c00);
  if (isFloat(t.dtype)) return (t.data as Float32Array).some((x) => !(Math.abs(x) <= 1e30));
  return Array.from(t.data as ArrayLike<number | bigint>).some((x) => x >= 100 || x <= -100);
}

/** The logical values of a tensor (float16 decoded), for conversions between element types. */
export function logical(t: HostTensor): (number | bigint | string)[] {
  if (t.dtype === T.FLOAT16) return Array.from(t.data as Uint16Array, halfToNumber);
  return Array.from(t.data as ArrayLike<number | bigint | string>);
}

export function halfToNumber(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const f = h & 0x3ff;
  if (e === 0) return s * f * 2 ** -24;
  if (e === 31) return f ? Number.NaN : s * Infinity;
  return s * (1 + f / 1024) * 2 ** (e - 15);
}

/** The tensor converted to another element type, value by value. */
export function convert(t: HostTensor, type: number): HostTensor {
  const vals = logical(t);
  const out: HostTensor = { dtype: type, dims: [...t.dims], data: arrayFor(type, vals.length) };
  vals.forEach((x, i) => {
    if (type === T.STRING) put(out, i, String(x));
    else if (typeof x === 'string') put(out, i, Number.parseFloat(x) || 0);
    else put(out, i, x);
  });
  return out;
}

/** The raw_data bytes of a numeric host tensor (little-endian hosts: the typed array's own bytes). */
export function rawBytes(t: HostTensor): Uint8Array {
  const d = t.data as TypedArray;
  return new Uint8Array(d.buffer.slice(d.byteOffset, d.byteOffset + d.byteLength));
}

// ---- the corpus's JSON form ----

export interface TensorJson {
  dtype: number;
  dims: number[];
  /** Strings as they are; other types as the base64 of their host bytes. */
  data: string[] | string;
}

export function tensorToJson(t: HostTensor): TensorJson {
  if (t.dtype === T.STRING) return { dtype: t.dtype, dims: t.dims, data: [...(t.data as string[])] };
  return { dtype: t.dtype, dims: t.dims, data: Buffer.from(rawBytes(t)).toString('base64') };
}

export function tensorFromJson(j: TensorJson): HostTensor {
  if (j.dtype === T.STRING) return { dtype: j.dtype, dims: j.dims, data: j.data as string[] };
  const bytes = new Uint8Array(Buffer.from(j.data as string, 'base64'));
  const n = j.dims.reduce((a, b) => a * b, 1);
  const t = arrayFor(j.dtype, n) as TypedArray;
  new Uint8Array(t.buffer).set(bytes.subarray(0, t.byteLength));
  return { dtype: j.dtype, dims: j.dims, data: t };
}
