// Speculative decoding with a draft model: a smaller decoder with the target's vocabulary proposes
// `tokens` tokens, one run each, and the target verifies all of them in one run. Both keep their KV
// cache in shared-buffer mode (kvCapacity: one buffer per layer, the present bound into the past),
// so a rejected token costs no copy: each cache's valid length is the attention mask's sum, and
// the next run writes over the rejected positions.
//
// Greedy: the target keeps the draft's tokens while its own argmax agrees, then adds its own token;
// the output is plain greedy decoding's. Sampling: the standard acceptance rule (Leviathan et al.,
// Chen et al.): draft token x, drawn from the draft's distribution q, is kept with probability
// min(1, p(x) / q(x)) where p is the target's; on a rejection the token is drawn from
// normalize(max(0, p - q)), and when every draft token is kept one more is drawn from the target's
// next distribution. Each token is thus distributed as the target's sampling would draw it (p and q
// are the distributions after temperature, top-k and top-p, the ones pickToken draws from).
import { Tensor as CommonTensor, type InferenceSession, type Tensor } from 'onnxruntime-common';
import { deviceBufferOf } from './backend/device-buffer.js';
import { InvalidFeedError, OrtMlxError, ResourceLimitError, isAllocationFailure } from './errors.js';
import { distribution } from './sampler.js';
import {
  type GenerateOptions,
  type SamplingOptions,
  cacheNames,
  checkDecoderSession,
  checkOptions,
  greedyRows,
  isCount,
  isDevice,
  lastRows,
  maskLength,
  pickToken,
  runWithCaches,
  seeded,
  show,
} from './generate.js';

type Session = Pick<InferenceSession, 'inputNames' | 'outputNames' | 'inputMetadata' | 'run'>;

export interface DraftOptions {
  /** The draft decoder: same vocabulary as the target, same input and output names (generate()'s). */
  session: Session;
  /** How many tokens the draft proposes before each verification (an integer ≥ 1). */
  tokens: number;
  /** The draft's cache capacity (default: the target's kvCapacity). */
  kvCapacity?: number;
  /** Called after each verification with how many draft tokens were proposed and how many kept. */
  onVerify?: (proposed: number, accepted: number) => void;
}

/**
 * generate()'s options but the ones that edit logits (penalties, minNewTokens, a logitsProcessor),
 * promptLookup and kvWindow (both caches are shared buffers).
 */
export interface SpeculativeOptions
  extends Omit<
    GenerateOptions,
    | 'promptLookup'
    | 'repetitionPenalty'
    | 'presencePenalty'
    | 'frequencyPenalty'
    | 'logitsProcessor'
    | 'minNewTokens'
    | 'kvWindow'
    | 'sampler'
  > {
  /** The draft model that proposes tokens; kvCapacity (the target's) is required. */
  draft: DraftOptions;
}

const DRAFT_KEYS = ['session', 'tokens', 'kvCapacity', 'onVerify'];

function checkSpeculative(options: SpeculativeOptions & GenerateOptions): void {
  const who = 'generateSpeculative';
  if (typeof options !== 'object' || options === null) throw new TypeError(`${who}: options must be an object, got ${show(options)}`);
  const { draft, ...rest } = options;
  if ('promptLookup' in rest) throw new TypeError(`${who}: promptLookup and a draft model are two ways to propose tokens; give one`);
  checkOptions(rest, who);
  if (typeof draft !== 'object' || draft === null || Array.isArray(draft))
    throw new TypeError(`${who}: draft must be an object { session, tokens, kvCapacity, onVerify }, got ${show(draft)}`);
  for (const k of Object.keys(draft))
    if (!DRAFT_KEYS.includes(k)) throw new TypeError(`${who}: draft has an unknown option '${k}' (known: ${DRAFT_KEYS.join(', ')})`);
  const s = draft.session as unknown as { run?: unknown; inputNames?: unknown } | null;
  if (typeof s !== 'object' || s === null || typeof s.run !== 'function' || !Array.isArray(s.inputNames))
    throw new TypeError(`${who}: draft.session must be an InferenceSession, got ${show(draft.session)}`);
  if (!isCount(draft.tokens, 1)) throw new RangeError(`${who}: draft.tokens must be an integer ≥ 1, got ${show(draft.tokens)}`);
  if (draft.kvCapacity !== undefined && !isCount(draft.kvCapacity, 1))
    throw new RangeError(`${who}: draft.kvCapacity must be a positive integer, got ${show(draft.kvCapacity)}`);
  if (draft.onVerify !== undefined && typeof draft.onVerify !== 'function')
    throw new TypeError(`${who}: draft.onVerify must be a function, got ${show(draft.onVerify)}`);
  if (options.kvCapacity === undefined)
    throw new TypeError(`${who}: a draft model needs kvCapacity (the in-place caches, whose rejected positions the next run writes over)`);
  if (
    options.repetitionPenalty !== undefined ||
    options.presencePenalty ||
    options.frequencyPenalty ||
    options.logitsProcessor ||
    options.minNewTokens
  )
    throw new TypeError(`${who}: a draft model does not take penalties, minNewTokens or a logitsProcessor`);
}

