// Gradient checkpointing by layer (valueAndGrad and trainStep's `checkpoint`): each layer's
// activations recomputed in the backward pass through MLX's checkpoint. The gradients must be
// those of the plain walk (the same ops on the same values; the cotangents of a value read in
// several places may add up in another order, a float32 rounding apart), and the peak memory of
// the evaluation lower, on a built Llama-shaped decoder and the shared bert-tiny.
import { join } from 'node:path';
import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { MlxSession, OnnxDataType, type HostTensor, type Value } from '../../src/index.js';
import { buildDecoder, type DecoderConfig } from '../helpers/decoder.js';
import { sharedPath } from '../helpers/shared.js';

const i64 = (data: number[], dims: number[]): HostTensor => ({
  dtype: OnnxDataType.INT64,
  dims,
  data: BigInt64Array.from(data.map(BigInt)),
});
const arrayOf = (t: HostTensor | Value) => (t as Value & { kind: 'device' }).array;
const cfg: DecoderConfig = {
  kind: 'llama',
  layers: 4,
  hidden: 128,
  heads: 4,
  kvHeads: 2,
  ffn: 512,
  vocab: 256,
  maxPositions: 256,
  seed: 3,
};
const B = 4;
const S = 128;

function decoderFeeds(s: MlxSession): Record<string, HostTensor> {
  const f: Record<string, HostTensor> = {
    input_ids: i64(
      Array.from({ length: B * S }, (_, i) => (i * 7) % cfg.vocab),
      [B, S],
    ),
    attention_mask: i64(new Array(B * S).fill(1), [B, S]),
  };
  for (const n of s.inputNames)
    if (n.startsWith('past_key_values.'))
      f[n] = { dtype: OnnxDataType.FLOAT, dims: [B, cfg.kvHeads!, 0, cfg.hidden / cfg.heads], data: new Float32Array(0) };
  return f;
}
const meanSquare = (name: string) => (o: Record<string, mx.Array>) => mx.mean(mx.square(o[name]));

/** value, gradients (as numbers) and the evaluation's peak memory above what was held before. */
async function gradsOf(s: MlxSession, feeds: Record<string, HostTensor>, output: string, wrt: string[], checkpoint?: 'layers' | string[]) {
  mx.memory.clearCache();
  mx.memory.resetPeak();
  const before = mx.memory.active();
  const r = await s.valueAndGrad(feeds, { output: meanSquare(output), wrt, fetches: [output], checkpoint, keepOnDevice: true });
  const peak = mx.memory.peak() - before;
  const grads = Object.fromEntries(wrt.map((n) => [n, Array.from(arrayOf(r.grads[n]).toTypedArray() as Float32Array)]));
  mx.dispose([...Object.values(r.grads), ...Object.values(r.outputs)].map(arrayOf));
  return { value: r.value, grads, peak };
}

function expectSameGrads(got: Record<string, number[]>, want: Record<string, number[]>, tol = 1e-6): void {
  for (const [n, w] of Object.entries(want)) {
    const g = got[n];
    const bad = w.findIndex((x, i) => !(Math.abs(g[i] - x) <= tol * (1 + Math.abs(x))));
    expect(bad, `${n}[${bad}]: ${g[bad]} vs ${w[bad]}`).toBe(-1);
  }
}

