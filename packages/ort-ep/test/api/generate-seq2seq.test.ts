// Encoder-decoder generation: a tiny T5 exported by torch + transformers in optimum's layout
// (encoder_model.onnx, decoder_model_merged.onnx with use_cache_branch), greedy through
// generateSeq2Seq on mlx (outputs on the device) and on onnxruntime-node, against transformers'
// own model.generate; the cross-attention cache computed once and kept on the device; bad
// sessions and options named.
import { join } from 'node:path';
import * as mx from '@mlx/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidFeedError, generateSeq2Seq, transferStats } from '../../src/index.js';
import { mlxCpu, ort } from '../helpers/ort.js';
import { type Seq2SeqReference, t5Folder, t5Reference, whisperFeatures, whisperFolder, whisperReference } from '../helpers/seq2seq.js';

type Session = import('onnxruntime-node').InferenceSession;
type Opts = Partial<Parameters<typeof generateSeq2Seq>[2]>;

const onDevice = {
  ...mlxCpu,
  preferredOutputLocation: 'gpu-buffer',
} as unknown as import('onnxruntime-node').InferenceSession.SessionOptions;

let ref: Seq2SeqReference;
const engines: Record<'mlx' | 'ort', { encoder: Session; decoder: Session }> = {} as never;

beforeAll(async () => {
  const dir = t5Folder();
  ref = t5Reference(dir);
  for (const [name, options] of [
    ['mlx', onDevice],
    ['ort', {}],
  ] as const)
    engines[name] = {
      encoder: await ort.InferenceSession.create(join(dir, 'onnx', 'encoder_model.onnx'), options),
      decoder: await ort.InferenceSession.create(join(dir, 'onnx', 'decoder_model_merged.onnx'), options),
    };
}, 300_000);

afterAll(async () => {
  for (const e of Object.values(engines)) {
    await e.encoder?.release();
    await e.decoder?.release();
  }
});

async function run(engine: 'mlx' | 'ort', opts: Opts): Promise<number[]> {
  const { encoder, decoder } = engines[engine];
  const out: number[] = [];
  const options = {
    inputIds: [],
    maxNewTokens: ref.maxNewTokens,
    decoderStartTokenId: ref.decoderStartTokenId,
    Tensor: ort.Tensor as never,
    ...opts,
  };
  for await (const t of generateSeq2Seq(encoder, decoder, options)) out.push(t);
  return out;
}

