// Pooling beyond the node suite: MaxPool indices in 3-D and column-major order, integer max
// pools, float32 max pools without Indices, ceil mode with pads and count_include_pad, LpPool p=1/3, the Global forms, older opsets
// and MaxRoiPool, against onnxruntime-node.
import { describe, expect, it } from 'vitest';
import { model, node, v, type AttrSpec, type ElemName, type ValueSpec } from '../../test/helpers/build.js';
import { expectSameAsOrt, ort, runOn, seeded, type Feeds } from '../../test/helpers/ort.js';

const make: Record<string, (d: number[]) => ArrayLike<number | bigint>> = {
  float32: (d) => Float32Array.from(d),
  int8: (d) => Int8Array.from(d),
  uint8: (d) => Uint8Array.from(d),
};
const size = (dims: number[]) => dims.reduce((a, b) => a * b, 1);

async function same(
  op: string,
  x: { type: ElemName; dims: number[]; data?: number[] },
  attrs: Record<string, AttrSpec>,
  outs: ValueSpec[],
  opset = 22,
  extra: { name: string; dims: number[]; data: number[] }[] = [],
) {
  const bytes = model({
    opsets: { '': opset },
    inputs: [v('x', x.type, x.dims), ...extra.map((e) => v(e.name, 'float32', e.dims))],
    outputs: outs,
    nodes: [
      node(
        op,
        ['x', ...extra.map((e) => e.name)],
        outs.map((o) => o.name),
        { attrs },
      ),
    ],
  });
  const feeds: Feeds = { x: new ort.Tensor(x.type as never, make[x.type](x.data ?? seeded(size(x.dims), 3)) as never, x.dims) };
  for (const e of extra) feeds[e.name] = new ort.Tensor('float32', Float32Array.from(e.data), e.dims);
  return expectSameAsOrt(bytes, feeds, { rtol: 1e-5, atol: 1e-6 });
}
const fx = (dims: number[]) => ({ type: 'float32' as const, dims });
const y = [v('y', 'float32')];

describe('MaxPool', () => {
  it('3-D with Indices, pads and strides', async () => {
    await same('MaxPool', fx([1, 2, 4, 5, 6]), { kernel_shape: [2, 3, 2], strides: [2, 1, 2], pads: [1, 0, 1, 0, 1, 1] }, [
      v('y', 'float32'),
      v('i', 'int64'),
    ]);
  });
  it('column-major Indices (storage_order 1), ceil mode', async () => {
    await same('MaxPool', fx([2, 2, 5, 7]), { kernel_shape: [3, 2], strides: [2, 2], ceil_mode: 1, storage_order: 1 }, [
      v('y', 'float32'),
      v('i', 'int64'),
    ]);
  });
  it('int8 with negative values padded by the type minimum', async () => {
    const data = seeded(50, 4).map((t) => Math.round(t * 127));
    await same('MaxPool', { type: 'int8', dims: [1, 2, 5, 5], data }, { kernel_shape: [3, 3], pads: [1, 1, 1, 1] }, [v('y', 'int8')]);
  });
  it('SAME_UPPER with strides; with dilations the output is ceil(in / stride) as the spec says', async () => {
    await same('MaxPool', fx([1, 1, 9, 8]), { kernel_shape: [3, 2], strides: [2, 3], auto_pad: 'SAME_UPPER' }, y);
    // onnxruntime pads for the undilated kernel here and returns 7x6; the spec's pad formula uses the dilated one.
    const bytes = model({
      opsets: { '': 22 },
      inputs: [v('x', 'float32', [1, 1, 9, 8])],
      outputs: y,
      nodes: [node('MaxPool', ['x'], ['y'], { attrs: { kernel_shape: [3, 2], dilations: [2, 3], auto_pad: 'SAME_UPPER' } })],
    });
    const out = await runOn('mlx', bytes, { x: new ort.Tensor('float32', Float32Array.from(seeded(72, 3)), [1, 1, 9, 8]) });
    expect([...out.y.dims]).toEqual([1, 1, 9, 8]);
  });
  it('opset 7 (no dilations or ceil_mode)', async () => {
    await same('MaxPool', fx([1, 3, 6, 6]), { kernel_shape: [2, 2], strides: [2, 2] }, y, 7);
  });
  it('float32 without Indices: asymmetric pads, strides, dilations, ceil mode, 1-D', async () => {
    await same('MaxPool', fx([2, 3, 9, 8]), { kernel_shape: [3, 2], strides: [2, 1], pads: [2, 0, 1, 1], dilations: [1, 2] }, y);
    await same('MaxPool', fx([1, 2, 7, 6]), { kernel_shape: [2, 3], strides: [2, 2], pads: [0, 1, 0, 0], ceil_mode: 1 }, y);
    await same('MaxPool', fx([3, 2, 13]), { kernel_shape: [4], strides: [3], pads: [1, 2], dilations: [2] }, y);
  });
  it('float32: a NaN propagates to the windows that hold it, as mx.maximum does (onnxruntime skips it)', async () => {
    const data = Float32Array.from(seeded(2 * 5 * 5, 7));
    data[3] = Number.NaN; // plane 0, row 0, column 3: the 2x2 windows at (0, 2) and (0, 3)
    const bytes = model({
      opsets: { '': 22 },
      inputs: [v('x', 'float32', [1, 2, 5, 5])],
      outputs: y,
      nodes: [node('MaxPool', ['x'], ['y'], { attrs: { kernel_shape: [2, 2] } })],
    });
    const out = await runOn('mlx', bytes, { x: new ort.Tensor('float32', data, [1, 2, 5, 5]) });
    const nan = [...(out.y.data as Float32Array)].flatMap((t, i) => (Number.isNaN(t) ? [i] : []));
    expect(nan).toEqual([2, 3]);
  });
});

