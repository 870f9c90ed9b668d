import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { softmaxCrossEntropy, softmaxCrossEntropyComposite, softmaxCrossEntropyVjp, type SoftmaxCrossEntropyOptions } from './index.js';
import { gradientErrors } from './testing/gradient-check.js';
import { hasNaN, maxAbs, onCpu, randn, relativeError } from './testing/numeric.js';

describe('softmaxCrossEntropy', () => {
  const logits = randn([5, 7]);
  const labels = mx.array([1, -100, 6, 0, 3], 'int32');

  it('is −log softmax at the label, averaged over labels that are not ignored', () => {
    const z = logits.toList() as number[][];
    const per = [0, 2, 3, 4].map((i) => {
      const row = z[i];
      const m = Math.max(...row);
      const lse = m + Math.log(row.reduce((a, v) => a + Math.exp(v - m), 0));
      return lse - row[[1, -100, 6, 0, 3][i]];
    });
    const mean = softmaxCrossEntropy(logits, labels, { ignoreIndex: -100 }).item() as number;
    expect(mean).toBeCloseTo(per.reduce((a, b) => a + b, 0) / 4, 5);
    const none = softmaxCrossEntropy(logits, labels, { ignoreIndex: -100, reduction: 'none' }).toList() as number[];
    expect(none[1]).toBe(0);
    expect(none[0]).toBeCloseTo(per[0], 5);
  });

  it('weights classes and divides the mean by the total weight', () => {
    const weights = mx.array([1, 2, 0.5, 1, 3, 1, 0.25], 'float32');
    const w = [2, 0, 0.25, 1, 1];
    const none = softmaxCrossEntropy(logits, labels, { ignoreIndex: -100, weights, reduction: 'none' });
    const plain = softmaxCrossEntropy(logits, labels, { ignoreIndex: -100, reduction: 'none' }).toList() as number[];
    (none.toList() as number[]).forEach((v, i) => expect(v).toBeCloseTo(plain[i] * w[i], 5));
    const mean = softmaxCrossEntropy(logits, labels, { ignoreIndex: -100, weights }).item() as number;
    expect(mean).toBeCloseTo(plain.reduce((a, v, i) => a + v * w[i], 0) / (2 + 0.25 + 1 + 1), 5);
  });

  it('gives 0 (not NaN) loss and gradient when every label is ignored', () => {
    const all = mx.full([5], -100, 'int32');
    expect(softmaxCrossEntropy(logits, all, { ignoreIndex: -100 }).item()).toBe(0);
    const [, g] = mx.valueAndGrad((z) => softmaxCrossEntropy(z, all, { ignoreIndex: -100 }))(logits) as [mx.Array, mx.Array];
    expect(hasNaN(g)).toBe(false);
    expect(maxAbs(g)).toBe(0);
  });

  it.each([
    ['mean, ignore index', { ignoreIndex: -100 }, [5, 7], null],
    ['sum', { ignoreIndex: -100, reduction: 'sum' }, [5, 7], null],
    ['none', { ignoreIndex: -100, reduction: 'none' }, [5, 7], null],
    ['classes on axis 1 ([N, C, d]), weights', { ignoreIndex: 2, classAxis: 1 }, [2, 7, 3], [7]],
  ] as [string, SoftmaxCrossEntropyOptions, number[], number[] | null][])(
    'VJP matches finite differences and autodiff: %s',
    (_n, opts, shape, ws) => {
      onCpu(() => {
        const z = mx.multiply(randn(shape, 'float64'), 2);
        const labelShape = opts.classAxis === 1 ? [shape[0], shape[2]] : [shape[0]];
        const lab = mx.reshape(
          mx.array(
            [1, -100, 6, 0, 3, 2]
              .slice(
                0,
                labelShape.reduce((a, b) => a * b, 1),
              )
              .map((v) => (v === -100 && opts.ignoreIndex !== -100 ? 2 : v)),
            'int32',
          ),
          labelShape,
        );
        const o = { ...opts, weights: ws ? mx.abs(randn(ws, 'float64')) : null };
        const e = gradientErrors({
          kernel: (x, l) => softmaxCrossEntropy(x, l, o),
          composite: (x, l) => softmaxCrossEntropyComposite(x, l, o),
          primals: [z, lab],
          wrt: [0],
        });
        expect(e.forward).toBeLessThan(1e-14);
        expect(e.finiteDifference[0]).toBeLessThan(1e-8);
        expect(e.autodiff[0]).toBeLessThan(1e-12);
      });
    },
  );

  it('softmaxCrossEntropyVjp equals the registered VJP', () => {
    const g = randn([]);
    const [, [viaVjp]] = mx.vjp((z) => softmaxCrossEntropy(z, labels, { ignoreIndex: -100 }), [logits], [g]);
    expect(relativeError(softmaxCrossEntropyVjp(logits, labels, g, { ignoreIndex: -100 }), viaVjp)).toBeLessThan(1e-6);
  });
});
