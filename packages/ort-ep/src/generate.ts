// A token generation loop over any onnxruntime-common InferenceSession of a decoder-only model
// with a KV cache (the 'mlx' backend, onnxruntime-node, onnxruntime-web), named as
// onnxruntime-genai and transformers.js export them: input_ids, attention_mask, position_ids,
// past_key_values.{i}.key/value (or past.{i}.key/value) in, logits and present.{i}.key/value out.
//
// On the 'mlx' backend the presents come back as device tensors (generate() asks for them with
// the backend's KEEP_ON_DEVICE run option, and so does preferredOutputLocation: 'gpu-buffer') and
// are fed back as they are: the cache never crosses to the host, only the token or the last
// logits do. With `kvCapacity` (GroupQueryAttention's shared-buffer mode; on the 'mlx' backend
// prompt plus new tokens by default, where the model allows: defaultCapacity) the cache is one
// buffer of fixed capacity per layer: each step binds the present into the past's own tensor, so
// the new rows are written in place and every decode step has the same shapes. A model whose
// GroupQueryAttention keeps a sliding window cache (sliding_window_cache, local_window_size W) is
// fed W-row buffers that its presents replace: the cache stays W rows however long the sequence.
import { Tensor as CommonTensor, type InferenceSession, type Tensor } from 'onnxruntime-common';
import * as mx from '@mlx/core';
import { deviceBufferOf } from './backend/device-buffer.js';
import { KEEP_ON_DEVICE, MlxSessionHandler } from './backend/handler.js';
import type { NodeIR } from './onnx/index.js';
import { download } from './runtime/convert.js';
import { InvalidFeedError, OrtMlxError, ResourceLimitError, isAllocationFailure } from './errors.js';
import { PrefixCache } from './prefix-cache.js';
import { sample } from './sampler.js';
import { deviceGreedyRows, deviceToken } from './sampler-device.js';

export interface SamplingOptions {
  /** Softmax temperature; default 1. */
  temperature?: number;
  /** Keep only the k most likely tokens (0 or absent: all). */
  topK?: number;
  /** Keep the smallest set of most likely tokens whose probability reaches p (1 or absent: all). */
  topP?: number;
  /** Seed of the sampler's generator (default 0): one seed, one sequence of tokens. */
  seed?: number;
}

export interface GenerateOptions {
  /** The prompt (batch 1). */
  inputIds: readonly (number | bigint)[];
  maxNewTokens: number;
  /** 'greedy' (default) or sampling (temperature, top-k, top-p, seed). */
  sampling?: 'greedy' | SamplingOptions;
  /** Tokens that end generation; the stop token is yielded, then the iteration ends. */
  stopTokens?: readonly number[];
  /**
   * Token sequences that end generation: once the generated tokens end with one, its last token is
   * yielded and the iteration ends (the sequence is not removed).
   */
  stopSequences?: readonly (readonly number[])[];
  /** No stop token ends generation before this many new tokens (they are never chosen before). Default 0. */
  minNewTokens?: number;
  /**
   * Divides the logit of every token already in the sequence (prompt and generated) by this
   * factor when positive, multiplies it when negative (the CTRL / transformers convention); 1 or
   * absent: none. Must be > 0.
   */
  repetitionPenalty?: number;
  /** Subtracted once from the logit of every token the generated tokens hold (OpenAI's presence_penalty). */
  presencePenalty?: number;
  /** Subtracted from each token's logit as many times as the generated tokens hold it (OpenAI's frequency_penalty). */
  frequencyPenalty?: number;
  /**
   * Called with each step's last logits (after the penalties; a Float32Array it may change in
   * place) and the sequence so far (prompt and generated), before the token is chosen; it may also
   * return another array of the same length to choose from.
   */
  logitsProcessor?: (logits: Float32Array, sequence: readonly number[]) => Float32Array | undefined | void;
  /**
   * Prompt lookup decoding (greedy only, with kvCapacity, which an mlx session whose caches are
   * GroupQueryAttention pasts has by default): each step proposes the tokens that
   * followed the last earlier occurrence of the sequence's final `ngram` tokens (default 3, from
   * the prompt or the generated text; at most `maxDraft`, default 4) and verifies them in the same
   * run: the tokens it keeps are the ones greedy decoding chooses, several a run where the text
   * repeats itself. The rejected positions of the in-place cache are written over by the next step.
   */
  promptLookup?: { ngram?: number; maxDraft?: number };
  /**
   * Shared-buffer mode (GroupQueryAttention's past_present_share_buffer, as onnxruntime-genai runs
   * it): each layer's past is one buffer of this many positions, and the present is bound into it.
   * Prompt plus new tokens must fit. Absent: on an mlx session whose every cache is a
   * GroupQueryAttention past without a sliding window, prompt plus new tokens where that cache
   * takes at most 512 MiB (defaultCapacity); otherwise the cache grows by concatenation each step.
   */
  kvCapacity?: number;
  /**
   * GroupQueryAttention's sliding window cache (`sliding_window_cache`, with `local_window_size`
   * W): each layer's past and present are buffers of W rows that hold the sequence's last tokens,
   * so the cache stays W rows however many tokens are generated. On the 'mlx' backend it is read
   * from the model (each layer's own window) and may be left out; other sessions (onnxruntime-node)
   * do not show their graph, so pass the model's local_window_size here. Not with kvCapacity.
   */
  kvWindow?: number;
  /** The Tensor class of the session's onnxruntime module (default: onnxruntime-common's). */
  Tensor?: typeof Tensor;
  /** Called once each step's token is chosen, with the step's index (0: the prompt) and how many tokens it fed. */
  onStep?: (step: number, sequenceLength: number) => void;
  /**
   * Reuses the KV state of an earlier sequence the prompt starts with (src/prefix-cache.ts): only
   * the tokens after it are run. When the stream ends (or the loop is left), the sequence's own
   * state is kept there for later prompts. generate() only.
   */
  prefixCache?: PrefixCache;
  /**
   * Where the token is chosen (generate() only). 'device': on the device, from the logits as the
   * mlx backend keeps them there (generate() asks an mlx session for its logits and presents on the
   * device, whatever its preferredOutputLocation; src/sampler-device.ts):
   * greedy is the argmax, sampling the same distribution as the host's (top-k by a partition, top-p
   * by a sort of the kept tokens, or of the 2048 best when top-p comes alone, and of the row, on the
   * device, only where those hold less than p), drawn from MLX's generator
   * with a key of the seed and the step, so one seed gives one sequence, but not the host's; only
   * the token id is downloaded (promptLookup's verification: the ids of its rows). It refuses,
   * naming the option, what needs the host row: penalties, a logitsProcessor, minNewTokens with
   * stop tokens, and host logits.
   * 'host': the row is downloaded and src/sampler.ts chooses. 'auto' (default): where nothing
   * needs the host row, greedy on the device, and sampling on the device when MLX runs on a GPU
   * (on a CPU the host sampler is faster than MLX's ops); else the host.
   */
  sampler?: 'auto' | 'host' | 'device';
}

