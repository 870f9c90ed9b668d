// Whisper's decoding in generateSeq2Seq: the forced prompt from the generation config, each
// timestamp rule on crafted logits (the expected masks derived by hand from the rule), the chunks,
// and end to end on a Whisper-shaped export with timestamp tokens: mlx and onnxruntime-node equal
// transformers' greedy generate with its WhisperTimeStampLogitsProcessor and suppress processors.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type WhisperGenerationConfig, generateSeq2Seq, whisperChunks, whisperLogitsProcessor, whisperPrompt } from '../../src/index.js';
import { mlxCpu, ort } from '../helpers/ort.js';
import { whisperFeatures, whisperFolder, whisperTsFolder, whisperTsReference } from '../helpers/seq2seq.js';

type Session = import('onnxruntime-node').InferenceSession;

// A 15-token vocabulary laid out as Whisper's: text 0-4, <|endoftext|> 5, <|startoftranscript|> 6,
// another special 7, <|notimestamps|> 8, timestamps 9-14 (<|0.00|> ... <|0.10|>).
const config: WhisperGenerationConfig = {
  decoder_start_token_id: 6,
  eos_token_id: 5,
  no_timestamps_token_id: 8,
  max_initial_timestamp_index: 2,
};
const V = 15;
const range = (a: number, b: number) => Array.from({ length: b - a }, (_, i) => a + i);

/** The tokens the rules leave choosable (not -Infinity) for these logits after this sequence. */
function allowed(sequence: number[], logits: Record<number, number> = {}, cfg = config, returnTimestamps = true): number[] {
  const row = new Float32Array(V);
  for (const [i, v] of Object.entries(logits)) row[Number(i)] = v;
  whisperLogitsProcessor({ generationConfig: cfg, returnTimestamps }, [6])(row, sequence);
  return range(0, V).filter((i) => row[i] !== Number.NEGATIVE_INFINITY);
}

describe('whisperLogitsProcessor: the timestamp rules on crafted logits (prompt [6], generation from index 1)', () => {
  it('first generated token: a timestamp (text and specials masked), at most max_initial_timestamp_index in', () => {
    // Everything below timestamp_begin 9 is masked; 9 + 2 is the last timestamp allowed.
    expect(allowed([6])).toEqual([9, 10, 11]);
    expect(allowed([6], {}, { ...config, max_initial_timestamp_index: null })).toEqual(range(9, 15));
  });

  it('pairs: after a lone timestamp no text token (below eos 5); after two in a row no timestamp', () => {
    // [9, 2, 11]: the last (11) is a timestamp, the one before (2) text: tokens 0-4 masked, 8
    // (<|notimestamps|>) always, and below 11 (monotonic, 11 itself may close the pair). eos high,
    // so the probability rule keeps the text side.
    expect(allowed([6, 9, 2, 11], { 5: 10 })).toEqual([5, 6, 7, 11, 12, 13, 14]);
    // [9, 2, 11, 11]: a pair closed: every timestamp masked.
    expect(allowed([6, 9, 2, 11, 11])).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });

  it('monotonic: after text, timestamps up to the last one are masked (it may not repeat)', () => {
    // [9, 2, 12, 3]: the last timestamp 12 and below masked; text 3 high keeps text in.
    expect(allowed([6, 9, 2, 12, 3], { 3: 10 })).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 13, 14]);
  });

  it("probability: a timestamp is chosen when the timestamps' summed probability beats every text token", () => {
    // After [9, 2] the timestamps 10-14 are allowed (9 masked, monotonic). All logits 0 but text
    // token 1: the timestamps' log-sum-exp is log(5) = 1.609 (softmax's normalizer cancels).
    expect(allowed([6, 9, 2], { 1: 1.5 })).toEqual([10, 11, 12, 13, 14]); // 1.609 > 1.5: text masked
    expect(allowed([6, 9, 2], { 1: 1.7 })).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14]); // 1.7 > 1.609
  });

  it('suppress_tokens always, begin_suppress_tokens on the first generated token only; without timestamps only these', () => {
    const cfg = { ...config, suppress_tokens: [3], begin_suppress_tokens: [10] };
    expect(allowed([6], {}, cfg)).toEqual([9, 11]);
    expect(allowed([6, 9, 2], { 1: 10 }, cfg)).toEqual([0, 1, 2, 4, 5, 6, 7, 10, 11, 12, 13, 14]);
    expect(allowed([6], {}, cfg, false)).toEqual(range(0, V).filter((t) => t !== 3 && t !== 10));
    expect(allowed([6, 9, 2], {}, cfg, false)).toEqual(range(0, V).filter((t) => t !== 3));
  });

  it('a vocabulary without timestamp tokens is named', () => {
    const row = new Float32Array(9);
    expect(() => whisperLogitsProcessor({ generationConfig: config, returnTimestamps: true }, [6])(row, [6])).toThrow(
      /^whisper: returnTimestamps needs timestamp tokens from no_timestamps_token_id \+ 1 = 9 on, but the decoder's logits have 9 entries/,
    );
  });
});

