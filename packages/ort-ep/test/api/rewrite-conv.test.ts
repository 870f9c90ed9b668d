// The conv-epilogue rewrite (src/plan/rewrite/conv-epilogue.ts): Conv -> [Add] -> [Relu | Clip] ->
// [HardSigmoid | HardSwish] becomes one mlx.fused::Conv whose bias, residual, clamp and activation
// run in one pass after the product.
// Each form of the product (conv_general's channels-last result, the 1x1 matmul and the depthwise
// kernel, both channels-first) is checked against onnxruntime-node and against the rewrites off,
// on the eager and the compiled path; chains the rewrite must leave alone stay as written.
import { describe, expect, it } from 'vitest';
import { prepareModel } from '../../src/plan/prepare.js';
import { model, node, v, type NodeSpec, type TensorSpec } from '../helpers/build.js';
import { expectSameAsOrt, f32, expectSameWithRewrites, seeded, type Feeds } from '../helpers/ort.js';
import { REWRITES } from '../../src/plan/rewrite/index.js';
import { seededInit as init } from '../helpers/rewrite-products.js';

// The layout pass (channels-last, its own test file) would take these convs over: off here, so
// that the fused Conv's own forms run.
const WITHOUT_LAYOUT = (Object.keys(REWRITES) as (keyof typeof REWRITES)[]).filter((n) => n !== 'channels-last');

const scalar = (name: string, value: number): TensorSpec => ({ name, type: 'float32', dims: [], values: [value] });

const X = [2, 8, 9, 7];

function build(nodes: NodeSpec[], inits: TensorSpec[], opts: { r?: number[]; outputs?: string[]; opset?: number } = {}) {
  return model({
    inputs: [v('x', 'float32', X), ...(opts.r ? [v('r', 'float32', opts.r)] : [])],
    outputs: (opts.outputs ?? ['y']).map((o) => v(o, 'float32')),
    nodes,
    initializers: inits,
    opsets: { '': opts.opset ?? 17 },
  });
}

const t = (dims: number[], seed: number, scale = 2) =>
  f32(
    seeded(
      dims.reduce((a, b) => a * b, 1),
      seed,
    ).map((x) => (x - 0.5) * scale),
    dims,
  );

async function expectRewrite(bytes: Uint8Array, counts: Record<string, number>, f: Feeds, tol = { rtol: 1e-5, atol: 1e-5 }) {
  expect(prepareModel(bytes, { rewrites: WITHOUT_LAYOUT }).rewrites).toEqual(counts);
  await expectSameAsOrt(bytes, f, tol);
  await expectSameWithRewrites(bytes, f, WITHOUT_LAYOUT, false, tol);
}

const conv3 = (inputs: string[], out: string, attrs: Record<string, number[] | { i: number }> = { pads: [1, 1, 1, 1] }): NodeSpec =>
  node('Conv', inputs, [out], { attrs: { kernel_shape: [3, 3], ...attrs } });

