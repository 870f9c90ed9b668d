// Every element type in every form a TensorProto may hold its values in: raw_data (also at odd
// offsets of the file), the typed field the spec assigns it, packed sub-byte values, and the
// errors for data that does not fit the dims.
import { create, toBinary } from '@bufbuild/protobuf';
import { TensorProtoSchema } from 'onnx-buf';
import { describe, expect, it } from 'vitest';
import { OnnxDataType as T, type HostData } from './ir.js';
import { decodeTensor, decodeTensorBytes, sparseToDense } from './tensor.js';
import { tensor, type TensorFields } from './testing/builders.js';

/** Little-endian bytes written with DataView, independently of the loader's own conversion. */
function le(width: number, values: (number | bigint)[], set: (v: DataView, o: number, x: never) => void): Uint8Array<ArrayBuffer> {
  const b = new Uint8Array(width * values.length);
  const v = new DataView(b.buffer);
  values.forEach((x, i) => set(v, i * width, x as never));
  return b;
}
const f32 = (xs: number[]) => le(4, xs, (v, o, x) => v.setFloat32(o, x, true));
const f64 = (xs: number[]) => le(8, xs, (v, o, x) => v.setFloat64(o, x, true));
const i16 = (xs: number[]) => le(2, xs, (v, o, x) => v.setInt16(o, x, true));
const u16 = (xs: number[]) => le(2, xs, (v, o, x) => v.setUint16(o, x, true));
const i32 = (xs: number[]) => le(4, xs, (v, o, x) => v.setInt32(o, x, true));
const u32 = (xs: number[]) => le(4, xs, (v, o, x) => v.setUint32(o, x, true));
const i64 = (xs: bigint[]) => le(8, xs, (v, o, x) => v.setBigInt64(o, x, true));
const u64 = (xs: bigint[]) => le(8, xs, (v, o, x) => v.setBigUint64(o, x, true));

interface Case {
  dtype: T;
  dims: number[];
  /** The canonical host data the loader must produce. */
  want: HostData;
  raw?: Uint8Array<ArrayBuffer>;
  typed: TensorFields;
}

