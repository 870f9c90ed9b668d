import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { customVjpCacheSize, disposeCustomVjpCache, gelu, silu } from './index.js';
import { randn } from './testing/numeric.js';

describe('custom-VJP closure cache', () => {
  it('makes one closure per kernel and option set, and can be released', () => {
    disposeCustomVjpCache();
    expect(customVjpCacheSize()).toBe(0);
    const x = randn([4]);
    for (let i = 0; i < 3; i++) {
      gelu(x);
      gelu(x, { approximate: 'tanh' });
      silu(x);
    }
    expect(customVjpCacheSize()).toBe(3);
    disposeCustomVjpCache();
    expect(customVjpCacheSize()).toBe(0);
    // Kernels rebuild their closure on the next call.
    const [, g] = mx.valueAndGrad((a) => mx.sum(silu(a)))(x) as [mx.Array, mx.Array];
    expect(g.shape).toEqual([4]);
    expect(customVjpCacheSize()).toBe(1);
  });
});
