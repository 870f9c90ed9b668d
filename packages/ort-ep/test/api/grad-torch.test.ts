// valueAndGrad's weight gradients of the shared models against torch autograd: the fixtures in
// test/fixtures/torch-grads are written by test/helpers/torch_grads.py (torch 2.9, float64, the
// ONNX graph run on torch ops with the initializers as leaves), for the loss sum over the outputs
// k of <y_k, r_k> (r_k = seeded(n, 1000 + k)) on test_data_set_0. Each weight's gradient is
// compared by its norm and its dot products with 4 seeded directions, at float32 tolerances.
//
// Covered: all nine shared models, every float initializer of each: bert-tiny,
// bert-tiny-ort-fused (com.microsoft SkipLayerNormalization and BiasGelu), gpt2-tiny,
// gpt2-tiny-int4 (MatMulNBits: its float initializer is the scales), llama-tiny, lstm-tagger,
// small-cnn, small-cnn-qdq (QuantizeLinear/DequantizeLinear; a weak check: every scale but the
// output's reaches the loss through a later rounding, so only probs_scale's gradient is not zero),
// mobilenet-v3-ish.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { type HostTensor, MlxSession } from '../../src/index.js';
import { readTestCase } from '../../src/onnx/index.js';
import { seeded } from '../helpers/ort.js';
import { expectShared, sharedPath } from '../helpers/shared.js';

interface Fixture {
  model: string;
  outputs: string[];
  loss: number;
  weights: { name: string; shape: number[]; seed: number; norm: number; dots: number[] }[];
}

const dir = new URL('../fixtures/torch-grads/', import.meta.url);
const fixtures: Fixture[] = readdirSync(dir)
  .filter((f) => f.endsWith('.json'))
  .sort()
  .map((f) => JSON.parse(readFileSync(new URL(f, dir), 'utf8')) as Fixture);

describe('weight gradients of the shared models against torch autograd', () => {
  it('the fixtures are there', () => {
    expect(fixtures.map((f) => f.model).sort()).toEqual(
      [
        'bert-tiny',
        'bert-tiny-ort-fused',
        'gpt2-tiny',
        'gpt2-tiny-int4',
        'llama-tiny',
        'lstm-tagger',
        'mobilenet-v3-ish',
        'small-cnn',
        'small-cnn-qdq',
      ].sort(),
    );
  });
  for (const fx of fixtures)
    it(fx.model, async () => {
      const modelDir = sharedPath(`models/${fx.model}`);
      expectShared(modelDir);
      const tc = readTestCase(modelDir);
      const g = tc.model.graph;
      const inputs = g.inputs.filter((i) => !g.initializers.has(i.name)).map((i) => i.name);
      const feeds: Record<string, HostTensor> = {};
      (tc.datasets[0].inputs as HostTensor[]).forEach((t, i) => (feeds[inputs[i]] = t));
      const s = await MlxSession.create(join(modelDir, 'model.onnx'), { device: 'cpu', graphRewrites: false });
      let r: Awaited<ReturnType<MlxSession['valueAndGrad']>>;
      try {
        r = await s.valueAndGrad(feeds, {
          wrt: fx.weights.map((w) => w.name),
          fetches: fx.outputs,
          output: (o) => {
            let l: mx.Array | undefined;
            fx.outputs.forEach((name, k) => {
              const y = o[name];
              const t = mx.sum(mx.multiply(y, mx.Array.fromTypedArray(Float32Array.from(seeded(y.size, 1000 + k)), y.shape)));
              l = l ? mx.add(l, t) : t;
            });
            return l!;
          },
        });
      } finally {
        s.release();
      }
      expect(Math.abs(r.value - fx.loss), `${fx.model}: loss ${r.value} vs torch's ${fx.loss}`).toBeLessThan(
        1e-4 * Math.max(1, Math.abs(fx.loss)),
      );
      const bad: string[] = [];
      for (const w of fx.weights) {
        const t = r.grads[w.name] as HostTensor;
        expect(t.dims, `${fx.model}: d/d${w.name} shape`).toEqual(w.shape);
        const gr = t.data as Float32Array;
        let norm = 0;
        for (const x of gr) norm += x * x;
        norm = Math.sqrt(norm);
        // float32 tolerances: 2e-3 of the gradient's size (a dot product with a direction in
        // [-1, 1)^n is about norm / sqrt(3)).
        const tol = 2e-3 * w.norm + 1e-7;
        if (Math.abs(norm - w.norm) > tol) bad.push(`${w.name}: norm ${norm} vs torch's ${w.norm}`);
        w.dots.forEach((want, j) => {
          const d = seeded(gr.length, w.seed + j);
          let dot = 0;
          for (let i = 0; i < gr.length; i++) dot += gr[i] * d[i];
          if (Math.abs(dot - want) > tol + 2e-3 * Math.abs(want)) bad.push(`${w.name}: <g, d${j}> ${dot} vs torch's ${want}`);
        });
      }
      expect(bad, `${fx.model}: ${bad.length} of ${fx.weights.length * 5} comparisons differ`).toEqual([]);
    }, 120_000);
});
