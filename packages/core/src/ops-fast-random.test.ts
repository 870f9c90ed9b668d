// mlx.fast (layer norm, RMS norm, RoPE, attention) against JS implementations; random against
// shape, dtype, range and statistics with seeded keys.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';
import { inputs, flat, expectAllClose } from '../test/numeric.js';

const expectClose = (actual: mx.Array, expected: readonly number[], rtol = 1e-5, atol = 1e-5): void =>
  expectAllClose(actual, expected, rtol, atol);
const rows = (xs: readonly number[], d: number) => Array.from({ length: xs.length / d }, (_, r) => xs.slice(r * d, r * d + d));
const mean = (xs: readonly number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const variance = (xs: readonly number[]) => {
  const m = mean(xs);
  return mean(xs.map((x) => (x - m) ** 2));
};

describe('fast', () => {
  const D = 8;
  const X = inputs(3 * D, -2, 2, 1);
  const w = inputs(D, 0.5, 1.5, 2);
  const b = inputs(D, -0.5, 0.5, 3);

  it('layerNorm with and without weight and bias', () => {
    const eps = 1e-5;
    const norm = (r: number[]) => {
      const m = mean(r);
      const s = Math.sqrt(variance(r) + eps);
      return r.map((v) => (v - m) / s);
    };
    const x = mx.array(X, { shape: [3, D] });
    expectClose(mx.fast.layerNorm(x, null, null, eps), rows(X, D).flatMap(norm));
    expectClose(
      mx.fast.layerNorm(x, mx.array(w), mx.array(b), eps),
      rows(X, D).flatMap((r) => norm(r).map((v, i) => v * w[i] + b[i])),
    );
  });

  it('rmsNorm', () => {
    const eps = 1e-6;
    const ref = rows(X, D).flatMap((r) => {
      const s = Math.sqrt(mean(r.map((v) => v * v)) + eps);
      return r.map((v, i) => (v / s) * w[i]);
    });
    expectClose(mx.fast.rmsNorm(mx.array(X, { shape: [3, D] }), mx.array(w), eps), ref);
  });

  /** RoPE over the last axis of [L, D] rows at positions offset + l, rotating the first `dims` features. */
  function ropeRef(x: number[], L: number, d: number, dims: number, traditional: boolean, base: number, scale: number, offset: number) {
    const out = [...x];
    for (let l = 0; l < L; l++) {
      const pos = (offset + l) * scale;
      for (let i = 0; i < dims / 2; i++) {
        const theta = pos * base ** ((-2 * i) / dims);
        const [p, q] = traditional ? [2 * i, 2 * i + 1] : [i, i + dims / 2];
        const a = x[l * d + p];
        const c = x[l * d + q];
        out[l * d + p] = a * Math.cos(theta) - c * Math.sin(theta);
        out[l * d + q] = a * Math.sin(theta) + c * Math.cos(theta);
      }
    }
    return out;
  }

  for (const traditional of [false, true]) {
    it(`rope (traditional: ${traditional}), with an offset, a scale and partial dims`, () => {
      const L = 5;
      const x = inputs(L * D, -1, 1, 4);
      const arr = mx.array(x, { shape: [1, L, D] });
      expectClose(mx.fast.rope(arr, D, traditional, 10000, 1, 0), ropeRef(x, L, D, D, traditional, 10000, 1, 0), 1e-4, 1e-5);
      expectClose(mx.fast.rope(arr, D, traditional, 500, 0.5, 3), ropeRef(x, L, D, D, traditional, 500, 0.5, 3), 1e-4, 1e-5);
      // Only the first 4 features rotate; the rest pass through.
      expectClose(mx.fast.rope(arr, 4, traditional, 10000, 1, 2), ropeRef(x, L, D, 4, traditional, 10000, 1, 2), 1e-4, 1e-5);
    });
  }

  /** softmax(q k^T * scale + mask) v for one head: q [Lq, d], k/v [Lk, d]. */
  function attentionRef(
    q: number[],
    k: number[],
    v: number[],
    Lq: number,
    Lk: number,
    d: number,
    scale: number,
    mask?: (i: number, j: number) => number,
  ) {
    const out: number[] = [];
    for (let i = 0; i < Lq; i++) {
      const s = Array.from({ length: Lk }, (_, j) => {
        let dot = 0;
        for (let c = 0; c < d; c++) dot += q[i * d + c] * k[j * d + c];
        return dot * scale + (mask ? mask(i, j) : 0);
      });
      const m = Math.max(...s);
      const e = s.map((x) => Math.exp(x - m));
      const z = e.reduce((a, c) => a + c, 0);
      for (let c = 0; c < d; c++) out.push(e.reduce((acc, p, j) => acc + (p / z) * v[j * d + c], 0));
    }
    return out;
  }
  const head = (xs: number[], h: number, L: number, d: number) => xs.slice(h * L * d, (h + 1) * L * d);

  it('scaledDotProductAttention with grouped KV heads, no mask and causal', () => {
    const [Hq, Hkv, L, d] = [4, 2, 6, 8];
    const q = inputs(Hq * L * d, -1, 1, 5);
    const k = inputs(Hkv * L * d, -1, 1, 6);
    const v = inputs(Hkv * L * d, -1, 1, 7);
    const scale = 1 / Math.sqrt(d);
    const Q = mx.array(q, { shape: [1, Hq, L, d] });
    const K = mx.array(k, { shape: [1, Hkv, L, d] });
    const V = mx.array(v, { shape: [1, Hkv, L, d] });
    // Query head h reads KV head floor(h / (Hq / Hkv)).
    const kvOf = (h: number) => Math.floor(h / (Hq / Hkv));
    const full = Array.from({ length: Hq }, (_, h) =>
      attentionRef(head(q, h, L, d), head(k, kvOf(h), L, d), head(v, kvOf(h), L, d), L, L, d, scale),
    ).flat();
    expectClose(mx.fast.scaledDotProductAttention(Q, K, V, scale, '', null, null), full, 1e-4, 1e-5);
    const causal = (i: number, j: number) => (j <= i ? 0 : -Infinity);
    const ref = Array.from({ length: Hq }, (_, h) =>
      attentionRef(head(q, h, L, d), head(k, kvOf(h), L, d), head(v, kvOf(h), L, d), L, L, d, scale, causal),
    ).flat();
    expectClose(mx.fast.scaledDotProductAttention(Q, K, V, scale, 'causal', null, null), ref, 1e-4, 1e-5);
  });

  it('scaledDotProductAttention with an additive mask array', () => {
    const [Lq, Lk, d] = [3, 5, 4];
    const q = inputs(Lq * d, -1, 1, 8);
    const k = inputs(Lk * d, -1, 1, 9);
    const v = inputs(Lk * d, -1, 1, 10);
    const m = inputs(Lq * Lk, -2, 0, 11);
    const ref = attentionRef(q, k, v, Lq, Lk, d, 0.7, (i, j) => m[i * Lk + j]);
    const r = mx.fast.scaledDotProductAttention(
      mx.array(q, { shape: [1, 1, Lq, d] }),
      mx.array(k, { shape: [1, 1, Lk, d] }),
      mx.array(v, { shape: [1, 1, Lk, d] }),
      0.7,
      'array',
      mx.array(m, { shape: [1, 1, Lq, Lk] }),
      null,
    );
    expectClose(r, ref, 1e-4, 1e-5);
  });
});

describe('random', () => {
  const key = () => mx.random.key(1234);

  it('the same key gives the same values; split keys give different ones', () => {
    const a = flat(mx.random.uniform(0, 1, [100], 'float32', key()));
    const b = flat(mx.random.uniform(0, 1, [100], 'float32', key()));
    expect(a).toEqual(b);
    const [k1, k2] = mx.random.split(key());
    expect(k1.shape).toEqual([2]);
    expect(k1.dtype).toBe('uint32');
    const c = flat(mx.random.uniform(0, 1, [100], 'float32', k1));
    const d = flat(mx.random.uniform(0, 1, [100], 'float32', k2));
    expect(c).not.toEqual(a);
    expect(c).not.toEqual(d);
    expect(mx.random.splitNum(key(), 5).shape).toEqual([5, 2]);
  });

  it('uniform: shape, dtype, range, mean and variance', () => {
    const u = mx.random.uniform(-2, 3, [200, 50], 'float32', key());
    expect(u.shape).toEqual([200, 50]);
    expect(u.dtype).toBe('float32');
    const xs = flat(u);
    expect(Math.min(...xs)).toBeGreaterThanOrEqual(-2);
    expect(Math.max(...xs)).toBeLessThan(3);
    // n = 10000: the standard error of the mean is 5/sqrt(12)/100 ~ 0.0144.
    expect(Math.abs(mean(xs) - 0.5)).toBeLessThan(0.06);
    expect(Math.abs(variance(xs) - 25 / 12)).toBeLessThan(0.1);
  });

  it('normal: mean, std and a float16 dtype', () => {
    const xs = flat(mx.random.normal([10000], 'float32', 1.5, 2, key()));
    expect(Math.abs(mean(xs) - 1.5)).toBeLessThan(0.08);
    expect(Math.abs(Math.sqrt(variance(xs)) - 2)).toBeLessThan(0.08);
    const h = mx.random.normal([4, 4], 'float16', 0, 1, key());
    expect(h.dtype).toBe('float16');
    expect((h.toList() as number[][]).flat().every(Number.isFinite)).toBe(true);
  });

  it('randint: integers in [low, high) covering the range', () => {
    const r = mx.random.randint(-3, 4, [5000], 'int32', key());
    expect(r.dtype).toBe('int32');
    const xs = flat(r);
    expect(xs.every((v) => Number.isInteger(v) && v >= -3 && v < 4)).toBe(true);
    expect(new Set(xs).size).toBe(7);
    // Each of the 7 values ~ 714 times.
    for (let v = -3; v < 4; v++) expect(Math.abs(xs.filter((x) => x === v).length - 5000 / 7)).toBeLessThan(120);
  });

  it('bernoulli: booleans with the given frequency', () => {
    const b = mx.random.bernoulli(0.3, [10000], key());
    expect(b.dtype).toBe('bool');
    const freq = mean(flat(b));
    expect(Math.abs(freq - 0.3)).toBeLessThan(0.03);
  });

  it('truncatedNormal stays in its bounds; gumbel and laplace have their means', () => {
    const t = flat(mx.random.truncatedNormal(-0.5, 1, [5000], 'float32', key()));
    expect(Math.min(...t)).toBeGreaterThanOrEqual(-0.5);
    expect(Math.max(...t)).toBeLessThanOrEqual(1);
    const g = flat(mx.random.gumbel([10000], 'float32', key()));
    expect(Math.abs(mean(g) - 0.5772156649)).toBeLessThan(0.06); // Euler-Mascheroni
    const l = flat(mx.random.laplace([10000], 'float32', 2, 0.5, key()));
    expect(Math.abs(mean(l) - 2)).toBeLessThan(0.04);
    expect(Math.abs(variance(l) - 2 * 0.25)).toBeLessThan(0.06);
  });

  it('permutation is a permutation; categorical follows the logits', () => {
    const p = flat(mx.random.permutationArange(50, key()));
    expect([...p].sort((a, b) => a - b)).toEqual(Array.from({ length: 50 }, (_, i) => i));
    expect(p).not.toEqual(Array.from({ length: 50 }, (_, i) => i));
    const probs = [0.1, 0.6, 0.3];
    const c = flat(mx.random.categoricalNumSamples(mx.log(mx.array(probs)), -1, 6000, key()));
    expect(c.length).toBe(6000);
    for (let i = 0; i < 3; i++) expect(Math.abs(c.filter((v) => v === i).length / 6000 - probs[i])).toBeLessThan(0.03);
  });

  it('seed makes key-less calls reproducible', () => {
    mx.random.seed(7);
    const a = flat(mx.random.uniform(0, 1, [10], 'float32'));
    mx.random.seed(7);
    expect(flat(mx.random.uniform(0, 1, [10], 'float32'))).toEqual(a);
  });
});
