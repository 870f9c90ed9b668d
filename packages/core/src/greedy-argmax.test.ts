// ext.greedyArgmax: a greedy decoding step's token in one primitive. The expected index comes from a
// plain loop written here (NaN counted as -Infinity, the first of equal maxima), on the CPU kernel
// (float32) and on MLX's ops (the composition other dtypes take).
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';

/** The first index of the largest value, NaN as -Infinity; 0 where none exceeds -Infinity. */
function reference(xs: ArrayLike<number>): number {
  let best = Number.NEGATIVE_INFINITY;
  let at = 0;
  for (let i = 0; i < xs.length; i++) {
    const v = Number.isNaN(xs[i]) ? Number.NEGATIVE_INFINITY : xs[i];
    if (v > best) {
      best = v;
      at = i;
    }
  }
  return at;
}

function seeded(n: number, seed: number): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return (s / 2 ** 32) * 20 - 10;
  });
}

const token = (x: mx.Array) => {
  const y = mx.ext.greedyArgmax(x);
  expect(y.dtype).toBe('int32');
  expect(y.shape).toEqual([]);
  return (y.toTypedArray() as Int32Array)[0];
};

describe('ext.greedyArgmax', () => {
  const N = Number.NaN;
  const I = Number.POSITIVE_INFINITY;
  const cases: [string, number[]][] = [
    ['plain', [0.5, 2, -1, 1.5]],
    ['ties keep the first', [1, 3, 3, 2, 3]],
    ['NaN never wins', [N, 1, N, 0.5]],
    ['NaN first, the rest -Infinity: 0', [N, -I, -I]],
    ['every value NaN: 0', [N, N, N]],
    ['every value -Infinity: 0', [-I, -I]],
    ['-Infinity then a finite value', [-I, -I, -5]],
    ['+Infinity wins, the first of two', [1, I, N, I]],
    ['one element', [-3]],
  ];
  for (const [name, xs] of cases) {
    it(name, () => {
      const want = reference(xs);
      expect(token(mx.array(new Float32Array(xs), { shape: [xs.length] }))).toBe(want);
      // Other dtypes take MLX's ops: the same rule.
      expect(token(mx.astype(mx.array(new Float32Array(xs), { shape: [xs.length] }), 'float16'))).toBe(want);
    });
  }

  it('a 128k vocabulary, a [1, 1, V] step output and a sliced view of a batch', () => {
    const V = 128_256;
    const xs = seeded(V, 7);
    xs[V - 3] = 50; // the largest, near the end
    xs[1000] = Number.NaN;
    expect(token(mx.array(xs, { shape: [1, 1, V] }))).toBe(reference(xs));
    const batch = seeded(3 * 4096, 11);
    const rows = mx.array(batch, { shape: [3, 4096] });
    const last = mx.slice(rows, [2, 0], [3, 4096], [1, 1]);
    expect(token(last)).toBe(reference(batch.subarray(2 * 4096)));
    // A transposed view is read in its logical order.
    const t = mx.transpose(mx.array(seeded(64, 3), { shape: [8, 8] }));
    expect(token(t)).toBe(reference(t.toTypedArray() as Float32Array));
  });

  it('an empty array is an error', () => {
    expect(() => mx.ext.greedyArgmax(mx.array(new Float32Array(0), { shape: [0] }))).toThrow(/empty/);
  });
});

describe('greedyRows', () => {
  /** Rows of a length around the kernel's 16- and 4-lane blocks, with NaN, infinities and ties placed at random. */
  function awkward(V: number, seed: number): Float32Array {
    const xs = seeded(V, seed);
    let s = seed;
    const next = () => (s = (Math.imul(s, 1103515245) + 12345) >>> 0) % V;
    for (let i = 0; i < V / 5; i++) xs[next()] = Number.NaN;
    const top = 20 + (seed % 3);
    // Ties for the maximum (the first wins), sometimes an infinity, sometimes a row of -Infinity only.
    xs[next()] = top;
    xs[next()] = top;
    if (seed % 4 === 0) xs[next()] = Number.POSITIVE_INFINITY;
    if (seed % 7 === 0) xs.fill(Number.NEGATIVE_INFINITY);
    return xs;
  }

  it('matches the reference on every row length from 1 to 70, and ext.greedyArgmax', () => {
    for (let V = 1; V <= 70; V++) {
      const xs = awkward(V, V);
      const x = mx.array(xs, { shape: [1, 1, V] });
      expect(mx.greedyRows(x)?.[0]).toBe(reference(xs));
      expect(token(x)).toBe(reference(xs));
    }
  });

  it("the last rows of a batch, each the reference's choice, read from a lazy result", () => {
    const V = 4099;
    const data = new Float32Array(5 * V);
    for (let r = 0; r < 5; r++) data.set(awkward(V, 100 + r), r * V);
    // Lazy: the sum is evaluated by the call.
    const x = mx.add(mx.array(data, { shape: [1, 5, V] }), mx.array(new Float32Array([0]), { shape: [1] }));
    const ids = mx.greedyRows(x, 3);
    expect(Array.from(ids ?? [])).toEqual([2, 3, 4].map((r) => reference(data.subarray(r * V, (r + 1) * V))));
  });

  it('undefined where the data cannot be read in place: float16, a transposed view', () => {
    const xs = seeded(64, 9);
    expect(mx.greedyRows(mx.astype(mx.array(xs, { shape: [64] }), 'float16'))).toBeUndefined();
    const t = mx.transpose(mx.array(xs, { shape: [8, 8] }));
    expect(mx.greedyRows(t)).toBeUndefined();
  });

  it('refuses rows it does not have, empty rows and a disposed array', () => {
    const x = mx.array(seeded(12, 1), { shape: [3, 4] });
    expect(() => mx.greedyRows(x, 4)).toThrow(/4 rows asked of an array of 3/);
    expect(() => mx.greedyRows(x, 0)).toThrow(/rows must be a positive integer/);
    expect(() => mx.greedyRows(mx.array(new Float32Array(0), { shape: [2, 0] }))).toThrow(/empty/);
    x.dispose();
    expect(() => mx.greedyRows(x)).toThrow(/disposed/);
  });
});
