// The native CPU kernels on inputs that are views: a transpose, a slice past the buffer's start,
// a slice along the last axis, a reversed slice and a broadcast. The kernels read their inputs in
// row order and copy a view into row order inside their evaluation (native/src/kernels/common/dense.h), no
// longer through a Contiguous node in front; each case here is checked against the same kernel on
// a fresh row-ordered array of the same values (whose results the kernels' own tests check
// against float64 references), so a view read through the wrong strides or offset fails it.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';
import { flat, inputs } from '../test/numeric.js';

const cpu = { stream: 'cpu' } as const;
const size = (shape: readonly number[]) => shape.reduce((a, b) => a * b, 1);

/** Row-order values of a view made by `make` (evaluated on its own). */
const valuesOf = (a: mx.Array) => flat(a);

/**
 * Views of `shape` over the values `v` (row order): each is built from other data so that its
 * strides, offset or broadcast differ from a plain array's.
 */
function views(v: number[], shape: number[]): { name: string; x: mx.Array }[] {
  const nd = shape.length;
  const out: { name: string; x: mx.Array }[] = [];
  // Transposed: the data laid out with the axes reversed, then transposed back.
  const rev = [...shape].reverse();
  const perm = [...Array(nd).keys()].reverse();
  const base = mx.array(new Float32Array(v), { shape });
  const laidOut = mx.array(new Float32Array(flat(mx.transpose(base, perm, cpu))), { shape: rev });
  out.push({ name: 'transposed', x: mx.transpose(laidOut, perm, cpu) });
  // The last axis moved from next-to-last (an NCHW image read as NHWC): the next-to-last axis is the
  // contiguous one, the last its length apart (the row-ordered copy's plane transpose).
  if (nd >= 2) {
    const swap = [...Array(nd).keys()];
    [swap[nd - 2], swap[nd - 1]] = [swap[nd - 1], swap[nd - 2]];
    const swapped = mx.array(new Float32Array(flat(mx.transpose(base, swap, cpu))), { shape: swap.map((a) => shape[a]) });
    out.push({ name: 'last two axes swapped', x: mx.transpose(swapped, swap, cpu) });
  }
  // A slice along the first axis that starts one row in (row-contiguous, at an offset).
  const rows = [shape[0] + 2, ...shape.slice(1)];
  const inner = size(shape.slice(1));
  const padded = new Float32Array(size(rows)).fill(Number.NaN);
  padded.set(v, inner);
  out.push({
    name: 'offset slice',
    x: mx.slice(
      mx.array(padded, { shape: rows }),
      [1, ...Array(nd - 1).fill(0)],
      [1 + shape[0], ...shape.slice(1)],
      Array(nd).fill(1),
      cpu,
    ),
  });
  // Every other element of a twice-as-long last axis.
  const last = shape[nd - 1];
  const wide = [...shape.slice(0, -1), 2 * last];
  const spread = new Float32Array(size(wide)).fill(Number.NaN);
  for (let i = 0; i < v.length; i++) spread[Math.floor(i / last) * 2 * last + 2 * (i % last)] = v[i];
  out.push({
    name: 'strided slice',
    x: mx.slice(mx.array(spread, { shape: wide }), Array(nd).fill(0), wide, [...Array(nd - 1).fill(1), 2], cpu),
  });
  // The last axis read backwards.
  const reversed = new Float32Array(v.length);
  for (let i = 0; i < v.length; i++) reversed[Math.floor(i / last) * last + (last - 1 - (i % last))] = v[i];
  out.push({
    name: 'reversed slice',
    x: mx.slice(
      mx.array(reversed, { shape }),
      [...Array(nd - 1).fill(0), last - 1],
      [...shape.slice(0, -1), -last - 1],
      [...Array(nd - 1).fill(1), -1],
      cpu,
    ),
  });
  return out;
}

/** A broadcast over the leading axis: shape [k, ...rest] from one row of values. */
function broadcastView(row: number[], shape: number[]): { x: mx.Array; values: number[] } {
  const x = mx.broadcastTo(mx.array(new Float32Array(row), { shape: [1, ...shape.slice(1)] }), shape, cpu);
  const values: number[] = [];
  for (let i = 0; i < shape[0]; i++) values.push(...row);
  return { x, values };
}

const plain = (v: number[], shape: number[]) => mx.array(new Float32Array(v), { shape });

/** `op` on each view of each input (the others plain) equals `op` on plain arrays, bit for bit. */
function checkViews(shapes: number[][], op: (...xs: mx.Array[]) => mx.Array, seed: number): void {
  const data = shapes.map((s, i) => inputs(size(s), -3, 3, seed + i));
  const ref = flat(op(...data.map((d, i) => plain(d, shapes[i]))));
  for (let k = 0; k < shapes.length; k++) {
    for (const { name, x } of views(data[k], shapes[k])) {
      expect(valuesOf(x), `${name} view of input ${k}`).toEqual(data[k]);
      const args = data.map((d, i) => (i === k ? x : plain(d, shapes[i])));
      expect(flat(op(...args)), `input ${k} as a ${name} view`).toEqual(ref);
    }
  }
  // The first input broadcast from one row.
  if (shapes[0].length >= 2) {
    const row = inputs(size(shapes[0].slice(1)), -3, 3, seed + 99);
    const { x, values } = broadcastView(row, shapes[0]);
    const rest = data.slice(1).map((d, i) => plain(d, shapes[i + 1]));
    expect(flat(op(x, ...rest)), 'input 0 broadcast').toEqual(flat(op(plain(values, shapes[0]), ...rest)));
  }
}

