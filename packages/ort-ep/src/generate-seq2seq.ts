// Token generation from an encoder-decoder (T5, BART, Marian) exported as optimum and
// transformers.js lay it out: an encoder session (input_ids, attention_mask -> last_hidden_state)
// and a merged decoder session (encoder_attention_mask, input_ids, encoder_hidden_states,
// past_key_values.{i}.decoder/encoder.key/value, use_cache_branch -> logits,
// present.{i}.decoder/encoder.key/value), over any onnxruntime-common sessions.
//
// The encoder runs once. The decoder's first step (use_cache_branch false) computes the
// cross-attention keys and values from the encoder's output; they are fed back unchanged on every
// later step (the merged graph's other branch returns placeholders for them, which are dropped),
// while the self-attention cache grows by one row a step. On the 'mlx' backend with
// `preferredOutputLocation: 'gpu-buffer'` the encoder output and both caches stay on the device;
// only each step's last logits are downloaded.
import { Tensor as CommonTensor, type InferenceSession, type Tensor } from 'onnxruntime-common';
import { deviceBufferOf } from './backend/device-buffer.js';
import { InvalidFeedError } from './errors.js';
import {
  type GenerateOptions,
  type SamplingOptions,
  applyPenalties,
  checkSampling,
  isDevice,
  lastRows,
  pickToken,
  seeded,
} from './generate.js';
import { type WhisperOptions, checkWhisperOptions, whisperLogitsProcessor, whisperPrompt } from './whisper.js';

export interface Seq2SeqOptions
  extends Pick<
    GenerateOptions,
    | 'maxNewTokens'
    | 'stopTokens'
    | 'minNewTokens'
    | 'repetitionPenalty'
    | 'presencePenalty'
    | 'frequencyPenalty'
    | 'logitsProcessor'
    | 'Tensor'
    | 'onStep'
  > {
  /** The encoder's input_ids (batch 1; its attention_mask is all ones). Or `encoderFeeds`. */
  inputIds?: readonly (number | bigint)[];
  /**
   * The encoder's feeds as they are, for an encoder whose input is not token ids (Whisper's
   * `input_features`) or that takes a mask of its own; batch 1. The decoder's
   * `encoder_attention_mask` is its `attention_mask` where given, else all ones.
   */
  encoderFeeds?: Record<string, Tensor>;
  /**
   * The token the decoder starts from (the model's `decoder_start_token_id`: 0 for T5, 2 for BART,
   * the pad token for Marian). It is fed, not yielded; the repetition penalty and the
   * logitsProcessor's sequence count it, as transformers does. Or `decoderInputIds`.
   */
  decoderStartTokenId?: number;
  /**
   * The decoder's prompt, fed whole by the first step and not yielded: the start token and any
   * forced tokens after it (Whisper's `<|startoftranscript|>`, language, task, `<|notimestamps|>`).
   */
  decoderInputIds?: readonly number[];
  /** 'greedy' (default) or sampling (temperature, top-k, top-p, seed), as generate() takes them. */
  sampling?: 'greedy' | SamplingOptions;
  /**
   * Whisper's decoding from its generation_config.json, as transformers.js's generate applies it:
   * the forced prompt (whisperPrompt: <|startoftranscript|>, language and task for a multilingual
   * model, <|notimestamps|> unless `returnTimestamps`) unless decoderInputIds gives one, its
   * eos_token_id as a stop token, suppress_tokens and begin_suppress_tokens, and with
   * `returnTimestamps` the timestamp rules (whisperLogitsProcessor); whisperChunks turns the
   * tokens into timed chunks. Not with decoderStartTokenId.
   */
  whisper?: WhisperOptions;
}

type Session = Pick<InferenceSession, 'inputNames' | 'outputNames' | 'inputMetadata' | 'run'>;

interface Cache {
  past: string;
  present: string;
  /** 'decoder': self-attention, grows each step; 'encoder': cross-attention, computed once. */
  kind: 'decoder' | 'encoder';
  dims: [number, number];
  type: Tensor.Type;
}

