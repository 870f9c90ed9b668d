// Whisper's decoding rules for generateSeq2Seq, from the model's generation_config.json as
// transformers and transformers.js read it: the forced prompt (<|startoftranscript|>, language,
// task, <|notimestamps|> or not), the suppressed tokens, the timestamp rules of
// WhisperTimeStampLogitsProcessor, and the timestamped token stream cut into chunks
// { tokens, text, timestamp: [start, end] } in seconds, as the automatic-speech-recognition
// pipeline returns them with return_timestamps.

/** The fields of a Whisper model's generation_config.json these helpers read (others are ignored). */
export interface WhisperGenerationConfig {
  /** <|startoftranscript|>. */
  decoder_start_token_id: number;
  /** <|endoftext|>: generation stops there; the tokens below it are text, those from it on special. */
  eos_token_id: number | readonly number[];
  /** <|notimestamps|>; the timestamp tokens follow it (<|0.00|> is no_timestamps_token_id + 1). */
  no_timestamps_token_id?: number;
  /** Multilingual models take a language and a task token after <|startoftranscript|>. */
  is_multilingual?: boolean;
  /** '<|en|>' -> its token, for multilingual models. */
  lang_to_id?: Readonly<Record<string, number>>;
  /** 'transcribe' / 'translate' -> its token, for multilingual models. */
  task_to_id?: Readonly<Record<string, number>>;
  /** The first timestamp may be at most this many steps of time precision (50: 1.00 s). */
  max_initial_timestamp_index?: number | null;
  /** Never chosen. */
  suppress_tokens?: readonly number[] | null;
  /** Not chosen as the first generated token. */
  begin_suppress_tokens?: readonly number[] | null;
  [key: string]: unknown;
}

export interface WhisperOptions {
  /** The model's generation_config.json, parsed. */
  generationConfig: WhisperGenerationConfig;
  /** A multilingual model's language: its code ('en', 'de') or token ('<|en|>'). Default 'en'. */
  language?: string;
  /** A multilingual model's task: 'transcribe' (default) or 'translate'. */
  task?: string;
  /**
   * Timestamp tokens in the output: the prompt has no <|notimestamps|> and the timestamp rules
   * apply (whisperChunks turns the tokens into timed chunks). Default false.
   */
  returnTimestamps?: boolean;
}

/** A stretch of text between two timestamps, as the ASR pipeline returns it with return_timestamps. */
export interface WhisperChunk {
  /** The text tokens (special tokens dropped). */
  tokens: number[];
  /** decode(tokens), where whisperChunks was given a decode function. */
  text?: string;
  /**
   * Start and end in seconds (rounded to 0.01). The end is null for text the output did not close
   * with a timestamp (generation cut short); the start is null where no timestamp came before.
   */
  timestamp: [number | null, number | null];
}

type Config = WhisperGenerationConfig;

const show = (v: unknown): string => (typeof v === 'string' ? `'${v}'` : Array.isArray(v) ? `[${v.map(show).join(', ')}]` : String(v));
const isId = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

function eosOf(config: Config): number {
  const e = config.eos_token_id;
  return Array.isArray(e) ? e[0] : (e as number);
}

