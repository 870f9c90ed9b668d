import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import {
  nllLoss,
  softmaxCrossEntropy,
  softmaxCrossEntropyComposite,
  softmaxCrossEntropyVjp,
  type SoftmaxCrossEntropyOptions,
} from './index.js';
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

describe('nllLoss', () => {
  // log-probabilities [N = 2, C = 3, d = 2] (classes on axis 1), written out so that the expected
  // losses are plain sums on the host.
  const lp = [
    [
      [-0.5, -1.5],
      [-1.2, -0.3],
      [-2.0, -2.5],
    ],
    [
      [-0.1, -0.9],
      [-3.0, -0.7],
      [-2.2, -1.1],
    ],
  ];
  const logProbs = mx.array(lp, 'float32');
  const labels = mx.array(
    [
      [2, 1],
      [0, -1],
    ],
    'int32',
  );
  const weights = mx.array([0.5, 2, 1], 'float32');
  // Picked: [n=0,d=0] class 2 → −2.0; [0,1] class 1 → −0.3; [1,0] class 0 → −0.1; [1,1] ignored.
  const picked = [-2.0, -0.3, -0.1];
  const w = [1, 2, 0.5];

  it('picks −logp at the label, weighted, ignoring ignoreIndex, for each reduction', () => {
    const options = { classAxis: 1, ignoreIndex: -1, weights };
    const none = nllLoss(logProbs, labels, { ...options, reduction: 'none' }).toList() as number[][];
    expect(none[0][0]).toBeCloseTo(2.0 * 1, 6);
    expect(none[0][1]).toBeCloseTo(0.3 * 2, 6);
    expect(none[1][0]).toBeCloseTo(0.1 * 0.5, 6);
    expect(none[1][1]).toBe(0);
    const total = picked.reduce((a, p, i) => a - p * w[i], 0);
    expect(nllLoss(logProbs, labels, { ...options, reduction: 'sum' }).item()).toBeCloseTo(total, 6);
    expect(nllLoss(logProbs, labels, options).item()).toBeCloseTo(total / (1 + 2 + 0.5), 6);
    // Without weights or an ignore index: the plain mean over every label.
    const all = mx.array(
      [
        [2, 1],
        [0, 1],
      ],
      'int32',
    );
    expect(nllLoss(logProbs, all, { classAxis: 1 }).item()).toBeCloseTo((2.0 + 0.3 + 0.1 + 0.7) / 4, 6);
  });

  it("emptyMean: an all-ignored 'mean' is 0 by default, NaN with 'nan'", () => {
    const ignored = mx.full([2, 2], -1, 'int32');
    expect(nllLoss(logProbs, ignored, { classAxis: 1, ignoreIndex: -1 }).item()).toBe(0);
    expect(Number.isNaN(nllLoss(logProbs, ignored, { classAxis: 1, ignoreIndex: -1, emptyMean: 'nan' }).item())).toBe(true);
    const z = randn([4, 3]);
    const none = mx.full([4], 7, 'int32');
    expect(Number.isNaN(softmaxCrossEntropy(z, none, { ignoreIndex: 7, emptyMean: 'nan' }).item())).toBe(true);
  });

  it('softmaxCrossEntropy is nllLoss of the log-softmax', () => {
    const z = randn([3, 5, 4]);
    const lab = mx.array(
      [
        [0, 4, 2, 9],
        [1, 1, 9, 3],
        [4, 0, 0, 2],
      ],
      'int32',
    );
    const options = { classAxis: 1, ignoreIndex: 9, weights: mx.array([1, 0.5, 2, 1, 3], 'float32') };
    const logp = mx.subtract(z, mx.logsumexp(z, 1, { keepdims: true }));
    expect(relativeError(softmaxCrossEntropy(z, lab, options), nllLoss(logp, lab, options))).toBeLessThan(1e-6);
  });
});