describe('generateSeq2Seq on a T5 export', () => {
  it('the mlx sessions run on mlx, the merged decoder has the cross-attention cache', () => {
    expect((engines.mlx.decoder as unknown as { handler: object }).handler.constructor.name).toBe('MlxSessionHandler');
    expect(engines.mlx.decoder.inputNames).toContain('past_key_values.1.encoder.value');
    expect(engines.mlx.decoder.inputNames).toContain('use_cache_branch');
  });

  it("greedy tokens: mlx equals onnxruntime-node, and both equal transformers' model.generate", async () => {
    expect(ref.cases.length).toBeGreaterThan(1);
    for (const c of ref.cases) {
      const expected = c.tokens.slice(1); // transformers returns the decoder start token first
      expect(c.tokens[0]).toBe(ref.decoderStartTokenId);
      expect(await run('ort', { inputIds: c.inputIds })).toEqual(expected);
      expect(await run('mlx', { inputIds: c.inputIds })).toEqual(expected);
    }
  });

  it('a decoder prompt (forced tokens) is fed whole by the first step and continued as transformers does', async () => {
    const p = ref.prompted;
    const expected = p.tokens.slice(p.decoderInputIds.length);
    const opts: Opts = { inputIds: p.inputIds, decoderInputIds: p.decoderInputIds, decoderStartTokenId: undefined };
    const fed: number[] = [];
    expect(await run('ort', opts)).toEqual(expected);
    expect(await run('mlx', { ...opts, onStep: (_, n) => fed.push(n) })).toEqual(expected);
    expect(fed.slice(0, 3)).toEqual([3, 1, 1]);
  });

  it('encoderFeeds: the encoder fed as given, its attention_mask reused as the encoder_attention_mask', async () => {
    const c = ref.cases[1];
    const n = c.inputIds.length;
    const encoderFeeds = {
      input_ids: new ort.Tensor('int64', BigInt64Array.from(c.inputIds, BigInt), [1, n]),
      attention_mask: new ort.Tensor('int64', new BigInt64Array(n).fill(1n), [1, n]),
    };
    for (const engine of ['ort', 'mlx'] as const)
      expect(await run(engine, { inputIds: undefined, encoderFeeds: encoderFeeds as never })).toEqual(c.tokens.slice(1));
  });

  it('on mlx the caches stay on the device: a step downloads its logits alone', async () => {
    const c = ref.cases[1];
    const vocab = 256;
    const count = async (n: number) => {
      const before = transferStats().downloadedBytes;
      await run('mlx', { inputIds: c.inputIds, maxNewTokens: n });
      return transferStats().downloadedBytes - before;
    };
    const few = await count(2);
    const many = await count(10);
    // Eight more steps move eight rows of float32 logits, not the caches (2 layers x 4 tensors x
    // 4 heads x 16 x (positions) floats) nor the encoder's output; the steps past the streak of new
    // signatures run unanalysed (eager), which read their device checks' one-byte flags.
    expect(many - few).toBeGreaterThanOrEqual(8 * vocab * 4);
    expect(many - few).toBeLessThanOrEqual(8 * vocab * 4 + 8 * 4);
  });

  it('stop tokens end the stream (yielded), minNewTokens holds them back, on both engines', async () => {
    const c = ref.cases.find((x) => new Set(x.tokens.slice(1)).size < x.tokens.length - 2) ?? ref.cases[0];
    const greedy = c.tokens.slice(1);
    const stop = greedy[1];
    const first = greedy.indexOf(stop);
    for (const engine of ['ort', 'mlx'] as const) {
      expect(await run(engine, { inputIds: c.inputIds, stopTokens: [stop] })).toEqual(greedy.slice(0, first + 1));
      const held = await run(engine, { inputIds: c.inputIds, stopTokens: [stop], minNewTokens: first + 2 });
      expect(held.slice(0, first + 1)).not.toContain(stop);
      expect(held.length).toBeGreaterThan(first + 1);
    }
  });

  it('seeded sampling and penalties give the same tokens on both engines', async () => {
    const c = ref.cases[0];
    const opts: Opts = { inputIds: c.inputIds, sampling: { temperature: 0.7, topK: 8, seed: 3 }, repetitionPenalty: 1.3 };
    const a = await run('ort', opts);
    expect(a).toHaveLength(ref.maxNewTokens);
    expect(await run('mlx', opts)).toEqual(a);
    // The repetition penalty changes greedy's repeating tail.
    const penalized = await run('ort', { inputIds: ref.cases[2].inputIds, repetitionPenalty: 5 });
    expect(penalized).not.toEqual(ref.cases[2].tokens.slice(1));
    expect(await run('mlx', { inputIds: ref.cases[2].inputIds, repetitionPenalty: 5 })).toEqual(penalized);
  });

  it('finishing or breaking out of the loop frees the device tensors it holds; a later run is unaffected', async () => {
    const { encoder, decoder } = engines.mlx;
    const c = ref.cases[0];
    // Warm: the first runs leave the session's own caches behind (they stop growing by the third).
    for (let i = 0; i < 3; i++) await run('mlx', { inputIds: c.inputIds });
    const active = mx.memory.active();
    await run('mlx', { inputIds: c.inputIds });
    expect(mx.memory.active()).toBe(active);
    for await (const t of generateSeq2Seq(encoder, decoder, {
      inputIds: c.inputIds,
      maxNewTokens: 8,
      decoderStartTokenId: 0,
      Tensor: ort.Tensor as never,
    })) {
      expect(t).toBe(c.tokens[1]);
      break;
    }
    expect(mx.memory.active()).toBe(active);
    expect(await run('mlx', { inputIds: c.inputIds })).toEqual(c.tokens.slice(1));
  });
});