/**
 * One decoder and its in-place cache: `cached` positions of each layer's buffer are valid; a run
 * feeds tokens at the next positions, and a rollback is only a smaller `cached`.
 */
class CachedDecoder {
  readonly caches;
  past: Tensor[];
  cached = 0;
  private runs = 0;
  private maskData: Int32Array | BigInt64Array | undefined;

  constructor(
    readonly session: Session,
    readonly capacity: number,
    private readonly T: typeof Tensor,
    readonly role: 'target' | 'draft',
  ) {
    this.caches = cacheNames(session);
    checkDecoderSession(session, this.caches, 'generateSpeculative', `the ${role} model`, " (the in-place cache's length)");
    try {
      this.past = this.caches.map((c) => {
        const n = c.dims[0] * capacity * c.dims[1];
        const data = c.type === 'float16' ? new Uint16Array(n) : new Float32Array(n);
        return new T(c.type as 'float32', data as Float32Array, [1, c.dims[0], capacity, c.dims[1]]);
      });
    } catch (e) {
      if (!isAllocationFailure(e)) throw e;
      throw new ResourceLimitError(
        `generateSpeculative: the ${role}'s KV cache of kvCapacity ${capacity} cannot be allocated: ${e.message}`,
        {
          cause: e,
        },
      );
    }
  }

  private typeOf(name: string): Tensor.Type {
    const m = this.session.inputMetadata[this.session.inputNames.indexOf(name)];
    return m?.isTensor ? m.type : 'int64';
  }

  private ints(name: string, values: number[]): Tensor {
    const T = this.T;
    return this.typeOf(name) === 'int32'
      ? new T('int32', Int32Array.from(values), [1, values.length])
      : new T('int64', BigInt64Array.from(values.map(BigInt)), [1, values.length]);
  }

  private mask(total: number): Tensor {
    const len = maskLength(total, this.capacity);
    const int32 = this.typeOf('attention_mask') === 'int32';
    if (this.maskData?.length !== len) this.maskData = int32 ? new Int32Array(len) : new BigInt64Array(len);
    if (this.maskData instanceof Int32Array) this.maskData.fill(1, 0, total).fill(0, total);
    else this.maskData.fill(1n, 0, total).fill(0n, total);
    return new this.T(int32 ? 'int32' : ('int64' as 'int32'), this.maskData as Int32Array, [1, len]);
  }

  /** Feeds `tokens` after the valid positions; returns the logits of the last `rows` of them. */
  async run(tokens: number[], rows: number): Promise<Float32Array[]> {
    const logits = await this.forward(tokens, rows);
    return lastRows(logits, logits.dims[logits.dims.length - 1], rows);
  }

  /**
   * Feeds `tokens` after the valid positions; returns the greedy tokens of the last `rows` of them
   * (chosen on the device where the logits are there: greedyRows) and the vocabulary.
   */
  async greedy(tokens: number[], rows: number): Promise<{ ids: number[]; vocab: number }> {
    const logits = await this.forward(tokens, rows);
    const vocab = logits.dims[logits.dims.length - 1];
    return { ids: await greedyRows(logits, vocab, rows), vocab };
  }

