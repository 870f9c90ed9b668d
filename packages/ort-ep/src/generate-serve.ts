// Continuous batching: a generator that serves many requests over one decoder session, each request
// joining the shared decode step when a slot is free and leaving it when it ends, so concurrent
// streams read the weights once per step between them.
//
// The cache is GroupQueryAttention's shared buffer (kvCapacity) with one slot per sequence:
// [slots, heads, kvCapacity, head size] per layer, right-padded, each slot at its own length
// (the attention mask's sum is each sequence's seqlens_k, as generateBatch() feeds it). A request
// is admitted when a slot is free (the slots are what the memory budget allows); its prompt is
// prefilled alone, in a one-sequence buffer, and copied into its slot (on the device for the mlx
// backend, a slice update of that slot alone); from then on it decodes with the others, one token
// per step. An idle slot is fed the pad token at row 0 (its rows are written over when a request
// takes it). A request's stream ends with its stop token or sequence, its maxNewTokens, an abort
// (its AbortSignal, `cancel()`, or leaving the loop), or the generator's close().
import { Tensor as CommonTensor, type InferenceSession, type Tensor } from 'onnxruntime-common';
import * as mx from '@mlx/core';
import { deviceBufferOf } from './backend/device-buffer.js';
import { OrtMlxError, ResourceLimitError } from './errors.js';
import { upload } from './runtime/convert.js';
import { OnnxDataType } from './onnx/index.js';
import {
  type GenerateOptions,
  OPTION_KEYS,
  cacheNames,
  checkDecoderSession,
  checkOptions,
  endsAfter,
  isCount,
  isDevice,
  kvCacheBytes,
  lastRows,
  maskLength,
  pickToken,
  runWithCaches,
  seeded,
  shapeLogits,
  show,
} from './generate.js';

type Session = Pick<InferenceSession, 'inputNames' | 'outputNames' | 'inputMetadata' | 'run'>;
type CacheName = ReturnType<typeof cacheNames>[number];

export interface BatchGeneratorOptions {
  /** The most sequences decoded together (slots). */
  maxBatch: number;
  /** Positions each sequence's cache holds: its prompt and new tokens must fit. */
  kvCapacity: number;
  /** Bytes the slots' caches may take; fewer slots than maxBatch when they would not fit (default: no bound). */
  maxKvBytes?: number;
  /** The token idle slots are fed (default 0); attention never reads their rows. */
  padTokenId?: number;
  /** The Tensor class of the session's onnxruntime module (default: onnxruntime-common's). */
  Tensor?: typeof Tensor;
}

/** A request's options: generate()'s that apply to one sequence, and an AbortSignal. */
export type SubmitOptions = Pick<
  GenerateOptions,
  | 'maxNewTokens'
  | 'sampling'
  | 'stopTokens'
  | 'stopSequences'
  | 'minNewTokens'
  | 'repetitionPenalty'
  | 'presencePenalty'
  | 'frequencyPenalty'
  | 'logitsProcessor'
> & {
  /** Ends the request's stream (it finishes without error) and frees its slot at the next step. */
  signal?: AbortSignal;
};

const SUBMIT_KEYS = OPTION_KEYS.filter((k) => !['inputIds', 'promptLookup', 'kvCapacity', 'Tensor', 'onStep'].includes(k));

/** A request's stream of tokens: an async iterator; `cancel()` (or leaving the loop) ends it. */
export interface TokenStream extends AsyncIterableIterator<number> {
  cancel(): void;
  /** Milliseconds from submit() to the first token (undefined before it). */
  readonly timeToFirstTokenMs: number | undefined;
}

export interface BatchGeneratorStats {
  /** Decode steps run (one run for all active sequences). */
  steps: number;
  /** Prompts prefilled. */
  prefills: number;
  /** Tokens produced, first tokens included. */
  tokens: number;
  completed: number;
  cancelled: number;
  /** Requests decoding now, and waiting for a slot. */
  active: number;
  queued: number;
  /** The most sequences one decode step held. */
  maxActive: number;
}