const cases: Record<string, Case> = {
  float32: { dtype: T.FLOAT, dims: [2, 2], want: Float32Array.of(1.5, -2, Infinity, 3.25), raw: f32([1.5, -2, Infinity, 3.25]), typed: { floatData: [1.5, -2, Infinity, 3.25] } },
  float64: { dtype: T.DOUBLE, dims: [3], want: Float64Array.of(Math.PI, -1e300, 0), raw: f64([Math.PI, -1e300, 0]), typed: { doubleData: [Math.PI, -1e300, 0] } },
  int8: { dtype: T.INT8, dims: [4], want: Int8Array.of(-128, 127, 0, -1), raw: Uint8Array.of(0x80, 0x7f, 0, 0xff), typed: { int32Data: [-128, 127, 0, -1] } },
  uint8: { dtype: T.UINT8, dims: [3], want: Uint8Array.of(0, 255, 7), raw: Uint8Array.of(0, 255, 7), typed: { int32Data: [0, 255, 7] } },
  int16: { dtype: T.INT16, dims: [3], want: Int16Array.of(-32768, 32767, -2), raw: i16([-32768, 32767, -2]), typed: { int32Data: [-32768, 32767, -2] } },
  uint16: { dtype: T.UINT16, dims: [3], want: Uint16Array.of(0, 65535, 1234), raw: u16([0, 65535, 1234]), typed: { int32Data: [0, 65535, 1234] } },
  int32: { dtype: T.INT32, dims: [3], want: Int32Array.of(-2147483648, 2147483647, 5), raw: i32([-2147483648, 2147483647, 5]), typed: { int32Data: [-2147483648, 2147483647, 5] } },
  uint32: { dtype: T.UINT32, dims: [3], want: Uint32Array.of(0, 4294967295, 17), raw: u32([0, 4294967295, 17]), typed: { uint64Data: [0n, 4294967295n, 17n] } },
  int64: { dtype: T.INT64, dims: [3], want: BigInt64Array.of(-(2n ** 63n), 2n ** 63n - 1n, 42n), raw: i64([-(2n ** 63n), 2n ** 63n - 1n, 42n]), typed: { int64Data: [-(2n ** 63n), 2n ** 63n - 1n, 42n] } },
  uint64: { dtype: T.UINT64, dims: [3], want: BigUint64Array.of(0n, 2n ** 64n - 1n, 9n), raw: u64([0n, 2n ** 64n - 1n, 9n]), typed: { uint64Data: [0n, 2n ** 64n - 1n, 9n] } },
  bool: { dtype: T.BOOL, dims: [3], want: Uint8Array.of(1, 0, 1), raw: Uint8Array.of(1, 0, 1), typed: { int32Data: [1, 0, 1] } },
  float16: { dtype: T.FLOAT16, dims: [3], want: Uint16Array.of(0x3c00, 0xc000, 0x7c00), raw: u16([0x3c00, 0xc000, 0x7c00]), typed: { int32Data: [0x3c00, 0xc000, 0x7c00] } },
  bfloat16: { dtype: T.BFLOAT16, dims: [3], want: Uint16Array.of(0x3f80, 0xc000, 0x7fc0), raw: u16([0x3f80, 0xc000, 0x7fc0]), typed: { int32Data: [0x3f80, 0xc000, 0x7fc0] } },
  float8e4m3fn: { dtype: T.FLOAT8E4M3FN, dims: [3], want: Uint8Array.of(0x38, 0xb8, 0x7e), raw: Uint8Array.of(0x38, 0xb8, 0x7e), typed: { int32Data: [0x38, 0xb8, 0x7e] } },
  float8e4m3fnuz: { dtype: T.FLOAT8E4M3FNUZ, dims: [2], want: Uint8Array.of(0x40, 0x80), raw: Uint8Array.of(0x40, 0x80), typed: { int32Data: [0x40, 0x80] } },
  float8e5m2: { dtype: T.FLOAT8E5M2, dims: [2], want: Uint8Array.of(0x3c, 0xfc), raw: Uint8Array.of(0x3c, 0xfc), typed: { int32Data: [0x3c, 0xfc] } },
  float8e5m2fnuz: { dtype: T.FLOAT8E5M2FNUZ, dims: [2], want: Uint8Array.of(0x40, 0x01), raw: Uint8Array.of(0x40, 0x01), typed: { int32Data: [0x40, 0x01] } },
  float8e8m0: { dtype: T.FLOAT8E8M0, dims: [3], want: Uint8Array.of(127, 0, 255), raw: Uint8Array.of(127, 0, 255), typed: { int32Data: [127, 0, 255] } },
  // Sub-byte types: first value in the low bits; an odd count leaves the last byte half used.
  int4: { dtype: T.INT4, dims: [5], want: Int8Array.of(-8, 7, -1, 0, 3), raw: Uint8Array.of(0x78, 0x0f, 0x03), typed: { int32Data: [0x78, 0x0f, 0x03] } },
  uint4: { dtype: T.UINT4, dims: [3], want: Uint8Array.of(15, 0, 9), raw: Uint8Array.of(0x0f, 0x09), typed: { int32Data: [0x0f, 0x09] } },
  float4e2m1: { dtype: T.FLOAT4E2M1, dims: [3], want: Uint8Array.of(0x1, 0xf, 0x7), raw: Uint8Array.of(0xf1, 0x07), typed: { int32Data: [0xf1, 0x07] } },
  uint2: { dtype: T.UINT2, dims: [5], want: Uint8Array.of(3, 0, 1, 2, 1), raw: Uint8Array.of(0x93, 0x01), typed: { int32Data: [0x93, 0x01] } },
  int2: { dtype: T.INT2, dims: [2, 2], want: Int8Array.of(-2, 1, -1, 0), raw: Uint8Array.of(0x36), typed: { int32Data: [0x36] } },
  complex64: { dtype: T.COMPLEX64, dims: [2], want: Float32Array.of(1, 2, -3, 4), raw: f32([1, 2, -3, 4]), typed: { floatData: [1, 2, -3, 4] } },
  complex128: { dtype: T.COMPLEX128, dims: [1], want: Float64Array.of(0.5, -0.25), raw: f64([0.5, -0.25]), typed: { doubleData: [0.5, -0.25] } },
  string: { dtype: T.STRING, dims: [3], want: ['a', 'héllo wörld', ''], typed: { stringData: ['a', 'héllo wörld', ''].map((s) => new TextEncoder().encode(s)) } },
};