  /** One run of `tokens`: its logits, which hold at least `rows` positions (checked). */
  private async forward(tokens: number[], rows: number): Promise<Tensor> {
    const { session, caches } = this;
    const total = this.cached + tokens.length;
    if (total > this.capacity)
      throw new RangeError(`generateSpeculative: ${total} positions do not fit the ${this.role}'s kvCapacity ${this.capacity}`);
    const feeds: Record<string, Tensor> = { input_ids: this.ints('input_ids', tokens), attention_mask: this.mask(total) };
    if (session.inputNames.includes('position_ids'))
      feeds.position_ids = this.ints(
        'position_ids',
        tokens.map((_, i) => this.cached + i),
      );
    if (session.inputNames.includes('use_cache_branch')) feeds.use_cache_branch = new this.T('bool', [this.cached > 0], [1]);
    const ran = await runWithCaches(
      session,
      feeds,
      caches,
      this.past,
      this.capacity,
      this.runs === 0,
      'generateSpeculative',
      `the ${this.role} model`,
    );
    this.runs++;
    this.past = ran.past;
    const out = ran.out;
    this.cached = total;
    const logits = out.logits;
    const positions = logits.dims.length >= 2 ? logits.dims[logits.dims.length - 2] : 1;
    if (positions < rows) {
      if (deviceBufferOf(logits) || isDevice(logits)) logits.dispose();
      throw new OrtMlxError(
        `generateSpeculative: the ${this.role} model's logits hold ${positions} positions for ${tokens.length} tokens fed; verification needs the last ${rows}`,
      );
    }
    return logits;
  }

  dispose(): void {
    for (const t of this.past) if (isDevice(t)) t.dispose();
  }
}

/**
 * The distribution pickToken draws from for these logits and settings (temperature, then top-k,
 * then top-p over the top-k set): a probability per token, zero outside the kept set.
 */
export function samplingDistribution(logits: ArrayLike<number>, sampling: SamplingOptions): Float64Array {
  return distribution(logits, sampling);
}

/** A draw from a distribution (weights that need not sum to 1); zero-weight tokens are never drawn. */
export function drawFrom(weights: ArrayLike<number>, random: () => number): number {
  let total = 0;
  for (let i = 0; i < weights.length; i++) total += weights[i];
  let r = random() * total;
  let last = 0;
  for (let i = 0; i < weights.length; i++) {
    if (weights[i] <= 0) continue;
    last = i;
    r -= weights[i];
    if (r < 0) return i;
  }
  return last;
}

/**
 * The speculative sampling rule over one verification: `drafts[i]` was drawn from `q[i]`, and
 * `p[i]` is the target's distribution at the same position (`p` has one more row, the position after
 * the last draft token). Returns the tokens kept: the accepted draft tokens, then one drawn from
 * the residual normalize(max(0, p - q)) at the first rejection, or from the last row of `p` when
 * every draft token was accepted.
 */
export function speculativeAccept(
  drafts: readonly number[],
  q: readonly ArrayLike<number>[],
  p: readonly ArrayLike<number>[],
  random: () => number,
): number[] {
  const kept: number[] = [];
  for (let i = 0; i < drafts.length; i++) {
    const x = drafts[i];
    const px = p[i][x];
    const qx = q[i][x];
    if (qx > 0 && random() < Math.min(1, px / qx)) {
      kept.push(x);
      continue;
    }
    const residual = new Float64Array(p[i].length);
    let sum = 0;
    for (let t = 0; t < residual.length; t++) sum += residual[t] = Math.max(0, p[i][t] - q[i][t]);
    kept.push(drawFrom(sum > 0 ? residual : p[i], random));
    return kept;
  }
  kept.push(drawFrom(p[drafts.length], random));
  return kept;
}

/**
 * generate() with a draft model (`draft: { session, tokens }`): the draft proposes `tokens` tokens,
 * the target verifies them in one run and keeps the longest prefix its own decoding agrees with
 * (greedy: the same tokens as generate(); sampling: the target's distribution, by the acceptance
 * rule above), then one token of its own. Needs kvCapacity (both caches in place; the draft's is
 * `draft.kvCapacity`, by default the same). Penalties, minNewTokens, a logitsProcessor and
 * promptLookup are refused. Breaking out of the loop (or an error) frees both caches.
 */
