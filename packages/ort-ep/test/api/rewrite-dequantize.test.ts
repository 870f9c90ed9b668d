// The constant-dequantization pass (src/plan/rewrite/dequantize.ts): DequantizeLinear of constant
// integer weights and biases (QDQ models) folded into float32 initializers at plan time, so the
// later passes see constant weights (the layout pass packs the convolutions'). Each graph is checked
// against onnxruntime-node and against the same rewrites without the pass, eager and compiled.
import { describe, expect, it } from 'vitest';
import { prepareModel } from '../../src/plan/prepare.js';
import { REWRITES } from '../../src/plan/rewrite/index.js';
import { model, node, v, type TensorSpec } from '../helpers/build.js';
import { expectSameAsOrt, f32, expectSameWithRewrites, seeded, type Feeds } from '../helpers/ort.js';

const WITHOUT = (Object.keys(REWRITES) as (keyof typeof REWRITES)[]).filter((n) => n !== 'dequantize-constants');
const size = (dims: number[]) => dims.reduce((a, b) => a * b, 1);
const ints = (
  name: string,
  type: 'int8' | 'uint8' | 'int16' | 'int32',
  dims: number[],
  seed: number,
  lo: number,
  hi: number,
): TensorSpec => ({
  name,
  type,
  dims,
  values: seeded(size(dims), seed).map((x) => Math.round(lo + x * (hi - lo))),
});
const floats = (name: string, dims: number[], values: number[]): TensorSpec => ({ name, type: 'float32', dims, values });
const input = (dims: number[], seed: number) =>
  f32(
    seeded(size(dims), seed).map((x) => (x - 0.5) * 2),
    dims,
  );

async function expectSame(bytes: Uint8Array, f: Feeds, tol = { rtol: 1e-5, atol: 1e-5 }) {
  await expectSameAsOrt(bytes, f, tol);
  await expectSameWithRewrites(bytes, f, true, WITHOUT, tol);
}

describe('constant dequantization pass', () => {
  it('per-tensor and per-axis int8/uint8 conv weights and int32 biases fold; the convs get packed weights', async () => {
    const X = [2, 3, 9, 8];
    const bytes = model({
      inputs: [v('x', 'float32', X)],
      outputs: [v('y', 'float32'), v('z', 'float32')],
      nodes: [
        node('DequantizeLinear', ['w0q', 'w0s', 'w0z'], ['w0']),
        node('DequantizeLinear', ['b0q', 'b0s'], ['b0']),
        node('Conv', ['x', 'w0', 'b0'], ['a'], { attrs: { kernel_shape: [3, 3], pads: [1, 1, 1, 1] } }),
        node('Relu', ['a'], ['ar']),
        // Per output channel (axis 0), uint8 with per-channel zero points.
        node('DequantizeLinear', ['w1q', 'w1s', 'w1z'], ['w1'], { attrs: { axis: { i: 0 } } }),
        node('Conv', ['ar', 'w1'], ['y'], { attrs: { kernel_shape: [3, 3], strides: [2, 2], pads: [0, 1, 1, 0] } }),
        // Per axis along the last axis (negative axis), int16, no zero point, into a MatMul.
        node('DequantizeLinear', ['m1q', 'm1s'], ['m1'], { attrs: { axis: { i: -1 } } }),
        node('MatMul', ['ar', 'm1'], ['z']),
      ],
      initializers: [
        ints('w0q', 'int8', [6, 3, 3, 3], 1, -127, 127),
        floats('w0s', [], [0.0125]),
        { name: 'w0z', type: 'int8', dims: [], values: [3] },
        ints('b0q', 'int32', [6], 2, -40000, 40000),
        floats('b0s', [1], [0.00001]),
        ints('w1q', 'uint8', [5, 6, 3, 3], 3, 0, 255),
        floats('w1s', [5], [0.01, 0.002, 0.005, 0.02, 0.008]),
        ints('w1z', 'uint8', [5], 4, 100, 150),
        ints('m1q', 'int16', [8, 4], 5, -3000, 3000),
        floats('m1s', [4], [0.0001, 0.0003, 0.0002, 0.0004]),
      ],
      opsets: { '': 21 },
    });
    const prepared = prepareModel(bytes);
    expect(prepared.rewrites).toMatchObject({ 'dequantize-constants': 4 });
    const ops = prepared.model.graph.nodes.map((n) => n.opType);
    expect(ops).not.toContain('DequantizeLinear');
    expect(ops.filter((o) => o === 'ConvChannelsLast').length).toBe(2);
    await expectSame(bytes, { x: input(X, 7) });
  });

  it('a QDQ activation, a graph output, a blocked scale and a fed scale stay as written', async () => {
    const X = [1, 2, 4, 6];
    const bytes = model({
      inputs: [v('x', 'float32', X), v('s', 'float32', [])],
      outputs: [v('y', 'float32'), v('d', 'float32'), v('e', 'float32'), v('f', 'float32')],
      nodes: [
        node('QuantizeLinear', ['x', 'xs', 'xz'], ['xq']),
        node('DequantizeLinear', ['xq', 'xs', 'xz'], ['y']),
        // A graph output.
        node('DequantizeLinear', ['cq', 'xs'], ['d']),
        // Blocked along the last axis (opset 21).
        node('DequantizeLinear', ['bq', 'bs'], ['e'], { attrs: { axis: { i: 1 }, block_size: { i: 2 } } }),
        // The scale is a graph input.
        node('DequantizeLinear', ['cq', 's'], ['f0']),
        node('Add', ['f0', 'f0'], ['f']),
      ],
      initializers: [
        floats('xs', [], [0.02]),
        { name: 'xz', type: 'uint8', dims: [], values: [128] },
        ints('cq', 'int8', [3, 4], 8, -100, 100),
        ints('bq', 'int8', [3, 4], 9, -100, 100),
        floats('bs', [3, 2], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]),
      ],
      opsets: { '': 21 },
    });
    expect(prepareModel(bytes).rewrites['dequantize-constants']).toBeUndefined();
    await expectSame(bytes, { x: input(X, 3), s: f32([0.25], []) });
  });

  // x - zero point of int32 constants wraps in int32 as onnxruntime subtracts (fuzz seed 2401,
  // small-cnn-qdq with an edge zero point: the fold subtracted in float and differed).
  it('an int32 bias whose zero point makes x - zp wrap', async () => {
    const X = [1, 2, 3, 3];
    const bytes = model({
      inputs: [v('x', 'float32', X)],
      outputs: [v('y', 'float32')],
      nodes: [
        node('DequantizeLinear', ['bq', 'bs', 'bz'], ['b']),
        node('Conv', ['x', 'w', 'b'], ['y'], { attrs: { kernel_shape: [1, 1] } }),
      ],
      initializers: [
        { name: 'bq', type: 'int32', dims: [2], values: [2147483600, -2147483600] },
        floats('bs', [], [1e-9]),
        { name: 'bz', type: 'int32', dims: [], values: [-100] },
        floats('w', [2, 2, 1, 1], [0.5, -1, 2, 0.25]),
      ],
    });
    expect(prepareModel(bytes).rewrites).toMatchObject({ 'dequantize-constants': 1 });
    await expectSame(bytes, { x: input(X, 5) });
  });
});