interface CacheName {
  past: string;
  present: string;
  dims: [number, number];
  type: Tensor.Type;
}

/** What a model's GroupQueryAttention nodes tell a generation loop. */
export interface AttentionLayout {
  /** Whether the model has a GroupQueryAttention node (anywhere: subgraphs and functions too). */
  gqa: boolean;
  /** Past input name -> local_window_size, for the pasts of GroupQueryAttention nodes with sliding_window_cache. */
  windows: Map<string, number>;
  /** The graph inputs fed to a GroupQueryAttention node as its past key or value (shared-buffer capable). */
  pasts: Set<string>;
}

/**
 * The GroupQueryAttention layout of an 'mlx' session's model (its handler holds the model); undefined
 * for sessions that do not show their graph (onnxruntime-node's, onnxruntime-web's).
 */
export function attentionLayout(session: object): AttentionLayout | undefined {
  const handler: unknown = (session as { handler?: unknown }).handler;
  if (!(handler instanceof MlxSessionHandler)) return undefined;
  const model = handler.model;
  const layout: AttentionLayout = { gqa: false, windows: new Map(), pasts: new Set() };
  const graphInputs = new Set(model.graph.inputs.map((i) => i.name));
  const int = (n: NodeIR, name: string, otherwise: number) => {
    const a = n.attributes.get(name);
    return a?.type === 'int' ? a.value : otherwise;
  };
  const visit = (nodes: readonly NodeIR[]) => {
    for (const n of nodes) {
      if (n.opType === 'GroupQueryAttention' && n.domain === 'com.microsoft') {
        layout.gqa = true;
        const window = int(n, 'local_window_size', -1);
        if (int(n, 'sliding_window_cache', 0) && window > 0)
          for (const name of [n.inputs[3], n.inputs[4]]) if (name) layout.windows.set(name, window);
        for (const name of [n.inputs[3], n.inputs[4]]) if (name && graphInputs.has(name)) layout.pasts.add(name);
      }
      for (const a of n.attributes.values())
        if (a.type === 'graph') visit(a.value.nodes);
        else if (a.type === 'graphs') for (const g of a.value) visit(g.nodes);
    }
  };
  visit(model.graph.nodes);
  for (const f of model.functions.values()) visit(f.nodes);
  return layout;
}

/**
 * Each cache's sliding window (rows of its buffers), undefined for a cache that grows: `kvWindow`
 * where given, else what the model's GroupQueryAttention nodes say (mlx sessions; `layout`, when
 * the caller has read it already). A window given that the model contradicts is an error naming both.
 */
export function cacheWindows(
  session: Session,
  caches: readonly CacheName[],
  kvWindow: number | undefined,
  who: string,
  layout = attentionLayout(session),
): (number | undefined)[] {
  return caches.map((c) => {
    const own = layout?.windows.get(c.past);
    if (kvWindow === undefined) return own;
    if (layout && own !== kvWindow)
      throw new InvalidFeedError(
        own === undefined
          ? `${who}: kvWindow ${kvWindow} was given, but the model's attention over '${c.past}' keeps no sliding window cache (GroupQueryAttention with sliding_window_cache)`
          : `${who}: kvWindow ${kvWindow} was given, but the model's GroupQueryAttention over '${c.past}' has local_window_size ${own}`,
      );
    return kvWindow;
  });
}

/**
 * A present of a sliding window cache checked to be the window's buffer; and onnxruntime's error
 * for a sliding window model fed growing pasts turned into the option to pass.
 */
export function checkWindows(caches: readonly CacheName[], windows: readonly (number | undefined)[], next: Tensor[], who: string): void {
  caches.forEach((c, i) => {
    const w = windows[i];
    if (w !== undefined && next[i].dims[2] !== w)
      throw new OrtMlxError(
        `${who}: '${c.past}' was fed a sliding window buffer of ${w} rows (kvWindow), but the model's present '${c.present}' has ${next[i].dims[2]} (its attention keeps no sliding window cache)`,
      );
  });
}

/** onnxruntime's (and this backend's) message for a sliding window cache fed a past shorter than the window. */
const WINDOW_TOO_SHORT = /KV cache capacity \((\d+)\) must be at least local_window_size \((\d+)\)/;

/** `e` with the option to pass when a session that hides its graph turns out to keep a sliding window cache. */
export function windowHint(e: unknown, windows: readonly (number | undefined)[], who: string): unknown {
  const m = e instanceof Error && windows.every((w) => w === undefined) ? WINDOW_TOO_SHORT.exec(e.message) : null;
  if (!m) return e;
  return new InvalidFeedError(
    `${who}: the model's GroupQueryAttention keeps a sliding window cache of local_window_size ${m[2]} (sliding_window_cache), and this session does not show its graph: pass kvWindow: ${m[2]} (${e instanceof Error ? e.message : ''})`,
    { cause: e },
  );
}