describe('native CPU kernels on strided inputs', () => {
  it('fusedActivation (with and without a bias)', () => {
    checkViews([[3, 5, 37]], (x) => mx.ext.fusedActivation(x, null, 'gelu', cpu), 1);
    checkViews([[3, 5, 37], [37]], (x, b) => mx.ext.fusedActivation(x, b, 'silu', cpu), 2);
  });

  it('fusedSoftmax, fusedLayerNorm, fusedRmsNorm', () => {
    checkViews([[4, 3, 19]], (x) => mx.ext.fusedSoftmax(x, false, cpu), 3);
    checkViews([[4, 3, 19]], (x) => mx.ext.fusedSoftmax(x, true, cpu), 4);
    checkViews([[6, 33], [33], [33]], (x, w, b) => mx.ext.fusedLayerNorm(x, w, b, 1e-5, cpu), 5);
    checkViews([[6, 33], [33]], (x, w) => mx.ext.fusedRmsNorm(x, w, 1e-6, cpu), 6);
  });

  it('hardSigmoid and HardSwish', () => {
    checkViews([[2, 3, 5, 7]], (x) => mx.ext.hardSigmoid(x, 1 / 6, 0.5, false, cpu), 7);
    checkViews([[2, 3, 5, 7]], (x) => mx.ext.hardSigmoid(x, 1 / 6, 0.5, true, cpu), 8);
  });

  it('convEpilogue: channels-first, channels-last moved, channels-last rows', () => {
    checkViews([[2, 9, 5, 6], [9], [2, 9, 5, 6]], (y, b, r) => mx.ext.convEpilogue(y, b, r, 0, 6, false, cpu), 9);
    checkViews([[2, 5, 6, 9], [9], [2, 9, 5, 6]], (y, b, r) => mx.ext.convEpilogue(y, b, r, -1, 1, true, cpu), 10);
    checkViews([[30, 9], [9], [30, 9]], (y, b, r) => mx.ext.convEpilogue(y, b, r, 0, Number.POSITIVE_INFINITY, true, cpu), 11);
  });

  it('depthwiseConv2d', () => {
    checkViews([[2, 4, 7, 8], [8, 1, 3, 3], [8]], (x, w, b) => mx.ext.depthwiseConv2d(x, w, b, 2, 1, 1, 1, 1, 0, 1, 1, cpu), 12);
  });

  it('pointwiseConv, convEpilogueAct and meanTrailing', () => {
    checkViews([[2, 6, 5, 7], [9, 6], [9], [2, 9, 5, 7]], (x, w, b, r) => mx.ext.pointwiseConv(x, w, b, r, -1, 3, 2, 1 / 6, 0.5, cpu), 16);
    checkViews([[2, 9, 5, 6], [9]], (y, b) => mx.ext.convEpilogueAct(y, b, null, -2, 2, 1, 0.2, 0.5, false, cpu), 17);
    checkViews([[3, 5, 4, 7]], (x) => mx.ext.meanTrailing(x, 2, true, cpu), 18);
  });

  it('images moved to channels-last over several tasks (the row-ordered copy transposes each plane in blocks)', () => {
    // [N, C, H, W] read as [N, H, W, C]: rows of 3 (an RGB stem's input, its few-column loop), of 12
    // (the blocked loop), and a plane longer than a block (its last block partial), split over the
    // pool's tasks; against MLX's own row-ordered copy of the same view.
    for (const [shape, seed] of [
      [[1, 3, 96, 96], 19],
      [[2, 12, 40, 40], 20],
      [[1, 3, 1, 2000], 21],
    ] as [number[], number][]) {
      const v = inputs(size(shape), -3, 3, seed);
      const t = mx.transpose(mx.array(new Float32Array(v), { shape }), [0, 2, 3, 1], cpu);
      const want = flat(mx.ext.hardSigmoid(mx.contiguous(t, false, cpu), 0.2, 0.5, true, cpu));
      for (const threads of [1, 2, 3]) {
        const before = mx.cpuThreads();
        mx.setCpuThreads(threads);
        try {
          expect(flat(mx.ext.hardSigmoid(t, 0.2, 0.5, true, cpu)), `[${shape}] on ${threads} threads`).toEqual(want);
        } finally {
          mx.setCpuThreads(before);
        }
      }
    }
  });

  it('maxPoolChannelsLast', () => {
    checkViews([[2, 7, 6, 5]], (x) => mx.ext.maxPoolChannelsLast(x, [3, 3], [2, 2], [1, 1], [1, 0], [1, 1], cpu), 13);
  });

  it('convGemm (input, bias and residual as views)', () => {
    const w = mx.ext.convPackWeight(mx.array(new Float32Array(inputs(8 * 3 * 3 * 5, -1, 1, 14)), { shape: [8, 3, 3, 5] }), cpu);
    checkViews(
      [[2, 6, 7, 5], [8], [2, 6, 7, 8]],
      (x, b, r) => mx.ext.convGemm(x, w, 8, b, r, [1, 1], [1, 1], [1, 1], [1, 1], 0, 6, cpu),
      15,
    );
  });
});