describe('whisperPrompt: the forced tokens as transformers.js builds them', () => {
  const multi: WhisperGenerationConfig = {
    ...config,
    is_multilingual: true,
    lang_to_id: { '<|en|>': 20, '<|de|>': 21 },
    task_to_id: { transcribe: 30, translate: 31 },
  };

  it('English-only and multilingual, with and without timestamps', () => {
    expect(whisperPrompt({ generationConfig: config })).toEqual([6, 8]);
    expect(whisperPrompt({ generationConfig: config, returnTimestamps: true })).toEqual([6]);
    expect(whisperPrompt({ generationConfig: multi })).toEqual([6, 20, 30, 8]);
    expect(whisperPrompt({ generationConfig: multi, language: 'de', task: 'translate', returnTimestamps: true })).toEqual([6, 21, 31]);
    expect(whisperPrompt({ generationConfig: multi, language: '<|de|>' })).toEqual([6, 21, 30, 8]);
  });

  it('a language or task the config lacks is named', () => {
    expect(() => whisperPrompt({ generationConfig: config, language: 'en' })).toThrow(
      /^whisper: Cannot specify `task` or `language` for an English-only model\./,
    );
    expect(() => whisperPrompt({ generationConfig: multi, language: 'xx' })).toThrow(
      "whisper: language 'xx' is not in generationConfig.lang_to_id (give one of its codes: <|en|>, <|de|>)",
    );
    expect(() => whisperPrompt({ generationConfig: multi, task: 'summarize' })).toThrow(
      "whisper: task 'summarize' is not in generationConfig.task_to_id (transcribe, translate)",
    );
  });
});

describe('whisperChunks: the token stream cut at timestamps, as the ASR pipeline returns it', () => {
  const decode = (ids: number[]) => ids.map((t) => 'abcde'[t]).join('');

  it('a timestamp opens a chunk, the next closes it; specials dropped; seconds at 0.02 a token', () => {
    expect(whisperChunks([6, 9, 1, 2, 11, 11, 3, 7, 14, 5], config, { decode })).toEqual([
      { tokens: [1, 2], text: 'bc', timestamp: [0, 0.04] },
      { tokens: [3], text: 'd', timestamp: [0.04, 0.1] },
    ]);
  });

  it('an end equal to its start is a start again; text left open has a null end; text before any timestamp joins the first chunk', () => {
    expect(whisperChunks([9, 9, 1, 10], config)).toEqual([{ tokens: [1], timestamp: [0, 0.02] }]);
    expect(whisperChunks([9, 1, 10, 2], config)).toEqual([
      { tokens: [1], timestamp: [0, 0.02] },
      { tokens: [2], timestamp: [null, null] },
    ]);
    expect(whisperChunks([0, 9, 1, 12], config)).toEqual([{ tokens: [0, 1], timestamp: [0, 0.06] }]);
    expect(whisperChunks([9, 1, 12], config, { timePrecision: 0.5 })).toEqual([{ tokens: [1], timestamp: [0, 1.5] }]);
  });
});