type Session = Pick<InferenceSession, 'inputNames' | 'outputNames' | 'inputMetadata' | 'run'>;

/** The past/present pairs of a session, with each past's heads and head size from its metadata. */
export function cacheNames(session: Session): CacheName[] {
  const out: CacheName[] = [];
  session.inputNames.forEach((name, i) => {
    const m = /^(past_key_values|past)\.(\d+)\.(key|value)$/.exec(name);
    if (!m) return;
    const candidates = [`present.${m[2]}.${m[3]}`, `present_key_values.${m[2]}.${m[3]}`];
    const present = candidates.find((c) => session.outputNames.includes(c));
    if (!present) throw new InvalidFeedError(`generate: input '${name}' has no present output (looked for ${candidates.join(', ')})`);
    const meta = session.inputMetadata[i];
    const shape = meta?.isTensor ? meta.shape : [];
    if (shape.length !== 4 || typeof shape[1] !== 'number' || typeof shape[3] !== 'number')
      throw new InvalidFeedError(
        `generate: input '${name}' needs a static [batch, heads, past, head size] shape in the model, got [${shape.join(', ')}]`,
      );
    out.push({ past: name, present, dims: [shape[1], shape[3]], type: meta.isTensor ? meta.type : 'float32' });
  });
  if (!out.length) throw new InvalidFeedError('generate: the model has no past_key_values.{i}.key/value inputs');
  return out;
}

/** An IEEE half's bits as a number (float16 logits held as Uint16Array). */
export function halfToFloat(h: number): number {
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  const v = e === 0 ? m * 2 ** -24 : e === 31 ? (m ? Number.NaN : Number.POSITIVE_INFINITY) : (1 + m / 1024) * 2 ** (e - 15);
  return h & 0x8000 ? -v : v;
}

/** mulberry32: a small seeded generator of floats in [0, 1). */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export const show = (v: unknown): string =>
  typeof v === 'string' ? `'${v}'` : typeof v === 'bigint' ? `${v}n` : Array.isArray(v) ? 'an array' : String(v);

const SAMPLING_KEYS = ['temperature', 'topK', 'topP', 'seed'];
export const OPTION_KEYS = [
  'inputIds',
  'maxNewTokens',
  'sampling',
  'stopTokens',
  'stopSequences',
  'minNewTokens',
  'repetitionPenalty',
  'presencePenalty',
  'frequencyPenalty',
  'logitsProcessor',
  'promptLookup',
  'kvCapacity',
  'kvWindow',
  'Tensor',
  'onStep',
];

/** Whether `v` is an integer in [min, 2^53). */
export const isCount = (v: unknown, min: number): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= min;

/**
 * `sampling` checked: absent, 'greedy', or an object of temperature (finite, > 0), topK (an integer
 * ≥ 0), topP (in (0, 1]) and seed (an integer); anything else (a typo such as 'greedy ', a number,
 * null, an unknown key) is a TypeError or RangeError naming it, not sampling with other settings.
 */
export function checkSampling(sampling: unknown, who = 'generate'): void {
  if (sampling === undefined || sampling === 'greedy') return;
  if (typeof sampling !== 'object' || sampling === null || Array.isArray(sampling))
    throw new TypeError(`${who}: sampling must be 'greedy' or an object { temperature, topK, topP, seed }, got ${show(sampling)}`);
  const s = sampling as Record<string, unknown>;
  for (const k of Object.keys(s))
    if (!SAMPLING_KEYS.includes(k))
      throw new TypeError(`${who}: sampling has an unknown option '${k}' (known: ${SAMPLING_KEYS.join(', ')})`);
  const num = (k: string) => {
    const v = s[k];
    if (v !== undefined && typeof v !== 'number') throw new TypeError(`${who}: sampling.${k} must be a number, got ${show(v)}`);
    return v as number | undefined;
  };
  const temperature = num('temperature');
  if (temperature !== undefined && !(Number.isFinite(temperature) && temperature > 0))
    throw new RangeError(`${who}: sampling.temperature must be a finite number > 0, got ${temperature}`);
  const topK = num('topK');
  if (topK !== undefined && !isCount(topK, 0))
    throw new RangeError(`${who}: sampling.topK must be an integer ≥ 0 (0: all tokens), got ${topK}`);
  const topP = num('topP');
  if (topP !== undefined && !(topP > 0 && topP <= 1)) throw new RangeError(`${who}: sampling.topP must be in (0, 1], got ${topP}`);
  const seed = num('seed');
  if (seed !== undefined && !Number.isSafeInteger(seed)) throw new RangeError(`${who}: sampling.seed must be an integer, got ${seed}`);
}