describe('decodeTensor: every element type, every form', () => {
  for (const [name, c] of Object.entries(cases)) {
    it(`${name} from its typed field`, () => {
      const t = decodeTensor(tensor('x', c.dtype, c.dims, c.typed));
      expect(t.dtype).toBe(c.dtype);
      expect(t.dims).toEqual(c.dims);
      expect(t.data.constructor).toBe(c.want.constructor);
      expect(t.data).toEqual(c.want);
      expect(t.name).toBe('x');
    });
    if (!c.raw) continue;
    it(`${name} from raw_data, aligned and at an odd offset of the file`, () => {
      expect(decodeTensor(tensor('x', c.dtype, c.dims, { rawData: c.raw })).data).toEqual(c.want);
      const shifted = new Uint8Array(c.raw!.length + 3);
      shifted.set(c.raw!, 1);
      const odd = decodeTensor(tensor('x', c.dtype, c.dims, { rawData: shifted.subarray(1, 1 + c.raw!.length) }));
      expect(odd.data).toEqual(c.want);
      expect(odd.data.constructor).toBe(c.want.constructor);
      // Through serialization, raw_data is a view into the file at whatever offset it lies.
      const bytes = toBinary(TensorProtoSchema, tensor('a_name_of_odd_length', c.dtype, c.dims, { rawData: c.raw }));
      expect(decodeTensorBytes(bytes).data).toEqual(c.want);
    });
  }

  it('bool bytes other than 0 and 1 become 1', () => {
    expect(decodeTensor(tensor('b', T.BOOL, [3], { rawData: Uint8Array.of(2, 0, 255) })).data).toEqual(Uint8Array.of(1, 0, 1));
    expect(decodeTensor(tensor('b', T.BOOL, [2], { int32Data: [7, 0] })).data).toEqual(Uint8Array.of(1, 0));
  });

  it('scalars, empty tensors and the unnamed', () => {
    const s = decodeTensor(tensor('', T.INT64, [], { int64Data: [5n] }));
    expect(s).toEqual({ dtype: T.INT64, dims: [], data: BigInt64Array.of(5n) });
    const e = decodeTensor(tensor('e', T.FLOAT, [0, 3]));
    expect(e.dims).toEqual([0, 3]);
    expect(e.data).toEqual(new Float32Array(0));
    expect(decodeTensor(tensor('s', T.STRING, [0])).data).toEqual([]);
  });
});