const OPTION_KEYS = [
  'inputIds',
  'encoderFeeds',
  'decoderStartTokenId',
  'decoderInputIds',
  'maxNewTokens',
  'sampling',
  'stopTokens',
  'minNewTokens',
  'repetitionPenalty',
  'presencePenalty',
  'frequencyPenalty',
  'logitsProcessor',
  'Tensor',
  'onStep',
  'whisper',
];

const show = (v: unknown): string =>
  typeof v === 'string' ? `'${v}'` : typeof v === 'bigint' ? `${v}n` : Array.isArray(v) ? 'an array' : String(v);
const isCount = (v: unknown, min: number): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= min;

function checkOptions(options: Seq2SeqOptions): void {
  if (typeof options !== 'object' || options === null)
    throw new TypeError(`generateSeq2Seq: options must be an object, got ${show(options)}`);
  for (const k of Object.keys(options))
    if (!OPTION_KEYS.includes(k)) throw new TypeError(`generateSeq2Seq: unknown option '${k}' (known: ${OPTION_KEYS.join(', ')})`);
  const ids = options.inputIds as unknown;
  const feeds = options.encoderFeeds as unknown;
  if ((ids === undefined) === (feeds === undefined))
    throw new TypeError(
      "generateSeq2Seq: give the encoder's input as inputIds (token ids) or as encoderFeeds (named tensors), one of them",
    );
  if (ids !== undefined) {
    if (!Array.isArray(ids)) throw new TypeError(`generateSeq2Seq: inputIds must be an array of token ids, got ${show(ids)}`);
    if (!ids.length) throw new RangeError('generateSeq2Seq: inputIds is empty');
    ids.forEach((id, i) => {
      const ok = typeof id === 'bigint' ? id >= 0n && id <= BigInt(Number.MAX_SAFE_INTEGER) : isCount(id, 0);
      if (!ok) throw new RangeError(`generateSeq2Seq: inputIds[${i}] = ${show(id)} is not a token id (an integer ≥ 0)`);
    });
  } else if (typeof feeds !== 'object' || feeds === null || Array.isArray(feeds))
    throw new TypeError(`generateSeq2Seq: encoderFeeds must be an object of named tensors, got ${show(feeds)}`);
  const start = options.decoderStartTokenId as unknown;
  const prompt = options.decoderInputIds as unknown;
  if (options.whisper !== undefined) {
    checkWhisperOptions(options.whisper, 'generateSeq2Seq: whisper');
    if (start !== undefined)
      throw new TypeError(
        'generateSeq2Seq: decoderStartTokenId is not taken with whisper (the prompt comes from whisper.generationConfig, or give decoderInputIds)',
      );
  } else if ((start === undefined) === (prompt === undefined))
    throw new TypeError(
      "generateSeq2Seq: give decoderStartTokenId (the model's decoder_start_token_id) or decoderInputIds (the decoder's prompt), one of them",
    );
  if (start !== undefined && !isCount(start, 0))
    throw new RangeError(
      `generateSeq2Seq: decoderStartTokenId must be a token id (the model's decoder_start_token_id), got ${show(start)}`,
    );
  if (prompt !== undefined) {
    if (!Array.isArray(prompt) || !prompt.length)
      throw new TypeError(`generateSeq2Seq: decoderInputIds must be a non-empty array of token ids, got ${show(prompt)}`);
    prompt.forEach((t, i) => {
      if (!isCount(t, 0)) throw new RangeError(`generateSeq2Seq: decoderInputIds[${i}] = ${show(t)} is not a token id (an integer ≥ 0)`);
    });
  }
  if (!isCount(options.maxNewTokens, 0))
    throw new RangeError(`generateSeq2Seq: maxNewTokens must be an integer ≥ 0, got ${show(options.maxNewTokens)}`);
  checkSampling(options.sampling);
  const stops = options.stopTokens as unknown;
  if (stops !== undefined) {
    if (!Array.isArray(stops)) throw new TypeError(`generateSeq2Seq: stopTokens must be an array of token ids, got ${show(stops)}`);
    stops.forEach((t, i) => {
      if (!isCount(t, 0)) throw new RangeError(`generateSeq2Seq: stopTokens[${i}] = ${show(t)} is not a token id (an integer ≥ 0)`);
    });
  }
  if (options.minNewTokens !== undefined && !isCount(options.minNewTokens, 0))
    throw new RangeError(`generateSeq2Seq: minNewTokens must be an integer ≥ 0, got ${show(options.minNewTokens)}`);
  const rp = options.repetitionPenalty as unknown;
  if (rp !== undefined && !(typeof rp === 'number' && Number.isFinite(rp) && rp > 0))
    throw new RangeError(`generateSeq2Seq: repetitionPenalty must be a finite number > 0 (1: none), got ${show(rp)}`);
  for (const k of ['presencePenalty', 'frequencyPenalty'] as const) {
    const v = options[k] as unknown;
    if (v !== undefined && !(typeof v === 'number' && Number.isFinite(v)))
      throw new RangeError(`generateSeq2Seq: ${k} must be a finite number, got ${show(v)}`);
  }
  for (const k of ['logitsProcessor', 'Tensor', 'onStep'] as const)
    if (options[k] !== undefined && typeof options[k] !== 'function')
      throw new TypeError(`generateSeq2Seq: ${k} must be a function, got ${show(options[k])}`);
}

