import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { customVjpCacheSize, disposeCustomVjpCache, gelu, silu } from './index.js';
import { randn } from './testing/numeric.js';

describe('custom-VJP closure cache', () => {
  it('makes one closure per kernel and option set, and can be released', () => {
    disposeCustomVjpCache();
    expect(customVjpCacheSize()).toBe(0);
    const x = randn([4]);
    // Closures are made only where a derivative is traced.
    const traced = (a: mx.Array): mx.Array => {
      let t = mx.array(0);
      for (let i = 0; i < 3; i++) t = mx.add(t, mx.sum(mx.add(mx.add(gelu(a), gelu(a, { approximate: 'tanh' })), silu(a))));
      return t;
    };
    mx.valueAndGrad(traced)(x);
    expect(customVjpCacheSize()).toBe(3);
    disposeCustomVjpCache();
    expect(customVjpCacheSize()).toBe(0);
    // Kernels rebuild their closure on the next call.
    const [, g] = mx.valueAndGrad((a) => mx.sum(silu(a)))(x) as [mx.Array, mx.Array];
    expect(g.shape).toEqual([4]);
    expect(customVjpCacheSize()).toBe(1);
  });

  it('runs kernels bare outside a differentiation (no closure, no CustomTransforms node)', () => {
    disposeCustomVjpCache();
    const x = randn([4]);
    const y = silu(x);
    expect(customVjpCacheSize()).toBe(0);
    // The same values as under the custom VJP.
    const [[z]] = mx.vjp((a) => silu(a), [x], [mx.onesLike(x)]);
    expect(Array.from(y.toTypedArray() as Float32Array)).toEqual(Array.from(z.toTypedArray() as Float32Array));
    expect(customVjpCacheSize()).toBe(1);
  });
});