describe('AveragePool', () => {
  for (const include of [0, 1]) {
    it(`ceil mode with asymmetric pads, count_include_pad ${include}`, async () => {
      await same(
        'AveragePool',
        fx([1, 2, 7, 6]),
        { kernel_shape: [3, 3], strides: [2, 2], pads: [1, 0, 0, 1], ceil_mode: 1, count_include_pad: include },
        y,
      );
    });
    it(`SAME_LOWER, count_include_pad ${include}`, async () => {
      await same('AveragePool', fx([1, 1, 6, 5]), { kernel_shape: [2, 3], auto_pad: 'SAME_LOWER', count_include_pad: include }, y);
    });
  }
  it('1-D with dilations (opset 19)', async () => {
    await same('AveragePool', fx([2, 3, 11]), { kernel_shape: [3], dilations: [2], strides: [2], pads: [1, 2] }, y, 19);
  });
  // Windows that all count every position (one divisor), and their neighbours that do not.
  it('no pads, count_include_pad 0 and 1; pads with count_include_pad 1; ceil overhang', async () => {
    for (const include of [0, 1]) {
      await same('AveragePool', fx([1, 16, 7, 7]), { kernel_shape: [2, 2], strides: [2, 2], count_include_pad: include }, y);
      await same(
        'AveragePool',
        fx([2, 3, 6, 7]),
        { kernel_shape: [3, 2], strides: [1, 2], pads: [1, 0, 1, 1], count_include_pad: include },
        y,
      );
      await same('AveragePool', fx([1, 2, 7, 7]), { kernel_shape: [2, 2], strides: [2, 2], ceil_mode: 1, count_include_pad: include }, y);
    }
    await same('AveragePool', fx([2, 3, 11]), { kernel_shape: [3], dilations: [2], strides: [2] }, y, 19);
  });
});

describe('LpPool and the global pools', () => {
  for (const p of [1, 3]) {
    it(`LpPool p=${p} with pads`, async () => {
      await same('LpPool', fx([1, 2, 6, 6]), { kernel_shape: [3, 3], p, pads: [1, 1, 1, 1], strides: [2, 2] }, y);
    });
  }
  it('GlobalLpPool p=3 and p=2', async () => {
    await same('GlobalLpPool', fx([2, 3, 4, 5]), { p: 3 }, y, 2);
    await same('GlobalLpPool', fx([2, 3, 4]), {}, y, 2);
  });
  it('GlobalMaxPool and GlobalAveragePool of a 3-D input', async () => {
    await same('GlobalMaxPool', fx([2, 3, 2, 3, 4]), {}, y);
    await same('GlobalAveragePool', fx([2, 3, 2, 3, 4]), {}, y);
  });
});

describe('MaxRoiPool', () => {
  it('ROIs with spatial_scale, including one partly outside the map', async () => {
    const rois = [0, 0, 0, 3, 3, 1, 2, 1, 7, 6, 0, 5, 5, 12, 12];
    await same('MaxRoiPool', fx([2, 3, 8, 8]), { pooled_shape: [2, 3], spatial_scale: { f: 0.5 } }, y, 1, [
      { name: 'rois', dims: [3, 5], data: rois },
    ]);
  });
});
