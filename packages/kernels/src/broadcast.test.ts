import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { broadcastAdjoint, broadcastAxes } from './index.js';
import { finiteDifferenceVjp, onCpu, randn, relativeError } from './testing/numeric.js';

describe('broadcastAdjoint', () => {
  it('finds the axes that broadcasting created or stretched', () => {
    expect(broadcastAxes([4, 1], [2, 3, 4, 5])).toEqual([0, 1, 3]);
    expect(broadcastAxes([3, 4], [3, 4])).toEqual([]);
    expect(() => broadcastAxes([2, 4], [3, 4])).toThrow(/does not broadcast/);
    expect(() => broadcastAxes([1, 2, 3], [2, 3])).toThrow(/larger rank/);
  });

  it('sums a gradient back to the operand shape', () => {
    // g[i][j][k] = 12i + 4j + k; summed over i and k down to [3, 1]: 8·(4j) + 2·(0+1+2+3) + 4·12.
    const g = mx.reshape(mx.arange(24), [2, 3, 4]);
    expect(broadcastAdjoint(g, [3, 1]).toList()).toEqual([[60], [92], [124]]);
    expect(broadcastAdjoint(g, [2, 3, 4]).toList()).toEqual(g.toList());
    expect(broadcastAdjoint(g, []).item()).toBe(276);
  });

  it('is the adjoint of broadcastTo: <broadcastTo(x), g> = <x, broadcastAdjoint(g)>', () => {
    onCpu(() => {
      const x = randn([1, 4, 1], 'float64');
      const g = randn([2, 3, 4, 5], 'float64');
      const lhs = mx.sum(mx.multiply(mx.broadcastTo(x, g.shape), g)).item() as number;
      const rhs = mx.sum(mx.multiply(x, broadcastAdjoint(g, x.shape))).item() as number;
      expect(Math.abs(lhs - rhs)).toBeLessThan(1e-12 * Math.abs(lhs));
    });
  });

  it('has a VJP (broadcasting the cotangent back) that matches finite differences and autodiff', () => {
    onCpu(() => {
      const g = randn([2, 3, 4], 'float64');
      const cot = randn([3, 1], 'float64');
      const f = (a: mx.Array) => broadcastAdjoint(a, [3, 1]);
      const [, [custom]] = mx.vjp(f, [g], [cot]);
      const [, [auto]] = mx.vjp((a) => mx.reshape(mx.sum(a, [0, 2], { keepdims: true }), [3, 1]), [g], [cot]);
      const [fd] = finiteDifferenceVjp(f, [g], cot);
      expect(relativeError(custom, fd)).toBeLessThan(1e-8);
      expect(relativeError(custom, auto)).toBeLessThan(1e-14);
    });
  });
});