class Request implements TokenStream {
  readonly prompt: number[];
  readonly generated: number[] = [];
  readonly random: (() => number) | undefined;
  readonly stops: ReadonlySet<number>;
  len = 0;
  /** The token the next decode step feeds. */
  pending = 0;
  slot = -1;
  ended = false;
  cancelled = false;
  error: unknown;
  timeToFirstTokenMs: number | undefined;
  private readonly buffered: number[] = [];
  private wake: (() => void) | undefined;
  private readonly submitted = performance.now();

  constructor(
    prompt: number[],
    readonly options: SubmitOptions,
    private readonly onCancel: () => void,
  ) {
    this.prompt = prompt;
    this.random = typeof options.sampling === 'object' ? seeded(options.sampling.seed ?? 0) : undefined;
    this.stops = new Set(options.stopTokens ?? []);
    options.signal?.addEventListener('abort', () => this.cancel(), { once: true });
  }

  push(t: number): void {
    this.timeToFirstTokenMs ??= performance.now() - this.submitted;
    this.generated.push(t);
    this.buffered.push(t);
    this.wake?.();
  }

  finish(error?: unknown): void {
    if (this.ended) return;
    this.ended = true;
    this.error = error;
    this.wake?.();
  }

  cancel(): void {
    if (this.ended || this.cancelled) return;
    this.cancelled = true;
    this.onCancel();
  }

  async next(): Promise<IteratorResult<number>> {
    for (;;) {
      if (this.buffered.length) return { value: this.buffered.shift() as number, done: false };
      if (this.ended) {
        if (this.error !== undefined) {
          const e = this.error;
          this.error = undefined;
          throw e;
        }
        return { value: undefined, done: true };
      }
      await new Promise<void>((resolve) => {
        this.wake = resolve;
      });
      this.wake = undefined;
    }
  }

  async return(): Promise<IteratorResult<number>> {
    this.cancel();
    this.buffered.length = 0;
    return { value: undefined, done: true };
  }
  [Symbol.asyncIterator](): AsyncIterableIterator<number> {
    return this;
  }
}

/**
 * Serves requests over one decoder session with continuous batching: `submit(prompt, options)`
 * returns the request's token stream at once; requests join the shared decode step as slots free up
 * and leave it as they end. Each request's greedy tokens are its generate() run's (up to the float
 * differences batching may bring). Made by createGenerator().
 */
export class BatchGenerator {
  readonly slots: number;
  private readonly caches: CacheName[];
  private readonly T: typeof Tensor;
  private readonly capacity: number;
  private readonly pad: number;
  private readonly queue: Request[] = [];
  private readonly active: (Request | undefined)[];
  private batchPast: Tensor[];
  private prefillPast: Tensor[];
  private batchFirst = true;
  private prefillFirst = true;
  private pumping: Promise<void> | undefined;
  private closed = false;
  private readonly counts = { steps: 0, prefills: 0, tokens: 0, completed: 0, cancelled: 0, maxActive: 0 };