/** The decoder's past/present pairs, each past's heads and head size from the session's metadata. */
function decoderCaches(decoder: Session): Cache[] {
  const out: Cache[] = [];
  decoder.inputNames.forEach((name, i) => {
    const m = /^past_key_values\.(\d+)\.(decoder|encoder)\.(key|value)$/.exec(name);
    if (!m) return;
    const present = `present.${m[1]}.${m[2]}.${m[3]}`;
    if (!decoder.outputNames.includes(present))
      throw new InvalidFeedError(`generateSeq2Seq: the decoder's input '${name}' has no output '${present}'`);
    const meta = decoder.inputMetadata[i];
    const shape = meta?.isTensor ? meta.shape : [];
    if (shape.length !== 4 || typeof shape[1] !== 'number' || typeof shape[3] !== 'number')
      throw new InvalidFeedError(
        `generateSeq2Seq: the decoder's input '${name}' needs a static [batch, heads, past, head size] shape in the model, got [${shape.join(', ')}]`,
      );
    out.push({
      past: name,
      present,
      kind: m[2] as Cache['kind'],
      dims: [shape[1], shape[3]],
      type: meta.isTensor ? meta.type : 'float32',
    });
  });
  if (!out.length)
    throw new InvalidFeedError(
      `generateSeq2Seq: the decoder has no past_key_values.{i}.decoder/encoder.key/value inputs (its inputs: ${decoder.inputNames.join(', ')}); export it with a KV cache (decoder_model_merged)`,
    );
  return out;
}

