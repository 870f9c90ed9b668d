// generate()'s loop over a batch of prompts of different lengths: one run per step for every
// sequence, each padded to the longest prompt, the way transformers.js and onnxruntime-genai batch a
// decoder-only model. Two layouts:
//  - left padding (transformers.js): pads before each prompt, attention_mask 0 on them,
//    position_ids counting from each sequence's first real token (cumsum(mask) - 1, 0 on the pads);
//    every new token is appended at the same cache row for all sequences. For graphs whose attention
//    takes the mask as a mask (GPT-2's and most transformers.js exports, with position_ids).
//  - right padding (GroupQueryAttention's layout, as onnxruntime-genai runs it): each sequence's rows
//    start at row 0 of the cache and the mask holds as many ones as the sequence has tokens, since
//    GroupQueryAttention reads a sequence's length as the mask's sum (seqlens_k) and its rotary
//    positions from it; each new token is written at its own sequence's length. The one layout of
//    the shared buffer (kvCapacity), and the default of models without position_ids and of
//    models with GroupQueryAttention (read from an mlx session's model; a session that does not
//    show its graph, onnxruntime-node's, is told padding: 'right' by the caller).
// A finished sequence is fed the pad token from then on (its cache keeps growing, unread): every
// sequence's tokens are the ones its own batch-1 run chooses, up to the float differences a padded
// batch brings.
import { Tensor as CommonTensor, type InferenceSession, type Tensor } from 'onnxruntime-common';
import * as mx from '@mlx/core';
import { deviceBufferOf } from './backend/device-buffer.js';
import { download } from './runtime/convert.js';
import { InvalidFeedError, ResourceLimitError, isAllocationFailure } from './errors.js';
import {
  type GenerateOptions,
  OPTION_KEYS,
  attentionLayout,
  cacheNames,
  cacheWindows,
  checkDecoderSession,
  checkOptions,
  endsAfter,
  checkWindows,
  defaultCapacity,
  halfToFloat,
  isCount,
  isDevice,
  kvCacheBytes,
  maskLength,
  pickToken,
  runWithCaches,
  seeded,
  shapeLogits,
  show,
  windowHint,
} from './generate.js';

export interface GenerateBatchOptions extends Omit<GenerateOptions, 'inputIds' | 'promptLookup' | 'logitsProcessor' | 'sampler'> {
  /** The prompts, one array of token ids each, of any lengths (at least one token each). */
  inputIds: readonly (readonly (number | bigint)[])[];
  /** The token fed on padding (and to finished sequences); default 0. Attention never reads it. */
  padTokenId?: number;
  /**
   * Where the pads go: 'left' (transformers.js: attention_mask 0 on them, position_ids from each
   * sequence's first real token) or 'right' (GroupQueryAttention's layout: each sequence's rows
   * from the start of the cache, its length the mask's sum). Default: 'right' with kvCapacity,
   * when the model takes no position_ids (its positions then come from the mask, as
   * GroupQueryAttention's do) or when it has GroupQueryAttention nodes (read from the model on the
   * 'mlx' backend; 'left' is then refused), 'left' otherwise. Sessions that do not show their graph
   * (onnxruntime-node's) cannot tell GroupQueryAttention apart: pass 'right' for a
   * GroupQueryAttention model with position_ids there.
   */
  padding?: 'left' | 'right';
  /**
   * Called for each running sequence at each step with its last logits (after the penalties; a
   * Float32Array it may change in place), its tokens so far (prompt and generated) and its index
   * in the batch; it may return another array of the same length to choose from.
   */
  // biome-ignore lint/suspicious/noConfusingVoidType: generate()'s logitsProcessor type, which may return nothing
  logitsProcessor?: (logits: Float32Array, sequence: readonly number[], index: number) => Float32Array | undefined | void;
}