  constructor(
    private readonly session: Session,
    options: BatchGeneratorOptions,
  ) {
    const o = (options ?? {}) as Partial<BatchGeneratorOptions>;
    if (typeof options !== 'object' || options === null)
      throw new TypeError(`createGenerator: options must be an object, got ${show(options)}`);
    for (const k of Object.keys(o))
      if (!['maxBatch', 'kvCapacity', 'maxKvBytes', 'padTokenId', 'Tensor'].includes(k))
        throw new TypeError(`createGenerator: unknown option '${k}' (known: maxBatch, kvCapacity, maxKvBytes, padTokenId, Tensor)`);
    if (!isCount(o.maxBatch, 1)) throw new RangeError(`createGenerator: maxBatch must be an integer ≥ 1, got ${show(o.maxBatch)}`);
    if (!isCount(o.kvCapacity, 1)) throw new RangeError(`createGenerator: kvCapacity must be an integer ≥ 1, got ${show(o.kvCapacity)}`);
    if (o.maxKvBytes !== undefined && !isCount(o.maxKvBytes, 1))
      throw new RangeError(`createGenerator: maxKvBytes must be an integer ≥ 1, got ${show(o.maxKvBytes)}`);
    if (o.padTokenId !== undefined && !isCount(o.padTokenId, 0))
      throw new RangeError(`createGenerator: padTokenId must be a token id (an integer ≥ 0), got ${show(o.padTokenId)}`);
    if (o.Tensor !== undefined && typeof o.Tensor !== 'function') throw new TypeError('createGenerator: Tensor must be a Tensor class');
    this.caches = cacheNames(session);
    checkDecoderSession(session, this.caches, 'createGenerator', 'the model', ': sequences of different lengths need one');
    this.capacity = o.kvCapacity;
    this.pad = o.padTokenId ?? 0;
    this.T = o.Tensor ?? (CommonTensor as unknown as typeof Tensor);
    const slotBytes = kvCacheBytes(this.caches, this.capacity);
    const fit = o.maxKvBytes === undefined ? o.maxBatch : Math.floor(o.maxKvBytes / slotBytes) - 1;
    if (fit < 1)
      throw new ResourceLimitError(
        `createGenerator: maxKvBytes ${o.maxKvBytes} holds no slot: a sequence of kvCapacity ${this.capacity} takes ${slotBytes} bytes, and the prompt buffer another`,
      );
    this.slots = Math.min(o.maxBatch, fit);
    this.active = new Array<Request | undefined>(this.slots).fill(undefined);
    this.batchPast = this.caches.map((c) => this.zeros(c, this.slots));
    this.prefillPast = this.caches.map((c) => this.zeros(c, 1));
  }

  /** Starts a request: its stream yields its tokens as the shared steps choose them. */
  submit(inputIds: readonly (number | bigint)[], options: SubmitOptions): TokenStream {
    if (this.closed) throw new OrtMlxError('BatchGenerator.submit: the generator is closed');
    if (typeof options !== 'object' || options === null) throw new TypeError(`submit: options must be an object, got ${show(options)}`);
    for (const k of Object.keys(options))
      if (k !== 'signal' && !SUBMIT_KEYS.includes(k))
        throw new TypeError(`submit: unknown option '${k}' (known: ${[...SUBMIT_KEYS, 'signal'].join(', ')})`);
    const { signal, ...rest } = options;
    checkOptions({ inputIds, ...rest } as GenerateOptions, 'submit');
    if (signal !== undefined && !(signal instanceof AbortSignal))
      throw new TypeError(`submit: signal must be an AbortSignal, got ${show(signal)}`);
    const prompt = inputIds.map(Number);
    if (!prompt.length) throw new RangeError('submit: inputIds is empty');
    if (prompt.length + options.maxNewTokens > this.capacity)
      throw new RangeError(
        `submit: ${prompt.length} prompt tokens + ${options.maxNewTokens} new ones do not fit kvCapacity ${this.capacity}`,
      );
    const r = new Request(prompt, options, () => this.kick());
    if (signal?.aborted || options.maxNewTokens === 0) {
      if (signal?.aborted) this.counts.cancelled++;
      r.finish();
      return r;
    }
    this.queue.push(r);
    this.kick();
    return r;
  }

  get stats(): BatchGeneratorStats {
    return {
      ...this.counts,
      active: this.active.filter((r) => r !== undefined).length,
      queued: this.queue.length,
    };
  }

  /** Ends every request (their streams finish), waits for the step in flight, and frees the caches. */
  async close(): Promise<void> {
    this.closed = true;
    for (const r of this.queue.splice(0)) r.finish();
    await this.pumping;
    for (let s = 0; s < this.slots; s++) this.release(s, false);
    for (const t of [...this.batchPast, ...this.prefillPast]) if (isDevice(t)) t.dispose();
    this.batchPast = [];
    this.prefillPast = [];
  }

  private zeros(c: CacheName, batch: number): Tensor {
    const n = batch * c.dims[0] * this.capacity * c.dims[1];
    const data = c.type === 'float16' ? new Uint16Array(n) : new Float32Array(n);
    return new this.T(c.type as 'float32', data as Float32Array, [batch, c.dims[0], this.capacity, c.dims[1]]);
  }

  private kick(): void {
    if (this.pumping || this.closed) return;
    this.pumping = this.pump().finally(() => {
      this.pumping = undefined;
      if (!this.closed && (this.queue.length || this.active.some((r) => r !== undefined))) this.kick();
    });
  }