/** Throws a TypeError/RangeError naming what the options or the generation config lack. */
export function checkWhisperOptions(whisper: WhisperOptions, who = 'whisper'): void {
  if (typeof whisper !== 'object' || whisper === null) throw new TypeError(`${who} must be an object, got ${show(whisper)}`);
  for (const k of Object.keys(whisper))
    if (!['generationConfig', 'language', 'task', 'returnTimestamps'].includes(k))
      throw new TypeError(`${who}: unknown option '${k}' (known: generationConfig, language, task, returnTimestamps)`);
  const c = whisper.generationConfig as unknown as Record<string, unknown>;
  if (typeof c !== 'object' || c === null || Array.isArray(c))
    throw new TypeError(`${who}.generationConfig must be the model's generation_config.json (an object), got ${show(c)}`);
  if (!isId(c.decoder_start_token_id))
    throw new RangeError(`${who}.generationConfig.decoder_start_token_id must be a token id, got ${show(c.decoder_start_token_id)}`);
  const eos = c.eos_token_id;
  if (!(isId(eos) || (Array.isArray(eos) && eos.length > 0 && eos.every(isId))))
    throw new RangeError(`${who}.generationConfig.eos_token_id must be a token id (or a list of them), got ${show(eos)}`);
  for (const k of ['suppress_tokens', 'begin_suppress_tokens'] as const) {
    const v = c[k];
    if (v !== undefined && v !== null && !(Array.isArray(v) && v.every(isId)))
      throw new RangeError(`${who}.generationConfig.${k} must be a list of token ids, got ${show(v)}`);
  }
  const mi = c.max_initial_timestamp_index;
  if (mi !== undefined && mi !== null && !isId(mi))
    throw new RangeError(`${who}.generationConfig.max_initial_timestamp_index must be an integer ≥ 0, got ${show(mi)}`);
  const nts = c.no_timestamps_token_id;
  if (nts !== undefined && nts !== null && !isId(nts))
    throw new RangeError(`${who}.generationConfig.no_timestamps_token_id must be a token id, got ${show(nts)}`);
  if (whisper.returnTimestamps !== undefined && typeof whisper.returnTimestamps !== 'boolean')
    throw new TypeError(`${who}.returnTimestamps must be a boolean, got ${show(whisper.returnTimestamps)}`);
  if (whisper.returnTimestamps && !isId(nts))
    throw new RangeError(
      `${who}: returnTimestamps needs generationConfig.no_timestamps_token_id (the timestamp tokens follow it), which this config lacks`,
    );
  for (const k of ['language', 'task'] as const)
    if (whisper[k] !== undefined && typeof whisper[k] !== 'string')
      throw new TypeError(`${who}.${k} must be a string, got ${show(whisper[k])}`);
  whisperPrompt(whisper, who);
}

/**
 * The decoder's forced prompt as transformers.js's Whisper generate builds it from the generation
 * config: <|startoftranscript|>, then for a multilingual model the language (default English) and
 * the task (default transcribe), then <|notimestamps|> unless timestamps are asked for.
 */
export function whisperPrompt(whisper: WhisperOptions, who = 'whisper'): number[] {
  const c = whisper.generationConfig;
  const prompt = [c.decoder_start_token_id];
  if (c.is_multilingual) {
    const table = c.lang_to_id ?? {};
    const wanted = whisper.language ?? 'en';
    const key = /^<\|.*\|>$/.test(wanted) ? wanted : `<|${wanted.toLowerCase()}|>`;
    const id = table[key];
    if (!isId(id)) {
      const known = Object.keys(table);
      throw new RangeError(
        `${who}: language ${show(wanted)} is not in generationConfig.lang_to_id (${known.length ? `give one of its codes: ${known.slice(0, 12).join(', ')}${known.length > 12 ? ', ...' : ''}` : 'the config has none'})`,
      );
    }
    prompt.push(id);
    const task = whisper.task ?? 'transcribe';
    const taskId = c.task_to_id?.[task];
    if (!isId(taskId))
      throw new RangeError(
        `${who}: task ${show(task)} is not in generationConfig.task_to_id (${Object.keys(c.task_to_id ?? {}).join(', ') || 'the config has none'})`,
      );
    prompt.push(taskId);
  } else if (whisper.language !== undefined || whisper.task !== undefined)
    // transformers.js's message for the same case.
    throw new TypeError(
      `${who}: Cannot specify \`task\` or \`language\` for an English-only model. If the model is intended to be multilingual, set is_multilingual in its generation config.`,
    );
  if (!whisper.returnTimestamps && isId(c.no_timestamps_token_id)) prompt.push(c.no_timestamps_token_id);
  return prompt;
}

/**
 * The generation config's logits rules for a decoder started from `prompt`, applied in place to a
 * step's logits given the sequence so far (prompt and generated), in transformers' order:
 * suppress_tokens, begin_suppress_tokens (the first generated token only) and, with
 * returnTimestamps, WhisperTimeStampLogitsProcessor's rules (openai/whisper's):
 * - <|notimestamps|> is never chosen;
 * - the first generated token is a timestamp, at most max_initial_timestamp_index steps in;
 * - timestamps come in pairs: after a lone timestamp the next token is a timestamp or a special
 *   token (from eos_token_id on), after two in a row it is not a timestamp;
 * - timestamps do not decrease: below the last one is masked, and the last one too unless it
 *   opened a pair (an end may equal the next start, not repeat a start);
 * - when the timestamps' summed probability exceeds every text token's, a timestamp is chosen.
 */
