// The layout pass (src/plan/rewrite/channels-last.ts): convolutions with weights prepacked in panels
// of 32 output channels whose data stays channels-last between them. Each graph is checked against
// onnxruntime-node and against the same rewrites without the pass, eager and compiled; the layout
// flags it sets are checked on the prepared graph (which values stay channels-last, which go back).
import { describe, expect, it } from 'vitest';
import { prepareModel } from '../../src/plan/prepare.js';
import { REWRITES } from '../../src/plan/rewrite/index.js';
import { model, node, v, type NodeSpec, type TensorSpec } from '../helpers/build.js';
import { expectSameAsOrt, f32, plain, runMlxWith, seeded, type Feeds } from '../helpers/ort.js';

const WITHOUT = (Object.keys(REWRITES) as (keyof typeof REWRITES)[]).filter((n) => n !== 'channels-last');
const size = (dims: number[]) => dims.reduce((a, b) => a * b, 1);
const init = (name: string, dims: number[], seed: number, scale = 0.5): TensorSpec => ({
  name,
  type: 'float32',
  dims,
  values: seeded(size(dims), seed).map((x) => (x - 0.5) * scale),
});
const t = (dims: number[], seed: number) =>
  f32(
    seeded(size(dims), seed).map((x) => (x - 0.5) * 2),
    dims,
  );

/** The ConvChannelsLast nodes of the prepared graph, as 'x_last residual_last y_last' per node. */
function flags(bytes: Uint8Array): string[] {
  const g = prepareModel(bytes).model.graph;
  const int = (n: (typeof g.nodes)[number], k: string) => {
    const a = n.attributes.get(k);
    return a?.type === 'int' ? a.value : -1;
  };
  return g.nodes
    .filter((n) => n.opType === 'ConvChannelsLast')
    .map((n) => `${int(n, 'x_last')}${int(n, 'residual_last')}${int(n, 'y_last')}`);
}

async function expectLayout(bytes: Uint8Array, f: Feeds, tol = { rtol: 1e-4, atol: 1e-4 }) {
  await expectSameAsOrt(bytes, f, tol);
  for (const compiled of [false, true]) {
    const [on, off] = [
      await runMlxWith(bytes, f, { compiled, graphRewrites: true }),
      await runMlxWith(bytes, f, { compiled, graphRewrites: WITHOUT }),
    ];
    expect(Object.keys(on).sort()).toEqual(Object.keys(off).sort());
    for (const k of Object.keys(off)) {
      const [a, b] = [plain(on[k]), plain(off[k])];
      expect(on[k].dims).toEqual(off[k].dims);
      expect(a.length).toBe(b.length);
      a.forEach((x, i) =>
        expect(Math.abs(x - b[i]), `compiled ${compiled} ${k}[${i}]`).toBeLessThanOrEqual(tol.atol + tol.rtol * Math.abs(b[i])),
      );
    }
  }
}

const conv = (inputs: string[], out: string, k: number, attrs: Record<string, number[] | { i: number }> = {}): NodeSpec =>
  node('Conv', inputs, [out], { attrs: { kernel_shape: [k, k], pads: [k >> 1, k >> 1, k >> 1, k >> 1], ...attrs } });

