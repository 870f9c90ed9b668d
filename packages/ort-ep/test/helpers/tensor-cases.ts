// One sample tensor per element type, in the canonical host layout and in both serialized forms
// (raw_data, from the test builder's little-endian encoder or as literal bytes, and the typed
// field; float16 and bfloat16 as their bits), with how onnxruntime reads it back where it can
// (Identity, or Cast for types its Tensor lacks).
import { encodeRaw, type TensorFields } from './proto.js';
import { OnnxDataType as T, type HostData } from '../../src/onnx/ir.js';

export interface TensorCase {
  dtype: T;
  dims: number[];
  /** The canonical host data the loader must produce. */
  want: HostData;
  raw?: Uint8Array<ArrayBuffer>;
  typed: TensorFields;
  /**
   * How onnxruntime-node returns it: unchanged through Identity, or through Cast to `to` where its
   * Tensor has no such type, with `means` the values the stored bits stand for. Absent: it cannot.
   */
  ort?: { op: 'Identity' } | { op: 'Cast'; to: T; means: ArrayLike<number> };
}

const identity = { op: 'Identity' } as const;
const cast = (to: T, means: number[]) => ({ op: 'Cast' as const, to, means });

export const tensorCases: Record<string, TensorCase> = {
  float32: {
    dtype: T.FLOAT,
    dims: [2, 2],
    want: Float32Array.of(1.5, -2, Infinity, 3.25),
    raw: encodeRaw(T.FLOAT, [1.5, -2, Infinity, 3.25]),
    typed: { floatData: [1.5, -2, Infinity, 3.25] },
    ort: identity,
  },
  float64: {
    dtype: T.DOUBLE,
    dims: [3],
    want: Float64Array.of(Math.PI, -1e300, 0),
    raw: encodeRaw(T.DOUBLE, [Math.PI, -1e300, 0]),
    typed: { doubleData: [Math.PI, -1e300, 0] },
    ort: identity,
  },
  int8: {
    dtype: T.INT8,
    dims: [4],
    want: Int8Array.of(-128, 127, 0, -1),
    raw: Uint8Array.of(0x80, 0x7f, 0, 0xff),
    typed: { int32Data: [-128, 127, 0, -1] },
    ort: identity,
  },
  uint8: {
    dtype: T.UINT8,
    dims: [3],
    want: Uint8Array.of(0, 255, 7),
    raw: Uint8Array.of(0, 255, 7),
    typed: { int32Data: [0, 255, 7] },
    ort: identity,
  },
  int16: {
    dtype: T.INT16,
    dims: [3],
    want: Int16Array.of(-32768, 32767, -2),
    raw: encodeRaw(T.INT16, [-32768, 32767, -2]),
    typed: { int32Data: [-32768, 32767, -2] },
    ort: identity,
  },
  uint16: {
    dtype: T.UINT16,
    dims: [3],
    want: Uint16Array.of(0, 65535, 1234),
    raw: encodeRaw(T.UINT16, [0, 65535, 1234]),
    typed: { int32Data: [0, 65535, 1234] },
    ort: identity,
  },
  int32: {
    dtype: T.INT32,
    dims: [3],
    want: Int32Array.of(-2147483648, 2147483647, 5),
    raw: encodeRaw(T.INT32, [-2147483648, 2147483647, 5]),
    typed: { int32Data: [-2147483648, 2147483647, 5] },
    ort: identity,
  },
  uint32: {
    dtype: T.UINT32,
    dims: [3],
    want: Uint32Array.of(0, 4294967295, 17),
    raw: encodeRaw(T.UINT32, [0, 4294967295, 17]),
    typed: { uint64Data: [0n, 4294967295n, 17n] },
    ort: identity,
  },
  int64: {
    dtype: T.INT64,
    dims: [3],
    want: BigInt64Array.of(-(2n ** 63n), 2n ** 63n - 1n, 42n),
    raw: encodeRaw(T.INT64, [-(2n ** 63n), 2n ** 63n - 1n, 42n]),
    typed: { int64Data: [-(2n ** 63n), 2n ** 63n - 1n, 42n] },
    ort: identity,
  },
  uint64: {
    dtype: T.UINT64,
    dims: [3],
    want: BigUint64Array.of(0n, 2n ** 64n - 1n, 9n),
    raw: encodeRaw(T.UINT64, [0n, 2n ** 64n - 1n, 9n]),
    typed: { uint64Data: [0n, 2n ** 64n - 1n, 9n] },
    ort: identity,
  },
  bool: {
    dtype: T.BOOL,
    dims: [3],
    want: Uint8Array.of(1, 0, 1),
    raw: Uint8Array.of(1, 0, 1),
    typed: { int32Data: [1, 0, 1] },
    ort: identity,
  },
  float16: {
    dtype: T.FLOAT16,
    dims: [3],
    want: Uint16Array.of(0x3c00, 0xc000, 0x7c00),
    raw: encodeRaw(T.UINT16, [0x3c00, 0xc000, 0x7c00]),
    typed: { int32Data: [0x3c00, 0xc000, 0x7c00] },
    ort: identity,
  },
  bfloat16: {
    dtype: T.BFLOAT16,
    dims: [3],
    want: Uint16Array.of(0x3f80, 0xc000, 0x7fc0),
    raw: encodeRaw(T.UINT16, [0x3f80, 0xc000, 0x7fc0]),
    typed: { int32Data: [0x3f80, 0xc000, 0x7fc0] },
    ort: cast(T.FLOAT, [1, -2, NaN]),
  },
  float8e4m3fn: {
    dtype: T.FLOAT8E4M3FN,
    dims: [3],
    want: Uint8Array.of(0x38, 0xb8, 0x7e),
    raw: Uint8Array.of(0x38, 0xb8, 0x7e),
    typed: { int32Data: [0x38, 0xb8, 0x7e] },
    ort: cast(T.FLOAT, [1, -1, 448]),
  },
  float8e4m3fnuz: {
    dtype: T.FLOAT8E4M3FNUZ,
    dims: [2],
    want: Uint8Array.of(0x40, 0x80),
    raw: Uint8Array.of(0x40, 0x80),
    typed: { int32Data: [0x40, 0x80] },
    ort: cast(T.FLOAT, [1, NaN]),
  },
  float8e5m2: {
    dtype: T.FLOAT8E5M2,
    dims: [2],
    want: Uint8Array.of(0x3c, 0xfc),
    raw: Uint8Array.of(0x3c, 0xfc),
    typed: { int32Data: [0x3c, 0xfc] },
    ort: cast(T.FLOAT, [1, -Infinity]),
  },
  float8e5m2fnuz: {
    dtype: T.FLOAT8E5M2FNUZ,
    dims: [2],
    want: Uint8Array.of(0x40, 0x01),
    raw: Uint8Array.of(0x40, 0x01),
    typed: { int32Data: [0x40, 0x01] },
    ort: cast(T.FLOAT, [1, 2 ** -17]),
  },
  float8e8m0: {
    dtype: T.FLOAT8E8M0,
    dims: [3],
    want: Uint8Array.of(127, 0, 255),
    raw: Uint8Array.of(127, 0, 255),
    typed: { int32Data: [127, 0, 255] },
  },
  // Sub-byte types: first value in the low bits; an odd count leaves the last byte half used.
  int4: {
    dtype: T.INT4,
    dims: [5],
    want: Int8Array.of(-8, 7, -1, 0, 3),
    raw: Uint8Array.of(0x78, 0x0f, 0x03),
    typed: { int32Data: [0x78, 0x0f, 0x03] },
    ort: cast(T.INT8, [-8, 7, -1, 0, 3]),
  },
  uint4: {
    dtype: T.UINT4,
    dims: [3],
    want: Uint8Array.of(15, 0, 9),
    raw: Uint8Array.of(0x0f, 0x09),
    typed: { int32Data: [0x0f, 0x09] },
    ort: cast(T.UINT8, [15, 0, 9]),
  },
  float4e2m1: {
    dtype: T.FLOAT4E2M1,
    dims: [3],
    want: Uint8Array.of(0x1, 0xf, 0x7),
    raw: Uint8Array.of(0xf1, 0x07),
    typed: { int32Data: [0xf1, 0x07] },
  },
  uint2: {
    dtype: T.UINT2,
    dims: [5],
    want: Uint8Array.of(3, 0, 1, 2, 1),
    raw: Uint8Array.of(0x93, 0x01),
    typed: { int32Data: [0x93, 0x01] },
    ort: cast(T.INT8, [3, 0, 1, 2, 1]),
  },
  int2: {
    dtype: T.INT2,
    dims: [2, 2],
    want: Int8Array.of(-2, 1, -1, 0),
    raw: Uint8Array.of(0x36),
    typed: { int32Data: [0x36] },
    ort: cast(T.INT8, [-2, 1, -1, 0]),
  },
  complex64: {
    dtype: T.COMPLEX64,
    dims: [2],
    want: Float32Array.of(1, 2, -3, 4),
    raw: encodeRaw(T.FLOAT, [1, 2, -3, 4]),
    typed: { floatData: [1, 2, -3, 4] },
  },
  complex128: {
    dtype: T.COMPLEX128,
    dims: [1],
    want: Float64Array.of(0.5, -0.25),
    raw: encodeRaw(T.DOUBLE, [0.5, -0.25]),
    typed: { doubleData: [0.5, -0.25] },
  },
  string: {
    dtype: T.STRING,
    dims: [3],
    want: ['a', 'héllo wörld', ''],
    typed: { stringData: ['a', 'héllo wörld', ''].map((s) => new TextEncoder().encode(s)) },
    ort: identity,
  },
};