/** Every generate() option checked before the first run, each error naming the option and its value. */
export function checkOptions(options: GenerateOptions, who = 'generate'): void {
  if (typeof options !== 'object' || options === null) throw new TypeError(`${who}: options must be an object, got ${show(options)}`);
  for (const k of Object.keys(options))
    if (!OPTION_KEYS.includes(k))
      throw new TypeError(
        k === 'draft'
          ? `${who}: a draft model decodes with generateSpeculative(session, { draft: { session, tokens }, ... })`
          : `${who}: unknown option '${k}' (known: ${OPTION_KEYS.join(', ')})`,
      );
  const ids = options.inputIds as unknown;
  if (!Array.isArray(ids)) throw new TypeError(`${who}: inputIds must be an array of token ids, got ${show(ids)}`);
  ids.forEach((id, i) => {
    const ok = typeof id === 'bigint' ? id >= 0n && id <= BigInt(Number.MAX_SAFE_INTEGER) : isCount(id, 0);
    if (!ok) throw new RangeError(`${who}: inputIds[${i}] = ${show(id)} is not a token id (an integer ≥ 0)`);
  });
  if (!isCount(options.maxNewTokens, 0))
    throw new RangeError(`${who}: maxNewTokens must be an integer ≥ 0, got ${show(options.maxNewTokens)}`);
  checkSampling(options.sampling, who);
  const stops = options.stopTokens as unknown;
  if (stops !== undefined) {
    if (!Array.isArray(stops)) throw new TypeError(`${who}: stopTokens must be an array of token ids, got ${show(stops)}`);
    stops.forEach((t, i) => {
      if (!isCount(t, 0)) throw new RangeError(`${who}: stopTokens[${i}] = ${show(t)} is not a token id (an integer ≥ 0)`);
    });
  }
  const seqs = options.stopSequences as unknown;
  if (seqs !== undefined) {
    if (!Array.isArray(seqs)) throw new TypeError(`${who}: stopSequences must be an array of token-id arrays, got ${show(seqs)}`);
    seqs.forEach((q, i) => {
      if (!Array.isArray(q) || !q.length)
        throw new TypeError(`${who}: stopSequences[${i}] must be a non-empty array of token ids, got ${show(q)}`);
      q.forEach((t, j) => {
        if (!isCount(t, 0)) throw new RangeError(`${who}: stopSequences[${i}][${j}] = ${show(t)} is not a token id (an integer ≥ 0)`);
      });
    });
  }
  if (options.minNewTokens !== undefined && !isCount(options.minNewTokens, 0))
    throw new RangeError(`${who}: minNewTokens must be an integer ≥ 0, got ${show(options.minNewTokens)}`);
  const rp = options.repetitionPenalty as unknown;
  if (rp !== undefined && !(typeof rp === 'number' && Number.isFinite(rp) && rp > 0))
    throw new RangeError(`${who}: repetitionPenalty must be a finite number > 0 (1: none), got ${show(rp)}`);
  for (const k of ['presencePenalty', 'frequencyPenalty'] as const) {
    const v = options[k] as unknown;
    if (v !== undefined && !(typeof v === 'number' && Number.isFinite(v)))
      throw new RangeError(`${who}: ${k} must be a finite number, got ${show(v)}`);
  }
  if (options.logitsProcessor !== undefined && typeof options.logitsProcessor !== 'function')
    throw new TypeError(`${who}: logitsProcessor must be a function, got ${show(options.logitsProcessor)}`);
  const pl = options.promptLookup as unknown;
  if (pl !== undefined) {
    if (typeof pl !== 'object' || pl === null || Array.isArray(pl))
      throw new TypeError(`${who}: promptLookup must be an object { ngram, maxDraft }, got ${show(pl)}`);
    for (const k of Object.keys(pl))
      if (k !== 'ngram' && k !== 'maxDraft')
        throw new TypeError(`${who}: promptLookup has an unknown option '${k}' (known: ngram, maxDraft)`);
    const { ngram, maxDraft } = pl as { ngram?: unknown; maxDraft?: unknown };
    if (ngram !== undefined && !isCount(ngram, 1))
      throw new RangeError(`${who}: promptLookup.ngram must be an integer ≥ 1, got ${show(ngram)}`);
    if (maxDraft !== undefined && !isCount(maxDraft, 1))
      throw new RangeError(`${who}: promptLookup.maxDraft must be an integer ≥ 1, got ${show(maxDraft)}`);
    if (options.sampling !== undefined && options.sampling !== 'greedy')
      throw new TypeError('generate: promptLookup verifies greedy choices; it does not take sampling');
    if (
      options.repetitionPenalty !== undefined ||
      options.presencePenalty ||
      options.frequencyPenalty ||
      options.logitsProcessor ||
      options.minNewTokens
    )
      throw new TypeError('generate: promptLookup does not take penalties, minNewTokens or a logitsProcessor');
  }
  if (options.kvCapacity !== undefined && !isCount(options.kvCapacity, 1))
    throw new RangeError(`${who}: kvCapacity must be a positive integer, got ${show(options.kvCapacity)}`);
  if (options.kvWindow !== undefined) {
    if (!isCount(options.kvWindow, 1))
      throw new RangeError(`${who}: kvWindow must be a positive integer (the model's local_window_size), got ${show(options.kvWindow)}`);
    if (options.kvCapacity !== undefined)
      throw new TypeError(
        `${who}: kvWindow (a sliding window cache of that many rows) and kvCapacity (one shared buffer of prompt and new tokens) are two cache layouts; give one`,
      );
  }
  if (options.Tensor !== undefined && typeof options.Tensor !== 'function')
    throw new TypeError(`${who}: Tensor must be the Tensor class of the session's onnxruntime module, got ${show(options.Tensor)}`);
  if (options.onStep !== undefined && typeof options.onStep !== 'function')
    throw new TypeError(`${who}: onStep must be a function, got ${show(options.onStep)}`);
}

/**
 * generate()'s `sampler` checked: 'auto' (or absent), 'host' or 'device'. Returns the option that
 * needs the host row (penalties, a logitsProcessor, minNewTokens with stop tokens), or undefined
 * (promptLookup, greedy alone, verifies its drafts on the device too); with 'device' such an
 * option is a TypeError naming it.
 */
export function checkSampler(sampler: unknown, options: GenerateOptions, who = 'generate'): string | undefined {
  if (sampler !== undefined && sampler !== 'auto' && sampler !== 'host' && sampler !== 'device')
    throw new TypeError(`${who}: sampler must be 'auto', 'host' or 'device', got ${show(sampler)}`);
  const hostOnly =
    options.repetitionPenalty !== undefined && options.repetitionPenalty !== 1
      ? 'repetitionPenalty'
      : options.presencePenalty
        ? 'presencePenalty'
        : options.frequencyPenalty
          ? 'frequencyPenalty'
          : options.logitsProcessor
            ? 'logitsProcessor'
            : options.minNewTokens && options.stopTokens?.length
              ? 'minNewTokens (the stop tokens are masked on the host row)'
              : undefined;
  if (sampler === 'device' && hostOnly)
    throw new TypeError(
      `${who}: sampler 'device' chooses tokens on the device, but ${hostOnly} needs the logits on the host: use 'auto' or 'host'`,
    );
  return hostOnly;
}

