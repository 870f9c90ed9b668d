// Quantizers beyond the node suite: float8/float4 codes at the edges of the saturation tables
// (ties, subnormals, overflow with and without saturate, -0, NaN), per-axis int8 against
// onnxruntime-node, rounding half to even, and DynamicQuantizeLinear of an all-zero input.
import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { OnnxDataType } from '../onnx/index.js';
import { model, node, v } from '../../test/helpers/build.js';
import { expectSameAsOrt, ort, plain, runOn } from '../../test/helpers/ort.js';
import { decodeMiniFloatArray, encodeMiniFloatArray } from './helpers/minifloat.js';

const encode = (type: number, values: number[], saturate = true): number[] =>
  Array.from(encodeMiniFloatArray(mx.array(values), type, saturate).toTypedArray() as Uint8Array);

describe('float8 and float4 codes', () => {
  it('E4M3FN: ties to even, subnormals, -0, NaN, saturation', () => {
    const x = [448, 464, 480, -480, 2 ** -9, 2 ** -10, 1.5 * 2 ** -10, -0, NaN, Infinity, -Infinity, 1, 0.1];
    expect(encode(OnnxDataType.FLOAT8E4M3FN, x)).toEqual([0x7e, 0x7e, 0x7e, 0xfe, 0x01, 0x00, 0x01, 0x80, 0x7f, 0x7e, 0xfe, 0x38, 0x1d]);
    expect(encode(OnnxDataType.FLOAT8E4M3FN, [480, -480, Infinity, 448], false)).toEqual([0x7f, 0xff, 0x7f, 0x7e]);
  });
  it('E5M2: overflow to infinity only without saturation', () => {
    const x = [57344, 61440, Infinity, -Infinity, 2 ** -16, -1.25];
    expect(encode(OnnxDataType.FLOAT8E5M2, x)).toEqual([0x7b, 0x7b, 0x7b, 0xfb, 0x01, 0xbd]);
    expect(encode(OnnxDataType.FLOAT8E5M2, x, false)).toEqual([0x7b, 0x7c, 0x7c, 0xfc, 0x01, 0xbd]);
  });
  it('FNUZ formats: one zero, NaN is 0x80', () => {
    expect(encode(OnnxDataType.FLOAT8E4M3FNUZ, [-0, NaN, 240, 1000, -1000])).toEqual([0x00, 0x80, 0x7f, 0x7f, 0xff]);
    expect(encode(OnnxDataType.FLOAT8E4M3FNUZ, [1000, -Infinity], false)).toEqual([0x80, 0x80]);
    expect(encode(OnnxDataType.FLOAT8E5M2FNUZ, [-0, 57344, 1])).toEqual([0x00, 0x7f, 0x40]);
  });
  it('FLOAT4E2M1: the eight magnitudes, ties to even, saturation at 6', () => {
    expect(encode(OnnxDataType.FLOAT4E2M1, [0, 0.5, 1, 1.5, 2, 3, 4, 6, 5, 0.25, 0.75, 7, -3, -100])).toEqual([
      0, 1, 2, 3, 4, 5, 6, 7, 6, 0, 2, 7, 0xd, 0xf,
    ]);
  });
  for (const type of [
    OnnxDataType.FLOAT8E4M3FN,
    OnnxDataType.FLOAT8E4M3FNUZ,
    OnnxDataType.FLOAT8E5M2,
    OnnxDataType.FLOAT8E5M2FNUZ,
    OnnxDataType.FLOAT4E2M1,
  ]) {
    it(`every code of type ${type} decodes and encodes back to itself`, () => {
      const n = type === OnnxDataType.FLOAT4E2M1 ? 16 : 256;
      const unsignedZero = type === OnnxDataType.FLOAT8E4M3FNUZ || type === OnnxDataType.FLOAT8E5M2FNUZ;
      const codes = mx.array(
        Array.from({ length: n }, (_, i) => i),
        { dtype: 'uint8' },
      );
      const values = Array.from(decodeMiniFloatArray(codes, type).toTypedArray() as Float32Array);
      const back = encode(type, values, false);
      expect(values.length).toBe(n);
      values.forEach((val, i) => {
        if (Number.isNaN(val))
          expect(
            Number.isNaN(Array.from(decodeMiniFloatArray(mx.array([back[i]], { dtype: 'uint8' }), type).toTypedArray() as Float32Array)[0]),
          ).toBe(true);
        else if (unsignedZero || val !== 0) expect(back[i]).toBe(i);
      });
    });
  }
});