/** One step of a batch: the new token of every sequence, `undefined` for those already finished. */
export interface BatchStep {
  /** The run's index: 0 is the prompts', and the index of this token in each running sequence's new tokens. */
  step: number;
  /** The token each sequence chose this step; undefined for a sequence that ended at an earlier step. */
  tokens: (number | undefined)[];
  /** Whether each sequence has ended (with this step's token: a stop token or sequence, or its last new token). */
  done: boolean[];
}

type Session = Pick<InferenceSession, 'inputNames' | 'outputNames' | 'inputMetadata' | 'run'>;

const BATCH_KEYS = [...OPTION_KEYS, 'padTokenId', 'padding'];

/** The batch's own options checked (the prompts, padTokenId, padding), then the shared ones as generate() checks them. */
function checkBatchOptions(options: GenerateBatchOptions): void {
  if (typeof options !== 'object' || options === null)
    throw new TypeError(`generateBatch: options must be an object, got ${show(options)}`);
  for (const k of Object.keys(options))
    if (!BATCH_KEYS.includes(k)) throw new TypeError(`generateBatch: unknown option '${k}' (known: ${BATCH_KEYS.join(', ')})`);
  const ids = options.inputIds as unknown;
  if (!Array.isArray(ids))
    throw new TypeError(`generateBatch: inputIds must be an array of prompts (arrays of token ids), got ${show(ids)}`);
  if (!ids.length) throw new RangeError('generateBatch: inputIds holds no prompts');
  ids.forEach((p: unknown, b) => {
    if (!Array.isArray(p))
      throw new TypeError(
        `generateBatch: inputIds[${b}] must be a prompt (an array of token ids), got ${show(p)}${typeof p === 'number' || typeof p === 'bigint' ? ' (generate() takes a single prompt as one array)' : ''}`,
      );
    if (!p.length) throw new RangeError(`generateBatch: inputIds[${b}] is an empty prompt (each prompt needs at least one token)`);
    p.forEach((id: unknown, i) => {
      const ok = typeof id === 'bigint' ? id >= 0n && id <= BigInt(Number.MAX_SAFE_INTEGER) : isCount(id, 0);
      if (!ok) throw new RangeError(`generateBatch: inputIds[${b}][${i}] = ${show(id)} is not a token id (an integer ≥ 0)`);
    });
  });
  const pad = options.padTokenId as unknown;
  if (pad !== undefined) {
    if (typeof pad !== 'number') throw new TypeError(`generateBatch: padTokenId must be a token id (a number), got ${show(pad)}`);
    if (!isCount(pad, 0)) throw new RangeError(`generateBatch: padTokenId must be a token id (an integer ≥ 0), got ${pad}`);
  }
  const side = options.padding as unknown;
  if (side !== undefined && side !== 'left' && side !== 'right')
    throw new TypeError(`generateBatch: padding must be 'left' or 'right', got ${show(side)}`);
  if ((options as { promptLookup?: unknown }).promptLookup !== undefined)
    throw new TypeError(
      'generateBatch: promptLookup is batch 1 only (each sequence would keep drafts of its own length); run generate() per prompt for it',
    );
  if (side === 'left' && options.kvCapacity !== undefined)
    throw new TypeError(
      "generateBatch: kvCapacity (GroupQueryAttention's shared buffer) takes right-padded batches only: GroupQueryAttention reads each sequence's length as the attention mask's sum (seqlens_k) and its rows from the start of the buffer, so left pads would be attended and the last tokens missed; leave padding unset or 'right'",
    );
  const { padTokenId: _pad, padding: _side, logitsProcessor, ...rest } = options;
  checkOptions({ ...rest, logitsProcessor: logitsProcessor as GenerateOptions['logitsProcessor'], inputIds: [] }, 'generateBatch');
}

/**
 * The logits rows `rows` of `logits` ([B, S, vocab], as rows of vocab), as float32 arrays. A device
 * tensor of the mlx backend is gathered on the device first, so only those rows are downloaded;
 * the tensor is freed either way.
 */
