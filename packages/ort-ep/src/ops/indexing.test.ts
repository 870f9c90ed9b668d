// Indexing, ordering and resize ops against onnxruntime-node's CPU provider, each case twice: as
// fed (small host tensors take the host() paths where an op has one) and with the data inputs
// moved to MLX first through a no-op Clip (the run() paths). The cases are the edges the node
// suite leaves out: negative steps and sentinels, negative indices, batch_dims, every reduction,
// ties in TopK, and a grid of Resize modes.
import { describe, it } from 'vitest';
import type { AttrSpec, ElemName } from '../../test/helpers/build.js';

import { f, ints, same, type In } from '../../test/helpers/both-paths.js';

const I64_MAX = 9223372036854775807n;
const I64_MIN = -9223372036854775808n;
const data = (name: string, type: ElemName, values: number[], dims: number[]): In => ({ name, type, dims, data: values });
const idx = (name: string, values: number[], dims = [values.length]): In => ({ name, type: 'int64', dims, data: values });

describe('Slice', () => {
  const x = f('x', [5, 6]);
  it('negative step from the end down through index 0 (INT64_MIN end)', () =>
    same('Slice', [x, ints('s', [-1]), ints('e', [I64_MIN]), ints('a', [1]), ints('t', [-1])]));
  it('negative step of 2 with a clamped start', () =>
    same('Slice', [x, ints('s', [20, 4]), ints('e', [0, -7]), ints('a', [0, 1]), ints('t', [-2, -3])]));
  it('INT64_MAX end, default axes and steps', () => same('Slice', [x, ints('s', [1, -4]), ints('e', [I64_MAX, 5])]));
  it('empty result when start passes end', () => same('Slice', [x, ints('s', [4]), ints('e', [2]), ints('a', [-2])]));
  it('opset 1 attributes', () => same('Slice', [x], { opset: 1, attrs: { starts: [1, 0], ends: [3, 100], axes: [0, 1] } }));
  it('opset 9 attributes without axes', () => same('Slice', [x], { opset: 9, attrs: { starts: [-2], ends: [1000] } }));
});

describe('Gather family', () => {
  const x = f('x', [4, 3, 2]);
  it('Gather negative indices, axis 1, 2-D indices', () => same('Gather', [x, idx('i', [-1, 0, 2, -3], [2, 2])], { attrs: { axis: 1 } }));
  it('Gather scalar index', () => same('Gather', [x, idx('i', [-2], [])]));
  // Host indices of one position or a consecutive run are taken as a slice (gatherAsSlice).
  it('Gather a scalar index along an inner axis', () => same('Gather', [x, idx('i', [-1], [])], { attrs: { axis: 2 } }));
  it('Gather a consecutive run, negative indices among them', () => same('Gather', [x, idx('i', [-2, 2], [2])], { attrs: { axis: 1 } }));
  it('Gather a one-element list along the last axis', () => same('Gather', [x, idx('i', [1], [1])], { attrs: { axis: -1 } }));
  it('Gather a descending run (not a slice)', () => same('Gather', [x, idx('i', [2, 1, 0], [3])], { attrs: { axis: 1 } }));
  it('Gather int32 indices on int64 data', () =>
    same('Gather', [{ ...idx('x', [5, 6, 7, 8]), dims: [4] }, data('i', 'int32', [3, -4, 0], [3])], { out: ['int64'] }));
  it('GatherElements, axis 1, negative, smaller than the data', () =>
    same('GatherElements', [f('x', [3, 4]), idx('i', [-1, 0, 1, 3], [2, 2])], { attrs: { axis: 1 } }));
  it('GatherND slices, negative indices', () => same('GatherND', [x, idx('i', [-1, 0, 1, 2, 0, -1], [3, 2])]));
  it('GatherND batch_dims 1', () => same('GatherND', [x, idx('i', [0, 1, -1, 0, 2, 1, 1, 1], [4, 1, 2])], { attrs: { batch_dims: 1 } }));
  it('GatherND batch_dims 2, full index', () =>
    same('GatherND', [x, idx('i', [1, 0, 1, 0, 1, 1, 0, 0, 1, 1, 0, 0], [4, 3, 1])], { attrs: { batch_dims: 2 } }));
});