/**
 * The next token from one position's logits. Greedy: the argmax, ties to the lowest id (a NaN
 * logit is never chosen). Sampling (src/sampler.ts): softmax(logits / temperature) over the top-k
 * set, cut to the smallest prefix reaching top-p, drawn with one call of `random` (seeded by the
 * callers: one seed, one sequence), in O(V) without sorting the vocabulary; a NaN logit, or every
 * logit -Infinity, is an OrtMlxError.
 */
export function pickToken(logits: ArrayLike<number>, sampling: GenerateOptions['sampling'], random?: () => number): number {
  checkSampling(sampling);
  if (sampling === undefined || sampling === 'greedy') {
    let best = 0;
    for (let i = 1; i < logits.length; i++) if (logits[i] > logits[best]) best = i;
    return best;
  }
  return sample(logits, sampling, random ?? Math.random);
}

/**
 * Applies the repetition, presence and frequency penalties to `logits` in place: `sequence` is the
 * whole sequence so far (the repetition penalty's), `generated` the new tokens (the other two's).
 */
export function applyPenalties(
  logits: Float32Array,
  sequence: readonly number[],
  generated: readonly number[],
  p: Pick<GenerateOptions, 'repetitionPenalty' | 'presencePenalty' | 'frequencyPenalty'>,
): void {
  const rp = p.repetitionPenalty ?? 1;
  if (rp !== 1) for (const t of new Set(sequence)) if (t < logits.length) logits[t] = logits[t] > 0 ? logits[t] / rp : logits[t] * rp;
  const presence = p.presencePenalty ?? 0;
  const frequency = p.frequencyPenalty ?? 0;
  if (presence || frequency) {
    const counts = new Map<number, number>();
    for (const t of generated) counts.set(t, (counts.get(t) ?? 0) + 1);
    for (const [t, n] of counts) if (t < logits.length) logits[t] -= presence + frequency * n;
  }
}

/**
 * A step's last logits shaped by the options before the token is chosen: the penalties (over
 * `prompt` and `generated`), the stop tokens hidden until minNewTokens are made, then the
 * logitsProcessor, which may return another array of the same length (checked; `who` and `suffix`
 * name the caller in the error). `logits` is edited in place when `owned`, else copied first; it
 * comes back as it is when nothing edits it.
 */
export function shapeLogits(
  logits: Float32Array,
  prompt: readonly number[],
  generated: readonly number[],
  options: Pick<GenerateOptions, 'repetitionPenalty' | 'presencePenalty' | 'frequencyPenalty' | 'minNewTokens' | 'stopTokens'>,
  processor: GenerateOptions['logitsProcessor'],
  where: { who: string; suffix?: string; owned?: boolean },
): Float32Array {
  const penalties = options.repetitionPenalty !== undefined || !!options.presencePenalty || !!options.frequencyPenalty;
  const stops = options.stopTokens ?? [];
  const hideStops = generated.length < (options.minNewTokens ?? 0) && stops.length > 0;
  if (!penalties && !processor && !hideStops) return logits;
  let last = where.owned ? logits : Float32Array.from(logits);
  const sequence = penalties || processor ? [...prompt, ...generated] : [];
  if (penalties) applyPenalties(last, sequence, generated, options);
  if (hideStops) for (const t of stops) if (t < last.length) last[t] = Number.NEGATIVE_INFINITY;
  if (processor) {
    const other = processor(last, sequence);
    if (other !== undefined) {
      if (!(other instanceof Float32Array) || other.length !== last.length)
        throw new TypeError(
          `${where.who}: logitsProcessor returned something other than a Float32Array of ${last.length} logits${where.suffix ?? ''}`,
        );
      last = other;
    }
  }
  return last;
}

/**
 * Whether a sequence ends with the last of its `generated` tokens: a stop token once minNewTokens
 * are made, or the last token of a stop sequence.
 */
export function endsAfter(
  generated: readonly number[],
  stops: ReadonlySet<number>,
  stopSequences: readonly (readonly number[])[],
  minNew: number,
): boolean {
  const n = generated.length;
  return (
    (stops.has(generated[n - 1]) && n >= minNew) ||
    stopSequences.some((q) => q.length <= n && q.every((x, j) => generated[n - q.length + j] === x))
  );
}

/**
 * A decoder session's names checked as the generation loops feed it: every input one they know,
 * `input_ids` (and, with `maskWhy`, `attention_mask`, the reason appended) in, `logits` out. `who`
 * names the caller and `what` the model in the errors.
 */
export function checkDecoderSession(
  session: Pick<InferenceSession, 'inputNames' | 'outputNames'>,
  caches: readonly CacheName[],
  who: string,
  what = 'the model',
  maskWhy?: string,
): void {
  const known = new Set(['input_ids', 'attention_mask', 'position_ids', 'use_cache_branch', ...caches.map((c) => c.past)]);
  const unknown = session.inputNames.filter((n) => !known.has(n));
  if (unknown.length) throw new InvalidFeedError(`${who}: ${what} has inputs it cannot feed: ${unknown.join(', ')}`);
  if (!session.inputNames.includes('input_ids')) throw new InvalidFeedError(`${who}: ${what} has no 'input_ids' input`);
  if (maskWhy !== undefined && !session.inputNames.includes('attention_mask'))
    throw new InvalidFeedError(`${who}: ${what} has no 'attention_mask' input${maskWhy}`);
  if (!session.outputNames.includes('logits')) throw new InvalidFeedError(`${who}: ${what} has no 'logits' output`);
}

/**
 * The attention mask of a context of `total` tokens. In shared-buffer mode, and for sliding window
 * caches (`capacity` Infinity), it is padded with zeros to a power of two (at most the capacity):
 * GroupQueryAttention reads the context from seqlens_k (the mask's sum) and the padded length as
 * total_sequence_length, so decode steps share feed shapes across each bucket and a session
 * compiles one program per bucket, not per token.
 */
