// The token choice of generate() on the device: one position's logits stay an MLX array, the
// token is chosen there with @mlx/core ops, and only its id (4 bytes) is downloaded.
//
// The distribution is the host sampler's (src/sampler.ts): softmax(logits / temperature) over the
// top-k tokens (argpartition: no sort of the vocabulary), then the smallest prefix of those, most
// likely first, whose probability reaches p (a sort of the k kept only; when top-p comes alone, of
// the 2048 best, and of the whole row, on the device, only where those hold less than p),
// renormalized. The draw is MLX's categorical (Gumbel-max) with a
// key derived from the seed and the step: one seed gives one sequence of tokens, but not the host
// sampler's sequence (another generator). The probabilities and the nucleus's running sum are
// float32 (the host's are float64): a nucleus boundary within float32 rounding of p may differ, and
// tokens of equal logits at the top-k boundary are kept in the order MLX's partition leaves them.
//
// Unusual logits as the host path treats them: greedy never chooses a NaN (ties to the lowest id);
// sampling refuses a NaN logit and a row of -Infinity (an OrtMlxError), and +Infinity tokens share
// all the mass equally. The checks are made on the device and come back in the same 4 bytes.
import * as mx from '@mlx/core';
import { OrtMlxError } from './errors.js';
import { countTransfers, download } from './runtime/convert.js';
import type { SamplerSettings } from './sampler.js';

/** The codes that come back instead of a token id. */
const NAN = -1;
const ALL_MASKED = -2;
const SHORT = -3;
/** Top-p alone looks among this many best tokens first. */
const CANDIDATES = 2048;

/** A 64-bit key seed of (seed, step): splitmix64's finalizer over both, so nearby seeds and steps give unrelated keys. */
export function stepKeySeed(seed: number, step: number): bigint {
  const M = (1n << 64n) - 1n;
  let z = (BigInt.asUintN(64, BigInt(seed)) * 0x9e3779b97f4a7c15n + BigInt(step) + 0x632be59bd9b4e019n) & M;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & M;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & M;
  return z ^ (z >> 31n);
}

/**
 * The token chosen from the last row of `logits` (an MLX array whose last axis is the vocabulary;
 * float32, float16 or bfloat16): the argmax (`sampling` undefined: greedy) or a draw from the
 * distribution of `sampling` with a key of (`seed`, `step`). Downloads the token id alone; `logits`
 * is not disposed.
 */
export function deviceToken(logits: mx.Array, sampling: SamplerSettings | undefined, seed = 0, step = 0): number {
  const shape = logits.shape;
  const V = shape[shape.length - 1] ?? 0;
  if (!V) throw new OrtMlxError('generate: the logits are empty: no token to choose');
  // Top-p alone: first over the CANDIDATES best tokens (a partition, then a sort of those); only
  // when their mass falls short of p (flat logits) is the whole row sorted, in a second pass.
  const p = sampling?.topP ?? 1;
  const k = sampling?.topK && sampling.topK > 0 && sampling.topK < V ? sampling.topK : 0;
  const narrow = p < 1 && !k && V > CANDIDATES;
  if (!sampling) {
    const one = greedyOneCall(logits, V);
    if (one !== undefined) return one;
  }
  let id = read(choose(logits, V, sampling, seed, step, narrow));
  if (id === SHORT) id = read(choose(logits, V, sampling, seed, step, false));
  if (id === NAN) throw new OrtMlxError(`generate: a logit is NaN (of ${V}): sampling needs a probability for every token`);
  if (id === ALL_MASKED) throw new OrtMlxError(`generate: every one of the ${V} logits is -Infinity: no token can be sampled`);
  return id;
}

/** The greedy programs kept per stream, the least recently used dropped first (a decode loop needs one). */
const MAX_GREEDY_PROGRAMS = 8;
const greedyPrograms = new WeakMap<mx.Stream, Map<string, { program: mx.HostProgram; f: mx.CompiledFunction }>>();

/**
 * The greedy token of a one-row `logits` in one native call, on a CPU stream (greedyIds).
 * Undefined where this does not apply (more than one row, another device).
 */
function greedyOneCall(logits: mx.Array, V: number): number | undefined {
  if (logits.size !== V) return undefined;
  return greedyIds(logits, V, 1)?.[0];
}

/**
 * The greedy tokens of the last `rows` positions of `logits` (its last axis the vocabulary), in
 * one native call on a CPU stream (greedyIds), downloading `rows` ids: a speculative
 * verification's rows or a draft's next token without their logits crossing to the host.
 * Undefined on another device.
 */
export function deviceGreedyRows(logits: mx.Array, rows: number): number[] | undefined {
  const V = logits.shape.at(-1) ?? 0;
  if (!V || rows < 1 || logits.size < rows * V) return undefined;
  const ids = greedyIds(logits, V, rows);
  if (!ids) return undefined;
  return Array.from(ids);
}

/**
 * The greedy ids of the last `rows` rows of `logits` on a CPU stream, in one native call:
 * float32 host data read where it lies (mx.greedyRows: no graph; a program run cost a small
 * decoder's step ~40 us of JavaScript and native work around a 2 us scan); other dtypes and views
 * through ext.greedyArgmax captured once per shape, dtype and row count (mx.captureGraph) and run
 * as a HostProgram that reads the logits where they are (ops made, evaluated, read and freed from
 * JS one by one cost a small model's CPU decode step about what one of its layers costs; the
 * argmax composed from MLX's ops was five primitives, ~30 us at 8192 tokens). A GPU keeps
 * choose() (its evaluation is asynchronous; nothing was measured there): undefined there.
 */