describe('Conv + Add + Relu/Clip -> one conv with a fused epilogue', () => {
  it('ResNet block end: 3x3 Conv (bias) + residual + Relu, and the residual first in the Add', async () => {
    const inits = [init('W', [8, 8, 3, 3], 1), init('B', [8], 2)];
    for (const add of [node('Add', ['c', 'r'], ['a']), node('Add', ['r', 'c'], ['a'])])
      await expectRewrite(
        build([conv3(['x', 'W', 'B'], 'c'), add, node('Relu', ['a'], ['y'])], inits, { r: X }),
        { 'conv-epilogue': 1 },
        {
          x: t(X, 3),
          r: t(X, 4),
        },
      );
  });

  it('strided 3x3 Conv + Relu without residual; 1x1 Conv (the matmul form) + residual + Relu', async () => {
    const s2 = build(
      [conv3(['x', 'W', 'B'], 'c', { pads: [1, 1, 1, 1], strides: [2, 2] }), node('Relu', ['c'], ['y'])],
      [init('W', [16, 8, 3, 3], 5), init('B', [16], 6)],
    );
    await expectRewrite(s2, { 'conv-epilogue': 1 }, { x: t(X, 7) });
    const pw = build(
      [
        node('Conv', ['x', 'W', 'B'], ['c'], { attrs: { kernel_shape: [1, 1] } }),
        node('Add', ['c', 'r'], ['a']),
        node('Relu', ['a'], ['y']),
      ],
      [init('W', [8, 8, 1, 1], 8), init('B', [8], 9)],
      { r: X },
    );
    await expectRewrite(pw, { 'conv-epilogue': 1 }, { x: t(X, 10), r: t(X, 11) });
  });

  it('depthwise Conv + Clip(0, 6) (MobileNet), Clip-6 attributes, and Conv + Add with a broadcast residual and no bias', async () => {
    const dw = build(
      [conv3(['x', 'W', 'B'], 'c', { pads: [1, 1, 1, 1], group: { i: 8 } }), node('Clip', ['c', 'lo', 'hi'], ['y'])],
      [init('W', [8, 1, 3, 3], 12), init('B', [8], 13), scalar('lo', 0), scalar('hi', 0.5)],
    );
    await expectRewrite(dw, { 'conv-epilogue': 1 }, { x: t(X, 14) });
    const clip6 = build(
      [conv3(['x', 'W'], 'c'), node('Clip', ['c'], ['y'], { attrs: { min: { f: -0.25 }, max: { f: 0.75 } } })],
      [init('W', [4, 8, 3, 3], 15)],
      {
        opset: 10,
      },
    );
    await expectRewrite(clip6, { 'conv-epilogue': 1 }, { x: t(X, 16) });
    const broad = build([conv3(['x', 'W'], 'c'), node('Add', ['c', 'r'], ['y'])], [init('W', [8, 8, 3, 3], 17)], { r: [1, 8, 1, 1] });
    await expectRewrite(broad, { 'conv-epilogue': 1 }, { x: t(X, 18), r: t([1, 8, 1, 1], 19) });
  });

  it('Conv + HardSwish / HardSigmoid (MobileNetV3): each product form, after a residual and a clamp, custom alpha and beta', async () => {
    const fused = (nodes: NodeSpec[], inits: TensorSpec[], f: Feeds, r?: number[]) =>
      expectRewrite(build(nodes, inits, { r }), { 'conv-epilogue': 1 }, f);
    // conv_general (channels-last result moved back in the epilogue's tiles), strided.
    await fused(
      [conv3(['x', 'W', 'B'], 'c', { pads: [1, 1, 1, 1], strides: [2, 2] }), node('HardSwish', ['c'], ['y'])],
      [init('W', [16, 8, 3, 3], 30), init('B', [16], 31)],
      { x: t(X, 32, 8) },
    );
    // The 1x1 matmul form (bias added in the epilogue), HardSigmoid with its own alpha and beta.
    await fused(
      [
        node('Conv', ['x', 'W', 'B'], ['c'], { attrs: { kernel_shape: [1, 1] } }),
        node('HardSigmoid', ['c'], ['y'], { attrs: { alpha: { f: 0.3 }, beta: { f: 0.4 } } }),
      ],
      [init('W', [12, 8, 1, 1], 33), init('B', [12], 34)],
      { x: t(X, 35, 8) },
    );
    // The depthwise kernel, HardSigmoid with ONNX's default alpha and beta.
    await fused(
      [conv3(['x', 'W', 'B'], 'c', { pads: [1, 1, 1, 1], group: { i: 8 } }), node('HardSigmoid', ['c'], ['y'])],
      [init('W', [8, 1, 3, 3], 36), init('B', [8], 37)],
      { x: t(X, 38, 8) },
    );
    // Residual, then a clamp, then the activation: all four in one node.
    await fused(
      [conv3(['x', 'W', 'B'], 'c'), node('Add', ['c', 'r'], ['a']), node('Relu', ['a'], ['a1']), node('HardSwish', ['a1'], ['y'])],
      [init('W', [8, 8, 3, 3], 39), init('B', [8], 40)],
      { x: t(X, 41, 8), r: t(X, 42, 8) },
      X,
    );
  });

  it('not when the Conv output is read elsewhere, nor for a Clip with bounds fed at run time', async () => {
    const inits = [init('W', [8, 8, 3, 3], 20), init('B', [8], 21)];
    await expectRewrite(
      build([conv3(['x', 'W', 'B'], 'c'), node('Relu', ['c'], ['y'])], inits, { outputs: ['y', 'c'] }),
      {},
      { x: t(X, 22) },
    );
    const fed = model({
      inputs: [v('x', 'float32', X), v('hi', 'float32', [])],
      outputs: [v('y', 'float32')],
      nodes: [conv3(['x', 'W', 'B'], 'c'), node('Clip', ['c', '', 'hi'], ['y'])],
      initializers: inits,
      opsets: { '': 17 },
    });
    await expectRewrite(fed, {}, { x: t(X, 23), hi: f32([0.3], []) });
  });
});