describe('Scatter family', () => {
  const x = f('x', [3, 4]);
  const upd = f('u', [2, 3], 5);
  for (const reduction of ['none', 'add', 'mul', 'max', 'min']) {
    // 'none' must not repeat an index; the others may.
    const i = reduction === 'none' ? [0, -1, 2, 3, 1, -2] : [0, -1, 0, 3, -1, 3];
    it(`ScatterElements axis 1, reduction ${reduction}`, () =>
      same('ScatterElements', [x, idx('i', i, [2, 3]), upd], { attrs: { axis: 1, reduction } }));
  }
  it('Scatter (opset 9) is ScatterElements', () => same('Scatter', [x, idx('i', [2, 0, 1, 0, 1, 2], [2, 3]), upd], { opset: 9 }));
  for (const reduction of ['none', 'add', 'mul', 'max', 'min']) {
    const i = reduction === 'none' ? [0, -1] : [-1, 2];
    it(`ScatterND row updates, reduction ${reduction}`, () =>
      same('ScatterND', [x, idx('i', i, [2, 1]), f('u', [2, 4], 3)], { attrs: { reduction } }));
  }
  it('ScatterND element updates', () => same('ScatterND', [f('x', [2, 3, 2]), idx('i', [1, 2, 0, 0, -1, 1], [2, 3]), f('u', [2], 4)]));
});

describe('TensorScatter', () => {
  it('circular, wrapping past the end, 4-D', () =>
    same('TensorScatter', [f('c', [2, 2, 5, 3]), f('u', [2, 2, 3, 3], 2), idx('w', [1, 4])], { opset: 24, attrs: { mode: 'circular' } }));
  it('linear, axis 1 of 3-D, no write indices', () =>
    same('TensorScatter', [f('c', [2, 5, 3]), f('u', [2, 2, 3], 2)], { opset: 24, attrs: { axis: 1 } }));
});

describe('OneHot, NonZero, Compress', () => {
  const vals = data('v', 'float32', [-1, 3], [2]);
  it('OneHot axis 0, negative and out-of-range indices', () =>
    same('OneHot', [idx('i', [0, -1, 5, 2, -7, 1], [2, 3]), idx('d', [4], []), vals], { opset: 11, attrs: { axis: 0 }, out: ['float32'] }));
  it('OneHot float indices and depth, default axis', () =>
    same('OneHot', [data('i', 'float32', [1.7, 0, 2], [3]), data('d', 'float32', [3], []), vals], { out: ['float32'] }));
  it('NonZero on floats', () => same('NonZero', [data('x', 'float32', [0, 1.5, 0, -2, 0, 3], [2, 3])], { out: ['int64'] }));
  it('NonZero on bools', () => same('NonZero', [data('x', 'bool', [1, 0, 1, 1], [2, 2])], { out: ['int64'] }));
  it('Compress along an axis, short condition', () =>
    same('Compress', [f('x', [3, 4]), data('c', 'bool', [0, 1, 1], [3])], { attrs: { axis: 1 } }));
  it('Compress without an axis flattens', () => same('Compress', [f('x', [2, 3]), data('c', 'bool', [1, 0, 0, 1, 1], [5])]));
});

describe('TopK, CumSum, ReverseSequence, Unique', () => {
  const ties = data('x', 'float32', [3, 1, 3, 2, 1, 3, 0, 2], [2, 4]);
  for (const largest of [1, 0])
    it(`TopK with ties, largest ${largest}`, () => same('TopK', [ties, idx('k', [3])], { attrs: { largest }, out: ['float32', 'int64'] }));
  it('TopK axis 0 on int32', () =>
    same('TopK', [data('x', 'int32', [5, -2, 7, 7, 0, 9], [3, 2]), idx('k', [2])], { attrs: { axis: 0 }, out: ['int32', 'int64'] }));
  it('TopK opset 1 k attribute', () => same('TopK', [ties], { opset: 1, attrs: { k: 2 }, out: ['float32', 'int64'] }));
  it('CumSum exclusive reverse, axis 0', () =>
    same('CumSum', [f('x', [3, 4]), idx('a', [0], [])], { attrs: { exclusive: 1, reverse: 1 } }));
  it('CumSum int32, negative axis', () => same('CumSum', [data('x', 'int32', [1, 2, 3, 4, 5, 6], [2, 3]), data('a', 'int32', [-1], [])]));
  it('ReverseSequence batch axis 0', () =>
    same('ReverseSequence', [f('x', [3, 4, 2]), idx('l', [4, 1, 3])], { attrs: { batch_axis: 0, time_axis: 1 } }));
  const u = data('x', 'float32', [2, 1, 1, 3, 4, 3, 2, 1, 1, 3, 0, 1], [4, 3]);
  const outs: ElemName[] = ['float32', 'int64', 'int64', 'int64'];
  it('Unique sorted, no axis', () => same('Unique', [u], { out: outs }));
  it('Unique unsorted, no axis', () => same('Unique', [u], { attrs: { sorted: 0 }, out: outs }));
  it('Unique rows (axis 0)', () =>
    same('Unique', [data('x', 'float32', [1, 2, 0, 1, 1, 2, 0, 1], [4, 2])], { attrs: { axis: 0 }, out: outs }));
  it('Unique columns (axis -1)', () =>
    same('Unique', [data('x', 'int64', [1, 0, 1, 2, 0, 2], [2, 3])], { attrs: { axis: -1 }, out: ['int64', 'int64', 'int64', 'int64'] }));
});