describe('decodeTensor: data that does not fit the dims', () => {
  const err = (init: Parameters<typeof tensor>) => () => decodeTensor(tensor(...init));
  it('raw_data of the wrong length', () => {
    expect(err(['w', T.FLOAT, [2, 3], { rawData: new Uint8Array(20) }])).toThrow("tensor 'w': raw_data has 20 bytes, but float32 [2, 3] needs 24");
    expect(err(['q', T.INT4, [5], { rawData: new Uint8Array(2) }])).toThrow('raw_data has 2 bytes, but int4 [5] needs 3');
  });
  it('a typed field of the wrong length, the wrong field, or none', () => {
    expect(err(['w', T.FLOAT, [2, 3], { floatData: [1, 2, 3, 4, 5] }])).toThrow('float32 [2, 3] has 5 entries in float_data, 6 expected in float_data');
    expect(err(['w', T.FLOAT, [2], { int32Data: [1, 2] }])).toThrow('(int32_data has 2)');
    expect(err(['w', T.INT64, [2]])).toThrow("tensor 'w': int64 [2] has no data, 2 expected in int64_data");
    expect(err(['c', T.COMPLEX64, [2], { floatData: [1, 2] }])).toThrow('4 expected in float_data');
    expect(err(['u', T.UINT4, [3], { int32Data: [1, 2, 3] }])).toThrow('2 expected in int32_data');
  });
  it('strings in raw_data, unknown or unset data types, bad dims, segments', () => {
    expect(err(['s', T.STRING, [1], { rawData: Uint8Array.of(65) }])).toThrow('string tensors cannot use raw_data');
    expect(err(['t', 0, [1], { floatData: [1] }])).toThrow("tensor 't': data_type is not set");
    expect(err(['t', 99, [1], { rawData: Uint8Array.of(1) }])).toThrow('unknown data_type 99');
    expect(() => decodeTensor(create(TensorProtoSchema, { name: 'n', dataType: T.FLOAT, dims: [-1n], floatData: [1] }))).toThrow('invalid dimension -1');
    expect(err(['g', T.FLOAT, [1], { floatData: [1], segment: { begin: 0n, end: 1n } }])).toThrow('segmented tensors');
  });
  it('huge dims fail before anything is allocated', () => {
    expect(err(['h', T.FLOAT, [100000, 100000]])).toThrow('float32 [100000, 100000] has no data');
    expect(err(['h', T.FLOAT, [1e6, 1e6, 1e6, 1e6], { rawData: new Uint8Array(4) }])).toThrow('more elements than can be addressed');
  });
});

describe('decodeTensorBytes: standalone TensorProto files', () => {
  const good = toBinary(TensorProtoSchema, tensor('input', T.FLOAT, [4], { rawData: f32([1, 2, 3, 4]) }));
  it('decodes and keeps the name', () => {
    expect(decodeTensorBytes(good)).toEqual({ dtype: T.FLOAT, dims: [4], data: Float32Array.of(1, 2, 3, 4), name: 'input' });
  });
  it('truncated and garbage bytes give clear errors', () => {
    expect(() => decodeTensorBytes(good.subarray(0, good.length - 5))).toThrow(/^truncated serialized TensorProto/);
    expect(() => decodeTensorBytes(new TextEncoder().encode('#!/bin/sh\necho not a tensor\n'))).toThrow(/^not a serialized TensorProto: /);
  });
});

describe('sparseToDense', () => {
  const values = { dtype: T.FLOAT, dims: [3], data: Float32Array.of(1, 2, 3) };
  it('linear and coordinate indices give the same dense tensor', () => {
    const linear = sparseToDense({ dims: [2, 3], values, indices: { dtype: T.INT64, dims: [3], data: BigInt64Array.of(0n, 4n, 5n) } });
    const coords = sparseToDense({ dims: [2, 3], values, indices: { dtype: T.INT64, dims: [3, 2], data: BigInt64Array.of(0n, 0n, 1n, 1n, 1n, 2n) } });
    expect(linear).toEqual({ dtype: T.FLOAT, dims: [2, 3], data: Float32Array.of(1, 0, 0, 0, 2, 3) });
    expect(coords).toEqual(linear);
  });
  it('indices outside the shape are refused', () => {
    expect(() => sparseToDense({ dims: [2, 3], values, indices: { dtype: T.INT64, dims: [3], data: BigInt64Array.of(0n, 4n, 6n) } })).toThrow('index 6 of value 2 is outside the 6 elements');
    expect(() => sparseToDense({ dims: [2, 3], values, indices: { dtype: T.INT64, dims: [3, 2], data: BigInt64Array.of(0n, 0n, 2n, 0n, 0n, 1n) } })).toThrow('outside dimension 0');
  });
});
