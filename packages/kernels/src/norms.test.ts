import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import {
  layerNorm,
  layerNormComposite,
  layerNormVjp,
  layerNormWithStats,
  rmsNorm,
  rmsNormComposite,
  rmsNormVjp,
  rmsNormWithStats,
} from './index.js';
import { gradientErrors } from './testing/gradient-check.js';
import { maxAbs, onCpu, randn, relativeError, values } from './testing/numeric.js';

describe('layerNorm', () => {
  it('normalises the trailing axes (fast path in float32 matches the composite)', () => {
    const x = mx.add(mx.multiply(randn([3, 4, 16]), 3), 1);
    const w = randn([16]);
    const b = randn([16]);
    expect(relativeError(layerNorm(x, w, b), layerNormComposite(x, w, b))).toBeLessThan(1e-5);
    expect(relativeError(layerNorm(x, w, b, { axis: 1, eps: 1e-3 }), layerNormComposite(x, w, b, { axis: 1, eps: 1e-3 }))).toBeLessThan(
      1e-5,
    );
    const y = layerNorm(x);
    expect(maxAbs(mx.mean(y, -1))).toBeLessThan(1e-5);
    expect(maxAbs(mx.subtract(mx.mean(mx.square(y), -1), 1))).toBeLessThan(1e-3);
  });

  it.each([
    ['weight and bias, last axis', [3, 5], {}, [5], [5]],
    ['no parameters', [2, 3, 4], {}, null, null],
    ['axis 1, broadcast weight', [2, 3, 4], { axis: 1 }, [1, 4], [3, 4]],
  ] as [string, number[], { axis?: number }, number[] | null, number[] | null][])(
    'VJP matches finite differences and autodiff: %s',
    (_n, shape, opts, ws, bs) => {
      onCpu(() => {
        const primals = [randn(shape, 'float64'), ...(ws ? [randn(ws, 'float64')] : []), ...(bs ? [randn(bs, 'float64')] : [])];
        const split = (xs: mx.Array[]) => [xs[0], ws ? xs[1] : null, bs ? xs[ws ? 2 : 1] : null] as const;
        const e = gradientErrors({
          kernel: (...xs) => layerNorm(...split(xs), opts),
          composite: (...xs) => layerNormComposite(...split(xs), opts),
          primals,
        });
        expect(e.forward).toBeLessThan(1e-12);
        for (const r of e.finiteDifference) expect(r).toBeLessThan(1e-7);
        for (const r of e.autodiff) expect(r).toBeLessThan(1e-12);
      });
    },
  );

  it('layerNormVjp returns the parameter gradients in their own shapes', () => {
    const g = layerNormVjp(randn([2, 3, 4]), randn([1, 4]), randn([4]), randn([2, 3, 4]));
    expect(g.dx.shape).toEqual([2, 3, 4]);
    expect(g.dweight?.shape).toEqual([1, 4]);
    expect(g.dbias?.shape).toEqual([4]);
  });
});

describe('rmsNorm', () => {
  it('matches x / sqrt(mean(x²) + eps) · w', () => {
    const x = randn([3, 8]);
    const w = randn([8]);
    expect(relativeError(rmsNorm(x, w, { eps: 1e-6 }), rmsNormComposite(x, w, { eps: 1e-6 }))).toBeLessThan(1e-5);
  });

  it.each([
    ['weight', [3, 6], {}, [6]],
    ['no weight, axis 0', [3, 4], { axis: 0 }, null],
  ] as [string, number[], { axis?: number }, number[] | null][])(
    'VJP matches finite differences and autodiff: %s',
    (_n, shape, opts, ws) => {
      onCpu(() => {
        const e = gradientErrors({
          kernel: (x, w) => rmsNorm(x, w ?? null, opts),
          composite: (x, w) => rmsNormComposite(x, w ?? null, opts),
          primals: [randn(shape, 'float64'), ...(ws ? [randn(ws, 'float64')] : [])],
        });
        expect(e.forward).toBeLessThan(1e-12);
        for (const r of e.finiteDifference) expect(r).toBeLessThan(1e-7);
        for (const r of e.autodiff) expect(r).toBeLessThan(1e-12);
      });
    },
  );

  it('rmsNormVjp without a weight gives only dx', () => {
    const g = rmsNormVjp(randn([2, 4]), null, randn([2, 4]));
    expect(g.dx.shape).toEqual([2, 4]);
    expect(g.dweight).toBeUndefined();
  });
});

