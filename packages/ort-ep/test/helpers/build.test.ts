// The test builder's own encodings, pinned to bytes worked out by hand from the ONNX and IEEE
// specs: every loader test trusts them, so they are checked here without the loader, and models
// are read back with onnx-buf's generated decoder.
import { fromBinary } from '@bufbuild/protobuf';
import { ModelProtoSchema, TensorProto_DataLocation } from 'onnx-buf';
import { describe, expect, it } from 'vitest';
import { ELEM, encodeRaw, model, node, pack4, proto, toBfloatBits, toHalfBits, v } from './build.js';
import { mapBytes, optionalBytes, sequenceBytes } from './data.js';

const bytes = (b: Uint8Array) => [...b];

describe('value encodings', () => {
  it('raw_data is little-endian for every width', () => {
    expect(bytes(encodeRaw('float32', [1, -2]))).toEqual([0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0]);
    expect(bytes(encodeRaw('float64', [1]))).toEqual([0, 0, 0, 0, 0, 0, 0xf0, 0x3f]);
    expect(bytes(encodeRaw('int16', [-2]))).toEqual([0xfe, 0xff]);
    expect(bytes(encodeRaw('uint16', [0x1234]))).toEqual([0x34, 0x12]);
    expect(bytes(encodeRaw('int32', [-2147483648]))).toEqual([0, 0, 0, 0x80]);
    expect(bytes(encodeRaw('uint32', [0xdeadbeef]))).toEqual([0xef, 0xbe, 0xad, 0xde]);
    expect(bytes(encodeRaw('int64', [-1n, 2]))).toEqual([...Array(8).fill(0xff), 2, 0, 0, 0, 0, 0, 0, 0]);
    expect(bytes(encodeRaw('uint64', [2n ** 64n - 2n]))).toEqual([0xfe, ...Array(7).fill(0xff)]);
    expect(bytes(encodeRaw('int8', [-1, 127]))).toEqual([0xff, 0x7f]);
    expect(bytes(encodeRaw('bool', [1, 0]))).toEqual([1, 0]);
    expect(bytes(encodeRaw('float16', [1, -2]))).toEqual([0x00, 0x3c, 0x00, 0xc0]);
    expect(bytes(encodeRaw('bfloat16', [1]))).toEqual([0x80, 0x3f]);
    expect(bytes(encodeRaw('complex64', [1, -2]))).toEqual(bytes(encodeRaw('float32', [1, -2])));
    expect(bytes(encodeRaw('int4', [-8, 7, -1, 0, 3]))).toEqual([0x78, 0x0f, 0x03]);
    expect(bytes(pack4([15, 0, 9]))).toEqual([0x0f, 0x09]);
    expect(() => encodeRaw('string', ['a' as never])).toThrow('no raw encoding for element type 8');
  });

  it('float16 bits round to nearest even, through subnormals, overflow, NaN and -0', () => {
    expect(toHalfBits(65504)).toBe(0x7bff);
    expect(toHalfBits(65520)).toBe(0x7c00); // halfway to the next binade: even is infinity
    expect(toHalfBits(1 + 2 ** -11)).toBe(0x3c00);
    expect(toHalfBits(1 + 3 * 2 ** -11)).toBe(0x3c02);
    expect(toHalfBits(2 ** -24)).toBe(0x0001);
    expect(toHalfBits(2 ** -25)).toBe(0x0000);
    expect(toHalfBits(3 * 2 ** -25)).toBe(0x0002);
    expect(toHalfBits(-Infinity)).toBe(0xfc00);
    expect(toHalfBits(NaN)).toBe(0x7e00);
    expect(toHalfBits(-0)).toBe(0x8000);
  });

  it('bfloat16 bits round to nearest even and keep NaN a NaN', () => {
    expect(toBfloatBits(1 + 2 ** -8)).toBe(0x3f80);
    expect(toBfloatBits(1 + 3 * 2 ** -8)).toBe(0x3f82);
    expect(toBfloatBits(NaN)).toBe(0x7fc0);
    expect(toBfloatBits(-2)).toBe(0xc000);
  });

  it('typed fields follow onnx.proto', () => {
    expect(proto.typedFields('float16', [1, -2])).toEqual({ int32Data: [0x3c00, 0xc000] });
    expect(proto.typedFields('uint32', [7])).toEqual({ uint64Data: [7n] });
    expect(proto.typedFields('int4', [-8, 7, 3])).toEqual({ int32Data: [0x78, 0x03] });
    expect(proto.typedFields('float64', [0.5])).toEqual({ doubleData: [0.5] });
  });
});

