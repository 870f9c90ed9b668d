// The fake-quantize pass (src/plan/rewrite/fake-quantize.ts): a QuantizeLinear read only by a
// DequantizeLinear of the same constant per-tensor scale and zero point becomes one
// mlx.fused::FakeQuantize node. Results are checked bit for bit against the same rewrites without
// the pass (eager and compiled), and against onnxruntime-node within one quantization step.
import { describe, expect, it } from 'vitest';
import { prepareModel } from '../../src/plan/prepare.js';
import { REWRITES } from '../../src/plan/rewrite/index.js';
import { model, node, v, type TensorSpec } from '../helpers/build.js';
import { expectSameAsOrt, expectSameWithRewrites, f32, seeded, type Feeds } from '../helpers/ort.js';

const WITHOUT = (Object.keys(REWRITES) as (keyof typeof REWRITES)[]).filter((n) => n !== 'fake-quantize');
const size = (dims: number[]) => dims.reduce((a, b) => a * b, 1);
const floats = (name: string, dims: number[], values: number[]): TensorSpec => ({ name, type: 'float32', dims, values });
const zp = (name: string, type: 'int8' | 'uint8' | 'int16' | 'uint16', value: number): TensorSpec => ({
  name,
  type,
  dims: [],
  values: [value],
});
const input = (dims: number[], seed: number, spread = 2) =>
  f32(
    seeded(size(dims), seed).map((x) => (x - 0.5) * spread),
    dims,
  );

async function expectSame(bytes: Uint8Array, f: Feeds, step: number) {
  // onnxruntime may round a tie the other way: one quantization step apart at most.
  await expectSameAsOrt(bytes, f, { rtol: 0, atol: step * 1.001 });
  await expectSameWithRewrites(bytes, f, true, WITHOUT, { rtol: 0, atol: 0 });
}

const ops = (bytes: Uint8Array) =>
  prepareModel(bytes).model.graph.nodes.map((n) => `${n.domain === 'mlx.fused' ? 'fused:' : ''}${n.opType}`);