export function whisperLogitsProcessor(
  whisper: WhisperOptions,
  prompt: readonly number[],
): (logits: Float32Array, sequence: readonly number[]) => void {
  const c = whisper.generationConfig;
  const suppress = c.suppress_tokens ?? [];
  const beginSuppress = c.begin_suppress_tokens ?? [];
  const begin = prompt.length;
  const timestamps = whisper.returnTimestamps === true;
  const eos = eosOf(c);
  const noTimestamps = c.no_timestamps_token_id ?? -1;
  const first = noTimestamps + 1;
  const maxInitial = c.max_initial_timestamp_index ?? null;
  const NEG = Number.NEGATIVE_INFINITY;
  return (logits, sequence) => {
    const n = logits.length;
    for (const t of suppress) if (t < n) logits[t] = NEG;
    if (sequence.length === begin) for (const t of beginSuppress) if (t < n) logits[t] = NEG;
    if (!timestamps) return;
    if (first >= n)
      throw new RangeError(
        `whisper: returnTimestamps needs timestamp tokens from no_timestamps_token_id + 1 = ${first} on, but the decoder's logits have ${n} entries (a model without timestamp tokens)`,
      );
    logits[noTimestamps] = NEG;
    const generated = sequence.slice(begin);
    const len = generated.length;
    const lastWas = len >= 1 && generated[len - 1] >= first;
    const penultimateWas = len < 2 || generated[len - 2] >= first;
    if (lastWas) {
      if (penultimateWas) logits.fill(NEG, first);
      else logits.fill(NEG, 0, Math.min(eos, n));
    }
    let lastTimestamp = -1;
    for (const t of generated) if (t >= first) lastTimestamp = t;
    if (lastTimestamp >= 0) logits.fill(NEG, first, Math.min(lastWas && !penultimateWas ? lastTimestamp : lastTimestamp + 1, n));
    if (sequence.length === begin) {
      logits.fill(NEG, 0, first);
      if (maxInitial !== null) logits.fill(NEG, Math.min(first + maxInitial + 1, n));
    }
    // log-softmax: the timestamps' log-sum-exp against the best text token's log-probability (the
    // normalizer cancels: compare the unnormalized values).
    let max = NEG;
    for (let i = 0; i < n; i++) if (logits[i] > max) max = logits[i];
    if (max === NEG) return;
    let sum = 0;
    for (let i = first; i < n; i++) sum += Math.exp(logits[i] - max);
    const timestampScore = Math.log(sum) + max;
    let bestText = NEG;
    for (let i = 0; i < first; i++) if (logits[i] > bestText) bestText = logits[i];
    if (timestampScore > bestText) logits.fill(NEG, 0, first);
  };
}

/**
 * Cuts Whisper's output tokens (generated with returnTimestamps; the prompt may be included) into
 * chunks between timestamps, as transformers.js's ASR pipeline does for one 30-second window:
 * a timestamp opens a chunk, the next one different from it closes it, the text tokens between
 * are its tokens (special tokens, from eos_token_id up to the first timestamp, are dropped); a
 * timestamp is (token - (no_timestamps_token_id + 1)) * timePrecision seconds (default 0.02, as
 * chunk_length 30 / max_source_positions 1500), rounded to 0.01. Text after the last closing
 * timestamp (output cut short) is a last chunk whose end is null: transformers.js's pipeline
 * throws there.
 */
export function whisperChunks(
  tokens: readonly number[],
  generationConfig: WhisperGenerationConfig,
  options: { timePrecision?: number; decode?: (tokens: number[]) => string } = {},
): WhisperChunk[] {
  const nts = generationConfig.no_timestamps_token_id;
  if (!isId(nts))
    throw new RangeError('whisperChunks: generationConfig.no_timestamps_token_id is missing (the timestamp tokens follow it)');
  const precision = options.timePrecision ?? 0.02;
  if (!(typeof precision === 'number' && Number.isFinite(precision) && precision > 0))
    throw new RangeError(`whisperChunks: timePrecision must be a number of seconds > 0, got ${show(precision)}`);
  const first = nts + 1;
  const eos = eosOf(generationConfig);
  const round = (t: number) => Math.round(t * 100) / 100;
  const chunks: WhisperChunk[] = [];
  let start: number | null = null;
  let text: number[] = [];
  const push = (end: number | null) => {
    const chunk: WhisperChunk = { tokens: text, timestamp: [start, end] };
    if (options.decode) chunk.text = options.decode(text);
    chunks.push(chunk);
    start = null;
    text = [];
  };
  for (const t of tokens) {
    if (t >= first) {
      const time = round((t - first) * precision);
      if (start === null) start = time;
      else if (time !== start) push(time); // an end equal to its start is taken as the start again
    } else if (t < eos) text.push(t);
  }
  if (text.length) push(null);
  return chunks;
}