function greedyIds(logits: mx.Array, V: number, rows: number): Int32Array | undefined {
  const stream = mx.defaultStream();
  if (stream.device.type !== 'cpu') return undefined;
  const direct = mx.greedyRows(logits, rows);
  if (direct) {
    countTransfers(0, 0, 1, 4 * rows);
    return direct;
  }
  let programs = greedyPrograms.get(stream);
  if (!programs) greedyPrograms.set(stream, (programs = new Map()));
  const one = rows === 1 && logits.size === V;
  const key = `${logits.dtype}[${logits.shape.join(',')}]${one ? '' : `/${rows}`}`;
  let entry = programs.get(key);
  if (entry) programs.delete(key);
  else {
    if (programs.size >= MAX_GREEDY_PROGRAMS) {
      const [oldest, dropped] = programs.entries().next().value!;
      programs.delete(oldest);
      // The native program refers to f's closure without owning it: with f disposed it refuses to
      // run, and it is freed with the HostProgram.
      dropped.f.dispose();
    }
    const P = logits.size / V;
    const f = one
      ? mx.captureGraph((x) => mx.ext.greedyArgmax(x))
      : mx.captureGraph((x) => {
          const flat = mx.reshape(x, [P, V]);
          return mx.stackAxis(
            Array.from({ length: rows }, (_, i) => mx.ext.greedyArgmax(mx.slice(flat, [P - rows + i, 0], [P - rows + i + 1, V], [1, 1]))),
            0,
          );
        });
    entry = {
      f,
      program: new mx.HostProgram(
        f,
        [{ dtype: logits.dtype, shape: logits.shape, array: true }],
        [{ dtype: 'int32', shape: one ? [] : [rows] }],
        stream,
      ),
    };
  }
  programs.set(key, entry);
  const [ids] = entry.program.run([logits]) as [Int32Array];
  countTransfers(0, 0, 1, 4 * rows);
  return ids;
}

/** The int32 scalar downloaded (4 bytes) and freed. */
function read(a: mx.Array): number {
  try {
    return Number(download(a).data[0]);
  } finally {
    a.dispose();
  }
}

/**
 * The token (an int32 scalar, or a code: NAN, ALL_MASKED, or SHORT when `narrow` and the
 * CANDIDATES best tokens hold less than p of the mass).
 */
function choose(logits: mx.Array, V: number, sampling: SamplerSettings | undefined, seed: number, step: number, narrow: boolean): mx.Array {
  const rows = logits.size / V;
  return mx.scope(() => {
    const flat = mx.reshape(logits, [rows, V]);
    const last = rows === 1 ? flat : mx.slice(flat, [rows - 1, 0], [rows, V], [1, 1]);
    // Greedy: NaN never wins (it counts as -Infinity) and the first of equal maxima is taken, in
    // one pass on a CPU stream (MLX's ops elsewhere).
    if (!sampling) return mx.ext.greedyArgmax(last);
    const row = mx.astype(mx.reshape(last, [V]), 'float32');
    const nanMask = mx.isnan(row);
    const ninf = mx.array(Number.NEGATIVE_INFINITY);
    const anyNan = mx.any(nanMask);
    const allMasked = mx.equal(mx.max(row), ninf);
    // +Infinity present: the infinite tokens alone, equally likely (the softmax's limit).
    const posInf = mx.isposinf(row);
    const anyPosInf = mx.any(posInf);
    const invT = 1 / (sampling.temperature ?? 1);
    const scaled = mx.where(anyPosInf, mx.where(posInf, mx.array(0), ninf), mx.multiply(row, mx.array(invT)));
    const key = mx.random.key(stepKeySeed(seed, step));
    const k = sampling.topK && sampling.topK > 0 && sampling.topK < V ? sampling.topK : 0;
    const p = sampling.topP ?? 1;
    let token: mx.Array;
    let short: mx.Array | undefined;
    if (!k && p >= 1) {
      token = mx.random.categorical(scaled, 0, key);
    } else {
      // The candidates: the k (or CANDIDATES) best, unordered, or the whole row; sorted best
      // first when top-p cuts them.
      const n = k || (narrow ? CANDIDATES : 0);
      let ids: mx.Array = n ? mx.slice(mx.argpartition(mx.negative(scaled), n - 1), [0], [n], [1]) : mx.arange(0, V, 1, 'int32');
      let vals = n ? mx.take(scaled, ids, 0) : scaled;
      if (p < 1) {
        const order = mx.argsort(mx.negative(vals), 0);
        ids = mx.take(ids, order, 0);
        vals = mx.take(vals, order, 0);
        // Each candidate's probability: over the top-k set, or over the whole row (top-p alone).
        const probs = k || !narrow ? mx.softmax(vals, 0, { precise: true }) : mx.exp(mx.subtract(vals, mx.logsumexp(scaled)));
        // Keep a token while the mass before it is below p: the smallest prefix reaching p.
        const before = mx.cumsum(probs, 0, { inclusive: false });
        vals = mx.where(mx.less(before, mx.array(p)), vals, ninf);
        if (narrow) short = mx.less(mx.sum(probs), mx.array(p));
      }
      token = mx.take(ids, mx.random.categorical(vals, 0, key), 0);
    }
    let out = mx.astype(token, 'int32');
    if (short) out = mx.where(short, mx.array(SHORT, 'int32'), out);
    return mx.where(anyNan, mx.array(NAN, 'int32'), mx.where(allMasked, mx.array(ALL_MASKED, 'int32'), out));
  });
}