describe('integer QuantizeLinear / DequantizeLinear', () => {
  it('per-axis int8 on axis 0 round trip, against onnxruntime', async () => {
    const x = [-1.25, 0.5, 2.5, 3.5, -7, 100, -100, 0.03];
    const bytes = model({
      opsets: { '': 13 },
      inputs: [v('x', 'float32', [2, 4])],
      outputs: [v('q', 'int8'), v('y', 'float32')],
      initializers: [
        { name: 's', type: 'float32', dims: [2], values: [0.5, 0.25] },
        { name: 'z', type: 'int8', dims: [2], values: [1, -3] },
      ],
      nodes: [
        node('QuantizeLinear', ['x', 's', 'z'], ['q'], { attrs: { axis: 0 } }),
        node('DequantizeLinear', ['q', 's', 'z'], ['y'], { attrs: { axis: 0 } }),
      ],
    });
    const out = await expectSameAsOrt(bytes, { x: new ort.Tensor('float32', Float32Array.from(x), [2, 4]) }, { rtol: 0, atol: 0 });
    // Halves round to even: -1.25/0.5 = -2.5 -> -2, 2.5/0.5 = 5, 3.5/0.5 = 7; 100 saturates.
    expect(plain(out.q)).toEqual([-1, 2, 6, 8, -31, 127, -128, -3]);
  });
  it('blocked uint8 quantization (block_size 2 along axis 1), checked by hand', async () => {
    const bytes = model({
      opsets: { '': 21 },
      inputs: [v('x', 'float32', [2, 5])],
      outputs: [v('q', 'uint8')],
      initializers: [
        { name: 's', type: 'float32', dims: [2, 3], values: [1, 2, 4, 0.5, 0.25, 1] },
        { name: 'z', type: 'uint8', dims: [2, 3], values: [10, 20, 30, 40, 50, 60] },
      ],
      nodes: [node('QuantizeLinear', ['x', 's', 'z'], ['q'], { attrs: { axis: 1, block_size: 2 } })],
    });
    const x = [1, 2, 3, 4, 5, 1, 2, 3, 4, 5];
    const out = await runOn('mlx', bytes, { x: new ort.Tensor('float32', Float32Array.from(x), [2, 5]) });
    expect(plain(out.q)).toEqual([11, 12, 22, 22, 31, 42, 44, 62, 66, 65]);
  });
});

describe('DynamicQuantizeLinear', () => {
  it('an all-zero input gives zeros, scale 1 and zero point 0 without NaN, as onnxruntime does', async () => {
    const bytes = model({
      opsets: { '': 11 },
      inputs: [v('x', 'float32', [4])],
      outputs: [v('y', 'uint8'), v('s', 'float32'), v('z', 'uint8')],
      nodes: [node('DynamicQuantizeLinear', ['x'], ['y', 's', 'z'])],
    });
    const feeds = { x: new ort.Tensor('float32', new Float32Array(4), [4]) };
    const [out, ref] = [await runOn('mlx', bytes, feeds), await runOn('cpu', bytes, feeds)];
    expect([plain(out.y), plain(out.s), plain(out.z)]).toEqual([plain(ref.y), plain(ref.s), plain(ref.z)]);
    expect(plain(out.s)).toEqual([1]);
  });
});

describe('QuantizeLinear of a NaN quotient', () => {
  // NaN x, a NaN scale, 0 / 0: onnxruntime gives the type's lowest value (0 for unsigned types).
  for (const [zt, zv] of [
    ['uint8', 3],
    ['int8', -3],
    ['int16', 5],
    ['uint16', 5],
  ] as const) {
    for (const scale of [Number.NaN, 0, 0.5]) {
      it(`${zt}, scale ${scale}`, async () => {
        const bytes = model({
          opsets: { '': 21 },
          inputs: [v('x', 'float32', [6])],
          outputs: [v('y', zt)],
          initializers: [
            { name: 's', type: 'float32', dims: [], values: [scale] },
            { name: 'z', type: zt, dims: [], values: [zv] },
          ],
          nodes: [node('QuantizeLinear', ['x', 's', 'z'], ['y'])],
        });
        await expectSameAsOrt(bytes, { x: new ort.Tensor('float32', Float32Array.from([1, -2, 0, Number.NaN, Infinity, -Infinity]), [6]) });
      });
    }
  }
});

describe('DequantizeLinear of int32', () => {
  // x - zero_point in int32, wrapping as in onnxruntime, and exact past float32's 2^24.
  for (const zp of [-(2 ** 31), 2 ** 31 - 1, -7, 16777217]) {
    it(`zero point ${zp}`, async () => {
      const bytes = model({
        opsets: { '': 21 },
        inputs: [v('x', 'int32', [7])],
        outputs: [v('y', 'float32')],
        initializers: [
          { name: 's', type: 'float32', dims: [], values: [0.5] },
          { name: 'z', type: 'int32', dims: [], values: [zp] },
        ],
        nodes: [node('DequantizeLinear', ['x', 's', 'z'], ['y'])],
      });
      const x = new ort.Tensor('int32', Int32Array.from([1, -2, 0, 2 ** 31 - 1, -(2 ** 31), 16777219, 100000001]), [7]);
      await expectSameAsOrt(bytes, { x }, { rtol: 0, atol: 0 });
    });
  }
});
