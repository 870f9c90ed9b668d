// Shape ops, slicing and indexing (take, gather, scatter, ...), against index arithmetic in JS.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';
import { flat } from '../test/numeric.js';

const size = (shape: readonly number[]) => shape.reduce((a, b) => a * b, 1);
const iota = (n: number) => Array.from({ length: n }, (_, i) => i);
function unravel(i: number, shape: readonly number[]): number[] {
  const idx = new Array<number>(shape.length);
  for (let d = shape.length - 1; d >= 0; d--) {
    idx[d] = i % shape[d];
    i = Math.floor(i / shape[d]);
  }
  return idx;
}
const ravel = (idx: readonly number[], shape: readonly number[]) => idx.reduce((acc, v, d) => acc * shape[d] + v, 0);
/** Builds the row-major data of `shape` from a function of the index. */
const build = (shape: readonly number[], f: (idx: number[]) => number) => iota(size(shape)).map((i) => f(unravel(i, shape)));

const shape = [2, 3, 4];
const data = iota(24).map((v) => v * 1.5 - 7);
const x = () => mx.array(data, { shape });
const at = (idx: readonly number[]) => data[ravel(idx, shape)];

describe('reshaping', () => {
  it('reshape keeps row-major order; wrong sizes are rejected', () => {
    const r = mx.reshape(x(), [4, 6]);
    expect(r.shape).toEqual([4, 6]);
    expect(flat(r)).toEqual(data);
    expect(mx.reshape(x(), [-1, 2]).shape).toEqual([12, 2]);
  });
  it('flatten between axes', () => {
    expect(mx.flatten(x()).shape).toEqual([24]);
    const f = mx.flatten(x(), 1, 2);
    expect(f.shape).toEqual([2, 12]);
    expect(flat(f)).toEqual(data);
  });
  it('squeeze and expandDims', () => {
    const e = mx.expandDims(x(), 1);
    expect(e.shape).toEqual([2, 1, 3, 4]);
    expect(mx.expandDims(x(), [0, -1]).shape).toEqual([1, 2, 3, 4, 1]);
    expect(mx.squeeze(e).shape).toEqual([2, 3, 4]);
    expect(mx.squeeze(mx.zeros([1, 2, 1]), 2).shape).toEqual([1, 2]);
    expect(flat(mx.squeeze(e, 1))).toEqual(data);
  });
  it('unflatten', () => {
    const u = mx.unflatten(x(), 2, [2, 2]);
    expect(u.shape).toEqual([2, 3, 2, 2]);
    expect(flat(u)).toEqual(data);
  });
});

describe('permuting', () => {
  it('transpose reverses axes by default and permutes by a list', () => {
    const t = mx.transpose(x());
    expect(t.shape).toEqual([4, 3, 2]);
    expect(flat(t)).toEqual(build([4, 3, 2], ([a, b, c]) => at([c, b, a])));
    const p = mx.transpose(x(), [1, 2, 0]);
    expect(flat(p)).toEqual(build([3, 4, 2], ([a, b, c]) => at([c, a, b])));
  });
  it('swapaxes and moveaxis', () => {
    expect(flat(mx.swapaxes(x(), 0, 2))).toEqual(build([4, 3, 2], ([a, b, c]) => at([c, b, a])));
    expect(flat(mx.moveaxis(x(), 0, 2))).toEqual(build([3, 4, 2], ([a, b, c]) => at([c, a, b])));
  });
});

describe('joining and splitting', () => {
  it('concatenate along an axis and flattened', () => {
    const a = mx.array([
      [1, 2],
      [3, 4],
    ]);
    const b = mx.array([[5, 6]]);
    expect(mx.concatenate([a, b], 0).toList()).toEqual([
      [1, 2],
      [3, 4],
      [5, 6],
    ]);
    expect(mx.concatenate([a, mx.array([[7], [8]])], 1).toList()).toEqual([
      [1, 2, 7],
      [3, 4, 8],
    ]);
    expect(mx.concatenate([a, b], null).toList()).toEqual([1, 2, 3, 4, 5, 6]);
  });
  it('stack on a new axis', () => {
    const a = mx.array([1, 2, 3]);
    const b = mx.array([4, 5, 6]);
    expect(mx.stack([a, b]).toList()).toEqual([
      [1, 2, 3],
      [4, 5, 6],
    ]);
    expect(mx.stack([a, b], 1).toList()).toEqual([
      [1, 4],
      [2, 5],
      [3, 6],
    ]);
  });
  it('split into equal parts and at indices', () => {
    const parts = mx.split(x(), 2, 2);
    expect(parts.map((p) => p.shape)).toEqual([
      [2, 3, 2],
      [2, 3, 2],
    ]);
    expect(flat(parts[1])).toEqual(build([2, 3, 2], ([a, b, c]) => at([a, b, c + 2])));
    const at1 = mx.split(mx.arange(7), [2, 5]);
    expect(at1.map((p) => p.toList())).toEqual([
      [0, 1],
      [2, 3, 4],
      [5, 6],
    ]);
  });
});