describe('generateSeq2Seq on a Whisper-shaped export', () => {
  it('input_features through encoderFeeds, a forced decoder prompt: mlx and onnxruntime-node equal transformers', async () => {
    const dir = whisperFolder();
    const w = whisperReference(dir);
    const features = new ort.Tensor('float32', whisperFeatures(dir), w.featureDims);
    const expected = w.tokens.slice(w.decoderInputIds.length);
    expect(new Set(expected).size).toBeGreaterThan(3);
    for (const options of [onDevice, {}]) {
      const encoder = await ort.InferenceSession.create(join(dir, 'onnx', 'encoder_model.onnx'), options);
      const decoder = await ort.InferenceSession.create(join(dir, 'onnx', 'decoder_model_merged.onnx'), options);
      try {
        // No encoder_attention_mask: Whisper's decoder attends to every frame.
        expect(decoder.inputNames).not.toContain('encoder_attention_mask');
        const handlers = [encoder, decoder].map((s) => (s as unknown as { handler: object }).handler.constructor.name);
        expect(handlers.every((h) => h === 'MlxSessionHandler')).toBe(options === onDevice);
        const out: number[] = [];
        for await (const t of generateSeq2Seq(encoder, decoder, {
          encoderFeeds: { input_features: features as never },
          decoderInputIds: w.decoderInputIds,
          maxNewTokens: w.maxNewTokens,
          stopTokens: [w.eosTokenId],
          Tensor: ort.Tensor as never,
        }))
          out.push(t);
        expect(out).toEqual(expected);
      } finally {
        await encoder.release();
        await decoder.release();
      }
    }
  }, 120_000);
});

