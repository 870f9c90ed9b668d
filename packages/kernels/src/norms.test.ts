import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { layerNorm, layerNormComposite, layerNormVjp, rmsNorm, rmsNormComposite, rmsNormVjp } from './index.js';
import { gradientErrors } from './testing/gradient-check.js';
import { maxAbs, onCpu, randn, relativeError } from './testing/numeric.js';

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
