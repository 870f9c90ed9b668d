// Shape, creation and layout ops against onnxruntime-node's CPU provider, each case twice: as fed
// (small host tensors take the ops' host() paths, as shape math does) and with the data inputs
// first moved to MLX through a no-op Clip (the run() paths). Cases are the edges the node suite
// does not reach: opset-specific forms, negative and clamped values, uneven splits, crops.
import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { planGraph } from '../plan/plan.js';
import { Env, RunState } from '../execute/env.js';
import { GraphProgram } from '../execute/run.js';
import { ConstantStore } from '../runtime/uploads.js';
import { decodeModel } from '../onnx/index.js';
import { defaultRegistry } from './index.js';
import { model, node, v } from '../../test/helpers/build.js';
import { ort, runOn } from '../../test/helpers/ort.js';

import { f, ints, same } from '../../test/helpers/both-paths.js';

describe('Reshape, Squeeze, Unsqueeze, Flatten', () => {
  it('Reshape: 0 copies a dim, -1 is inferred', () => same('Reshape', [f('x', [2, 3, 4]), ints('s', [0, -1, 2])]));
  it('Reshape allowzero keeps a 0 as an empty dim', () =>
    same('Reshape', [f('x', [0, 3]), ints('s', [3, 0])], { attrs: { allowzero: 1 } }));
  it('Reshape opset 1 takes the shape attribute', () => same('Reshape', [f('x', [2, 6])], { opset: 1, attrs: { shape: [3, 4] } }));
  it('Squeeze opset 11 axes attribute, negative', () => same('Squeeze', [f('x', [1, 3, 1, 2])], { opset: 11, attrs: { axes: [-2, 0] } }));
  it('Squeeze opset 13 without axes drops every 1', () => same('Squeeze', [f('x', [1, 3, 1, 2])], { opset: 13 }));
  it('Unsqueeze opset 13, unsorted negative axes', () => same('Unsqueeze', [f('x', [3, 2]), ints('a', [-1, 0])], { opset: 13 }));
  it('Unsqueeze opset 11 axes attribute', () => same('Unsqueeze', [f('x', [3, 2])], { opset: 11, attrs: { axes: [1, 3] } }));
  for (const axis of [0, 2, -1, 3]) it(`Flatten axis ${axis}`, () => same('Flatten', [f('x', [2, 3, 2])], { attrs: { axis } }));
});

describe('Transpose, Concat, Split', () => {
  it('Transpose default reverses', () => same('Transpose', [f('x', [2, 3, 4])]));
  it('Transpose perm', () => same('Transpose', [f('x', [2, 3, 4])], { attrs: { perm: [1, 2, 0] } }));
  it('Concat of three, negative axis', () =>
    same('Concat', [f('a', [2, 1, 3]), f('b', [2, 2, 3], 2), f('c', [2, 0, 3])], { attrs: { axis: -2 } }));
  it('Concat of empty inputs only', () => same('Concat', [f('a', [0, 3]), f('b', [0, 3])], { attrs: { axis: 0 } }));
  it('Concat of int64 shape pieces', () =>
    same(
      'Concat',
      [
        { ...ints('a', [1, 2]), arg: false },
        { ...ints('b', [7]), arg: false },
      ],
      { attrs: { axis: 0 } },
    ));
  it('Split opset 11: split attribute', () =>
    same('Split', [f('x', [6, 2])], { opset: 11, attrs: { split: [1, 5] }, out: ['float32', 'float32'] }));
  it('Split opset 13: split input with a zero part', () =>
    same('Split', [f('x', [2, 5]), ints('s', [2, 0, 3])], { opset: 13, attrs: { axis: 1 }, out: ['float32', 'float32', 'float32'] }));
  it('Split opset 18: num_outputs, uneven', () =>
    same('Split', [f('x', [7, 2])], { attrs: { num_outputs: 3 }, out: ['float32', 'float32', 'float32'] }));
  it('Split equal parts from the output count, negative axis', () =>
    same('Split', [f('x', [2, 6])], { opset: 13, attrs: { axis: -1 }, out: ['float32', 'float32'] }));
});