export async function* generateSpeculative(session: Session, options: SpeculativeOptions): AsyncGenerator<number, void, void> {
  checkSpeculative(options as SpeculativeOptions & GenerateOptions);
  const T = options.Tensor ?? (CommonTensor as unknown as typeof Tensor);
  const prompt = options.inputIds.map(Number);
  if (!prompt.length) throw new RangeError('generateSpeculative: inputIds is empty');
  const capacity = options.kvCapacity!;
  const draftCapacity = options.draft.kvCapacity ?? capacity;
  if (prompt.length + options.maxNewTokens > capacity)
    throw new RangeError(
      `generateSpeculative: ${prompt.length} prompt tokens + ${options.maxNewTokens} new ones do not fit kvCapacity ${capacity}`,
    );
  const target = new CachedDecoder(session, capacity, T, 'target');
  let draft: CachedDecoder | undefined;
  try {
    draft = new CachedDecoder(options.draft.session, draftCapacity, T, 'draft');
  } catch (e) {
    target.dispose();
    throw e;
  }
  const greedy = options.sampling === undefined || options.sampling === 'greedy';
  const sampling = greedy ? undefined : (options.sampling as SamplingOptions);
  const random = sampling ? seeded(sampling.seed ?? 0) : undefined;
  const k = options.draft.tokens;
  const stops = new Set(options.stopTokens ?? []);
  const stopSequences = (options.stopSequences ?? []).map((q) => [...q]);
  const seq = [...prompt];
  const generated: number[] = [];
  const ends = (t: number): boolean =>
    stops.has(t) ||
    stopSequences.some((q) => q.length <= generated.length && q.every((x, j) => generated[generated.length - q.length + j] === x));
  // The vocabularies from the models' logits shapes where both declare one; else from the first runs.
  const declared = [session, options.draft.session].map((m) => {
    const meta = (m as Partial<Pick<InferenceSession, 'outputMetadata'>>).outputMetadata?.[m.outputNames.indexOf('logits')];
    const last = meta?.isTensor ? meta.shape.at(-1) : undefined;
    return typeof last === 'number' ? last : undefined;
  });
  let vocab: number | undefined = declared[0];
  const sameVocab = (n: number, who: 'target' | 'draft') => {
    vocab ??= n;
    if (n !== vocab)
      throw new InvalidFeedError(
        `generateSpeculative: the draft model's vocabulary (${who === 'draft' ? n : vocab} logits) differs from the target's (${who === 'draft' ? vocab : n}); a draft must share the target's tokens`,
      );
  };
  try {
    if (declared[1] !== undefined) sameVocab(declared[1], 'draft');
    for (let step = 0; generated.length < options.maxNewTokens; step++) {
      const L = seq.length;
      // The target holds every token but the last fed ones; verification writes L + n positions
      // of the target (n draft tokens) and L + n - 1 of the draft, and yields up to n + 1 tokens.
      const n = Math.max(0, Math.min(k, options.maxNewTokens - generated.length - 1, capacity - L, draftCapacity - L + 1));
      const proposals: number[] = [];
      const q: Float64Array[] = [];
      for (let i = 0; i < n; i++) {
        const feed = i === 0 ? seq.slice(draft.cached) : [proposals[i - 1]];
        if (sampling) {
          const [row] = await draft.run(feed, 1);
          sameVocab(row.length, 'draft');
          const dist = samplingDistribution(row, sampling);
          q.push(dist);
          proposals.push(drawFrom(dist, random!));
        } else {
          const { ids, vocab: v } = await draft.greedy(feed, 1);
          sameVocab(v, 'draft');
          proposals.push(ids[0]);
        }
      }
      const fed = [...seq.slice(target.cached), ...proposals];
      let kept: number[];
      if (sampling) {
        const rows = await target.run(fed, n + 1);
        sameVocab(rows[0].length, 'target');
        kept = n
          ? speculativeAccept(
              proposals,
              q,
              rows.map((r) => samplingDistribution(r, sampling)),
              random!,
            )
          : [pickToken(rows[0], sampling, random)];
      } else {
        const { ids, vocab: v } = await target.greedy(fed, n + 1);
        sameVocab(v, 'target');
        kept = [];
        for (let i = 0; i <= n; i++) {
          kept.push(ids[i]);
          if (i === n || ids[i] !== proposals[i]) break;
        }
      }
      if (n) options.draft.onVerify?.(n, kept.length - 1);
      options.onStep?.(step, fed.length);
      // Rollback: the target keeps the fed tokens before the first rejected one (its last kept
      // token is new, fed next run); the draft keeps what it was fed of the same prefix.
      target.cached = L + kept.length - 1;
      if (n) draft.cached = Math.min(draft.cached, L + kept.length - 1);
      for (const t of kept) {
        seq.push(t);
        generated.push(t);
        yield t;
        if (ends(t) || generated.length >= options.maxNewTokens) return;
      }
    }
  } finally {
    target.dispose();
    draft.dispose();
  }
}
