// TopK with sorted = 0 against onnxruntime-node: the order of the returned elements is the
// implementation's, so the test compares it exactly, over the three strategies onnxruntime's CPU
// kernel picks between (k = 1, the heap for small k, the quickselect otherwise), ties, both
// directions, inner axes and integer types.
import { describe, expect, it } from 'vitest';
import { model, node, v, type ElemName } from '../../test/helpers/build.js';
import { i64, ort, plain, runOn, seeded, type OrtTensor } from '../../test/helpers/ort.js';

function tensor(type: ElemName, values: number[], dims: number[]): OrtTensor {
  if (type === 'int64') return i64(values, dims);
  if (type === 'int32') return new ort.Tensor('int32', Int32Array.from(values), dims);
  if (type === 'float64') return new ort.Tensor('float64', Float64Array.from(values), dims);
  return new ort.Tensor('float32', Float32Array.from(values), dims);
}

async function expectSameOrder(type: ElemName, dims: number[], values: number[], k: number, axis: number, largest: number) {
  const bytes = model({
    opsets: { '': 21 },
    inputs: [v('x', type, dims), v('k', 'int64', [1])],
    outputs: [v('y', type), v('i', 'int64')],
    nodes: [node('TopK', ['x', 'k'], ['y', 'i'], { attrs: { axis, largest, sorted: 0 } })],
  });
  const feeds = { x: tensor(type, values, dims), k: i64([k], [1]) };
  const want = await runOn('cpu', bytes, feeds);
  const have = await runOn('mlx', bytes, feeds);
  expect(have.i.dims).toEqual(want.i.dims);
  expect(plain(have.i)).toEqual(plain(want.i));
  expect(plain(have.y)).toEqual(plain(want.y));
}

describe('TopK sorted=0 returns onnxruntime order', () => {
  const rows = (n: number, seed: number, levels?: number) =>
    seeded(n, seed).map((x) => (levels ? Math.floor(x * levels) : Math.round(x * 1e6) / 1e6 - 0.5));
  for (const n of [5, 9, 16, 40, 200, 1000])
    for (const k of [1, 2, 3, 4, 5, 8, 13, 30, 100, 700].filter((k) => k <= n))
      for (const largest of [1, 0])
        it(`n=${n} k=${k} largest=${largest}`, async () => {
          await expectSameOrder('float32', [3, n], rows(3 * n, n + k), k, 1, largest);
          // With ties (few distinct values): the index tiebreak decides.
          await expectSameOrder('float32', [2, n], rows(2 * n, n * k + 7, 4), k, -1, largest);
        });
  it('an inner axis, int64 and int32', async () => {
    await expectSameOrder('float32', [2, 50, 3], rows(300, 11), 20, 1, 1);
    await expectSameOrder('int64', [4, 60], rows(240, 12, 1000), 30, 1, 0);
    await expectSameOrder('int32', [60, 2], rows(120, 13, 7), 25, 0, 1);
    await expectSameOrder('float64', [1, 300], rows(300, 14), 280, 1, 1);
  });
});
