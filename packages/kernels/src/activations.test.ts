import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { gelu, geluComposite, geluVjp, silu, siluComposite, swiglu, swigluComposite, swigluVjp } from './index.js';
import { gradientErrors } from './testing/gradient-check.js';
import { onCpu, randn, relativeError, values } from './testing/numeric.js';

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

/** erf by its Taylor series (|x| ≤ 3 here: the terms stay small, so float64 keeps ~13 digits). */
function erfHost(x: number): number {
  let term = x;
  let sum = x;
  for (let n = 1; n < 80; n++) {
    term *= (-x * x) / n;
    sum += term / (2 * n + 1);
  }
  return (2 / Math.sqrt(Math.PI)) * sum;
}
const geluHost = (v: number, tanhForm: boolean) =>
  tanhForm ? 0.5 * v * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (v + 0.044715 * v ** 3))) : 0.5 * v * (1 + erfHost(v / Math.SQRT2));
const sigmoidHost = (v: number) => 1 / (1 + Math.exp(-v));

/** max |actual − f(x)| / max |f(x)| over x's elements (and, with `y`, pairs of x and y broadcast to actual's shape). */
function hostError(actual: mx.Array, f: (...v: number[]) => number, ...inputs: mx.Array[]): number {
  const got = values(actual);
  const ins = inputs.map((a) => values(mx.broadcastTo(a, actual.shape)));
  let err = 0;
  let scale = 0;
  got.forEach((g, i) => {
    const e = f(...ins.map((v) => v[i]));
    err = Math.max(err, Math.abs(g - e));
    scale = Math.max(scale, Math.abs(e));
  });
  return err / scale;
}

describe('activation options against float64 host math', () => {
  const x = mx.clip(mx.multiply(randn([4, 6]), 1.2), -2.5, 2.5);
  const bias = mx.multiply(randn([6]), 0.3);

  it.each(['auto', 'fused', 'composite'] as const)('gelu with a bias, both forms (%s)', (implementation) => {
    for (const approximate of ['none', 'tanh'] as const) {
      const f = (v: number, b: number) => geluHost(v + b, approximate === 'tanh');
      expect(hostError(gelu(x, { approximate, bias, implementation }), f, x, bias)).toBeLessThan(2e-6);
      // A bias that is not a vector of the last axis is added first, then the activation.
      const rows = mx.multiply(randn([4, 1]), 0.3);
      expect(hostError(gelu(x, { approximate, bias: rows, implementation }), f, x, rows)).toBeLessThan(2e-6);
    }
  });

  it('gelu in float64 takes the composite: exact to float64 rounding in the tanh form', () => {
    onCpu(() => {
      const x64 = randn([3, 5], 'float64');
      expect(hostError(gelu(x64, { approximate: 'tanh' }), (v) => geluHost(v, true), x64)).toBeLessThan(1e-14);
    });
  });

  it('gelu with a bias: VJP for x and the bias matches finite differences and autodiff', () => {
    onCpu(() => {
      const e = gradientErrors({
        kernel: (a, b) => gelu(a, { approximate: 'tanh', bias: b }),
        composite: (a, b) => geluComposite(mx.add(a, b), 'tanh'),
        primals: [randn([3, 5], 'float64'), randn([5], 'float64')],
      });
      expect(e.forward).toBeLessThan(1e-14);
      for (const r of e.finiteDifference) expect(r).toBeLessThan(1e-8);
      for (const r of e.autodiff) expect(r).toBeLessThan(1e-12);
    });
  });

  it('silu with beta (swish-β, QuickGELU at 1.702): forward and VJP', () => {
    expect(hostError(silu(x, { beta: 1.702 }), (v) => v * sigmoidHost(1.702 * v), x)).toBeLessThan(2e-6);
    onCpu(() => {
      const x64 = mx.multiply(randn([3, 5], 'float64'), 3);
      expect(hostError(silu(x64, { beta: 1.702 }), (v) => v * sigmoidHost(1.702 * v), x64)).toBeLessThan(1e-14);
      const e = gradientErrors({
        kernel: (a) => silu(a, { beta: 1.702 }),
        composite: (a) => siluComposite(a, { beta: 1.702 }),
        primals: [x64],
      });
      expect(e.finiteDifference[0]).toBeLessThan(1e-8);
      expect(e.autodiff[0]).toBeLessThan(1e-12);
    });
  });

  it('swiglu with gpt-oss’s clamp and shift: forward and VJP (zero where clamped)', () => {
    const options = { beta: 1.702, limit: 1, upShift: 1 };
    const host = (g: number, u: number) => {
      const gc = Math.min(g, 1);
      return gc * sigmoidHost(1.702 * gc) * (Math.min(Math.max(u, -1), 1) + 1);
    };
    const up = mx.multiply(randn([4, 6]), 1.5);
    expect(hostError(swiglu(x, up, options), host, x, up)).toBeLessThan(2e-6);
    onCpu(() => {
      const gate = mx.multiply(randn([3, 4], 'float64'), 1.5);
      const e = gradientErrors({
        kernel: (g, u) => swiglu(g, u, options),
        composite: (g, u) => swigluComposite(g, u, options),
        primals: [gate, mx.multiply(randn([3, 4], 'float64'), 1.5)],
      });
      expect(e.forward).toBeLessThan(1e-14);
      for (const r of e.finiteDifference) expect(r).toBeLessThan(1e-8);
      for (const r of e.autodiff) expect(r).toBeLessThan(1e-12);
      const { dgate } = swigluVjp(gate, mx.onesLike(gate), mx.onesLike(gate), options);
      const clamped = values(gate).map((v) => (v > 1 ? 1 : 0));
      values(dgate).forEach((d, i) => {
        if (clamped[i]) expect(d).toBe(0);
      });
    });
  });
});