describe('generateSeq2Seq: bad sessions and options', () => {
  const fake = (s: Session, change: { inputNames?: string[]; outputNames?: string[] }) => ({
    inputNames: change.inputNames ?? s.inputNames,
    outputNames: change.outputNames ?? s.outputNames,
    inputMetadata: s.inputMetadata,
    run: s.run.bind(s),
  });
  const attempt = async (encoder: object, decoder: object, opts: object) => {
    try {
      for await (const _ of generateSeq2Seq(encoder as never, decoder as never, opts as never));
      return 'ran';
    } catch (e) {
      return e;
    }
  };
  const ok = () => ({ inputIds: ref.cases[0].inputIds, maxNewTokens: 2, decoderStartTokenId: 0, Tensor: ort.Tensor });

  it('sessions swapped, or missing the names the layout needs', async () => {
    const { encoder, decoder } = engines.ort;
    const swapped = await attempt(decoder, encoder, ok());
    expect(swapped).toBeInstanceOf(InvalidFeedError);
    expect((swapped as Error).message).toMatch(
      /^generateSeq2Seq: the encoder has inputs it cannot feed from inputIds: encoder_attention_mask, encoder_hidden_states, past_key_values\.0\.decoder\.key.* \(pass them in encoderFeeds\)$/,
    );
    const ids = (n: number) => new ort.Tensor('int64', new BigInt64Array(n).fill(5n), [1, n]);
    const { inputIds: _, ...noIds } = ok();
    await expect(attempt(encoder, decoder, { ...noIds, encoderFeeds: { input_ids: ids(4) } })).resolves.toMatchObject({
      message: "generateSeq2Seq: encoderFeeds has no 'attention_mask' (the encoder's inputs)",
    });
    await expect(
      attempt(encoder, decoder, { ...noIds, encoderFeeds: { input_ids: ids(4), attention_mask: ids(4), input_features: ids(4) } }),
    ).resolves.toMatchObject({
      message:
        "generateSeq2Seq: encoderFeeds has 'input_features', which the encoder does not take (its inputs: input_ids, attention_mask)",
    });
    await expect(attempt(encoder, encoder, ok())).resolves.toMatchObject({
      message:
        'generateSeq2Seq: the decoder has no past_key_values.{i}.decoder/encoder.key/value inputs (its inputs: input_ids, attention_mask); export it with a KV cache (decoder_model_merged)',
    });
    const noHidden = fake(encoder, { outputNames: ['hidden_states'] });
    await expect(attempt(noHidden, decoder, ok())).resolves.toMatchObject({
      message: "generateSeq2Seq: the encoder has no 'last_hidden_state' output (its outputs: hidden_states)",
    });
    const noPresent = fake(decoder, { outputNames: decoder.outputNames.filter((n) => n !== 'present.1.encoder.key') });
    const e = await attempt(encoder, noPresent, ok());
    expect(e).toBeInstanceOf(InvalidFeedError);
    expect((e as Error).message).toBe(
      "generateSeq2Seq: the decoder's input 'past_key_values.1.encoder.key' has no output 'present.1.encoder.key'",
    );
    const selfOnly = fake(decoder, { inputNames: decoder.inputNames.filter((n) => !n.includes('.encoder.')) });
    await expect(attempt(encoder, selfOnly, ok())).resolves.toMatchObject({
      message: expect.stringMatching(
        /^generateSeq2Seq: the decoder has inputs it cannot feed: past_key_values\.0\.encoder\.key|the decoder has no past_key_values\.\{i\}\.encoder/,
      ),
    });
    const noLogits = fake(decoder, { outputNames: decoder.outputNames.filter((n) => n !== 'logits') });
    await expect(attempt(encoder, noLogits, ok())).resolves.toMatchObject({
      message: expect.stringMatching(/^generateSeq2Seq: the decoder has no 'logits' output \(its outputs: present\.0\.decoder\.key/),
    });
  });

  it('options: each bad value named before anything runs', async () => {
    const { encoder, decoder } = engines.ort;
    const cases: [object, RegExp][] = [
      [
        { decoderStartTokenId: undefined },
        /^generateSeq2Seq: give decoderStartTokenId \(the model's decoder_start_token_id\) or decoderInputIds \(the decoder's prompt\), one of them$/,
      ],
      [{ decoderInputIds: [0, 5] }, /^generateSeq2Seq: give decoderStartTokenId .* one of them$/],
      [
        { decoderStartTokenId: undefined, decoderInputIds: [] },
        /^generateSeq2Seq: decoderInputIds must be a non-empty array of token ids, got an array$/,
      ],
      [{ decoderStartTokenId: undefined, decoderInputIds: [0, 1.5] }, /^generateSeq2Seq: decoderInputIds\[1\] = 1\.5 is not a token id/],
      [
        { inputIds: undefined },
        /^generateSeq2Seq: give the encoder's input as inputIds \(token ids\) or as encoderFeeds \(named tensors\), one of them$/,
      ],
      [{ encoderFeeds: {} }, /^generateSeq2Seq: give the encoder's input as inputIds .* one of them$/],
      [{ inputIds: undefined, encoderFeeds: [] }, /^generateSeq2Seq: encoderFeeds must be an object of named tensors, got an array$/],
      [{ decoderStartTokenId: -1 }, /decoderStartTokenId must be a token id .* got -1$/],
      [{ inputIds: [] }, /^generateSeq2Seq: inputIds is empty$/],
      [{ inputIds: [1, 2.5] }, /^generateSeq2Seq: inputIds\[1\] = 2\.5 is not a token id/],
      [{ maxNewTokens: -1 }, /^generateSeq2Seq: maxNewTokens must be an integer ≥ 0, got -1$/],
      [{ kvCapacity: 64 }, /^generateSeq2Seq: unknown option 'kvCapacity' \(known: inputIds, encoderFeeds, decoderStartTokenId,/],
      [{ sampling: 'greedy ' }, /sampling must be 'greedy' or an object/],
      [{ sampling: { topk: 3 } }, /sampling has an unknown option 'topk'/],
      [{ stopTokens: [1, -2] }, /^generateSeq2Seq: stopTokens\[1\] = -2 is not a token id/],
      [{ repetitionPenalty: 0 }, /^generateSeq2Seq: repetitionPenalty must be a finite number > 0/],
      [{ logitsProcessor: 'x' }, /^generateSeq2Seq: logitsProcessor must be a function, got 'x'$/],
    ];
    for (const [change, message] of cases) {
      const e = await attempt(encoder, decoder, { ...ok(), ...change });
      expect(e, JSON.stringify(change)).toBeInstanceOf(Error);
      expect((e as Error).message).toMatch(message);
    }
  });
});
