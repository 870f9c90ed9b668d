// Every element type in every form a TensorProto may hold its values in: raw_data (also at odd
// offsets of the file), the typed field the spec assigns it, packed sub-byte values, and the
// errors for data that does not fit the dims.
import { describe, expect, it } from 'vitest';
import { encodeRaw, serializeTensor, tensor } from '../../test/helpers/proto.js';
import { OnnxDataType as T } from './ir.js';
import { decodeTensor, decodeTensorBytes, sparseToDense } from './tensor.js';
import { tensorCases as cases } from '../../test/helpers/tensor-cases.js';

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
      const bytes = serializeTensor(tensor('a_name_of_odd_length', c.dtype, c.dims, { rawData: c.raw }));
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
    expect(err(['w', T.FLOAT, [2, 3], { rawData: new Uint8Array(20) }])).toThrow(
      "tensor 'w': raw_data has 20 bytes, but float32 [2, 3] needs 24",
    );
    expect(err(['q', T.INT4, [5], { rawData: new Uint8Array(2) }])).toThrow('raw_data has 2 bytes, but int4 [5] needs 3');
  });
  it('a typed field of the wrong length, the wrong field, or none', () => {
    expect(err(['w', T.FLOAT, [2, 3], { floatData: [1, 2, 3, 4, 5] }])).toThrow(
      'float32 [2, 3] has 5 entries in float_data, 6 expected in float_data',
    );
    expect(err(['w', T.FLOAT, [2], { int32Data: [1, 2] }])).toThrow('(int32_data has 2)');
    expect(err(['w', T.INT64, [2]])).toThrow("tensor 'w': int64 [2] has no data, 2 expected in int64_data");
    expect(err(['c', T.COMPLEX64, [2], { floatData: [1, 2] }])).toThrow('4 expected in float_data');
    expect(err(['u', T.UINT4, [3], { int32Data: [1, 2, 3] }])).toThrow('2 expected in int32_data');
  });
  it('strings in raw_data, unknown or unset data types, bad dims, segments', () => {
    expect(err(['s', T.STRING, [1], { rawData: Uint8Array.of(65) }])).toThrow('string tensors cannot use raw_data');
    expect(err(['t', 0, [1], { floatData: [1] }])).toThrow("tensor 't': data_type is not set");
    expect(err(['t', 99, [1], { rawData: Uint8Array.of(1) }])).toThrow('unknown data_type 99');
    expect(() => decodeTensor(tensor('n', T.FLOAT, [-1], { floatData: [1] }))).toThrow('invalid dimension -1');
    expect(err(['g', T.FLOAT, [1], { floatData: [1], segment: { begin: 0n, end: 1n } }])).toThrow('segmented tensors');
  });
  it('huge dims fail before anything is allocated', () => {
    expect(err(['h', T.FLOAT, [100000, 100000]])).toThrow('float32 [100000, 100000] has no data');
    expect(err(['h', T.FLOAT, [1e6, 1e6, 1e6, 1e6], { rawData: new Uint8Array(4) }])).toThrow('more elements than can be addressed');
  });
});

describe('decodeTensorBytes: standalone TensorProto files', () => {
  const good = serializeTensor(tensor('input', T.FLOAT, [4], { rawData: encodeRaw(T.FLOAT, [1, 2, 3, 4]) }));
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
    const coords = sparseToDense({
      dims: [2, 3],
      values,
      indices: { dtype: T.INT64, dims: [3, 2], data: BigInt64Array.of(0n, 0n, 1n, 1n, 1n, 2n) },
    });
    expect(linear).toEqual({ dtype: T.FLOAT, dims: [2, 3], data: Float32Array.of(1, 0, 0, 0, 2, 3) });
    expect(coords).toEqual(linear);
  });
  it('indices outside the shape are refused', () => {
    expect(() =>
      sparseToDense({ dims: [2, 3], values, indices: { dtype: T.INT64, dims: [3], data: BigInt64Array.of(0n, 4n, 6n) } }),
    ).toThrow('index 6 of value 2 is outside the 6 elements');
    expect(() =>
      sparseToDense({ dims: [2, 3], values, indices: { dtype: T.INT64, dims: [3, 2], data: BigInt64Array.of(0n, 0n, 2n, 0n, 0n, 1n) } }),
    ).toThrow('outside dimension 0');
  });
});