describe('channels-last layout pass', () => {
  it('a ResNet stage: stem + MaxPool, bottleneck with a strided 1x1 downsample, residual + Relu, GlobalAveragePool', async () => {
    const X = [2, 3, 17, 15];
    const nodes: NodeSpec[] = [
      conv(['x', 'W0', 'B0'], 's', 3, { strides: [2, 2] }),
      node('Relu', ['s'], ['s1']),
      node('MaxPool', ['s1'], ['p'], { attrs: { kernel_shape: [3, 3], strides: [2, 2], pads: [1, 1, 1, 1] } }),
      conv(['p', 'W1', 'B1'], 'a', 1),
      node('Relu', ['a'], ['a1']),
      conv(['a1', 'W2', 'B2'], 'b', 3, { strides: [2, 2] }),
      node('Relu', ['b'], ['b1']),
      conv(['b1', 'W3', 'B3'], 'c', 1),
      conv(['p', 'Wd'], 'd', 1, { strides: [2, 2], pads: [0, 0, 0, 0] }),
      node('Add', ['c', 'd'], ['e']),
      node('Relu', ['e'], ['e1']),
      conv(['e1', 'W4', 'B4'], 'f', 3),
      node('Add', ['e1', 'f'], ['g']),
      node('Relu', ['g'], ['g1']),
      node('GlobalAveragePool', ['g1'], ['y']),
    ];
    const inits = [
      init('W0', [8, 3, 3, 3], 1),
      init('B0', [8], 2),
      init('W1', [4, 8, 1, 1], 3),
      init('B1', [4], 4),
      init('W2', [4, 4, 3, 3], 5),
      init('B2', [4], 6),
      init('W3', [16, 4, 1, 1], 7),
      init('B3', [16], 8),
      init('Wd', [16, 8, 1, 1], 9),
      init('W4', [16, 16, 3, 3], 10),
      init('B4', [16], 11),
    ];
    const bytes = model({ inputs: [v('x', 'float32', X)], outputs: [v('y', 'float32')], nodes, initializers: inits, opsets: { '': 17 } });
    expect(prepareModel(bytes).rewrites).toMatchObject({ 'channels-last': 6 });
    // The stem hands NCHW to MaxPool; a, b, the residual d and e1 stay channels-last; the last conv
    // (with e1 as its residual) hands NCHW to the pool.
    const f = flags(bytes);
    expect(f).toHaveLength(6);
    expect(f[0]).toBe('000');
    expect(f.filter((s) => s.endsWith('1'))).toHaveLength(4);
    expect(f.at(-1)).toBe('110');
    await expectLayout(bytes, { x: t(X, 12) });
  });

  it('values read by other ops or given as graph outputs go back to ONNX layout; grouped convs are left alone', async () => {
    const X = [1, 4, 9, 11];
    const nodes: NodeSpec[] = [
      conv(['x', 'W0'], 'a', 3),
      conv(['a', 'W1', 'B1'], 'b', 3, { dilations: [2, 2], pads: [2, 1, 2, 3] }),
      node('Transpose', ['b'], ['bt'], { attrs: { perm: [0, 1, 3, 2] } }),
      conv(['b', 'Wg'], 'c', 3, { group: { i: 2 } }),
      node('Conv', ['a', 'W2'], ['y2'], { attrs: { kernel_shape: [3, 3], auto_pad: 'SAME_UPPER', strides: [2, 2] } }),
    ];
    const bytes = model({
      inputs: [v('x', 'float32', X)],
      outputs: [v('bt', 'float32'), v('c', 'float32'), v('y2', 'float32'), v('a', 'float32')],
      nodes,
      initializers: [
        init('W0', [6, 4, 3, 3], 1),
        init('W1', [6, 6, 3, 3], 2),
        init('B1', [6], 3),
        init('Wg', [4, 3, 3, 3], 4),
        init('W2', [5, 6, 3, 3], 5),
      ],
      opsets: { '': 17 },
    });
    expect(prepareModel(bytes).rewrites).toMatchObject({ 'channels-last': 3 });
    // a is a graph output, b is read by a Transpose and a grouped conv: nothing stays channels-last.
    expect(flags(bytes)).toEqual(['000', '000', '000']);
    await expectLayout(bytes, { x: t(X, 6) });
  });

  it('a chain of 1x1 convolutions only is left as written (channels-first products, no layout moves)', async () => {
    const X = [1, 6, 5, 4];
    const bytes = model({
      inputs: [v('x', 'float32', X)],
      outputs: [v('y', 'float32')],
      nodes: [conv(['x', 'W0', 'B0'], 'a', 1), node('Relu', ['a'], ['a1']), conv(['a1', 'W1'], 'y', 1)],
      initializers: [init('W0', [8, 6, 1, 1], 1), init('B0', [8], 2), init('W1', [3, 8, 1, 1], 3)],
      opsets: { '': 17 },
    });
    expect(prepareModel(bytes).rewrites).toEqual({ 'conv-epilogue': 1 });
    await expectLayout(bytes, { x: t(X, 4) });
  });

  it('a residual that broadcasts the conv result to a larger shape of the same size as the result', async () => {
    // y [1, 2, 1, 3] + r [1, 1, 6, 1] -> [1, 2, 6, 3], kept channels-last for the next conv.
    const X = [1, 3, 1, 3];
    const bytes = model({
      inputs: [v('x', 'float32', X), v('r', 'float32', [1, 1, 6, 1])],
      outputs: [v('y', 'float32')],
      nodes: [conv(['x', 'W0', 'B0'], 'a', 3), node('Add', ['a', 'r'], ['e']), node('Relu', ['e'], ['e1']), conv(['e1', 'W1'], 'y', 3)],
      initializers: [init('W0', [2, 3, 3, 3], 1), init('B0', [2], 2), init('W1', [4, 2, 3, 3], 3)],
      opsets: { '': 17 },
    });
    expect(flags(bytes)).toEqual(['001', '100']);
    await expectLayout(bytes, { x: t(X, 4), r: t([1, 1, 6, 1], 5) });
  });

  it('1-D convolutions, a batch of 3, a residual that broadcasts, Clip bounds, and the pass off by name', async () => {
    const X = [3, 5, 13];
    const nodes: NodeSpec[] = [
      node('Conv', ['x', 'W0', 'B0'], ['a'], { attrs: { kernel_shape: [3], pads: [1, 1] } }),
      node('Conv', ['a', 'W1', 'B1'], ['b'], { attrs: { kernel_shape: [1] } }),
      node('Add', ['b', 'r'], ['e']),
      node('Clip', ['e', 'lo', 'hi'], ['y']),
    ];
    const bytes = model({
      inputs: [v('x', 'float32', X), v('r', 'float32', [1, 7, 1])],
      outputs: [v('y', 'float32')],
      nodes,
      initializers: [
        init('W0', [6, 5, 3], 1),
        init('B0', [6], 2),
        init('W1', [7, 6, 1], 3),
        init('B1', [7], 4),
        { name: 'lo', type: 'float32', dims: [], values: [-0.2] },
        { name: 'hi', type: 'float32', dims: [], values: [0.4] },
      ],
      opsets: { '': 17 },
    });
    expect(prepareModel(bytes).rewrites).toMatchObject({ 'conv-epilogue': 1, 'channels-last': 2 });
    expect(flags(bytes)).toEqual(['001', '100']);
    expect(prepareModel(bytes, { rewrites: WITHOUT }).rewrites['channels-last']).toBeUndefined();
    await expectLayout(bytes, { x: t(X, 5), r: t([1, 7, 1], 6) });
  });
});