describe('fake-quantize pass', () => {
  it('a QDQ conv chain (uint8 activations, int8 weights folded) fuses every activation pair', async () => {
    const X = [2, 1, 10, 9];
    const bytes = model({
      inputs: [v('x', 'float32', X)],
      outputs: [v('y', 'float32')],
      nodes: [
        node('QuantizeLinear', ['x', 'xs', 'xz'], ['xq']),
        node('DequantizeLinear', ['xq', 'xs', 'xz'], ['xd']),
        node('DequantizeLinear', ['wq', 'ws', 'wz'], ['w']),
        node('Conv', ['xd', 'w'], ['c'], { attrs: { kernel_shape: [3, 3], pads: [1, 1, 1, 1] } }),
        node('QuantizeLinear', ['c', 'cs', 'cz'], ['cq']),
        node('DequantizeLinear', ['cq', 'cs', 'cz'], ['cd']),
        node('MaxPool', ['cd'], ['p'], { attrs: { kernel_shape: [2, 2], strides: [2, 2] } }),
        // No zero point: uint8, zero point 0 (the Relu of a QDQ model).
        node('QuantizeLinear', ['p', 'cs'], ['pq']),
        node('DequantizeLinear', ['pq', 'cs'], ['y']),
      ],
      initializers: [
        floats('xs', [], [0.0078125]),
        zp('xz', 'uint8', 128),
        { name: 'wq', type: 'int8', dims: [4, 1, 3, 3], values: seeded(36, 3).map((x) => Math.round((x - 0.5) * 250)) },
        floats('ws', [], [0.004]),
        zp('wz', 'int8', 0),
        floats('cs', [], [0.011]),
        zp('cz', 'uint8', 0),
      ],
      opsets: { '': 19 },
    });
    expect(prepareModel(bytes).rewrites).toMatchObject({ 'fake-quantize': 3 });
    expect(ops(bytes).filter((o) => o.endsWith('QuantizeLinear'))).toEqual([]);
    await expectSame(bytes, { x: input(X, 7) }, 0.011);
  });

  it("a Gemm reading a Flatten's fake-quantized result is still a matrix product with bias (gemm rewrite)", async () => {
    const X = [3, 2, 2, 2];
    const bytes = model({
      inputs: [v('x', 'float32', X)],
      outputs: [v('y', 'float32')],
      nodes: [
        node('Flatten', ['x'], ['f']),
        node('QuantizeLinear', ['f', 's', 'z'], ['fq']),
        node('DequantizeLinear', ['fq', 's', 'z'], ['fd']),
        node('Gemm', ['fd', 'b', 'c'], ['y'], { attrs: { transB: { i: 1 } } }),
      ],
      initializers: [
        floats('s', [], [0.02]),
        zp('z', 'uint8', 128),
        floats(
          'b',
          [5, 8],
          seeded(40, 2).map((x) => x - 0.5),
        ),
        floats('c', [5], [0.1, -0.2, 0.3, 0, 0.5]),
      ],
      opsets: { '': 19 },
    });
    expect(prepareModel(bytes).rewrites).toMatchObject({ 'fake-quantize': 1, gemm: 1 });
    expect(ops(bytes)).toEqual(['Flatten', 'fused:FakeQuantize', 'fused:MatMulAdd']);
    await expectSameAsOrt(bytes, { x: input(X, 5) }, { rtol: 1e-5, atol: 1e-5 });
  });

  it('int8 and int16 zero points, out-of-range values saturating, a graph output', async () => {
    const X = [3, 5];
    const bytes = model({
      inputs: [v('x', 'float32', X)],
      outputs: [v('y', 'float32'), v('z', 'float32')],
      nodes: [
        node('QuantizeLinear', ['x', 's8', 'z8'], ['q8']),
        node('DequantizeLinear', ['q8', 's8b', 'z8b'], ['y']),
        node('QuantizeLinear', ['x', 's16', 'z16'], ['q16']),
        node('DequantizeLinear', ['q16', 's16', 'z16'], ['z']),
      ],
      initializers: [
        // Equal values under other names fuse too.
        floats('s8', [1], [0.05]),
        floats('s8b', [], [0.05]),
        zp('z8', 'int8', -5),
        zp('z8b', 'int8', -5),
        floats('s16', [], [0.0001]),
        zp('z16', 'int16', 1000),
      ],
      opsets: { '': 21 },
    });
    expect(prepareModel(bytes).rewrites).toMatchObject({ 'fake-quantize': 2 });
    // Spread 20: many values past int8's range at scale 0.05 and past int16's at 0.0001.
    await expectSame(bytes, { x: input(X, 9, 20) }, 0.05);
  });

  it('pairs that differ, a shared or visible quantized value, and per-axis scales stay as written', async () => {
    const X = [2, 3];
    const bytes = model({
      inputs: [v('x', 'float32', X)],
      outputs: [v('a', 'float32'), v('b', 'float32'), v('c', 'float32'), v('d', 'float32'), v('q2', 'uint8'), v('e', 'float32')],
      nodes: [
        // Another scale.
        node('QuantizeLinear', ['x', 's', 'z'], ['q0']),
        node('DequantizeLinear', ['q0', 's2', 'z'], ['a']),
        // Another zero point.
        node('QuantizeLinear', ['x', 's', 'z'], ['q1']),
        node('DequantizeLinear', ['q1', 's', 'z2'], ['b']),
        // The quantized value is also a graph output.
        node('QuantizeLinear', ['x', 's', 'z'], ['q2']),
        node('DequantizeLinear', ['q2', 's', 'z'], ['c']),
        // Per axis.
        node('QuantizeLinear', ['x', 'sa', 'za'], ['q3'], { attrs: { axis: { i: 1 } } }),
        node('DequantizeLinear', ['q3', 'sa', 'za'], ['d'], { attrs: { axis: { i: 1 } } }),
        // Read by two DequantizeLinears.
        node('QuantizeLinear', ['x', 's', 'z'], ['q4']),
        node('DequantizeLinear', ['q4', 's', 'z'], ['e0']),
        node('DequantizeLinear', ['q4', 's', 'z'], ['e1']),
        node('Add', ['e0', 'e1'], ['e']),
      ],
      initializers: [
        floats('s', [], [0.02]),
        floats('s2', [], [0.03]),
        zp('z', 'uint8', 100),
        zp('z2', 'uint8', 101),
        floats('sa', [3], [0.01, 0.02, 0.03]),
        { name: 'za', type: 'uint8', dims: [3], values: [1, 2, 3] },
      ],
      opsets: { '': 19 },
    });
    expect(prepareModel(bytes).rewrites['fake-quantize']).toBeUndefined();
    await expectSame(bytes, { x: input(X, 4) }, 0.03);
  });
});