/**
 * Layer / RMS norm in float64 on the host, over the axes [axis, ndim) of a row-major x, with
 * weight and bias given per normalised element or per element of x (already broadcast): the
 * reference for the options below, computed independently of MLX.
 */
function hostNorm(
  x: Float64Array,
  shape: number[],
  axis: number,
  eps: number,
  rms: boolean,
  w?: Float64Array,
  b?: Float64Array,
): { y: Float64Array; mean: Float64Array; invStd: Float64Array } {
  const n = shape.slice(axis).reduce((p, q) => p * q, 1);
  const rows = x.length / n;
  const y = new Float64Array(x.length);
  const mean = new Float64Array(rows);
  const invStd = new Float64Array(rows);
  for (let r = 0; r < rows; r++) {
    const row = x.subarray(r * n, (r + 1) * n);
    const mu = rms ? 0 : row.reduce((s, v) => s + v, 0) / n;
    const second = row.reduce((s, v) => s + (v - mu) ** 2, 0) / n;
    mean[r] = mu;
    invStd[r] = 1 / Math.sqrt(second + eps);
    const at = (p: Float64Array, i: number) => (p.length === n ? p[i] : p[r * n + i]);
    for (let i = 0; i < n; i++) y[r * n + i] = (row[i] - mu) * invStd[r] * (w ? at(w, i) : 1) + (b ? at(b, i) : 0);
  }
  return { y, mean, invStd };
}

/** max |a − e| / max |e| between an MLX array and host values. */
function hostError(actual: mx.Array, expected: Float64Array): number {
  const a = values(actual);
  let err = 0;
  let scale = 0;
  for (let i = 0; i < a.length; i++) {
    err = Math.max(err, Math.abs(a[i] - expected[i]));
    scale = Math.max(scale, Math.abs(expected[i]));
  }
  return err / scale;
}