describe('valueAndGrad with checkpoint', () => {
  it('a 4-layer decoder: the same gradients by layer names and by prefixes, at a lower peak', async () => {
    const s = await MlxSession.create(buildDecoder(cfg), { device: 'cpu', graphRewrites: false });
    try {
      const wrt = Object.keys(s.parameters()).filter((n) => n !== 'cos_cache' && n !== 'sin_cache');
      const feeds = decoderFeeds(s);
      const plain = await gradsOf(s, feeds, 'logits', wrt);
      const layers = await gradsOf(s, feeds, 'logits', wrt, 'layers');
      // The decoder's node names carry no layer; its initializers do (l0.ln1, l3.down, ...).
      const prefixes = await gradsOf(s, feeds, 'logits', wrt, ['l0.', 'l1.', 'l2.', 'l3.']);
      for (const r of [layers, prefixes]) {
        expect(r.value).toBe(plain.value);
        expectSameGrads(r.grads, plain.grads);
      }
      // Measured: 51.3 MiB plain, 34.0 MiB checkpointed (the activations of one layer at a time).
      expect(layers.peak).toBeLessThan(0.8 * plain.peak);
      expect(prefixes.peak).toBeLessThan(0.8 * plain.peak);
    } finally {
      s.release();
    }
  });

  it('the shared bert-tiny: the same gradients, found by its node names (layer.N)', async () => {
    const s = await MlxSession.create(join(sharedPath('models/bert-tiny'), 'model.onnx'), { device: 'cpu', graphRewrites: false });
    try {
      const n = 2 * 16;
      const feeds = {
        input_ids: i64(
          Array.from({ length: n }, (_, i) => (i * 37 + 5) % 512),
          [2, 16],
        ),
        attention_mask: i64(new Array(n).fill(1), [2, 16]),
        token_type_ids: i64(new Array(n).fill(0), [2, 16]),
      };
      const wrt = Object.keys(s.parameters());
      const plain = await gradsOf(s, feeds, 'last_hidden_state', wrt);
      const layers = await gradsOf(s, feeds, 'last_hidden_state', wrt, 'layers');
      expect(layers.value).toBe(plain.value);
      expectSameGrads(layers.grads, plain.grads);
    } finally {
      s.release();
    }
  });

  it('refuses a checkpoint option that is not layers or prefixes, and prefixes that match nothing', async () => {
    const s = await MlxSession.create(buildDecoder({ ...cfg, layers: 1 }), { device: 'cpu', graphRewrites: false });
    try {
      const feeds = decoderFeeds(s);
      const go = (checkpoint: unknown) =>
        s.valueAndGrad(feeds, { output: meanSquare('logits'), wrt: ['lm_head'], checkpoint: checkpoint as 'layers' });
      await expect(go('all')).rejects.toThrow(/checkpoint must be 'layers' or a non-empty list of node-name prefixes, got 'all'/);
      await expect(go([])).rejects.toThrow(/checkpoint must be 'layers' or a non-empty list of node-name prefixes, got \[\]/);
      await expect(go(['nope/'])).rejects.toThrow(/checkpoint found no layer among the nodes .*pass the layers' node-name prefixes/);
    } finally {
      s.release();
    }
  });
});

describe('trainStep with checkpoint', () => {
  it('SGD steps give the same parameters, with mixed precision too', async () => {
    const small: DecoderConfig = { ...cfg, layers: 2, hidden: 64, ffn: 128, vocab: 96 };
    const feedsFor = (s: MlxSession) => {
      const f = decoderFeeds(s);
      f.input_ids = i64(
        Array.from({ length: B * S }, (_, i) => (i * 7) % small.vocab),
        [B, S],
      );
      for (const n of s.inputNames)
        if (n.startsWith('past_key_values.'))
          f[n] = { dtype: OnnxDataType.FLOAT, dims: [B, small.kvHeads!, 0, small.hidden / small.heads], data: new Float32Array(0) };
      return f;
    };
    for (const mixedPrecision of [undefined, 'bfloat16'] as const) {
      const params: Record<string, number[]>[] = [];
      for (const checkpoint of [undefined, 'layers'] as const) {
        const s = await MlxSession.create(buildDecoder(small), { device: 'cpu', graphRewrites: false });
        // SGD: the gradients' own differences (float rounding of a different summation order, 1e-8
        // at most), where AdamW's normalisation would magnify those of near-zero gradients.
        const opt = new mx.optim.SGD({ lr: 0.1, momentum: 0.9 });
        try {
          const wrt = Object.keys(s.parameters()).filter((n) => n !== 'cos_cache' && n !== 'sin_cache');
          for (let i = 0; i < 2; i++)
            await s.trainStep(feedsFor(s), { output: meanSquare('logits'), optimizer: opt, wrt, checkpoint, mixedPrecision });
          const p = s.parameters(wrt);
          params.push(Object.fromEntries(wrt.map((n) => [n, Array.from(p[n].toTypedArray() as Float32Array)])));
          mx.dispose(p);
        } finally {
          opt.dispose();
          s.release();
        }
      }
      // bfloat16: cotangents added in another order round to bfloat16 apart (2^-8 relative), times lr.
      expectSameGrads(params[1], params[0], mixedPrecision ? 0.1 * 2 ** -8 : 1e-6);
    }
  });
});
