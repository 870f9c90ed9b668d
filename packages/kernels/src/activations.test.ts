import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { gelu, geluComposite, geluVjp, silu, siluComposite, swiglu, swigluComposite, swigluVjp } from './index.js';
import { gradientErrors } from './testing/gradient-check.js';
import { onCpu, randn, relativeError } from './testing/numeric.js';

describe('gelu', () => {
  it('matches x·Φ(x) and the tanh form at known points', () => {
    const x = mx.array([-3, -1, 0, 0.5, 2], 'float32');
    const exact = [-0.0040496, -0.1586553, 0, 0.3457312, 1.9544997];
    const approx = [-0.0036374, -0.158808, 0, 0.345714, 1.9545977];
    (gelu(x).toList() as number[]).forEach((v, i) => expect(v).toBeCloseTo(exact[i], 5));
    (gelu(x, { approximate: 'tanh' }).toList() as number[]).forEach((v, i) => expect(v).toBeCloseTo(approx[i], 5));
  });

  it('tanh form: VJP matches finite differences and autodiff', () => {
    onCpu(() => {
      const e = gradientErrors({
        kernel: (x) => gelu(x, { approximate: 'tanh' }),
        composite: (x) => geluComposite(x, 'tanh'),
        primals: [mx.multiply(randn([4, 7], 'float64'), 2)],
      });
      expect(e.finiteDifference[0]).toBeLessThan(1e-8);
      expect(e.autodiff[0]).toBeLessThan(1e-12);
    });
  });

  it('exact form: VJP matches finite differences (within MLX’s float32-accurate erf) and autodiff', () => {
    onCpu(() => {
      // MLX's CPU erf has ~4e-7 absolute error even in float64, so a wide step keeps its noise small.
      const e = gradientErrors({
        kernel: (x) => gelu(x),
        composite: (x) => geluComposite(x),
        primals: [mx.multiply(randn([4, 7], 'float64'), 2)],
        step: 1e-2,
      });
      expect(e.finiteDifference[0]).toBeLessThan(2e-4);
      expect(e.autodiff[0]).toBeLessThan(1e-6);
    });
  });

  it('geluVjp is the derivative times the cotangent', () => {
    const x = randn([5]);
    const g = randn([5]);
    const [, [auto]] = mx.vjp((a) => geluComposite(a), [x], [g]);
    expect(relativeError(geluVjp(x, g), auto)).toBeLessThan(1e-5);
  });
});

describe('silu and swiglu', () => {
  it('silu: forward x·σ(x) and VJP against finite differences and autodiff', () => {
    expect(silu(mx.array([0, 1], 'float32')).toList()).toEqual([0, expect.closeTo(0.7310586, 6)]);
    onCpu(() => {
      const e = gradientErrors({
        kernel: (x) => silu(x),
        composite: (x) => siluComposite(x),
        primals: [mx.multiply(randn([3, 5], 'float64'), 3)],
      });
      expect(e.forward).toBeLessThan(1e-14);
      expect(e.finiteDifference[0]).toBeLessThan(1e-8);
      expect(e.autodiff[0]).toBeLessThan(1e-12);
    });
  });

  it('swiglu: both operands (with broadcasting) against finite differences and autodiff', () => {
    onCpu(() => {
      const e = gradientErrors({
        kernel: (g, u) => swiglu(g, u),
        composite: (g, u) => swigluComposite(g, u),
        primals: [randn([3, 4], 'float64'), randn([1, 4], 'float64')],
      });
      for (const r of e.finiteDifference) expect(r).toBeLessThan(1e-8);
      for (const r of e.autodiff) expect(r).toBeLessThan(1e-12);
    });
    const { dgate, dup } = swigluVjp(randn([3, 4]), randn([4]), randn([3, 4]));
    expect(dgate.shape).toEqual([3, 4]);
    expect(dup.shape).toEqual([4]);
  });
});
