import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { logSoftmax, softmax } from './index.js';
import { onCpu, randn, relativeError, values } from './testing/numeric.js';

/** softmax / log-softmax along `axis` of a row-major array, in float64 on the host. */
function hostSoftmax(x: Float64Array, shape: number[], axis: number, log: boolean): Float64Array {
  const n = shape[axis];
  const inner = shape.slice(axis + 1).reduce((p, q) => p * q, 1);
  const outer = x.length / (n * inner);
  const out = new Float64Array(x.length);
  for (let o = 0; o < outer; o++)
    for (let i = 0; i < inner; i++) {
      const at = (k: number) => (o * n + k) * inner + i;
      let m = -Infinity;
      for (let k = 0; k < n; k++) m = Math.max(m, x[at(k)]);
      let s = 0;
      for (let k = 0; k < n; k++) s += Math.exp(x[at(k)] - m);
      for (let k = 0; k < n; k++) out[at(k)] = log ? x[at(k)] - m - Math.log(s) : Math.exp(x[at(k)] - m) / s;
    }
  return out;
}

function hostError(actual: mx.Array, expected: Float64Array): number {
  const a = values(actual);
  let err = 0;
  let scale = 0;
  a.forEach((v, i) => {
    err = Math.max(err, Math.abs(v - expected[i]));
    scale = Math.max(scale, Math.abs(expected[i]));
  });
  return err / scale;
}

describe('softmax and logSoftmax', () => {
  const shape = [3, 5, 7];
  const x = mx.multiply(randn(shape), 3);

  it.each(['auto', 'fused', 'composite'] as const)('match float64 host math on every axis (%s)', (implementation) => {
    for (const axis of [0, 1, 2]) {
      const xs = values(x);
      expect(hostError(softmax(x, axis, { implementation }), hostSoftmax(xs, shape, axis, false))).toBeLessThan(2e-6);
      expect(hostError(logSoftmax(x, axis, { implementation }), hostSoftmax(xs, shape, axis, true))).toBeLessThan(2e-6);
    }
  });

  it('float16 input: computed in float32, returned in float16', () => {
    const h = mx.astype(x, 'float16');
    const ref = hostSoftmax(values(h), shape, 1, true);
    const y = logSoftmax(h, 1);
    expect(y.dtype).toBe('float16');
    expect(hostError(y, ref)).toBeLessThan(1e-3);
    expect(softmax(h, -1).dtype).toBe('float16');
  });

  it('float64 input: exact to float64 rounding', () => {
    onCpu(() => {
      const x64 = mx.multiply(randn(shape, 'float64'), 3);
      for (const axis of [1, 2]) {
        expect(hostError(softmax(x64, axis), hostSoftmax(values(x64), shape, axis, false))).toBeLessThan(1e-14);
        expect(hostError(logSoftmax(x64, axis), hostSoftmax(values(x64), shape, axis, true))).toBeLessThan(1e-14);
      }
    });
  });

  it('log-softmax in onnxruntime’s order: the log term survives next to the float32 limit; a row with +inf is NaN', () => {
    const big = mx.array(
      [
        [3e38, 3e38],
        [1, Infinity],
      ],
      'float32',
    );
    const y = logSoftmax(big, 1, { implementation: 'composite' }).toList() as number[][];
    expect(y[0][0]).toBeCloseTo(-Math.LN2, 6);
    expect(y[0][1]).toBeCloseTo(-Math.LN2, 6);
    expect(y[1].every(Number.isNaN)).toBe(true);
  });

  it('differentiable through the fused kernel (MLX autodiff of its composition)', () => {
    const dy = randn(shape);
    for (const f of [softmax, logSoftmax]) {
      const [, [fused]] = mx.vjp((a) => f(a, -1), [x], [dy]);
      const [, [plain]] = mx.vjp((a) => f(a, -1, { implementation: 'composite' }), [x], [dy]);
      expect(relativeError(fused, plain)).toBeLessThan(1e-5);
    }
  });

  it('returns empty arrays as they are and rejects an axis out of range', () => {
    const empty = mx.zeros([0, 3], 'float32');
    expect(softmax(empty, 0).shape).toEqual([0, 3]);
    expect(() => logSoftmax(x, 3)).toThrow(RangeError);
  });
});
