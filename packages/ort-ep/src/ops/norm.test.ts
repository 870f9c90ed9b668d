// Normalisations beyond the node suite: older BatchNormalization opsets and 2-D/3-D inputs,
// float16 LayerNormalization with its statistics outputs, the fused last-axis path, 3-D
// InstanceNormalization, GroupNormalization at opset 18 (per-group scale), MVN axes, size-5
// LRN and LpNormalization of zeros, against onnxruntime-node.
import { describe, expect, it } from 'vitest';
import { model, node, v, toHalfBits, type AttrSpec, type ValueSpec } from '../../test/helpers/build.js';
import { expectSameAsOrt, ort, plain, runOn, seeded, type Feeds } from '../../test/helpers/ort.js';

const size = (dims: number[]) => dims.reduce((a, b) => a * b, 1);

async function same(
  op: string,
  opset: number,
  ins: { name: string; dims: number[]; data?: number[] }[],
  attrs: Record<string, AttrSpec>,
  outs: ValueSpec[] = [v('y', 'float32')],
  tol = { rtol: 1e-4, atol: 1e-5 },
) {
  const bytes = model({
    opsets: { '': opset },
    inputs: ins.map((i) => v(i.name, 'float32', i.dims)),
    outputs: outs,
    nodes: [
      node(
        op,
        ins.map((i) => i.name),
        outs.map((o) => o.name),
        { attrs },
      ),
    ],
  });
  const feeds: Feeds = {};
  ins.forEach((i, k) => (feeds[i.name] = new ort.Tensor('float32', Float32Array.from(i.data ?? seeded(size(i.dims), k + 2)), i.dims)));
  return expectSameAsOrt(bytes, feeds, tol);
}
const positive = (n: number, seed: number) => seeded(n, seed).map((t) => t + 1.2);

describe('BatchNormalization', () => {
  const params = (c: number) => [
    { name: 's', dims: [c] },
    { name: 'b', dims: [c] },
    { name: 'm', dims: [c] },
    { name: 'var', dims: [c], data: positive(c, 9) },
  ];
  it('opset 7 on a 2-D [N, C] input', async () => {
    await same('BatchNormalization', 7, [{ name: 'x', dims: [5, 3] }, ...params(3)], { epsilon: { f: 1e-3 } });
  });
  it('opset 9 on a 3-D input', async () => {
    await same('BatchNormalization', 9, [{ name: 'x', dims: [2, 4, 6] }, ...params(4)], {});
  });
  it('opset 15 training mode on a 3-D input: Y and running statistics', async () => {
    await same('BatchNormalization', 15, [{ name: 'x', dims: [3, 2, 5] }, ...params(2)], { training_mode: 1, momentum: { f: 0.7 } }, [
      v('y', 'float32'),
      v('rm', 'float32'),
      v('rv', 'float32'),
    ]);
  });
});

describe('LayerNormalization', () => {
  it('last axis with 1-D scale and bias (the fused kernel)', async () => {
    await same(
      'LayerNormalization',
      17,
      [
        { name: 'x', dims: [2, 3, 8] },
        { name: 's', dims: [8] },
        { name: 'b', dims: [8] },
      ],
      { epsilon: { f: 1e-3 } },
    );
  });
  it('last axis with a one-element bias, which broadcasts (the fused kernel refuses it)', async () => {
    await same(
      'LayerNormalization',
      17,
      [
        { name: 'x', dims: [2, 3, 8] },
        { name: 's', dims: [8] },
        { name: 'b', dims: [1] },
      ],
      {},
    );
  });
  it('axis 1 without bias, Mean and InvStdDev outputs', async () => {
    await same(
      'LayerNormalization',
      17,
      [
        { name: 'x', dims: [2, 3, 4] },
        { name: 's', dims: [3, 4] },
      ],
      { axis: 1 },
      [v('y', 'float32'), v('mean', 'float32'), v('inv', 'float32')],
    );
  });
  it('float16 input computes its statistics in float32', async () => {
    const x = seeded(64, 4).map((t) => t * 100 + 1000); // float16 sums of squares would overflow or round
    const bytes = model({
      opsets: { '': 17 },
      inputs: [v('x', 'float16', [4, 16]), v('s', 'float16', [16])],
      outputs: [v('y', 'float16'), v('mean', 'float32'), v('inv', 'float32')],
      nodes: [node('LayerNormalization', ['x', 's'], ['y', 'mean', 'inv'])],
    });
    const half = (d: number[]) => Uint16Array.from(d.map(toHalfBits));
    const feeds = { x: new ort.Tensor('float16', half(x), [4, 16]), s: new ort.Tensor('float16', half(new Array(16).fill(1)), [16]) };
    const [want, have] = [await runOn('cpu', bytes, feeds), await runOn('mlx', bytes, feeds)];
    expect(have.mean.type).toBe('float32');
    const close = (a: number[], b: number[], tol: number) => a.every((x, i) => Math.abs(x - b[i]) <= tol * (1 + Math.abs(b[i])));
    expect(close(plain(have.mean), plain(want.mean), 1e-3)).toBe(true);
    expect(close(plain(have.inv), plain(want.inv), 1e-2)).toBe(true);
  });
});