describe('slicing and padding', () => {
  it('slice with start, stop and strides', () => {
    const s = mx.slice(x(), [0, 1, 0], [2, 3, 4], [1, 1, 2]);
    expect(s.shape).toEqual([2, 2, 2]);
    expect(flat(s)).toEqual(build([2, 2, 2], ([a, b, c]) => at([a, b + 1, 2 * c])));
  });
  it('sliceUpdate writes a block', () => {
    const u = mx.sliceUpdate(
      mx.zeros([3, 4]),
      mx.array([
        [1, 2],
        [3, 4],
      ]),
      [1, 2],
      [3, 4],
      [1, 1],
    );
    expect(u.toList()).toEqual([
      [0, 0, 0, 0],
      [0, 0, 1, 2],
      [0, 0, 3, 4],
    ]);
  });
  it('pad with a constant, per axis low and high', () => {
    const a = mx.array([
      [1, 2],
      [3, 4],
    ]);
    const p = mx.pad(a, [0, 1], [1, 0], [0, 2], -1, 'constant');
    expect(p.toList()).toEqual([
      [-1, -1, -1, -1],
      [1, 2, -1, -1],
      [3, 4, -1, -1],
    ]);
    expect(mx.padSymmetric(mx.array([1, 2, 3]), 2, 0, 'edge').toList()).toEqual([1, 1, 1, 2, 3, 3, 3]);
  });
  it('tile, repeat, broadcastTo', () => {
    const a = mx.array([
      [1, 2],
      [3, 4],
    ]);
    expect(flat(mx.tile(a, [2, 3]))).toEqual(
      build(
        [4, 6],
        ([i, j]) =>
          [
            [1, 2],
            [3, 4],
          ][i % 2][j % 2],
      ),
    );
    expect(mx.repeat(a, 2, 1).toList()).toEqual([
      [1, 1, 2, 2],
      [3, 3, 4, 4],
    ]);
    expect(mx.repeat(a, 2).toList()).toEqual([1, 1, 2, 2, 3, 3, 4, 4]);
    const b = mx.broadcastTo(mx.array([[1], [2]]), [2, 3]);
    expect(b.toList()).toEqual([
      [1, 1, 1],
      [2, 2, 2],
    ]);
  });
  it('roll along an axis and flattened', () => {
    expect(mx.roll(mx.arange(5), 2).toList()).toEqual([3, 4, 0, 1, 2]);
    expect(
      mx
        .roll(
          mx.array([
            [1, 2, 3],
            [4, 5, 6],
          ]),
          -1,
          1,
        )
        .toList(),
    ).toEqual([
      [2, 3, 1],
      [5, 6, 4],
    ]);
  });
  it('tril, triu, eye, diag, trace', () => {
    const m = build([3, 3], ([i, j]) => 3 * i + j + 1);
    const M = mx.array(m, { shape: [3, 3] });
    expect(flat(mx.tril(M, 0))).toEqual(build([3, 3], ([i, j]) => (j <= i ? 3 * i + j + 1 : 0)));
    expect(flat(mx.triu(M, 1))).toEqual(build([3, 3], ([i, j]) => (j >= i + 1 ? 3 * i + j + 1 : 0)));
    expect(flat(mx.eye(3, 4, 1, 'float32'))).toEqual(build([3, 4], ([i, j]) => (j === i + 1 ? 1 : 0)));
    expect(flat(mx.diag(M, 0))).toEqual([1, 5, 9]);
    expect(mx.trace(M, 0, 0, 1, 'float32').item()).toBe(15);
  });
});