describe('Expand, Tile, Shape, Size', () => {
  it('Expand broadcasts both ways', () => same('Expand', [f('x', [3, 1]), ints('s', [2, 1, 4])]));
  it('Expand to a smaller shape keeps the input dims', () => same('Expand', [f('x', [2, 3]), ints('s', [1, 1])]));
  it('Tile', () => same('Tile', [f('x', [2, 3]), ints('r', [2, 1])]));
  it('Tile past the host size limit', () => same('Tile', [f('x', [40, 30]), ints('r', [3, 2])]));
  it('Shape start/end, clamped', () => same('Shape', [f('x', [2, 3, 4, 5])], { opset: 15, attrs: { start: -3, end: 10 }, out: ['int64'] }));
  it('Size', () => same('Size', [f('x', [2, 3, 4])], { out: ['int64'] }));
});

describe('creation ops', () => {
  it('ConstantOfShape int64 value', () =>
    same('ConstantOfShape', [ints('s', [2, 3])], {
      attrs: { value: { t: { name: 'v', type: 'int64', dims: [1], values: [7n] } } },
      out: ['int64'],
    }));
  it('ConstantOfShape default float zeros, empty dim', () => same('ConstantOfShape', [ints('s', [2, 0])], { out: ['float32'] }));
  it('Range int64 negative delta', () =>
    same('Range', [ints('a', [10], []), ints('b', [-3], []), ints('c', [-4], [])], { out: ['int64'] }));
  it('Range float', () =>
    same('Range', [
      { ...f('a', []), data: [0.5] },
      { ...f('b', []), data: [3.2] },
      { ...f('c', []), data: [0.7] },
    ]));
  it('EyeLike with dtype and k', () => same('EyeLike', [f('x', [3, 5])], { attrs: { k: 2, dtype: 7 }, out: ['int64'] }));
  it('EyeLike negative k, default type', () => same('EyeLike', [f('x', [4, 3])], { attrs: { k: -1 } }));
});

describe('Pad', () => {
  const x = f('x', [3, 4]);
  for (const mode of ['constant', 'reflect', 'edge', 'wrap']) {
    it(`${mode}, pads on both axes`, () => same('Pad', [x, ints('p', [1, 2, 2, 1])], { opset: 19, attrs: { mode } }));
  }
  it('constant with a value input', () => same('Pad', [x, ints('p', [0, 1, 1, 0]), { ...f('cv', []), data: [2.5] }], { opset: 19 }));
  it('negative pads crop', () => same('Pad', [x, ints('p', [-1, 1, 0, -2])], { opset: 19 }));
  // A negative pad longer than the axis's own elements removes padding from the other side.
  it('negative pads that reach into the other side', () => same('Pad', [x, ints('p', [2, -5, -2, 6])], { opset: 19 }));
  it('an empty axis padded and cut back to empty (fuzz seed 7)', () => same('Pad', [f('x', [0]), ints('p', [2, -2])], { opset: 13 }));
  it('axes input (opset 18), negative axis', () =>
    same('Pad', [f('x', [2, 3, 4]), ints('p', [1, 2]), '', ints('a', [-1])], { opset: 18, attrs: { mode: 'edge' } }));
  it('opset 2 pads and value attributes', () => same('Pad', [x], { opset: 2, attrs: { pads: [0, 1, 2, 0], value: { f: 1.5 } } }));
  // Pads that fit in the axis are slices around it (padBySlices): at their largest, reversed
  // slices end at index 0 (reflect), or take the whole axis (wrap).
  it('reflect by n - 1 on both sides of both axes', () =>
    same('Pad', [x, ints('p', [2, 3, 2, 3])], { opset: 19, attrs: { mode: 'reflect' } }));
  it('wrap by the whole axis on both sides', () => same('Pad', [x, ints('p', [3, 4, 3, 4])], { opset: 19, attrs: { mode: 'wrap' } }));
  it('reflect behind only, the last axis (an STFT frame)', () =>
    same('Pad', [f('x', [1, 9]), ints('p', [0, 0, 0, 4])], { opset: 19, attrs: { mode: 'reflect' } }));
  it('reflect wider than the axis', () =>
    same('Pad', [f('x', [2, 3]), ints('p', [0, 2, 0, 2])], { opset: 19, attrs: { mode: 'reflect' } }));
});