describe('norm options against float64 host math', () => {
  const shape = [2, 3, 8];
  const x = mx.add(mx.multiply(randn(shape), 2), 0.5);
  const w = randn([8]);
  const b = randn([8]);
  const xs = values(x);
  const tile = (v: Float64Array, times: number) => Float64Array.from({ length: v.length * times }, (_, i) => v[i % v.length]);

  it.each(['auto', 'fused', 'composite'] as const)('layerNorm and rmsNorm over the last axis (%s)', (implementation) => {
    const ln = hostNorm(xs, shape, 2, 1e-5, false, values(w), values(b));
    const rn = hostNorm(xs, shape, 2, 1e-6, true, values(w));
    expect(hostError(layerNorm(x, w, b, { implementation }), ln.y)).toBeLessThan(2e-6);
    expect(hostError(rmsNorm(x, w, { eps: 1e-6, implementation }), rn.y)).toBeLessThan(2e-6);
  });

  it.each(['auto', 'fused', 'composite'] as const)('over the two last axes, weight broadcast from [1, 8] (%s)', (implementation) => {
    const w2 = mx.reshape(w, [1, 8]);
    const ln = hostNorm(xs, shape, 1, 1e-5, false, tile(values(w), 3));
    const rn = hostNorm(xs, shape, 1, 1e-5, true, tile(values(w), 3));
    expect(hostError(layerNorm(x, w2, null, { axis: 1, implementation }), ln.y)).toBeLessThan(2e-6);
    expect(hostError(rmsNorm(x, w2, { axis: 1, implementation }), rn.y)).toBeLessThan(2e-6);
  });

  it('over the last axis with parameters that are not vectors: applied after the fused kernel', () => {
    const w3 = randn([3, 8]);
    const ref = hostNorm(xs, shape, 2, 1e-5, false, tile(values(w3), 2), tile(values(b), 6));
    expect(hostError(layerNorm(x, w3, b), ref.y)).toBeLessThan(2e-6);
    const rref = hostNorm(xs, shape, 2, 1e-5, true, tile(values(w3), 2));
    expect(hostError(rmsNorm(x, w3), rref.y)).toBeLessThan(2e-6);
  });

  it('float64 input takes the composite: exact to float64 rounding', () => {
    onCpu(() => {
      const x64 = randn(shape, 'float64');
      const w64 = randn([8], 'float64');
      const ref = hostNorm(values(x64), shape, 2, 1e-5, false, values(w64));
      expect(hostError(layerNorm(x64, w64), ref.y)).toBeLessThan(1e-14);
      const rref = hostNorm(values(x64), shape, 2, 1e-5, true, values(w64));
      expect(hostError(rmsNorm(x64, w64), rref.y)).toBeLessThan(1e-14);
    });
  });

  it('layerNormWithStats / rmsNormWithStats: y, mean and 1/std with the normalised axes kept', () => {
    for (const axis of [1, 2]) {
      const ref = hostNorm(xs, shape, axis, 1e-3, false, undefined, undefined);
      const out = layerNormWithStats(x, null, null, { axis, eps: 1e-3 });
      const kept = [...shape.slice(0, axis), ...shape.slice(axis).map(() => 1)];
      expect(out.mean.shape).toEqual(kept);
      expect(out.invStd.shape).toEqual(kept);
      expect(hostError(out.y, ref.y)).toBeLessThan(2e-6);
      expect(hostError(out.mean, ref.mean)).toBeLessThan(2e-6);
      expect(hostError(out.invStd, ref.invStd)).toBeLessThan(2e-6);
      const rref = hostNorm(xs, shape, axis, 1e-3, true);
      const rout = rmsNormWithStats(x, null, { axis, eps: 1e-3 });
      expect(rout.invStd.shape).toEqual(kept);
      expect(hostError(rout.y, rref.y)).toBeLessThan(2e-6);
      expect(hostError(rout.invStd, rref.invStd)).toBeLessThan(2e-6);
    }
  });

  it('upcast: float16 statistics in float32 (default) or in float16, y back in float16', () => {
    // Rows of large values with a small spread: float16 squares overflow its range (65504).
    const h = mx.astype(mx.add(mx.multiply(randn([4, 64]), 4), 300), 'float16');
    const ref = hostNorm(values(h), [4, 64], 1, 1e-5, false);
    const up = layerNormWithStats(h, null, null, { axis: 1 });
    expect([up.y.dtype, up.mean.dtype, up.invStd.dtype]).toEqual(['float16', 'float32', 'float32']);
    expect(hostError(up.mean, ref.mean)).toBeLessThan(1e-6);
    expect(hostError(up.invStd, ref.invStd)).toBeLessThan(1e-5);
    expect(hostError(up.y, ref.y)).toBeLessThan(1e-3);
    const half = layerNormWithStats(h, null, null, { axis: 1, upcast: false });
    expect([half.y.dtype, half.mean.dtype, half.invStd.dtype]).toEqual(['float16', 'float16', 'float16']);
    const rms = rmsNormWithStats(h, null, { axis: 1, upcast: false });
    // 300² · 64 overflows float16: the un-widened mean square is infinite, so y is 0.
    expect(values(rms.invStd).every((v) => v === 0)).toBe(true);
    const rmsUp = rmsNorm(h, null, { implementation: 'composite' });
    expect(rmsUp.dtype).toBe('float16');
    expect(hostError(rmsUp, hostNorm(values(h), [4, 64], 1, 1e-5, true).y)).toBeLessThan(1e-3);
  });

  it('the registered pullback runs whichever forward ran', () => {
    const dy = randn(shape);
    const w3 = randn([3, 8]);
    for (const implementation of ['auto', 'fused', 'composite'] as const) {
      const [, [dx, dw]] = mx.vjp((a, c) => layerNorm(a, c, b, { implementation }), [x, w3], [dy]);
      const g = layerNormVjp(x, w3, b, dy);
      expect(relativeError(dx, g.dx)).toBeLessThan(1e-6);
      expect(relativeError(dw, g.dweight!)).toBeLessThan(1e-6);
    }
  });
});