describe('onnx-data.proto values', () => {
  const t = Uint8Array.of(1, 2);
  it('sequences and optionals put values in the field of their kind', () => {
    expect(bytes(sequenceBytes('s', [t]))).toEqual([0x0a, 1, 0x73, 0x10, 1, 0x1a, 2, 1, 2]);
    expect(bytes(sequenceBytes('', [t], 'sequence'))).toEqual([0x10, 3, 0x2a, 2, 1, 2]);
    expect(bytes(optionalBytes('o'))).toEqual([0x0a, 1, 0x6f, 0x10, 0]);
    expect(bytes(optionalBytes('o', { kind: 'map', bytes: t }))).toEqual([0x0a, 1, 0x6f, 0x10, 4, 0x32, 2, 1, 2]);
  });
  it('maps: packed or unpacked int64 keys, string keys', () => {
    const varintMinus1 = [...Array(9).fill(0xff), 0x01];
    expect(bytes(mapBytes('m', ELEM.int64, [-1n, 7n], Uint8Array.of(9)))).toEqual([
      0x0a,
      1,
      0x6d,
      0x10,
      7,
      0x1a,
      11,
      ...varintMinus1,
      7,
      0x2a,
      1,
      9,
    ]);
    expect(bytes(mapBytes('', ELEM.int64, [-1n, 7n], Uint8Array.of(9), { packed: false }))).toEqual([
      0x10,
      7,
      0x18,
      ...varintMinus1,
      0x18,
      7,
      0x2a,
      1,
      9,
    ]);
    expect(bytes(mapBytes('', ELEM.string, ['a'], Uint8Array.of(9)))).toEqual([0x10, 8, 0x22, 1, 0x61, 0x2a, 1, 9]);
  });
});

describe('compact descriptions', () => {
  it('serialize to the ModelProto they describe', () => {
    const m = fromBinary(
      ModelProtoSchema,
      model({
        inputs: [v('x', 'float16', ['N', 2, null])],
        outputs: [v('y', 'float16')],
        initializers: [
          { name: 'w', type: 'float16', dims: [2], values: [1, -2] },
          { name: 'k', type: 'int64', dims: [1], values: [5n], form: 'typed' },
          { name: 'e', type: 'float32', dims: [2], external: { location: 'w.bin', offset: 8 } },
        ],
        nodes: [
          node('Mul', ['x', 'w'], ['y'], { name: 'mul', attrs: { i: 2, f: 0.5, is: [1, 2], s: 'a', r: { ref: 'outer', type: 'float' } } }),
        ],
      }),
    );
    expect([m.irVersion, m.producerName, m.opsetImport.map((o) => [o.domain, o.version])]).toEqual([9n, 'ort-ep tests', [['', 17n]]]);
    const g = m.graph!;
    const x = g.input[0].type!.value;
    expect(x.case === 'tensorType' && x.value.shape!.dim.map((d) => d.value.value ?? null)).toEqual(['N', 2n, null]);
    expect(g.output[0].type!.value.case === 'tensorType' && g.output[0].type!.value.value.shape).toBeUndefined();
    const [w, k, e] = g.initializer;
    expect([w.dataType, w.dims, bytes(w.rawData)]).toEqual([ELEM.float16, [2n], [0x00, 0x3c, 0x00, 0xc0]]);
    expect([k.int64Data, k.rawData.length]).toEqual([[5n], 0]);
    expect([e.dataLocation, e.externalData.map((kv) => [kv.key, kv.value])]).toEqual([
      TensorProto_DataLocation.EXTERNAL,
      [
        ['location', 'w.bin'],
        ['offset', '8'],
      ],
    ]);
    const a = Object.fromEntries(g.node[0].attribute.map((x) => [x.name, x]));
    expect([a.i.i, a.f.f, a.is.ints, new TextDecoder().decode(a.s.s), a.r.refAttrName]).toEqual([2n, 0.5, [1n, 2n], 'a', 'outer']);
  });
});
