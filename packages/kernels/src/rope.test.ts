import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { rotaryCache, rotaryEmbedding, rotaryEmbeddingComposite, rotaryEmbeddingVjp } from './index.js';
import { gradientErrors } from './testing/gradient-check.js';
import { onCpu, randn, relativeError } from './testing/numeric.js';

/** The rotation written out per element in JS, for [b, h, s, d] inputs. */
function referenceRope(x: mx.Array, positions: number[][], rotaryDim: number, interleaved: boolean, base = 10000): number[] {
  const [b, h, s, d] = x.shape;
  const data = x.toTypedArray() as Float32Array;
  const out = Array.from(data);
  for (let bi = 0; bi < b; bi++)
    for (let hi = 0; hi < h; hi++)
      for (let si = 0; si < s; si++) {
        const row = ((bi * h + hi) * s + si) * d;
        for (let i = 0; i < rotaryDim / 2; i++) {
          const angle = positions[bi][si] / base ** ((2 * i) / rotaryDim);
          const [a, c] = interleaved ? [row + 2 * i, row + 2 * i + 1] : [row + i, row + i + rotaryDim / 2];
          out[a] = data[a] * Math.cos(angle) - data[c] * Math.sin(angle);
          out[c] = data[c] * Math.cos(angle) + data[a] * Math.sin(angle);
        }
      }
  return out;
}

describe('rotaryEmbedding', () => {
  const positions = [
    [0, 3, 5, 7],
    [1, 2, 9, 15],
  ];
  const positionIds = mx.array(positions, 'int32');
  const { cos, sin } = rotaryCache(16, 6);

  it.each([false, true])('rotates the first rotaryDim features by position (interleaved: %s)', (interleaved) => {
    const x = randn([2, 3, 4, 8]);
    const y = rotaryEmbedding(x, { cos, sin, positionIds, interleaved, rotaryDim: 6 }).toTypedArray() as Float32Array;
    const ref = referenceRope(x, positions, 6, interleaved);
    expect(ref.reduce((m, r, i) => Math.max(m, Math.abs(r - y[i])), 0)).toBeLessThan(1e-5);
  });

  it('takes caches already laid out per position ([s, r/2]) and 3-D inputs', () => {
    const x = randn([2, 4, 6]);
    const full = rotaryCache(4, 6);
    const y = rotaryEmbedding(x, { cos: full.cos, sin: full.sin });
    const viaIds = rotaryEmbedding(x, {
      cos,
      sin,
      positionIds: mx.array(
        [
          [0, 1, 2, 3],
          [0, 1, 2, 3],
        ],
        'int32',
      ),
    });
    expect(relativeError(y, viaIds)).toBeLessThan(1e-6);
  });

  it.each([false, true])('VJP (the inverse rotation) matches finite differences and autodiff (interleaved: %s)', (interleaved) => {
    onCpu(() => {
      const c64 = rotaryCache(16, 6, { dtype: 'float64' });
      const opts = { cos: c64.cos, sin: c64.sin, positionIds, interleaved, rotaryDim: 6 };
      const e = gradientErrors({
        kernel: (x) => rotaryEmbedding(x, opts),
        composite: (x) => rotaryEmbeddingComposite(x, opts),
        primals: [randn([2, 2, 4, 8], 'float64')],
      });
      expect(e.forward).toBeLessThan(1e-14);
      expect(e.finiteDifference[0]).toBeLessThan(1e-8);
      expect(e.autodiff[0]).toBeLessThan(1e-12);
      const dy = randn([2, 2, 4, 8], 'float64');
      const [, [viaVjp]] = mx.vjp((x) => rotaryEmbedding(x, opts), [randn([2, 2, 4, 8], 'float64')], [dy]);
      expect(relativeError(rotaryEmbeddingVjp(dy, opts), viaVjp)).toBeLessThan(1e-14);
    });
  });

  it('rejects an odd or too large rotaryDim', () => {
    expect(() => rotaryEmbedding(randn([1, 2, 8]), { cos, sin, rotaryDim: 5 })).toThrow(/even/);
    expect(() => rotaryEmbedding(randn([1, 2, 8]), { cos, sin, rotaryDim: 10 })).toThrow(/even/);
  });
});