/** The input and output names both sessions need, checked before anything runs. */
function checkSessions(encoder: Session, decoder: Session, feeds: Record<string, Tensor> | undefined): Cache[] {
  if (feeds) {
    const missing = encoder.inputNames.filter((n) => !(n in feeds));
    if (missing.length)
      throw new InvalidFeedError(`generateSeq2Seq: encoderFeeds has no ${missing.map((n) => `'${n}'`).join(', ')} (the encoder's inputs)`);
    const extra = Object.keys(feeds).filter((n) => !encoder.inputNames.includes(n));
    if (extra.length)
      throw new InvalidFeedError(
        `generateSeq2Seq: encoderFeeds has ${extra.map((n) => `'${n}'`).join(', ')}, which the encoder does not take (its inputs: ${encoder.inputNames.join(', ')})`,
      );
  } else {
    const encoderKnown = ['input_ids', 'attention_mask'];
    const extra = encoder.inputNames.filter((n) => !encoderKnown.includes(n));
    if (extra.length)
      throw new InvalidFeedError(
        `generateSeq2Seq: the encoder has inputs it cannot feed from inputIds: ${extra.join(', ')} (pass them in encoderFeeds)`,
      );
    if (!encoder.inputNames.includes('input_ids')) throw new InvalidFeedError("generateSeq2Seq: the encoder has no 'input_ids' input");
  }
  if (!encoder.outputNames.includes('last_hidden_state'))
    throw new InvalidFeedError(
      `generateSeq2Seq: the encoder has no 'last_hidden_state' output (its outputs: ${encoder.outputNames.join(', ')})`,
    );
  const caches = decoderCaches(decoder);
  const known = new Set(['input_ids', 'encoder_hidden_states', 'encoder_attention_mask', 'use_cache_branch', ...caches.map((c) => c.past)]);
  const unknown = decoder.inputNames.filter((n) => !known.has(n));
  if (unknown.length) throw new InvalidFeedError(`generateSeq2Seq: the decoder has inputs it cannot feed: ${unknown.join(', ')}`);
  for (const n of ['input_ids', 'encoder_hidden_states'])
    if (!decoder.inputNames.includes(n)) throw new InvalidFeedError(`generateSeq2Seq: the decoder has no '${n}' input`);
  if (!decoder.outputNames.includes('logits'))
    throw new InvalidFeedError(`generateSeq2Seq: the decoder has no 'logits' output (its outputs: ${decoder.outputNames.join(', ')})`);
  if (!caches.some((c) => c.kind === 'encoder'))
    throw new InvalidFeedError(
      'generateSeq2Seq: the decoder has no past_key_values.{i}.encoder.key/value inputs (the cross-attention cache)',
    );
  return caches;
}

/**
 * Generates up to `maxNewTokens` tokens from an encoder-decoder for the encoder input
 * (`inputIds` or `encoderFeeds`), yielding each as it is chosen (the decoder's start token or
 * prompt is not yielded). Breaking out of the loop (or an error) frees the device tensors it holds.
 */
