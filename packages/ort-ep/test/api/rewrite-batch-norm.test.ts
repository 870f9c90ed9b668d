// The Conv -> BatchNormalization fold (src/plan/rewrite/conv-batch-norm.ts): inference
// BatchNormalization after a Conv with constant weights becomes the Conv's weights and bias, as
// onnxruntime's ConvBNFusion folds it. Each graph is checked against onnxruntime-node and against
// the same rewrites without the pass, eager and compiled; the cases the pass must leave alone keep
// their BatchNormalization.
import { describe, expect, it } from 'vitest';
import { prepareModel } from '../../src/plan/prepare.js';
import { REWRITES } from '../../src/plan/rewrite/index.js';
import { model, node, v, type TensorSpec } from '../helpers/build.js';
import { expectSameAsOrt, expectSameWithRewrites, f32, seeded, type Feeds } from '../helpers/ort.js';

const WITHOUT = (Object.keys(REWRITES) as (keyof typeof REWRITES)[]).filter((n) => n !== 'conv-batch-norm');
const size = (dims: number[]) => dims.reduce((a, b) => a * b, 1);
const floats = (name: string, dims: number[], seed: number, lo = -1, hi = 1): TensorSpec => ({
  name,
  type: 'float32',
  dims,
  values: seeded(size(dims), seed).map((x) => lo + ((x + 1) / 2) * (hi - lo)),
});
const input = (dims: number[], seed: number) => f32(seeded(size(dims), seed), dims);
const stats = (p: string, c: number, seed: number): TensorSpec[] => [
  floats(`${p}s`, [c], seed, 0.5, 2),
  floats(`${p}b`, [c], seed + 1),
  floats(`${p}m`, [c], seed + 2),
  floats(`${p}v`, [c], seed + 3, 0.1, 3),
];

async function expectSame(bytes: Uint8Array, f: Feeds, tol = { rtol: 1e-4, atol: 1e-5 }) {
  await expectSameAsOrt(bytes, f, tol);
  await expectSameWithRewrites(bytes, f, true, WITHOUT, tol);
}

describe('Conv -> BatchNormalization fold', () => {
  it('with and without a conv bias, grouped, followed by an activation, a non-default epsilon', async () => {
    const X = [2, 4, 7, 6];
    const bytes = model({
      inputs: [v('x', 'float32', X)],
      outputs: [v('y', 'float32'), v('z', 'float32')],
      nodes: [
        node('Conv', ['x', 'w0', 'c0'], ['a'], { attrs: { kernel_shape: [3, 3], pads: [1, 1, 1, 1] } }),
        node('BatchNormalization', ['a', 'n0s', 'n0b', 'n0m', 'n0v'], ['an'], { attrs: { epsilon: 1e-3 } }),
        node('HardSwish', ['an'], ['ah']),
        node('Conv', ['ah', 'w1'], ['b'], { attrs: { kernel_shape: [3, 3], group: 6, strides: [2, 2] } }),
        node('BatchNormalization', ['b', 'n1s', 'n1b', 'n1m', 'n1v'], ['y']),
        node('Conv', ['ah', 'w2'], ['c'], { attrs: { kernel_shape: [1, 1] } }),
        node('BatchNormalization', ['c', 'n2s', 'n2b', 'n2m', 'n2v'], ['cn']),
        node('Relu', ['cn'], ['z']),
      ],
      initializers: [
        floats('w0', [6, 4, 3, 3], 1),
        floats('c0', [6], 2),
        floats('w1', [6, 1, 3, 3], 3),
        floats('w2', [5, 6, 1, 1], 4),
        ...stats('n0', 6, 10),
        ...stats('n1', 6, 20),
        ...stats('n2', 5, 30),
      ],
    });
    const prepared = prepareModel(bytes);
    expect(prepared.rewrites).toMatchObject({ 'conv-batch-norm': 3 });
    expect(prepared.model.graph.nodes.map((n) => n.opType)).not.toContain('BatchNormalization');
    await expectSame(bytes, { x: input(X, 7) });
  });

  it('a Conv whose output is also a graph output, and fed statistics, keep their BatchNormalization', async () => {
    const X = [1, 3, 5, 5];
    const bytes = model({
      opsets: { '': 15 },
      inputs: [v('x', 'float32', X), v('fm', 'float32', [4])],
      outputs: [v('y', 'float32'), v('a', 'float32'), v('z', 'float32')],
      nodes: [
        // The Conv's output is also a graph output.
        node('Conv', ['x', 'w0'], ['a'], { attrs: { kernel_shape: [3, 3] } }),
        node('BatchNormalization', ['a', 'n0s', 'n0b', 'n0m', 'n0v'], ['y']),
        // The mean is a feed.
        node('Conv', ['x', 'w1'], ['b'], { attrs: { kernel_shape: [1, 1] } }),
        node('BatchNormalization', ['b', 'n1s', 'n1b', 'fm', 'n1v'], ['z']),
      ],
      initializers: [floats('w0', [4, 3, 3, 3], 1), floats('w1', [4, 3, 1, 1], 2), ...stats('n0', 4, 10), ...stats('n1', 4, 20)],
    });
    expect(prepareModel(bytes).rewrites['conv-batch-norm']).toBeUndefined();
    await expectSame(bytes, { x: input(X, 3), fm: f32([0.1, -0.2, 0.3, 0], [4]) });
  });
});