  private typeOf(name: string): Tensor.Type {
    const m = this.session.inputMetadata[this.session.inputNames.indexOf(name)];
    return m?.isTensor ? m.type : 'int64';
  }

  private ints(name: string, values: number[], rows: number, cols: number): Tensor {
    return this.typeOf(name) === 'int32'
      ? new this.T('int32', Int32Array.from(values), [rows, cols])
      : new this.T(
          'int64',
          BigInt64Array.from(values, (x) => BigInt(x)),
          [rows, cols],
        );
  }

  private feeds(ids: number[], positions: number[], mask: number[], rows: number, width: number, cached: boolean): Record<string, Tensor> {
    const S = ids.length / rows;
    const f: Record<string, Tensor> = {
      input_ids: this.ints('input_ids', ids, rows, S),
      attention_mask: this.ints('attention_mask', mask, rows, width),
    };
    if (this.session.inputNames.includes('position_ids')) f.position_ids = this.ints('position_ids', positions, rows, S);
    if (this.session.inputNames.includes('use_cache_branch')) f.use_cache_branch = new this.T('bool', [cached], [1]);
    return f;
  }

  private release(slot: number, cancelled: boolean): void {
    const r = this.active[slot];
    if (!r) return;
    this.active[slot] = undefined;
    if (cancelled) this.counts.cancelled++;
    else this.counts.completed++;
    r.finish();
  }

  /** Chooses a request's next token from its last logits (generate()'s rules) and hands it out; true when the request ends. */
  private choose(r: Request, logits: Float32Array): boolean {
    const o = r.options;
    const last = shapeLogits(logits, r.prompt, r.generated, o, o.logitsProcessor, { who: 'submit' });
    const token = pickToken(last, o.sampling, r.random);
    r.push(token);
    r.pending = token;
    this.counts.tokens++;
    return endsAfter(r.generated, r.stops, o.stopSequences ?? [], o.minNewTokens ?? 0) || r.generated.length >= o.maxNewTokens;
  }

  private async pump(): Promise<void> {
    try {
      while (!this.closed) {
        // Requests that left (an abort, cancel(), the consumer's break) free their slots.
        for (let s = 0; s < this.slots; s++) if (this.active[s]?.cancelled) this.release(s, true);
        for (let i = this.queue.length - 1; i >= 0; i--)
          if (this.queue[i].cancelled) {
            this.queue.splice(i, 1)[0].finish();
            this.counts.cancelled++;
          }
        // Admission: a free slot takes the oldest waiting request, prefilled alone.
        let free = this.active.indexOf(undefined);
        while (free >= 0 && this.queue.length && !this.closed) {
          const r = this.queue.shift() as Request;
          await this.prefill(r, free);
          free = this.active.indexOf(undefined);
        }
        const running = this.active.filter((r) => r !== undefined).length;
        if (!running) return;
        await this.step(running);
      }
    } catch (e) {
      // A failed run ends every request with its error: the caches' state is not known any more.
      for (let s = 0; s < this.slots; s++) {
        const r = this.active[s];
        this.active[s] = undefined;
        r?.finish(e);
      }
      for (const r of this.queue.splice(0)) r.finish(e);
    }
  }

  private async prefill(r: Request, slot: number): Promise<void> {
    const n = r.prompt.length;
    const width = maskLength(n, this.capacity);
    const mask = Array.from({ length: width }, (_, j) => (j < n ? 1 : 0));
    const feeds = this.feeds(
      r.prompt,
      r.prompt.map((_, i) => i),
      mask,
      1,
      width,
      false,
    );
    let out: Record<string, Tensor>;
    ({ out, past: this.prefillPast } = await runWithCaches(
      this.session,
      feeds,
      this.caches,
      this.prefillPast,
      this.capacity,
      this.prefillFirst,
      'BatchGenerator',
    ));
    this.prefillFirst = false;
    this.counts.prefills++;
    const logits = out.logits;
    const last = (await lastRows(logits, logits.dims[logits.dims.length - 1], 1))[0];
    for (const [k, t] of Object.entries(out)) if (k !== 'logits' && !this.caches.some((c) => c.present === k) && isDevice(t)) t.dispose();
    await this.copyIntoSlot(slot);
    r.slot = slot;
    r.len = n;
    this.active[slot] = r;
    this.decide(r, slot, last);
  }