export function maskLength(total: number, capacity: number | undefined): number {
  if (capacity === undefined) return total;
  let len = 16;
  while (len < total) len *= 2;
  return Math.min(len, capacity);
}

export const isDevice = (t: Tensor) => t.location !== 'cpu' && t.location !== 'cpu-pinned';

/**
 * The last `n` positions' logits, as float32 rows. A device tensor of the mlx backend is sliced on
 * the device first, so a prompt's run downloads those rows, not [sequence, vocab]; the tensor is
 * freed either way.
 */
export async function lastRows(logits: Tensor, vocab: number, n: number): Promise<Float32Array[]> {
  const own = deviceBufferOf(logits);
  let data: Float32Array | Uint16Array;
  if (own?.value && own.value.array.ndim >= 2) {
    const a = own.value.array;
    const rows = a.size / vocab;
    if (rows === n) {
      // A decode step's [1, 1, vocab]: the rows wanted are the whole array, read as it is.
      data = download(a, own.value.onnxType).data as Float32Array | Uint16Array;
    } else {
      const part = mx.scope(() => mx.slice(mx.reshape(a, [rows, vocab]), [rows - n, 0], [rows, vocab], [1, 1]));
      data = download(part, own.value.onnxType).data as Float32Array | Uint16Array;
      part.dispose();
    }
    logits.dispose();
  } else {
    const all = (isDevice(logits) ? await logits.getData(true) : logits.data) as Float32Array | Uint16Array;
    data = all.subarray(all.length - n * vocab);
  }
  const f = data instanceof Uint16Array ? Float32Array.from(data, halfToFloat) : data;
  if (n === 1) return [f.length === vocab ? f : f.subarray(0, vocab)];
  return Array.from({ length: n }, (_, i) => f.subarray(i * vocab, (i + 1) * vocab));
}

/**
 * The greedy tokens (pickToken's choice: NaN never taken, ties to the lowest id) of the last `n`
 * rows of `logits`, which it consumes as lastRows does. Logits on the device (an mlx session's
 * 'gpu-buffer' outputs, on a CPU stream), unless `device` is false, are reduced there in one native
 * call and only the ids come back (a 32000-token row is 128 KB to download and scan in
 * JavaScript); others come to the host.
 */
export async function greedyRows(logits: Tensor, vocab: number, n: number, device = true): Promise<number[]> {
  const own = device ? deviceBufferOf(logits)?.value : undefined;
  if (own) {
    let ids: number[] | undefined;
    try {
      ids = deviceGreedyRows(own.array, n);
    } catch (e) {
      logits.dispose();
      throw e;
    }
    if (ids) {
      logits.dispose();
      return ids;
    }
  }
  return (await lastRows(logits, vocab, n)).map((r) => pickToken(r, 'greedy'));
}

/**
 * The draft of prompt lookup: the tokens after the last earlier occurrence of `seq`'s final
 * `ngram` tokens (the longest n-gram from `ngram` down to 1 that occurs), at most `max`.
 */
export function lookupDraft(seq: readonly number[], ngram: number, max: number): number[] {
  for (let n = Math.min(ngram, seq.length - 1); n >= 1; n--) {
    const tail = seq.slice(seq.length - n);
    for (let start = seq.length - n - 1; start >= 0; start--) {
      let j = 0;
      while (j < n && seq[start + j] === tail[j]) j++;
      if (j === n) return seq.slice(start + n, Math.min(start + n + max, seq.length));
    }
  }
  return [];
}

/**
 * Generates up to `maxNewTokens` tokens after the prompt, yielding each as it is chosen. Breaking
 * out of the loop (or an error) frees the cache tensors the loop holds.
 */
