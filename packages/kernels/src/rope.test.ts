import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { rotaryCache, rotaryEmbedding, rotaryEmbeddingComposite, rotaryEmbeddingVjp, rotaryFactors } from './index.js';
import { gradientErrors } from './testing/gradient-check.js';
import { onCpu, randn, relativeError, values } from './testing/numeric.js';

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

/**
 * The rotation per element in float64 on the host, for x [b, s, h, d] (heads after the sequence),
 * over features [offset, offset + r), angles p / base^(2i/r) at positions[b][s].
 */
function referenceRopeBshd(
  x: mx.Array,
  positions: number[][],
  r: number,
  offset: number,
  interleaved: boolean,
  base = 10000,
): Float64Array {
  const [b, s, h, d] = x.shape;
  const data = values(x);
  const out = Float64Array.from(data);
  for (let bi = 0; bi < b; bi++)
    for (let si = 0; si < s; si++)
      for (let hi = 0; hi < h; hi++) {
        const row = ((bi * s + si) * h + hi) * d + offset;
        for (let i = 0; i < r / 2; i++) {
          const angle = positions[bi][si] / base ** ((2 * i) / r);
          const [a, c] = interleaved ? [row + 2 * i, row + 2 * i + 1] : [row + i, row + i + r / 2];
          out[a] = data[a] * Math.cos(angle) - data[c] * Math.sin(angle);
          out[c] = data[c] * Math.cos(angle) + data[a] * Math.sin(angle);
        }
      }
  return out;
}

function maxDiff(a: mx.Array, expected: Float64Array): number {
  const v = values(a);
  return v.reduce((m, x, i) => Math.max(m, Math.abs(x - expected[i])), 0);
}

describe('rotaryEmbedding: span, layout and shared factors', () => {
  const positions = [
    [0, 3, 5],
    [1, 2, 9],
  ];
  const positionIds = mx.array(positions, 'int32');
  const { cos, sin } = rotaryCache(16, 4);

  it.each([false, true])(
    'rotates features [rotaryOffset, rotaryOffset + rotaryDim) of [b, s, h, d] (headAxis 2, interleaved: %s)',
    (interleaved) => {
      const x = randn([2, 3, 2, 10]);
      const y = rotaryEmbedding(x, { cos, sin, positionIds, interleaved, rotaryDim: 4, rotaryOffset: 3, headAxis: 2 });
      expect(maxDiff(y, referenceRopeBshd(x, positions, 4, 3, interleaved))).toBeLessThan(1e-5);
      // The span at the end, and tables already laid out [s, r/2] (one sequence for both entries).
      const laid = { cos: mx.take(cos, mx.array([0, 3, 5], 'int32'), 0), sin: mx.take(sin, mx.array([0, 3, 5], 'int32'), 0) };
      const tail = rotaryEmbedding(x, { ...laid, interleaved, rotaryDim: 4, rotaryOffset: 6, headAxis: 2 });
      const same = [positions[0], positions[0]];
      expect(maxDiff(tail, referenceRopeBshd(x, same, 4, 6, interleaved))).toBeLessThan(1e-5);
    },
  );

  it('factors made once rotate like the tables they were made from', () => {
    const x = randn([2, 2, 3, 8]); // [b, h, s, d]
    const c = mx.expandDims(mx.take(cos, positionIds, 0), 1); // [b, 1, s, r/2]
    const s = mx.expandDims(mx.take(sin, positionIds, 0), 1);
    for (const interleaved of [false, true]) {
      const factors = rotaryFactors(c, s, { interleaved });
      const viaFactors = rotaryEmbedding(x, { factors, rotaryDim: 4, rotaryOffset: 2 });
      const viaTables = rotaryEmbedding(x, { cos, sin, positionIds, interleaved, rotaryDim: 4, rotaryOffset: 2 });
      expect(relativeError(viaFactors, viaTables)).toBe(0);
      const bshd = mx.transpose(x, [0, 2, 1, 3]);
      const ref = referenceRopeBshd(bshd, positions, 4, 2, interleaved);
      expect(maxDiff(mx.transpose(viaFactors, [0, 2, 1, 3]), ref)).toBeLessThan(1e-5);
    }
  });

  it.each([false, true])('VJP over a span in the middle matches finite differences and autodiff (interleaved: %s)', (interleaved) => {
    onCpu(() => {
      const c64 = rotaryCache(16, 4, { dtype: 'float64' });
      const opts = { cos: c64.cos, sin: c64.sin, positionIds, interleaved, rotaryDim: 4, rotaryOffset: 2, headAxis: 2 as const };
      const e = gradientErrors({
        kernel: (x) => rotaryEmbedding(x, opts),
        composite: (x) => rotaryEmbeddingComposite(x, opts),
        primals: [randn([2, 3, 2, 8], 'float64')],
      });
      expect(e.finiteDifference[0]).toBeLessThan(1e-8);
      expect(e.autodiff[0]).toBeLessThan(1e-12);
      const dy = randn([2, 3, 2, 8], 'float64');
      const [, [viaVjp]] = mx.vjp((x) => rotaryEmbedding(x, opts), [randn([2, 3, 2, 8], 'float64')], [dy]);
      expect(relativeError(rotaryEmbeddingVjp(dy, opts), viaVjp)).toBeLessThan(1e-14);
    });
  });

  it('rejects a span past the last feature', () => {
    expect(() => rotaryEmbedding(randn([1, 2, 8]), { cos, sin, rotaryDim: 4, rotaryOffset: 6 })).toThrow(/rotaryDim/);
    expect(() => rotaryEmbedding(randn([1, 2, 8]), { cos, sin, rotaryOffset: 8 })).toThrow(/rotaryOffset/);
  });
});