  /**
   * Chooses a request's token and frees its slot when it ends; an error of its own choice (its
   * logitsProcessor's) ends that request alone, with the error.
   */
  private decide(r: Request, slot: number, logits: Float32Array): void {
    let ended: boolean;
    try {
      ended = this.choose(r, logits);
    } catch (e) {
      this.active[slot] = undefined;
      this.counts.completed++;
      r.finish(e);
      return;
    }
    if (ended) this.release(slot, false);
  }

  /** The prefill buffer's rows (all kvCapacity of them: past the prompt they are masked) into slot `slot`. */
  private async copyIntoSlot(slot: number): Promise<void> {
    for (let i = 0; i < this.caches.length; i++) {
      const [H, D] = this.caches[i].dims;
      const C = this.capacity;
      const dst = this.batchPast[i];
      const src = this.prefillPast[i];
      const own = deviceBufferOf(dst);
      if (own?.value) {
        const from = deviceBufferOf(src)?.value;
        const host = from ? undefined : (src.data as Float32Array | Uint16Array);
        const value = own.value;
        const update = from
          ? from.array
          : upload({
              dtype: this.caches[i].type === 'float16' ? OnnxDataType.FLOAT16 : OnnxDataType.FLOAT,
              dims: [1, H, C, D],
              data: host as Float32Array,
            });
        const next = mx.sliceUpdate(value.array, update, [slot, 0, 0, 0], [slot + 1, H, C, D], [1, 1, 1, 1]);
        if (!from) update.dispose();
        // The old handle goes first, so MLX may write the slot into the buffer in place.
        value.array.dispose();
        own.value = { ...value, array: next };
        mx.evaluate(next);
        continue;
      }
      const d = dst.data as Float32Array | Uint16Array;
      const s = (isDevice(src) ? await src.getData() : src.data) as Float32Array | Uint16Array;
      d.set(s.subarray(0, H * C * D), slot * H * C * D);
    }
  }

  private async step(running: number): Promise<void> {
    const B = this.slots;
    let longest = 1;
    for (const r of this.active) if (r) longest = Math.max(longest, r.len + 1);
    const width = maskLength(longest, this.capacity);
    const ids: number[] = [];
    const positions: number[] = [];
    const mask = new Array<number>(B * width).fill(0);
    for (let s = 0; s < B; s++) {
      const r = this.active[s];
      ids.push(r ? r.pending : this.pad);
      positions.push(r ? r.len : 0);
      mask.fill(1, s * width, s * width + (r ? r.len + 1 : 1));
    }
    const feeds = this.feeds(ids, positions, mask, B, width, true);
    let out: Record<string, Tensor>;
    ({ out, past: this.batchPast } = await runWithCaches(
      this.session,
      feeds,
      this.caches,
      this.batchPast,
      this.capacity,
      this.batchFirst,
      'BatchGenerator',
    ));
    this.batchFirst = false;
    this.counts.steps++;
    this.counts.maxActive = Math.max(this.counts.maxActive, running);
    const logits = out.logits;
    const rows = await lastRows(logits, logits.dims[logits.dims.length - 1], B);
    for (let s = 0; s < B; s++) {
      const r = this.active[s];
      if (!r) continue;
      r.len++;
      if (r.cancelled) continue;
      this.decide(r, s, rows[s]);
    }
  }
}

/**
 * A continuous-batching generator over a decoder session (GroupQueryAttention's shared-buffer cache,
 * as onnxruntime-genai exports Llama-shaped models): see BatchGenerator.
 *
 * ```ts
 * const server = createGenerator(session, { maxBatch: 8, kvCapacity: 2048 });
 * for await (const token of server.submit(promptIds, { maxNewTokens: 128 })) send(token);
 * ```
 */
export function createGenerator(session: Session, options: BatchGeneratorOptions): BatchGenerator {
  return new BatchGenerator(session, options);
}