export async function* generate(session: Session, options: GenerateOptions): AsyncGenerator<number, void, void> {
  const { prefixCache, sampler, ...rest } = (options ?? {}) as GenerateOptions;
  checkOptions(options === null || typeof options !== 'object' ? options : rest);
  if (prefixCache !== undefined && !(prefixCache instanceof PrefixCache))
    throw new TypeError(`generate: prefixCache must be a PrefixCache, got ${show(prefixCache)}`);
  const hostOnly = checkSampler(sampler, options);
  const seed = typeof options.sampling === 'object' ? (options.sampling.seed ?? 0) : 0;
  // 'auto': greedy on the device wherever the logits are there; sampling only where MLX runs on a
  // GPU (on a CPU the row's download is a copy, and the host sampler is faster: bench/sampler.ts).
  const deviceByDefault = typeof options.sampling !== 'object' || mx.defaultStream().device.type === 'gpu';
  const T = options.Tensor ?? (CommonTensor as unknown as typeof Tensor);
  const caches = cacheNames(session);
  checkDecoderSession(session, caches, 'generate');
  const prompt = options.inputIds.map(Number);
  if (!prompt.length) throw new RangeError('generate: inputIds is empty');
  const layout = attentionLayout(session);
  const windows = cacheWindows(session, caches, options.kvWindow, 'generate', layout);
  const capacity = options.kvCapacity ?? defaultCapacity(layout, caches, windows, prompt.length + options.maxNewTokens);
  if (capacity !== undefined && prompt.length + options.maxNewTokens > capacity)
    throw new RangeError(`generate: ${prompt.length} prompt tokens + ${options.maxNewTokens} new ones do not fit kvCapacity ${capacity}`);
  if (options.promptLookup && capacity === undefined)
    throw new TypeError(
      'generate: promptLookup needs kvCapacity (the in-place cache, whose rejected positions the next step writes over); an mlx session whose caches are GroupQueryAttention pasts has one by default',
    );
  // An mlx session keeps the presents on the device, and the logits where the token is chosen there.
  const keep = layout
    ? [...caches.map((c) => c.present), ...(sampler !== 'host' && !hostOnly && (sampler === 'device' || deviceByDefault) ? ['logits'] : [])]
    : [];
  const typeOf = (name: string) => {
    const m = session.inputMetadata[session.inputNames.indexOf(name)];
    return m?.isTensor ? m.type : 'int64';
  };
  if (capacity !== undefined && windows.some((w) => w !== undefined))
    throw new TypeError(
      `generate: kvCapacity was given, but the model's GroupQueryAttention keeps a sliding window cache of ${windows.find((w) => w !== undefined)} rows (sliding_window_cache): leave kvCapacity out`,
    );
  // Sliding window caches only: the mask is bucketed as in shared-buffer mode (no capacity caps it).
  // A window buffer holds a sequence's last W tokens, not a prefix: nothing a prefix cache can keep.
  if (prefixCache && windows.some((w) => w !== undefined))
    throw new TypeError(
      "generate: prefixCache does not take the model's sliding window caches (their buffers hold the last tokens, not a prefix)",
    );
  const buckets = windows.length && windows.every((w) => w !== undefined) ? Number.POSITIVE_INFINITY : capacity;
  // The mask's data, reused from step to step while its length stays (a bucket): ones, then zeros.
  const maskType = typeOf('attention_mask') === 'int32' ? 'int32' : 'int64';
  let maskData: Int32Array | BigInt64Array | undefined;
  const maskOf = (total: number): Tensor => {
    const len = maskLength(total, buckets);
    if (maskData?.length !== len) maskData = maskType === 'int32' ? new Int32Array(len) : new BigInt64Array(len);
    if (maskData instanceof Int32Array) maskData.fill(1, 0, total).fill(0, total);
    else maskData.fill(1n, 0, total).fill(0n, total);
    return new T(maskType as 'int32', maskData as Int32Array, [1, len]);
  };
  // The feeds' names and element types, looked up once rather than at every step.
  const int32Feeds = new Set(['input_ids', 'position_ids'].filter((n) => typeOf(n) === 'int32'));
  const hasMask = session.inputNames.includes('attention_mask');
  const hasPositions = session.inputNames.includes('position_ids');
  const hasCacheBranch = session.inputNames.includes('use_cache_branch');
  const ints = (name: string, values: number[]) => {
    const n = values.length;
    if (int32Feeds.has(name)) return new T('int32', Int32Array.from(values), [1, n]);
    const data = new BigInt64Array(n);
    for (let i = 0; i < n; i++) data[i] = BigInt(values[i]);
    return new T('int64', data, [1, n]);
  };
  /** position_ids of `n` tokens from `from` on, without an array of the positions first. */
  const positions = (from: number, n: number) => {
    if (int32Feeds.has('position_ids')) {
      const data = new Int32Array(n);
      for (let i = 0; i < n; i++) data[i] = from + i;
      return new T('int32', data, [1, n]);
    }
    const data = new BigInt64Array(n);
    for (let i = 0; i < n; i++) data[i] = BigInt(from + i);
    return new T('int64', data, [1, n]);
  };
  const zeros = (c: CacheName, len: number) => {
    const n = c.dims[0] * len * c.dims[1];
    const data = c.type === 'float16' ? new Uint16Array(n) : new Float32Array(n);
    return new T(c.type as 'float32', data as Float32Array, [1, c.dims[0], len, c.dims[1]]);
  };
  let past: Tensor[];
  try {
    past = caches.map((c, i) => zeros(c, windows[i] ?? capacity ?? 0));
  } catch (e) {
    if (!isAllocationFailure(e)) throw e;
    const bytes = kvCacheBytes(caches, capacity ?? 0);
    throw new ResourceLimitError(`generate: the KV cache of kvCapacity ${capacity} (${bytes} bytes) cannot be allocated: ${e.message}`, {
      cause: e,
    });
  }
  const random = typeof options.sampling === 'object' ? seeded(options.sampling.seed ?? 0) : undefined;
  const stops = new Set(options.stopTokens ?? []);
  const stopSequences = (options.stopSequences ?? []).map((q) => [...q]);
  const generated: number[] = [];
  /** Whether the stream ends with the token just generated. */
  const ends = (): boolean => endsAfter(generated, stops, stopSequences, options.minNewTokens ?? 0);
  let cached = 0;
  let tokens = prompt;
  // A cached prefix: its state in fresh pasts, and only the rest of the prompt to run.
  const reuse = prefixCache?.match(prompt, caches);
  if (reuse && prefixCache) {
    const fresh = prefixCache.pasts(reuse, caches, T, capacity);
    for (const t of past) if (isDevice(t)) t.dispose();
    past = fresh;
    cached = reuse.length;
    tokens = prompt.slice(reuse.length);
  }
  let failed = false;
  try {
    const lookup = options.promptLookup;
    for (let step = 0; generated.length < options.maxNewTokens; step++) {
      // Prompt lookup: the pending token, then a draft to verify in the same run.
      let draft: number[] = [];
      if (lookup && step > 0) {
        const room = Math.min(options.maxNewTokens - generated.length - 1, (capacity ?? 0) - cached - 1);
        if (room > 0) draft = lookupDraft([...prompt, ...generated], lookup.ngram ?? 3, Math.min(lookup.maxDraft ?? 4, room));
        tokens = [tokens[0], ...draft];
      }
      const total = cached + tokens.length;
      const feeds: Record<string, Tensor> = { input_ids: ints('input_ids', tokens) };
      if (hasMask) feeds.attention_mask = maskOf(total);
      if (hasPositions) feeds.position_ids = positions(cached, tokens.length);
      if (hasCacheBranch) feeds.use_cache_branch = new T('bool', [cached > 0], [1]);
      let out: Record<string, Tensor>;
      try {
        ({ out, past } = await runWithCaches(session, feeds, caches, past, capacity, step === 0, 'generate', undefined, keep));
      } catch (e) {
        throw windowHint(e, windows, 'generate');
      }
      checkWindows(caches, windows, past, 'generate');
      const logits = out.logits;
      const vocab = logits.dims[logits.dims.length - 1];
      if (draft.length) {
        // Verify: keep the draft while greedy decoding agrees with it, then greedy's own token.
        const picks = await greedyRows(logits, vocab, tokens.length, sampler !== 'host');
        const accepted: number[] = [];
        for (let i = 0; i < picks.length; i++) {
          const t = picks[i];
          accepted.push(t);
          if (i >= draft.length || t !== draft[i]) break;
        }
        options.onStep?.(step, tokens.length);
        // Valid cache rows: the pending token and the draft tokens kept (the last kept token is new).
        cached += accepted.length;
        tokens = [accepted[accepted.length - 1]];
        for (const t of accepted) {
          generated.push(t);
          yield t;
          if (ends() || generated.length >= options.maxNewTokens) return;
        }
        continue;
      }
      let token: number;
      const own = deviceBufferOf(logits)?.value;
      const onDevice = sampler === 'device' ? own !== undefined : sampler !== 'host' && own !== undefined && !hostOnly && deviceByDefault;
      if (sampler === 'device' && !onDevice)
        throw new TypeError(
          "generate: sampler 'device' needs the logits on the device (an mlx session); this session returned them on the host",
        );
      if (onDevice && own) {
        try {
          token = deviceToken(own.array, options.sampling === 'greedy' ? undefined : options.sampling, seed, step);
        } finally {
          logits.dispose();
        }
      } else {
        const last = shapeLogits((await lastRows(logits, vocab, 1))[0], prompt, generated, options, options.logitsProcessor, {
          who: 'generate',
        });
        token = pickToken(last, options.sampling, random);
      }
      options.onStep?.(step, tokens.length);
      cached = total;
      tokens = [token];
      generated.push(token);
      yield token;
      if (ends()) return;
    }
  } catch (e) {
    failed = true;
    throw e;
  } finally {
    // The state of the sequence's first `cached` tokens (the last token chosen is not run yet).
    if (prefixCache && !failed && cached > 0) await prefixCache.store([...prompt, ...generated].slice(0, cached), caches, past);
    for (const t of past) if (isDevice(t)) t.dispose();
  }
}

