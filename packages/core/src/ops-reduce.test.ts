// Reductions, scans, softmax/logsumexp and sorting, against plain-JS float64 references.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';
import { inputs, flat, expectAllClose } from '../test/numeric.js';

const expectClose = (actual: mx.Array, expected: readonly number[], rtol = 2e-6, atol = 1e-5): void =>
  expectAllClose(actual, expected, rtol, atol);

const strides = (shape: readonly number[]) => shape.map((_, i) => shape.slice(i + 1).reduce((a, b) => a * b, 1));

/** Reduces `data` of `shape` over `axes` with `f` (which sees the reduced values in index order). */
function reduceRef(
  data: readonly number[],
  shape: readonly number[],
  axes: readonly number[],
  f: (xs: number[]) => number,
  keepdims = false,
) {
  const ax = axes.map((a) => (a < 0 ? a + shape.length : a));
  const outShapeKeep = shape.map((s, i) => (ax.includes(i) ? 1 : s));
  const outSize = outShapeKeep.reduce((a, b) => a * b, 1);
  const groups: number[][] = Array.from({ length: outSize }, () => []);
  const st = strides(shape);
  const ost = strides(outShapeKeep);
  for (let i = 0; i < data.length; i++) {
    let o = 0;
    for (let d = 0; d < shape.length; d++) {
      const idx = Math.floor(i / st[d]) % shape[d];
      if (!ax.includes(d)) o += idx * ost[d];
    }
    groups[o].push(data[i]);
  }
  return { values: groups.map(f), shape: keepdims ? outShapeKeep : shape.filter((_, i) => !ax.includes(i)) };
}

/** Applies `f` to each 1-D line of `data` along `axis`, writing a line of the same length back. */
function alongAxis(data: readonly number[], shape: readonly number[], axis: number, f: (line: number[]) => number[]): number[] {
  const st = strides(shape);
  const out = new Array<number>(data.length);
  for (let i = 0; i < data.length; i++) {
    if (Math.floor(i / st[axis]) % shape[axis] !== 0) continue;
    const idx = Array.from({ length: shape[axis] }, (_, k) => i + k * st[axis]);
    const res = f(idx.map((j) => data[j]));
    idx.forEach((j, k) => (out[j] = res[k]));
  }
  return out;
}

const sumF = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
const meanF = (xs: number[]) => sumF(xs) / xs.length;
const varF = (ddof: number) => (xs: number[]) => {
  const m = meanF(xs);
  return sumF(xs.map((x) => (x - m) ** 2)) / (xs.length - ddof);
};
const lseF = (xs: number[]) => {
  const m = Math.max(...xs);
  return m + Math.log(sumF(xs.map((x) => Math.exp(x - m))));
};

const shape = [2, 3, 4];
const data = inputs(24, -2, 2, 42);
const x = () => mx.array(data, { shape });

describe('reductions', () => {
  const cases: [string, (a: mx.Array, axis?: mx.Axis | null, o?: mx.ReduceOptions) => mx.Array, (xs: number[]) => number][] = [
    ['sum', mx.sum, sumF],
    ['mean', mx.mean, meanF],
    ['prod', mx.prod, (xs) => xs.reduce((a, b) => a * b, 1)],
    ['max', mx.max, (xs) => Math.max(...xs)],
    ['min', mx.min, (xs) => Math.min(...xs)],
    ['logsumexp', mx.logsumexp, lseF],
  ];
  for (const [name, f, ref] of cases) {
    it(`${name}: all, one axis, several axes, keepdims`, () => {
      const all = f(x());
      expect(all.shape).toEqual([]);
      expectClose(all, [ref(data)]);
      for (const [axis, keepdims] of [
        [1, false],
        [-1, true],
        [[0, 2], false],
        [[0, 1], true],
      ] as const) {
        const r = reduceRef(data, shape, typeof axis === 'number' ? [axis] : axis, ref, keepdims);
        const got = f(x(), axis, { keepdims });
        expect(got.shape, `axis ${String(axis)}`).toEqual(r.shape);
        expectClose(got, r.values);
      }
    });
  }

  it('variance and std with ddof', () => {
    for (const ddof of [0, 1]) {
      const r = reduceRef(data, shape, [2], varF(ddof));
      expectClose(mx.variance(x(), 2, { ddof }), r.values);
      expectClose(mx.std(x(), 2, { ddof }), r.values.map(Math.sqrt));
    }
    expectClose(mx.variance(x(), null, { ddof: 1 }), [varF(1)(data)]);
  });

  it('all and any with axes', () => {
    const b = [true, false, true, true, true, true];
    const a = mx.array(b, { shape: [2, 3] });
    expect(mx.all(a).item()).toBe(false);
    expect(mx.any(a).item()).toBe(true);
    expect(mx.all(a, 1).toList()).toEqual([false, true]);
    expect(mx.any(a, 0, { keepdims: true }).toList()).toEqual([[true, true, true]]);
    expect(mx.all(mx.array([false, false]), [0]).item()).toBe(false);
  });

  it('argmax and argmin, flat and along an axis', () => {
    const argOf = (pick: (a: number, b: number) => boolean) => (xs: number[]) => xs.reduce((bi, v, i) => (pick(v, xs[bi]) ? i : bi), 0);
    expect(mx.argmax(x()).item()).toBe(argOf((a, b) => a > b)(data));
    expect(mx.argmin(x()).item()).toBe(argOf((a, b) => a < b)(data));
    const r = reduceRef(
      data,
      shape,
      [1],
      argOf((a, b) => a > b),
    );
    const got = mx.argmax(x(), 1);
    expect(got.shape).toEqual(r.shape);
    expect(flat(got)).toEqual(r.values);
    const rk = reduceRef(
      data,
      shape,
      [2],
      argOf((a, b) => a < b),
      true,
    );
    const gotk = mx.argmin(x(), 2, { keepdims: true });
    expect(gotk.shape).toEqual(rk.shape);
    expect(flat(gotk)).toEqual(rk.values);
  });

  it('median over axes', () => {
    const med = (xs: number[]) => {
      const s = [...xs].sort((a, b) => a - b);
      const m = s.length >> 1;
      return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
    };
    expectClose(mx.median(x(), [2], false), reduceRef(data, shape, [2], med).values);
    expectClose(mx.median(x(), [0, 1], false), reduceRef(data, shape, [0, 1], med).values);
  });
});