describe('constructors', () => {
  it('arange, linspace, full, zeros, ones', () => {
    expect(mx.arange(5).toList()).toEqual([0, 1, 2, 3, 4]);
    expect(mx.arange(1, 2, 0.25).toList()).toEqual([1, 1.25, 1.5, 1.75]);
    expect(mx.arange(3, undefined, 1, 'int32').dtype).toBe('int32');
    expect(mx.linspace(0, 1, 5, 'float32').toList()).toEqual([0, 0.25, 0.5, 0.75, 1]);
    expect(mx.full([2, 2], 7).toList()).toEqual([
      [7, 7],
      [7, 7],
    ]);
    expect(mx.full([2], 3, 'int32').dtype).toBe('int32');
    expect(mx.zeros([2, 1]).toList()).toEqual([[0], [0]]);
    expect(mx.ones([3], 'uint8').toList()).toEqual([1, 1, 1]);
    expect(mx.onesLike(x()).shape).toEqual(shape);
  });
});

describe('indexing', () => {
  const idx = (v: number[]) => mx.array(v, 'int32');
  it('take along an axis and from the flattened array', () => {
    const t = mx.take(x(), idx([2, 0, 2]), 1);
    expect(t.shape).toEqual([2, 3, 4]);
    expect(flat(t)).toEqual(build([2, 3, 4], ([a, b, c]) => at([a, [2, 0, 2][b], c])));
    expect(flat(mx.take(x(), idx([23, 0, 5])))).toEqual([data[23], data[0], data[5]]);
  });
  it('takeAlongAxis and putAlongAxis', () => {
    const ind = [
      [3, 0],
      [1, 1],
      [2, 3],
    ];
    const I = mx.array([ind, ind], 'int32'); // [2, 3, 2]
    const t = mx.takeAlongAxis(x(), I, 2);
    expect(flat(t)).toEqual(build([2, 3, 2], ([a, b, c]) => at([a, b, ind[b][c]])));
    const z = mx.zeros([2, 4]);
    const p = mx.putAlongAxis(z, mx.array([[1], [3]], 'int32'), mx.array([[10], [20]]), 1);
    expect(p.toList()).toEqual([
      [0, 10, 0, 0],
      [0, 0, 0, 20],
    ]);
  });
  it('gather slices at index tuples', () => {
    // Rows 1 and 0 of axis 0, whole slices: output is indices.shape + sliceSizes.
    const g = mx.gather(x(), [idx([1, 0])], [0], [1, 3, 4]);
    expect(g.shape).toEqual([2, 1, 3, 4]);
    expect(flat(g)).toEqual([...data.slice(12), ...data.slice(0, 12)]);
    // Points (a, b) with full last axis.
    const pts = [
      [1, 2],
      [0, 1],
      [1, 0],
    ];
    const g2 = mx.gather(x(), [idx(pts.map((p) => p[0])), idx(pts.map((p) => p[1]))], [0, 1], [1, 1, 4]);
    expect(g2.shape).toEqual([3, 1, 1, 4]);
    expect(flat(g2)).toEqual(pts.flatMap(([a, b]) => iota(4).map((c) => at([a, b, c]))));
  });
  it('scatter writes and scatterAdd accumulates duplicates', () => {
    const s = mx.scatter(mx.zeros([4, 2]), [idx([3, 1])], mx.array([[[1, 2]], [[3, 4]]]), [0]);
    expect(s.toList()).toEqual([
      [0, 0],
      [3, 4],
      [0, 0],
      [1, 2],
    ]);
    const sa = mx.scatterAdd(mx.zeros([3]), [idx([0, 2, 0, 0])], mx.array([[1], [2], [3], [4]]), [0]);
    expect(sa.toList()).toEqual([8, 0, 2]);
    const sm = mx.scatterMax(mx.full([3], -100), [idx([1, 1, 2])], mx.array([[5], [9], [-1]]), [0]);
    expect(sm.toList()).toEqual([-100, 9, -1]);
    const sad = mx.scatterAddAxis(
      mx.zeros([2, 3]),
      mx.array(
        [
          [0, 0],
          [2, 1],
        ],
        'int32',
      ),
      mx.array([
        [1, 2],
        [3, 4],
      ]),
      1,
    );
    expect(sad.toList()).toEqual([
      [3, 0, 0],
      [0, 4, 3],
    ]);
  });
});