describe('layout ops', () => {
  for (const mode of ['DCR', 'CRD'])
    it(`DepthToSpace ${mode}`, () => same('DepthToSpace', [f('x', [1, 8, 2, 3])], { attrs: { blocksize: 2, mode } }));
  it('SpaceToDepth', () => same('SpaceToDepth', [f('x', [2, 2, 4, 6])], { attrs: { blocksize: 2 } }));
  it('Trilu lower, k = -1, batched', () => same('Trilu', [f('x', [2, 3, 4]), ints('k', [-1], [])], { attrs: { upper: 0 } }));
  it('Trilu upper on int64 data', () => same('Trilu', [{ ...ints('x', [1, 2, 3, 4, 5, 6]), dims: [2, 3], arg: false }]));
  it('CenterCropPad crops one axis and pads another', () =>
    same('CenterCropPad', [f('x', [5, 2, 3]), ints('s', [2, 5])], { attrs: { axes: [0, -1] } }));
});

describe('string tensors stay on the host at any size', () => {
  it('Reshape -> Transpose -> Slice -> Gather on 5000 strings', async () => {
    const words = Array.from({ length: 5000 }, (_, i) => `w${i}`);
    const bytes = model({
      inputs: [v('x', 'string', [5000])],
      outputs: [v('y', 'string')],
      initializers: [
        { name: 's', type: 'int64', dims: [2], values: [50n, 100n] },
        { name: 'b', type: 'int64', dims: [1], values: [10n] },
        { name: 'e', type: 'int64', dims: [1], values: [-1n] },
        { name: 'i', type: 'int64', dims: [2], values: [3n, -1n] },
      ],
      nodes: [
        node('Reshape', ['x', 's'], ['r']),
        node('Transpose', ['r'], ['t']),
        node('Slice', ['t', 'b', 'e'], ['sl']),
        node('Gather', ['sl', 'i'], ['y'], { attrs: { axis: 1 } }),
      ],
    });
    const feeds = { x: new ort.Tensor('string', words, [5000]) };
    const [want, have] = [await runOn('cpu', bytes, feeds), await runOn('mlx', bytes, feeds)];
    expect(have.y.dims).toEqual(want.y.dims);
    expect(have.y.data).toEqual(want.y.data);
  });
});

describe('shape math stays on the host', () => {
  it('Shape -> Gather -> Unsqueeze -> Concat -> Reshape of an MLX array: every shape value is a host tensor', () => {
    const bytes = model({
      inputs: [v('x', 'float32', ['N', 6])],
      outputs: [v('y', 'float32')],
      initializers: [
        { name: 'zero', type: 'int64', dims: [], values: [0n] },
        { name: 'ax', type: 'int64', dims: [1], values: [0n] },
        { name: 'rest', type: 'int64', dims: [2], values: [3n, -1n] },
      ],
      nodes: [
        node('Shape', ['x'], ['shape']),
        node('Gather', ['shape', 'zero'], ['n']),
        node('Unsqueeze', ['n', 'ax'], ['n1']),
        node('Concat', ['n1', 'rest'], ['target'], { attrs: { axis: 0 } }),
        node('Reshape', ['x', 'target'], ['y']),
      ],
    });
    const m = decodeModel(bytes, {});
    const plan = planGraph(m.graph, { registry: defaultRegistry, opsets: m.opsetImports, modelName: 't' }, []);
    const env = new Env(plan, new RunState(new ConstantStore(), 't'));
    env.values.set('x', { kind: 'device', array: mx.reshape(mx.arange(0, 24, 1, 'float32'), [4, 6]), onnxType: 1 });
    const [y] = new GraphProgram(plan).execute(env, ['y']);
    for (const name of ['shape', 'n', 'n1', 'target']) expect([name, env.get(name)?.kind]).toEqual([name, 'host']);
    expect(y.kind === 'device' && y.array.shape).toEqual([4, 3, 2]);
  });
});