async function rowsAt(logits: Tensor, vocab: number, rows: number[]): Promise<Float32Array[]> {
  const own = deviceBufferOf(logits);
  let data: Float32Array | Uint16Array;
  let at: number[];
  if (own?.value && own.value.array.ndim >= 2) {
    const a = own.value.array;
    const part = mx.scope(() => mx.take(mx.reshape(a, [a.size / vocab, vocab]), mx.array(Int32Array.from(rows), 'int32'), 0));
    data = download(part, own.value.onnxType).data as Float32Array | Uint16Array;
    part.dispose();
    logits.dispose();
    at = rows.map((_, i) => i);
  } else {
    data = (isDevice(logits) ? await logits.getData(true) : logits.data) as Float32Array | Uint16Array;
    at = rows;
  }
  return at.map((r) => {
    const row = data.subarray(r * vocab, (r + 1) * vocab);
    return row instanceof Uint16Array ? Float32Array.from(row, halfToFloat) : Float32Array.from(row);
  });
}

/**
 * Generates up to `maxNewTokens` tokens after each prompt of a batch, one run per step for all of
 * them, yielding `{ step, tokens, done }` each step: `tokens[b]` is sequence b's new token
 * (undefined once it has ended), `done[b]` whether it has ended. Prompts of different lengths are
 * padded with `padTokenId` (default 0) on the left (models taking position_ids, as transformers.js
 * batches them) or on the right (GroupQueryAttention's layout: kvCapacity, models without
 * position_ids, or GroupQueryAttention seen in an mlx session's model); see `padding`. A sliding
 * window cache (kvWindow, GroupQueryAttention's sliding_window_cache) takes prompts of one length. Every option applies per sequence: stop tokens and stop sequences
 * end the sequence that produced them (the stream ends once all have ended), penalties and
 * minNewTokens count each sequence's own tokens, `logitsProcessor(logits, sequence, index)` is
 * called once per running sequence, and sampling draws from one generator per sequence, seeded
 * with `seed + index`, so sequence b of a batch chooses what generate() with seed `seed + b` does
 * on its prompt alone (up to the float differences padding may bring). Not with promptLookup.
 * Breaking out of the loop (or an error) frees the cache tensors the loop holds.
 *
 * ```ts
 * for await (const { tokens } of generateBatch(session, { inputIds: [[1, 2, 3], [4, 5]], maxNewTokens: 16 }))
 *   tokens.forEach((t, b) => t !== undefined && out[b].push(t));
 * ```
 */