describe('Resize', () => {
  const x = f('x', [1, 2, 4, 5]);
  const scales = (s: number[]) => data('s', 'float32', s, [s.length]);
  const sizes = (s: number[]) => ({ ...ints('z', s) });
  // Products with the input sizes are whole numbers here: where they are not, align_corners in the
  // ONNX reference (and so the node suite) divides by the unrounded output length, onnxruntime by
  // the rounded one. We follow the reference; the fractional case is tested on half_pixel below.
  const up = scales([1, 1, 1.5, 2]);
  const down = scales([1, 1, 0.5, 0.6]);
  const tol = { rtol: 1e-4, atol: 1e-5 };
  const run = (ins: (In | '')[], attrs: Record<string, AttrSpec>, opset = 19) => same('Resize', ins, { opset, attrs, tol });
  for (const coordinate_transformation_mode of [
    'half_pixel',
    'asymmetric',
    'align_corners',
    'pytorch_half_pixel',
    'half_pixel_symmetric',
  ]) {
    for (const mode of ['nearest', 'linear', 'cubic']) {
      it(`${mode}, ${coordinate_transformation_mode}, up and down`, async () => {
        await run([x, '', up], { mode, coordinate_transformation_mode });
        await run([x, '', down], { mode, coordinate_transformation_mode });
      });
    }
  }
  for (const nearest_mode of ['round_prefer_floor', 'round_prefer_ceil', 'floor', 'ceil']) {
    it(`nearest_mode ${nearest_mode}`, () => run([x, '', '', sizes([1, 2, 7, 3])], { mode: 'nearest', nearest_mode }));
  }
  for (const mode of ['nearest', 'linear', 'cubic'])
    it(`${mode}, fractional output lengths`, () => run([x, '', scales([1, 1, 1.7, 0.7])], { mode }));
  it('cubic exclude_outside with A = -0.5', () => run([x, '', up], { mode: 'cubic', exclude_outside: 1, cubic_coeff_a: -0.5 }));
  it('tf_crop_and_resize with extrapolation', () =>
    run([x, data('r', 'float32', [0, 0, 0.2, -0.3, 1, 1, 0.9, 1.2], [8]), '', sizes([1, 2, 3, 4])], {
      mode: 'linear',
      coordinate_transformation_mode: 'tf_crop_and_resize',
      extrapolation_value: { f: 9 },
    }));
  for (const keep_aspect_ratio_policy of ['not_larger', 'not_smaller']) {
    it(`sizes over axes, ${keep_aspect_ratio_policy}`, () =>
      run([x, '', '', sizes([3, 7])], { mode: 'linear', axes: [2, 3], keep_aspect_ratio_policy }));
  }
  for (const mode of ['linear', 'cubic'])
    it(`antialias ${mode} downsampling`, () => run([f('x', [1, 1, 8, 9]), '', scales([1, 1, 0.4, 0.6])], { mode, antialias: 1 }));
  it('opset 11 with an empty scales and sizes', () =>
    run([x, data('r', 'float32', [], [0]), data('s', 'float32', [], [0]), sizes([1, 2, 3, 8])], { mode: 'linear' }, 11));
  it('opset 10 nearest upsampling', () => run([x, scales([1, 1, 2, 3])], { mode: 'nearest' }, 10));
  it('opset 10 linear', () => run([x, scales([1, 1, 2, 1.5])], { mode: 'linear' }, 10));
  it('Upsample opset 9 nearest', () => same('Upsample', [x, scales([1, 1, 2, 2])], { opset: 9 }));
  it('Upsample opset 7 linear (scales attribute)', () =>
    same('Upsample', [x], { opset: 7, attrs: { mode: 'linear', scales: { floats: [1, 1, 2, 1.5] } } }));
});