describe('softmax', () => {
  const softmaxLine = (xs: number[]) => {
    const m = Math.max(...xs);
    const e = xs.map((v) => Math.exp(v - m));
    const s = sumF(e);
    return e.map((v) => v / s);
  };
  it('along the last axis (the default) and along axis 0', () => {
    expectClose(mx.softmax(x()), alongAxis(data, shape, 2, softmaxLine), 1e-5, 1e-6);
    expectClose(mx.softmax(x(), 0), alongAxis(data, shape, 0, softmaxLine), 1e-5, 1e-6);
  });
  it('over all elements, and stably for large logits', () => {
    expectClose(mx.softmax(x(), null), softmaxLine(data), 1e-5, 1e-6);
    const big = [1000, 1001, 1002];
    expectClose(mx.softmax(mx.array(big)), softmaxLine(big), 1e-5, 1e-6);
  });
  it('logsumexp of large values does not overflow', () => {
    const big = [1000, 1000.5, 999];
    expectClose(mx.logsumexp(mx.array(big)), [lseF(big)], 1e-6);
  });
});

describe('scans', () => {
  const scan = (f: (acc: number, v: number) => number) => (xs: number[]) => {
    const out: number[] = [];
    xs.forEach((v, i) => out.push(i ? f(out[i - 1], v) : v));
    return out;
  };
  const cases: [string, (a: mx.Array, axis?: number, o?: mx.CumOptions) => mx.Array, (acc: number, v: number) => number][] = [
    ['cumsum', mx.cumsum, (a, v) => a + v],
    ['cumprod', mx.cumprod, (a, v) => a * v],
    ['cummax', mx.cummax, Math.max],
    ['cummin', mx.cummin, Math.min],
    ['logcumsumexp', mx.logcumsumexp, (a, v) => Math.max(a, v) + Math.log1p(Math.exp(-Math.abs(a - v)))],
  ];
  for (const [name, f, step] of cases) {
    it(`${name} along each axis`, () => {
      for (const axis of [0, 1, 2]) expectClose(f(x(), axis), alongAxis(data, shape, axis, scan(step)));
    });
  }
  it('cumsum reversed and exclusive', () => {
    const xs = [1, 2, 3, 4];
    expect(flat(mx.cumsum(mx.array(xs), 0, { reverse: true }))).toEqual([10, 9, 7, 4]);
    expect(flat(mx.cumsum(mx.array(xs), 0, { inclusive: false }))).toEqual([0, 1, 3, 6]);
    expect(flat(mx.cumsum(mx.array(xs), 0, { reverse: true, inclusive: false }))).toEqual([9, 7, 4, 0]);
  });
});

describe('sorting', () => {
  const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
  it('sort along each axis and flattened', () => {
    for (const axis of [0, 1, 2]) expect(flat(mx.sort(x(), axis))).toEqual(alongAxis(data, shape, axis, sorted));
    const all = mx.sort(x(), null);
    expect(all.shape).toEqual([24]);
    expect(flat(all)).toEqual(sorted(data));
  });

  it('argsort gives the permutation that sorts', () => {
    const argsorted = (xs: number[]) =>
      xs
        .map((v, i) => [v, i])
        .sort((a, b) => a[0] - b[0])
        .map((p) => p[1]);
    // Distinct values, so the permutation is unique.
    expect(new Set(data).size).toBe(data.length);
    expect(flat(mx.argsort(x(), -1))).toEqual(alongAxis(data, shape, 2, argsorted));
    expect(flat(mx.argsort(x(), null))).toEqual(argsorted(data));
  });

  it('topk returns the k largest (in some order)', () => {
    const xs = inputs(20, -10, 10, 7);
    const got = flat(mx.topk(mx.array(xs), 5));
    expect(sorted(got)).toEqual(sorted(xs).slice(-5));
    const rows = mx.topk(mx.array(xs, { shape: [4, 5] }), 2, 1);
    expect(rows.shape).toEqual([4, 2]);
    const g = flat(rows);
    for (let r = 0; r < 4; r++) expect(sorted(g.slice(2 * r, 2 * r + 2))).toEqual(sorted(xs.slice(5 * r, 5 * r + 5)).slice(-2));
  });

  it('partition puts the kth element in place with smaller ones before it', () => {
    const xs = inputs(9, 0, 1, 11);
    const p = flat(mx.partition(mx.array(xs), 4));
    const s = sorted(xs);
    expect(p[4]).toBe(s[4]);
    for (let i = 0; i < 4; i++) expect(p[i]).toBeLessThanOrEqual(s[4]);
    for (let i = 5; i < 9; i++) expect(p[i]).toBeGreaterThanOrEqual(s[4]);
  });
});