export async function* generateBatch(session: Session, options: GenerateBatchOptions): AsyncGenerator<BatchStep, void, void> {
  checkBatchOptions(options);
  const T = options.Tensor ?? (CommonTensor as unknown as typeof Tensor);
  const caches = cacheNames(session);
  checkDecoderSession(session, caches, 'generateBatch');
  const prompts = options.inputIds.map((p) => p.map(Number));
  const hasMask = session.inputNames.includes('attention_mask');
  if (!hasMask && new Set(prompts.map((p) => p.length)).size > 1)
    throw new InvalidFeedError(
      "generateBatch: the model has no 'attention_mask' input, so the pads of prompts of different lengths cannot be masked",
    );
  const B = prompts.length;
  const metaOf = (name: string) => session.inputMetadata[session.inputNames.indexOf(name)];
  for (const name of ['input_ids', ...caches.map((c) => c.past)]) {
    const m = metaOf(name);
    const batch = m?.isTensor ? m.shape[0] : undefined;
    if (typeof batch === 'number' && batch !== B)
      throw new InvalidFeedError(
        `generateBatch: the model's input '${name}' has a fixed batch size ${batch}, and the batch holds ${B} prompts`,
      );
  }
  const lens = prompts.map((p) => p.length);
  const L = Math.max(...lens);
  // GroupQueryAttention (seen in an mlx session's model) reads each sequence's length as the mask's
  // sum and its rows from the start of the cache: right padding, position_ids or not. Sessions
  // that do not show their graph (onnxruntime-node's) are told by the caller (padding: 'right').
  const layout = attentionLayout(session);
  const windows = cacheWindows(session, caches, options.kvWindow, 'generateBatch', layout);
  // As generate(): an mlx session's cache on the device, in a shared buffer where the model allows.
  const capacity = options.kvCapacity ?? defaultCapacity(layout, caches, windows, L + options.maxNewTokens, B);
  const keep = layout ? caches.map((c) => c.present) : [];
  if (capacity !== undefined && L + options.maxNewTokens > capacity)
    throw new RangeError(
      `generateBatch: the longest prompt's ${L} tokens + ${options.maxNewTokens} new ones do not fit kvCapacity ${capacity}`,
    );
  const hasPositions = session.inputNames.includes('position_ids');
  const gqa = layout?.gqa ?? false;
  if (gqa && options.padding === 'left')
    throw new TypeError(
      "generateBatch: padding 'left' on a model with GroupQueryAttention, which reads each sequence's length as the attention mask's sum (seqlens_k) and its rows from the start of the cache, so left pads would be attended and the last tokens missed; leave padding unset or 'right'",
    );
  const right = (options.padding ?? (capacity !== undefined || !hasPositions || gqa ? 'right' : 'left')) === 'right';
  if (windows.some((w) => w !== undefined)) {
    if (capacity !== undefined)
      throw new TypeError(
        `generateBatch: kvCapacity was given, but the model's GroupQueryAttention keeps a sliding window cache of ${windows.find((w) => w !== undefined)} rows (sliding_window_cache): leave kvCapacity out`,
      );
    if (new Set(lens).size > 1)
      throw new InvalidFeedError(
        `generateBatch: a sliding window cache (GroupQueryAttention's sliding_window_cache) takes prompts of one length (onnxruntime takes no padded first prompt there: seqlens_k + 1 >= sequence_length for each sequence), got lengths ${lens.join(', ')}; run the prompts of each length as a batch of their own`,
      );
  }
  // Sliding window caches only: the mask is bucketed as in shared-buffer mode (no capacity caps it).
  const buckets = windows.length && windows.every((w) => w !== undefined) ? Number.POSITIVE_INFINITY : capacity;
  const pad = options.padTokenId ?? 0;
  const typeOf = (name: string) => {
    const m = metaOf(name);
    return m?.isTensor ? m.type : 'int64';
  };
  /** A [B, n] integer feed from row-major values, in the input's type (int32 or int64). */
  const ints = (name: string, values: number[], n: number) =>
    typeOf(name) === 'int32'
      ? new T('int32', Int32Array.from(values), [B, n])
      : new T(
          'int64',
          BigInt64Array.from(values, (x) => BigInt(x)),
          [B, n],
        );
  const zeros = (c: (typeof caches)[number], len: number) => {
    const n = B * c.dims[0] * len * c.dims[1];
    const data = c.type === 'float16' ? new Uint16Array(n) : new Float32Array(n);
    return new T(c.type as 'float32', data as Float32Array, [B, c.dims[0], len, c.dims[1]]);
  };
  let past: Tensor[];
  try {
    past = caches.map((c, i) => zeros(c, windows[i] ?? capacity ?? 0));
  } catch (e) {
    if (!isAllocationFailure(e)) throw e;
    const bytes = kvCacheBytes(caches, capacity ?? 0, B);
    throw new ResourceLimitError(
      `generateBatch: the KV cache of ${B} sequences of kvCapacity ${capacity} (${bytes} bytes) cannot be allocated: ${e.message}`,
      { cause: e },
    );
  }
  const seed = typeof options.sampling === 'object' ? (options.sampling.seed ?? 0) : 0;
  const random = prompts.map((_, b) => (typeof options.sampling === 'object' ? seeded(seed + b) : undefined));
  const stops = new Set(options.stopTokens ?? []);
  const stopSequences = (options.stopSequences ?? []).map((q) => [...q]);
  const generated: number[][] = prompts.map(() => []);
  const done = prompts.map(() => false);
  let next = prompts.map(() => pad);
  try {
    for (let step = 0; step < options.maxNewTokens; step++) {
      // Step 0 feeds the padded prompts (L columns); step s > 0 one token per sequence, whose
      // context is then L + s tokens long in the cache (pads included on the left).
      const S = step === 0 ? L : 1;
      const ids: number[] = [];
      const positions: number[] = [];
      let width: number;
      let mask: number[];
      if (step === 0) {
        width = L;
        mask = [];
        for (let b = 0; b < B; b++) {
          const n = lens[b];
          for (let j = 0; j < L; j++) {
            const real = right ? j < n : j >= L - n;
            const at = right ? j : j - (L - n);
            ids.push(real ? prompts[b][at] : pad);
            mask.push(real ? 1 : 0);
            positions.push(real ? at : right ? j : 0);
          }
        }
      } else {
        // Right: sequence b holds lens[b] + step tokens from row 0 (its new one at row lens[b] +
        // step - 1); the mask is padded with zeros to the longest's length (a bucket in shared mode).
        // Left: every sequence's new token at row L + step - 1, its pads still masked.
        width = right ? maskLength(L + step, buckets) : L + step;
        mask = new Array<number>(B * width).fill(0);
        for (let b = 0; b < B; b++) {
          ids.push(next[b]);
          positions.push(lens[b] + step - 1);
          const from = right ? 0 : L - lens[b];
          mask.fill(1, b * width + from, b * width + (right ? lens[b] + step : width));
        }
      }
      const feeds: Record<string, Tensor> = { input_ids: ints('input_ids', ids, S) };
      if (hasMask) feeds.attention_mask = ints('attention_mask', mask, width);
      if (hasPositions) feeds.position_ids = ints('position_ids', positions, S);
      if (session.inputNames.includes('use_cache_branch')) feeds.use_cache_branch = new T('bool', [step > 0], [1]);
      let out: Record<string, Tensor>;
      try {
        ({ out, past } = await runWithCaches(session, feeds, caches, past, capacity, step === 0, 'generateBatch', undefined, keep));
      } catch (e) {
        throw windowHint(e, windows, 'generateBatch');
      }
      checkWindows(caches, windows, past, 'generateBatch');
      const logits = out.logits;
      const vocab = logits.dims[logits.dims.length - 1];
      // Each sequence's last real position: the end of its prompt on the right, else the last column.
      const rows = lens.map((n, b) => b * S + (right && step === 0 ? n - 1 : S - 1));
      const lasts = await rowsAt(logits, vocab, rows);
      const tokens: (number | undefined)[] = [];
      for (let b = 0; b < B; b++) {
        if (done[b]) {
          tokens.push(undefined);
          next[b] = pad;
          continue;
        }
        const g = generated[b];
        const processor = options.logitsProcessor;
        const last = shapeLogits(lasts[b], prompts[b], g, options, processor && ((l, seq) => processor(l, seq, b)), {
          who: 'generateBatch',
          suffix: ` (sequence ${b})`,
          owned: true,
        });
        const token = pickToken(last, options.sampling, random[b]);
        g.push(token);
        tokens.push(token);
        next[b] = token;
        if (endsAfter(g, stops, stopSequences, options.minNewTokens ?? 0) || g.length >= options.maxNewTokens) done[b] = true;
      }
      options.onStep?.(step, S);
      next = next.map((t, b) => (done[b] ? pad : t));
      yield { step, tokens, done: [...done] };
      if (done.every(Boolean)) return;
    }
  } finally {
    for (const t of past) if (isDevice(t)) t.dispose();
  }
}