describe('InstanceNormalization and GroupNormalization', () => {
  it('InstanceNormalization on a 3-D input', async () => {
    await same(
      'InstanceNormalization',
      6,
      [
        { name: 'x', dims: [2, 3, 7] },
        { name: 's', dims: [3] },
        { name: 'b', dims: [3] },
      ],
      { epsilon: { f: 1e-2 } },
    );
  });
  it('GroupNormalization opset 18: scale and bias per group', async () => {
    await same(
      'GroupNormalization',
      18,
      [
        { name: 'x', dims: [2, 6, 3, 2] },
        { name: 's', dims: [3] },
        { name: 'b', dims: [3] },
      ],
      { num_groups: 3 },
    );
  });
  it('GroupNormalization opset 21: scale and bias per channel, 3-D input', async () => {
    await same(
      'GroupNormalization',
      21,
      [
        { name: 'x', dims: [2, 6, 5] },
        { name: 's', dims: [6] },
        { name: 'b', dims: [6] },
      ],
      { num_groups: 2, epsilon: { f: 1e-3 } },
    );
  });
});

describe('MeanVarianceNormalization, LRN, LpNormalization', () => {
  it('MVN over axes [1, 2]', async () => {
    await same('MeanVarianceNormalization', 13, [{ name: 'x', dims: [2, 3, 4] }], { axes: [1, 2] });
  });
  it('MVN with axes the input lacks (the default [0, 2, 3] on ranks 1 to 3, out-of-range negatives) ignores them, as onnxruntime does', async () => {
    for (const dims of [[5], [2, 3], [2, 3, 4]]) await same('MeanVarianceNormalization', 13, [{ name: 'x', dims }], {});
    await same('MeanVarianceNormalization', 13, [{ name: 'x', dims: [2, 3] }], { axes: [-5, -1, 1] });
  });
  it('LRN with size 5 over 6 channels', async () => {
    await same('LRN', 13, [{ name: 'x', dims: [2, 6, 3, 3] }], { size: 5, alpha: { f: 0.01 }, beta: { f: 0.6 }, bias: { f: 2 } });
  });
  it('LpNormalization p=1 along axis 0 of a row of zeros gives zeros', async () => {
    const out = await same('LpNormalization', 22, [{ name: 'x', dims: [2, 3], data: [0, 1, -2, 0, 3, 4] }], { axis: 0, p: 1 });
    expect(plain(out.y).map((t) => (Object.is(t, -0) ? 0 : t))).toEqual([0, 0.25, -1 / 3, 0, 0.75, 2 / 3].map((t) => Math.fround(t)));
  });
});

describe('LRN with non-finite squares', () => {
  // onnxruntime slides the channel window with a running sum: an infinite square that has left
  // the window leaves inf - inf, NaN for the rest of the channels at that position.
  const cases: [number[], number[]][] = [
    [
      [1, Infinity, 1, 1, 1, 2],
      [1, 6, 1, 1],
    ],
    [
      [1, 1, 1, 1, Infinity, 2],
      [1, 6, 1, 1],
    ],
    [
      [1, Number.NaN, 1, 1, 1, 2],
      [1, 6, 1, 1],
    ],
    [
      [1, 2, 3, 4, Infinity, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12],
      [1, 8, 2, 1],
    ],
  ];
  for (const [data, dims] of cases) {
    it(`[${data.join(', ')}]`, async () => {
      const bytes = model({
        opsets: { '': 13 },
        inputs: [v('x', 'float32', dims)],
        outputs: [v('y', 'float32')],
        nodes: [node('LRN', ['x'], ['y'], { attrs: { size: 3, alpha: { f: 0.0002 }, beta: { f: 0.5 }, bias: { f: 2 } } })],
      });
      const x = new ort.Tensor('float32', Float32Array.from(data), dims);
      const [want, have] = [plain((await runOn('cpu', bytes, { x })).y), plain((await runOn('mlx', bytes, { x })).y)];
      expect(have.map(Number.isNaN)).toEqual(want.map(Number.isNaN));
      have.forEach((h, i) => {
        if (!Number.isNaN(h)) expect(Math.abs(h - want[i])).toBeLessThanOrEqual(1e-5 * Math.max(1, Math.abs(want[i])));
      });
    });
  }
});
