import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { fromHeads, toHeads } from './index.js';

describe('toHeads / fromHeads', () => {
  // x[b, s, f] = 100·b + 10·s + f: every element says where it came from.
  const [B, S, H, D] = [2, 3, 2, 4];
  const data = Float32Array.from({ length: B * S * H * D }, (_, i) => {
    const f = i % (H * D),
      s = Math.floor(i / (H * D)) % S,
      b = Math.floor(i / (S * H * D));
    return 100 * b + 10 * s + f;
  });
  const x = mx.Array.fromTypedArray(data, [B, S, H * D], 'float32');

  it('puts feature block h of position s at [b, h, s, :]', () => {
    const y = toHeads(x, H);
    expect(y.shape).toEqual([B, H, S, D]);
    const out = y.toTypedArray() as Float32Array;
    for (let b = 0; b < B; b++)
      for (let h = 0; h < H; h++)
        for (let s = 0; s < S; s++)
          for (let d = 0; d < D; d++) {
            expect(out[((b * H + h) * S + s) * D + d]).toBe(100 * b + 10 * s + h * D + d);
          }
  });

  it('fromHeads undoes it', () => {
    const back = fromHeads(toHeads(x, H));
    expect(back.shape).toEqual([B, S, H * D]);
    expect(Array.from(back.toTypedArray() as Float32Array)).toEqual(Array.from(data));
  });

  it('refuses a width the head count does not divide, and other ranks', () => {
    expect(() => toHeads(x, 3)).toThrow('hidden size 8 is not a multiple of 3 heads');
    expect(() => toHeads(x, 0)).toThrow('is not a multiple of 0 heads');
    expect(() => toHeads(mx.zeros([2, 8]), 2)).toThrow('expected [batch, seq, heads * headDim], got shape [2, 8]');
    expect(() => fromHeads(x)).toThrow('expected [batch, heads, seq, headDim], got shape [2, 3, 8]');
  });
});