describe('generateSeq2Seq with whisper: a Whisper-shaped export with timestamp tokens', () => {
  const onDevice = { ...mlxCpu, preferredOutputLocation: 'gpu-buffer' } as never;

  async function each(dir: string, body: (encoder: Session, decoder: Session, engine: string) => Promise<void>) {
    for (const [engine, options] of [
      ['mlx', onDevice],
      ['ort', {}],
    ] as const) {
      const encoder = await ort.InferenceSession.create(join(dir, 'onnx', 'encoder_model.onnx'), options);
      const decoder = await ort.InferenceSession.create(join(dir, 'onnx', 'decoder_model_merged.onnx'), options);
      try {
        await body(encoder, decoder, engine);
      } finally {
        await encoder.release();
        await decoder.release();
      }
    }
  }
  const collect = async (stream: AsyncGenerator<number>) => {
    const out: number[] = [];
    for await (const t of stream) out.push(t);
    return out;
  };

  it("returnTimestamps: mlx and onnxruntime-node equal transformers' WhisperTimeStampLogitsProcessor greedy run", async () => {
    const dir = whisperTsFolder();
    const ref = whisperTsReference(dir);
    const generationConfig = JSON.parse(readFileSync(join(dir, 'generation_config.json'), 'utf8'));
    const features = new ort.Tensor('float32', whisperFeatures(dir), ref.featureDims);
    const expected = ref.tokens.slice(1);
    expect(ref.decoderInputIds).toEqual([380]); // English-only with timestamps: no <|notimestamps|>
    // The reference has pairs, a repeated end/start and special tokens among the text.
    expect(expected.filter((t) => t >= 384).length).toBeGreaterThan(4);
    const { suppress_tokens: _, begin_suppress_tokens: __, ...plainConfig } = generationConfig;
    await each(dir, async (encoder, decoder, engine) => {
      const run = (cfg: WhisperGenerationConfig) =>
        collect(
          generateSeq2Seq(encoder, decoder, {
            encoderFeeds: { input_features: features as never },
            whisper: { generationConfig: cfg, returnTimestamps: true },
            maxNewTokens: ref.maxNewTokens,
            Tensor: ort.Tensor as never,
          }),
        );
      expect(await run(generationConfig), engine).toEqual(expected);
      // Without the suppress lists: transformers' run without those processors.
      expect(await run(plainConfig), engine).toEqual(ref.plain);
    });
    const chunks = whisperChunks(expected, generationConfig);
    // By hand: <|0.22|> 47 <|0.48|>, <|2.28|> 47 152 <|2.60|>, <|3.90|> 47 329 152 <|5.90|>, then
    // <|transcribe|> (special, dropped) and text no timestamp closes.
    expect(chunks.slice(0, 3)).toEqual([
      { tokens: [47], timestamp: [0.22, 0.48] },
      { tokens: [47, 152], timestamp: [2.28, 2.6] },
      { tokens: [47, 329, 152], timestamp: [3.9, 5.9] },
    ]);
    expect(chunks[3].timestamp).toEqual([null, null]);
    expect(chunks[3].tokens).toEqual(expected.slice(expected.indexOf(381) + 1));
  }, 180_000);

  it("transformers.js 4.3.2: its rules as a logitsProcessor give its generate's tokens; without timestamps the option gives them", async () => {
    // Captured from transformers.js 4.3.2 (not a dependency here) on this export, CPU provider:
    //   const model = await WhisperForConditionalGeneration.from_pretrained('whisper-ts-tiny', { dtype: 'fp32' });
    //   model.generate({ inputs: features, return_timestamps: true, max_new_tokens: 32 })  -> withTimestamps
    //   model.generate({ inputs: features, max_new_tokens: 8 })                             -> withoutTimestamps
    // Its timestamps decrease (672 then 666) and its first one is past max_initial_timestamp_index:
    // its processor has no non-decreasing rule and stops at the first step after masking the text.
    const withTimestamps = [
      380, 607, 47, 672, 666, 230, 602, 447, 152, 55, 498, 447, 323, 469, 390, 55, 498, 447, 312, 637, 634, 152, 406, 447, 329, 406, 464,
      347, 653, 447, 15, 406, 447,
    ];
    const withoutTimestamps = [380, 383, 498, 131, 104, 498, 69, 15, 165, 15];
    const dir = whisperTsFolder();
    const gc: WhisperGenerationConfig = JSON.parse(readFileSync(join(dir, 'generation_config.json'), 'utf8'));
    const features = new ort.Tensor('float32', whisperFeatures(dir), [1, 80, 3000]);
    const tb = 384;
    // transformers.js 4.3.2's order: suppress_tokens, begin_suppress_tokens, then its timestamp rules.
    const theirs = (l: Float32Array, seq: readonly number[]) => {
      for (const t of gc.suppress_tokens ?? []) l[t] = Number.NEGATIVE_INFINITY;
      if (seq.length === 1) for (const t of gc.begin_suppress_tokens ?? []) l[t] = Number.NEGATIVE_INFINITY;
      l[tb - 1] = Number.NEGATIVE_INFINITY;
      if (seq.length === 1) {
        l.fill(Number.NEGATIVE_INFINITY, 0, tb);
        return;
      }
      const s = seq.slice(1);
      const last = s.length >= 1 && s[s.length - 1] >= tb;
      const penultimate = s.length < 2 || s[s.length - 2] >= tb;
      if (last) {
        if (penultimate) l.fill(Number.NEGATIVE_INFINITY, tb);
        else l.fill(Number.NEGATIVE_INFINITY, 0, 379);
      }
      let m = Number.NEGATIVE_INFINITY;
      for (const v of l) m = Math.max(m, v);
      let sum = 0;
      for (let i = tb; i < l.length; i++) sum += Math.exp(l[i] - m);
      let best = Number.NEGATIVE_INFINITY;
      for (let i = 0; i < tb; i++) best = Math.max(best, l[i]);
      if (Math.log(sum) + m > best) l.fill(Number.NEGATIVE_INFINITY, 0, tb);
    };
    await each(dir, async (encoder, decoder, engine) => {
      const base = { encoderFeeds: { input_features: features as never }, Tensor: ort.Tensor as never };
      const a = await collect(
        generateSeq2Seq(encoder, decoder, {
          ...base,
          decoderInputIds: [380],
          logitsProcessor: theirs,
          stopTokens: [379],
          maxNewTokens: 32,
        }),
      );
      expect([380, ...a], engine).toEqual(withTimestamps);
      const b = await collect(generateSeq2Seq(encoder, decoder, { ...base, whisper: { generationConfig: gc }, maxNewTokens: 8 }));
      expect([380, 383, ...b], engine).toEqual(withoutTimestamps);
    });
  }, 180_000);

  it('the prompt from the config, its eos a stop; a model without timestamp tokens and bad options named', async () => {
    const dir = whisperFolder();
    const generationConfig = JSON.parse(readFileSync(join(dir, 'generation_config.json'), 'utf8'));
    const features = new ort.Tensor('float32', whisperFeatures(dir), [1, 80, 3000]);
    await each(dir, async (encoder, decoder) => {
      const fed: number[] = [];
      const base = { encoderFeeds: { input_features: features as never }, maxNewTokens: 3, Tensor: ort.Tensor as never };
      const out = await collect(
        generateSeq2Seq(encoder, decoder, { ...base, whisper: { generationConfig }, onStep: (_, n) => fed.push(n) }),
      );
      expect(out).toHaveLength(3);
      expect(fed[0]).toBe(2); // <|startoftranscript|> <|notimestamps|>
      // The same tokens as the prompt given by hand.
      expect(await collect(generateSeq2Seq(encoder, decoder, { ...base, decoderInputIds: [380, 383] }))).toEqual(out);
      await expect(
        collect(generateSeq2Seq(encoder, decoder, { ...base, whisper: { generationConfig, returnTimestamps: true } })),
      ).rejects.toThrow(
        "whisper: returnTimestamps needs timestamp tokens from no_timestamps_token_id + 1 = 384 on, but the decoder's logits have 384 entries (a model without timestamp tokens)",
      );
      await expect(
        collect(generateSeq2Seq(encoder, decoder, { ...base, decoderStartTokenId: 380, whisper: { generationConfig } })),
      ).rejects.toThrow(/^generateSeq2Seq: decoderStartTokenId is not taken with whisper/);
      await expect(collect(generateSeq2Seq(encoder, decoder, { ...base, whisper: { generationConfig, language: 'en' } }))).rejects.toThrow(
        /^generateSeq2Seq: whisper: Cannot specify `task` or `language` for an English-only model/,
      );
      const { no_timestamps_token_id: _, ...noTimestamps } = generationConfig;
      await expect(
        collect(generateSeq2Seq(encoder, decoder, { ...base, whisper: { generationConfig: noTimestamps, returnTimestamps: true } })),
      ).rejects.toThrow(/^generateSeq2Seq: whisper: returnTimestamps needs generationConfig\.no_timestamps_token_id/);
      await expect(
        collect(
          generateSeq2Seq(encoder, decoder, { ...base, whisper: { generationConfig: { ...generationConfig, suppress_tokens: [1, -1] } } }),
        ),
      ).rejects.toThrow('generateSeq2Seq: whisper.generationConfig.suppress_tokens must be a list of token ids, got [1, -1]');
    });
  }, 180_000);
});
