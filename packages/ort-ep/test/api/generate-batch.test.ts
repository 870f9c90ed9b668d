// generateBatch(): prompts of different lengths in one batch, padded on the left (GPT-2-shaped,
// position_ids and a mask) or on the right (Llama-shaped, GroupQueryAttention's layout, growing or
// in a shared buffer): each sequence's greedy tokens are its own batch-1 run's, on mlx and on
// onnxruntime-node running the same loop.
import { describe, expect, it } from 'vitest';
import { type BatchStep, generate, generateBatch } from '../../src/index.js';
import { buildDecoder, type DecoderConfig } from '../helpers/decoder.js';
import { mlxCpu, ort } from '../helpers/ort.js';

const llama: DecoderConfig = { kind: 'llama', layers: 2, hidden: 64, heads: 4, kvHeads: 2, ffn: 128, vocab: 256, maxPositions: 256 };
const gpt2: DecoderConfig = { kind: 'gpt2', layers: 2, hidden: 64, heads: 4, ffn: 128, vocab: 256, maxPositions: 256, seed: 3 };
const prompts = [[3, 17, 42, 99, 7, 128, 5, 77], [9, 4], [200, 1, 33, 64, 18], [250]];
type Session = import('onnxruntime-node').InferenceSession;
type BatchOpts = Partial<Parameters<typeof generateBatch>[1]>;
type Opts = Partial<Parameters<typeof generate>[1]>;

const onDevice = { ...mlxCpu, preferredOutputLocation: 'gpu-buffer' };

async function single(s: Session, prompt: number[], opts: Opts): Promise<number[]> {
  const out: number[] = [];
  for await (const t of generate(s, { inputIds: prompt, maxNewTokens: 24, Tensor: ort.Tensor as never, ...opts })) out.push(t);
  return out;
}

async function batch(s: Session, opts: BatchOpts, steps?: BatchStep[]): Promise<number[][]> {
  const input = (opts.inputIds ?? prompts) as number[][];
  const out: number[][] = input.map(() => []);
  for await (const st of generateBatch(s, { inputIds: input, maxNewTokens: 24, Tensor: ort.Tensor as never, ...opts })) {
    steps?.push(st);
    st.tokens.forEach((t, b) => t !== undefined && out[b].push(t));
  }
  return out;
}

async function withSession<T>(bytes: Uint8Array, options: object, body: (s: Session) => Promise<T>): Promise<T> {
  const s = await ort.InferenceSession.create(bytes, options as never);
  try {
    return await body(s);
  } finally {
    await s.release();
  }
}

describe('generateBatch: batch 4 greedy equals four batch-1 runs', () => {
  const cases: [string, DecoderConfig, BatchOpts][] = [
    ['GPT-2 (Concat cache, left padding)', gpt2, {}],
    ['Llama (GQA, growing cache, right padding)', llama, {}],
    ['Llama (GQA, shared buffer kvCapacity 64, right padding)', llama, { kvCapacity: 64 }],
  ];
  for (const [name, config, opts] of cases)
    it(name, async () => {
      const bytes = buildDecoder(config);
      const one = { kvCapacity: opts.kvCapacity };
      const want = await withSession(bytes, {}, (s) => Promise.all(prompts.map((p) => single(s, p, one))));
      const ortBatch = await withSession(bytes, {}, (s) => batch(s, opts));
      const mlxBatch = await withSession(bytes, mlxCpu, (s) => batch(s, opts));
      const mlxDevice = await withSession(bytes, onDevice, (s) => batch(s, opts));
      expect(ortBatch).toEqual(want);
      expect(mlxBatch).toEqual(want);
      expect(mlxDevice).toEqual(want);
    }, 120_000);
});