/**
 * One decoder run with each layer's cache bound as generate() binds it, and the pasts it replaced
 * disposed: the outputs and the new pasts. Shared buffer (kvCapacity): the present is written into
 * the past's own tensor, on the device or on the host where the session returns it there (a new
 * host present per step would hold another whole cache until the garbage collector frees the last
 * one); only a first run of an mlx session with preferredOutputLocation 'gpu-buffer', fed host
 * pasts, gets a device present instead, bound from then on. A growing cache on the mlx backend is
 * made consumable: the run may append in place. `who` and `model` name the caller and the model in
 * the error for a present that is not the shared buffer.
 */
export async function runWithCaches(
  session: Session,
  feeds: Record<string, Tensor>,
  caches: readonly CacheName[],
  past: Tensor[],
  capacity: number | undefined,
  first: boolean,
  who: string,
  model = 'the model',
  keep: readonly string[] = [],
): Promise<{ out: Record<string, Tensor>; past: Tensor[] }> {
  const fetches: Record<string, Tensor | null> = { logits: null };
  caches.forEach((c, i) => {
    feeds[c.past] = past[i];
    const onDevice = keepsOnDevice(session, c.present) || keep.includes(c.present);
    const shared = capacity !== undefined && (isDevice(past[i]) || !first || !onDevice);
    fetches[c.present] = shared ? past[i] : null;
    const own = deviceBufferOf(past[i]);
    if (own && !shared) own.consumable = true;
  });
  const out = (
    keep.length ? await session.run(feeds, fetches, { [KEEP_ON_DEVICE]: keep } as never) : await session.run(feeds, fetches)
  ) as Record<string, Tensor>;
  const next = caches.map((c) => out[c.present]);
  for (let i = 0; i < past.length; i++) if (past[i] !== next[i] && isDevice(past[i])) past[i].dispose();
  if (capacity !== undefined && next[0].dims[2] !== capacity)
    throw new OrtMlxError(
      `${who}: kvCapacity ${capacity} was given, but ${model}'s present has ${next[0].dims[2]} positions (its attention does not share past and present buffers)`,
    );
  return { out, past: next };
}

/** The most KV cache bytes generate() allocates up front on its own (defaultCapacity). */
const DEFAULT_CAPACITY_BYTES = 512 * 1024 * 1024;

/**
 * The shared buffer's capacity generate() (and generateBatch(), for `batch` sequences) uses where
 * kvCapacity is not given: on an mlx session whose every cache is a GroupQueryAttention past (no
 * sliding window), prompt plus new tokens, when the whole cache of that many positions takes at
 * most DEFAULT_CAPACITY_BYTES. Then every decode step of a length bucket replays one compiled
 * program (a cache grown by concatenation is a new input shape each step, which runs the eager
 * walk: several times the step's time on a small model). Undefined otherwise (the cache grows as
 * before).
 */
export function defaultCapacity(
  layout: AttentionLayout | undefined,
  caches: readonly CacheName[],
  windows: readonly (number | undefined)[],
  positions: number,
  batch = 1,
): number | undefined {
  if (!layout || !caches.length || windows.some((w) => w !== undefined)) return undefined;
  if (!caches.every((c) => layout.pasts.has(c.past))) return undefined;
  return kvCacheBytes(caches, positions, batch) <= DEFAULT_CAPACITY_BYTES ? positions : undefined;
}

/** The bytes of every layer's key and value cache of `positions` rows, for `batch` sequences. */
export function kvCacheBytes(caches: readonly CacheName[], positions: number, batch = 1): number {
  return caches.reduce((n, c) => n + batch * c.dims[0] * positions * c.dims[1] * (c.type === 'float16' ? 2 : 4), 0);
}

/** Whether `session` is an mlx one that returns output `name` on the device (its handler says). */
export function keepsOnDevice(session: object, name: string): boolean {
  const handler: unknown = (session as { handler?: unknown }).handler;
  return handler instanceof MlxSessionHandler && handler.keepsOnDevice(name);
}
