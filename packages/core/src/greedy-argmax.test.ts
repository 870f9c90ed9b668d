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