export async function* generateSeq2Seq(encoder: Session, decoder: Session, options: Seq2SeqOptions): AsyncGenerator<number, void, void> {
  checkOptions(options);
  const caches = checkSessions(encoder, decoder, options.encoderFeeds);
  const T = options.Tensor ?? (CommonTensor as unknown as typeof Tensor);
  const typeOf = (s: Session, name: string) => {
    const m = s.inputMetadata[s.inputNames.indexOf(name)];
    return m?.isTensor ? m.type : 'int64';
  };
  const ints = (s: Session, name: string, values: number[]) =>
    typeOf(s, name) === 'int32'
      ? new T('int32', Int32Array.from(values), [1, values.length])
      : new T('int64', BigInt64Array.from(values.map(BigInt)), [1, values.length]);
  const empty = (c: Cache) =>
    new T(c.type as 'float32', c.type === 'float16' ? new Uint16Array(0) : new Float32Array(0), [1, c.dims[0], 0, c.dims[1]]) as Tensor;

  let encoderFeeds = options.encoderFeeds;
  if (!encoderFeeds) {
    const source = options.inputIds!.map(Number);
    encoderFeeds = { input_ids: ints(encoder, 'input_ids', source) };
    if (encoder.inputNames.includes('attention_mask'))
      encoderFeeds.attention_mask = ints(
        encoder,
        'attention_mask',
        source.map(() => 1),
      );
  }
  const held: Tensor[] = []; // device tensors this loop owns, freed at the end
  const free = (t: Tensor | undefined) => {
    if (t && isDevice(t)) t.dispose();
  };
  let past: Tensor[] = caches.map(empty);
  try {
    const encoded = (await encoder.run(encoderFeeds, { last_hidden_state: null })) as Record<string, Tensor>;
    const hidden = encoded.last_hidden_state;
    held.push(hidden);
    if (hidden.dims.length !== 3 || hidden.dims[0] !== 1)
      throw new InvalidFeedError(
        `generateSeq2Seq: the encoder's last_hidden_state has shape [${hidden.dims.join(', ')}], not [1, positions, hidden]`,
      );
    const positions = hidden.dims[1];
    const encoderMask = decoder.inputNames.includes('encoder_attention_mask')
      ? (encoderFeeds.attention_mask ?? ints(decoder, 'encoder_attention_mask', new Array<number>(positions).fill(1)))
      : undefined;
    const random = typeof options.sampling === 'object' ? seeded(options.sampling.seed ?? 0) : undefined;
    const stops = new Set(options.stopTokens ?? []);
    const minNew = options.minNewTokens ?? 0;
    const shapes = options.repetitionPenalty !== undefined || options.presencePenalty || options.frequencyPenalty;
    const whisper = options.whisper;
    const sequence = options.decoderInputIds
      ? [...options.decoderInputIds]
      : whisper
        ? whisperPrompt(whisper)
        : [options.decoderStartTokenId!];
    let whisperRules: ((logits: Float32Array, sequence: readonly number[]) => void) | undefined;
    if (whisper) {
      whisperRules = whisperLogitsProcessor(whisper, sequence);
      const eos = whisper.generationConfig.eos_token_id;
      for (const t of Array.isArray(eos) ? eos : [eos]) stops.add(t);
    }
    const generated: number[] = [];
    for (let step = 0; generated.length < options.maxNewTokens; step++) {
      const feeds: Record<string, Tensor> = {
        input_ids: ints(decoder, 'input_ids', step === 0 ? sequence : [sequence[sequence.length - 1]]),
        encoder_hidden_states: hidden,
      };
      if (encoderMask) feeds.encoder_attention_mask = encoderMask;
      if (decoder.inputNames.includes('use_cache_branch')) feeds.use_cache_branch = new T('bool', [step > 0], [1]);
      const fetches: Record<string, null> = { logits: null };
      caches.forEach((c, i) => {
        feeds[c.past] = past[i];
        // The self-attention cache on the mlx backend: the run may append to it in place. The
        // cross-attention one is fed again next step and must stay as it is.
        const own = c.kind === 'decoder' ? deviceBufferOf(past[i]) : undefined;
        if (own) own.consumable = true;
        fetches[c.present] = null;
      });
      const out = (await decoder.run(feeds, fetches)) as Record<string, Tensor>;
      const next = caches.map((c, i) => {
        const present = out[c.present];
        if (c.kind === 'decoder' || step === 0) {
          if (present !== past[i]) free(past[i]);
          return present;
        }
        // Later steps: the merged decoder's cross-attention presents are placeholders.
        if (present !== past[i]) free(present);
        return past[i];
      });
      past = next;
      if (step === 0)
        caches.forEach((c, i) => {
          if (c.kind === 'encoder' && past[i].dims[2] !== positions)
            throw new InvalidFeedError(
              `generateSeq2Seq: the decoder's first step returned '${c.present}' of shape [${past[i].dims.join(', ')}]: the cross-attention cache needs the encoder's ${positions} positions (is use_cache_branch false there?)`,
            );
        });
      const logits = out.logits;
      let last = (await lastRows(logits, logits.dims[logits.dims.length - 1], 1))[0];
      if (shapes || options.logitsProcessor || whisperRules || (generated.length < minNew && stops.size)) {
        last = Float32Array.from(last);
        if (shapes) applyPenalties(last, sequence, generated, options);
        if (generated.length < minNew) for (const t of stops) if (t < last.length) last[t] = Number.NEGATIVE_INFINITY;
        whisperRules?.(last, sequence);
        if (options.logitsProcessor) {
          const other = options.logitsProcessor(last, [...sequence]);
          if (other !== undefined) {
            if (!(other instanceof Float32Array) || other.length !== last.length)
              throw new TypeError(`generateSeq2Seq: logitsProcessor returned something other than a Float32Array of ${last.length} logits`);
            last = other;
          }
        }
      }
      const token = pickToken(last, options.sampling, random);
      options.onStep?.(step, step === 0 ? sequence.length : 1);
      sequence.push(token);
      generated.push(token);
      yield token;
      if (stops.has(token) && generated.length >= minNew) return;
    }
  } finally {
    for (const t of past) free(t);
    for (const t of held) free(t);
  }
}
