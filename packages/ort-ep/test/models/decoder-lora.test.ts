// LoRA fine-tuning of the 7M Llama-shaped decoder (4 layers, 256 wide, GroupQueryAttention over 2
// KV heads, vocabulary 8192; random weights from test/helpers/decoder.ts) on a synthetic corpus:
// sequences that count through 16 tokens in a cycle. Rank-8 adapters on every layer's q and v
// projections and on lm_head, trained with AdamW until the next-token loss falls; the adapters
// merged, the model saved, and generate() run on it in onnxruntime-node and on MLX.
import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { LoraAdapters, MlxSession, OnnxDataType, generate, type HostTensor } from '../../src/index.js';
import { buildDecoder, type DecoderConfig } from '../helpers/decoder.js';
import { mlxCpu, ort, seeded } from '../helpers/ort.js';

const config: DecoderConfig = { kind: 'llama', layers: 4, hidden: 256, heads: 8, kvHeads: 2, ffn: 704, vocab: 8192, maxPositions: 64 };
const FIRST = 100;
const CYCLE = 16;
const B = 4;
const S = 24;
const next = (t: number) => FIRST + ((t - FIRST + 1) % CYCLE);

/** B sequences counting through the cycle from seeded starts, and each token's successor (the labels). */
function corpus(seed: number): { ids: BigInt64Array; labels: Int32Array } {
  const starts = seeded(B, seed).map((x) => Math.floor(((x + 1) / 2) * CYCLE));
  const ids = new BigInt64Array(B * S);
  const labels = new Int32Array(B * S);
  for (let b = 0; b < B; b++)
    for (let t = 0; t < S; t++) {
      const tok = FIRST + ((starts[b] + t) % CYCLE);
      ids[b * S + t] = BigInt(tok);
      labels[b * S + t] = next(tok);
    }
  return { ids, labels };
}

function feedsOf(ids: BigInt64Array, names: readonly string[]): Record<string, HostTensor> {
  const f: Record<string, HostTensor> = {
    input_ids: { dtype: OnnxDataType.INT64, dims: [B, S], data: ids },
    attention_mask: { dtype: OnnxDataType.INT64, dims: [B, S], data: new BigInt64Array(B * S).fill(1n) },
  };
  const H = config.hidden / config.heads;
  for (const n of names)
    if (n.startsWith('past_key_values.')) f[n] = { dtype: OnnxDataType.FLOAT, dims: [B, config.kvHeads!, 0, H], data: new Float32Array(0) };
  return f;
}

/** How many of the generated tokens continue the count (each the successor of the one before). */
async function counted(session: import('onnxruntime-node').InferenceSession): Promise<number> {
  const prompt = [FIRST + 3, FIRST + 4, FIRST + 5, FIRST + 6];
  const out: number[] = [];
  for await (const t of generate(session, { inputIds: prompt, maxNewTokens: 10, Tensor: ort.Tensor as never })) out.push(t);
  let prev = prompt.at(-1)!;
  let good = 0;
  for (const t of out) {
    if (t === next(prev)) good++;
    prev = t;
  }
  return good;
}

describe('the 7M decoder, LoRA fine-tuned on a counting corpus', () => {
  it('the loss falls, and generate() from the saved model counts on', { timeout: 120_000 }, async () => {
    const bytes = buildDecoder(config);
    const s = await MlxSession.create(bytes, { device: 'cpu', graphRewrites: false });
    const targets = [...Array.from({ length: config.layers }, (_, l) => [`l${l}.q`, `l${l}.v`]).flat(), 'lm_head'];
    const lora = LoraAdapters.attach(s, { targets, rank: 8, alpha: 16, seed: 3 });
    const opt = new mx.optim.AdamW({ lr: 5e-3, weightDecay: 0 });
    try {
      const base = await ort.InferenceSession.create(bytes);
      const before = await counted(base);
      await base.release();

      const losses: number[] = [];
      for (let step = 0; step < 30; step++) {
        const { ids, labels } = corpus(50 + step);
        const { loss } = await lora.trainStep(feedsOf(ids, s.inputNames), {
          optimizer: opt,
          fetches: ['logits'],
          clipGradNorm: 1,
          // Next-token cross-entropy, written with @mlx/core ops (the labels made inside: evaluated with the step).
          output: (o) => {
            const y = mx.expandDims(mx.array(labels, { shape: [B, S] }), -1);
            return mx.mean(mx.subtract(mx.logsumexp(o.logits, -1), mx.squeeze(mx.takeAlongAxis(o.logits, y, -1), -1)));
          },
        });
        losses.push(loss);
      }
      const mean = (xs: number[]) => xs.reduce((a, b) => a + b) / xs.length;
      expect(mean(losses.slice(-5))).toBeLessThan(mean(losses.slice(0, 5)) * 0.5);

      lora.merge();
      const tuned = s.saveModel();
      for (const options of [{}, mlxCpu]) {
        const o = await ort.InferenceSession.create(tuned, options as never);
        try {
          const good = await counted(o);
          expect(good).toBeGreaterThan(before);
          expect(good).toBeGreaterThanOrEqual(8);
        } finally {
          await o.release();
        }
      }
    } finally {
      opt.dispose();
      lora.dispose();
      s.release();
    }
  });
});
