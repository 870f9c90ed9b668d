// The fuzz worker: a child process that runs cases through the public API, the 'mlx' provider
// first, then onnxruntime-node's CPU provider as the reference, and classifies each one. It tells
// its parent which case and which phase it is in before each step, so that a crash or a hang
// is attributed to the case (and to mlx or the reference) that caused it.
import { execFileSync, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { MlxError } from '@mlx/core';
import '../../src/index.js';
import { OrtMlxError } from '../../src/errors.js';
import type { HostTensor } from '../../src/onnx/index.js';
import { decodeModel, OnnxDataType as T } from '../../src/onnx/index.js';
import { generateCase, type FuzzCase, type Roots } from './generate.js';
import type { Special } from './hostile.js';
import { extreme, halfToNumber, tensorFromJson, type TensorJson } from './values.js';

const require = createRequire(import.meta.url);
const ort = require('onnxruntime-node') as typeof import('onnxruntime-node');
ort.env.logLevel = 'fatal';
type OrtTensor = import('onnxruntime-node').Tensor;
type Outputs = Record<string, OrtTensor>;

export type Outcome = 'error' | 'unclear-error' | 'matched' | 'mismatched' | 'unverified' | 'crashed' | 'hung' | 'skipped';

export interface CaseResult {
  key: string;
  id: string;
  source: string;
  label: string;
  mutation: string;
  outcome: Outcome;
  /** mlx's error or the difference, in a line. */
  detail: string;
  /** What the reference did: 'ok', 'error', 'unavailable' (no kernel), 'failed' (crashed or hung). */
  reference: 'ok' | 'error' | 'unavailable' | 'failed' | 'skipped';
  /** Whether a float feed or a mutated tensor holds NaN, an infinity or a value beyond 1e30 (results of such cases may differ by evaluation order). */
  nonFinite?: boolean;
}

export type Item = { key: string; seed: number; index: number } | { key: string; file: string };

export type ToParent =
  | { type: 'phase'; key: string; phase: 'generate' | 'mlx' | 'ort'; partial?: Omit<CaseResult, 'reference'> }
  | { type: 'result'; result: CaseResult }
  | { type: 'ready' }
  | { type: 'done' };

/** timeoutMs: the parent's limit per phase (the procedures keep their own limits below it). */
export type ToChild = { type: 'run'; items: Item[]; roots: Roots; maxTensorBytes: number; timeoutMs?: number };

/** A corpus file: the case, as written by the parent. */
export interface CaseFile {
  id: string;
  source: string;
  label: string;
  mutation: string;
  outcome?: string;
  detail?: string;
  runs: number;
  model: string;
  feeds: Record<string, TensorJson>;
  special?: Special;
}

export function readCaseFile(path: string): FuzzCase {
  const j = JSON.parse(readFileSync(path, 'utf8')) as CaseFile;
  return {
    id: j.id,
    source: j.source as FuzzCase['source'],
    label: j.label,
    mutation: j.mutation,
    runs: j.runs,
    model: new Uint8Array(Buffer.from(j.model, 'base64')),
    feeds: Object.fromEntries(Object.entries(j.feeds).map(([k, t]) => [k, tensorFromJson(t)])),
    ...(j.special && { special: j.special }),
  };
}

const ortTypes: Record<number, string> = {
  [T.FLOAT]: 'float32',
  [T.UINT8]: 'uint8',
  [T.INT8]: 'int8',
  [T.UINT16]: 'uint16',
  [T.INT16]: 'int16',
  [T.INT32]: 'int32',
  [T.INT64]: 'int64',
  [T.STRING]: 'string',
  [T.BOOL]: 'bool',
  [T.FLOAT16]: 'float16',
  [T.DOUBLE]: 'float64',
  [T.UINT32]: 'uint32',
  [T.UINT64]: 'uint64',
};

function ortFeeds(feeds: Record<string, HostTensor>): Record<string, OrtTensor> {
  const out: Record<string, OrtTensor> = {};
  for (const [k, t] of Object.entries(feeds)) {
    const data = t.dtype === T.BOOL ? new Uint8Array(t.data as Uint8Array) : t.data.slice();
    out[k] = new ort.Tensor(ortTypes[t.dtype] as 'float32', data as Float32Array, t.dims);
  }
  return out;
}

// Errors that name a JavaScript fault rather than the input: a bug even inside a NodeExecutionError.
// ("out of memory" only as V8's heap message: the provider's ResourceLimitError says "out of
// memory: [malloc] ..." for an allocation MLX refused, a clean error.)
export const INTERNAL =
  /Cannot read propert|is not a function|is not iterable|Invalid typed array length|Invalid array length|Maximum call stack|Array buffer allocation failed|Cannot convert|\w is not defined$|undefined is not|of undefined|of null|Cannot mix BigInt|RangeError: offset|JavaScript heap out of memory/i;

// onnxruntime died in the fallback partitions' process (the provider handed it a node it crashes on).
const FALLBACK_CRASH = /process for the fallback partitions .* ended \(signal/;

export function classifyError(e: unknown): 'error' | 'unclear-error' | 'crashed' {
  if (!(e instanceof Error)) return 'unclear-error';
  if (FALLBACK_CRASH.test(e.message)) return 'crashed';
  if (INTERNAL.test(e.message)) return 'unclear-error';
  if (e instanceof OrtMlxError || e instanceof MlxError) return 'error';
  // onnxruntime-common's own argument checks (feeds, fetches, options) run before the backend.
  if (/onnxruntime-common/.test(e.stack ?? '')) return 'error';
  return 'unclear-error';
}

const RANDOM_OPS = /::(RandomUniform|RandomNormal|RandomUniformLike|RandomNormalLike|Bernoulli|Multinomial|Dropout)$/;

const line = (e: unknown) => {
  const s = `${e instanceof Error ? e.constructor.name : typeof e}: ${e instanceof Error ? e.message : String(e)}`;
  return process.env.FUZZ_FULL ? `${s}\n${e instanceof Error ? e.stack : ''}` : s.replace(/\s*\n\s*/g, ' ').slice(0, 400);
};

function close(a: number, b: number, tol: { rtol: number; atol: number }): boolean {
  if (Number.isNaN(a) && Number.isNaN(b)) return true;
  if (a === b) return true;
  return Math.abs(a - b) <= tol.atol + tol.rtol * Math.abs(b);
}

/** An element the comparison accepts although it differs: output name, flat index, mlx's value, the reference's. */
type Accept = (name: string, i: number, have: unknown, want: unknown) => boolean;

/** Undefined when the outputs agree, else what differs. */
function compare(have: Outputs, want: Outputs, exact: boolean, valuesToo: boolean, loose = false, accept?: Accept): string | undefined {
  const names = Object.keys(want).sort();
  if (Object.keys(have).sort().join() !== names.join()) return `outputs ${Object.keys(have)} vs ${names}`;
  for (const n of names) {
    const [h, w] = [have[n], want[n]];
    if (h.type !== w.type) return `${n}: type ${h.type} vs ${w.type}`;
    if (h.dims.join() !== w.dims.join()) return `${n}: dims [${h.dims}] vs [${w.dims}]`;
    if (!valuesToo) continue;
    const tol = exact ? { rtol: 0, atol: 0 } : w.type === 'float16' || loose ? { rtol: 1e-2, atol: 2e-2 } : { rtol: 1e-3, atol: 1e-4 };
    // float16 data are bits (Uint16Array): compare their values.
    const [a, b] = w.type === 'float16' ? [halves(h.data), halves(w.data)] : [h.data as ArrayLike<unknown>, w.data as ArrayLike<unknown>];
    for (let i = 0; i < b.length; i++) {
      const [x, y] = [a[i], b[i]];
      const same = typeof y === 'string' || typeof y === 'bigint' ? x === y : close(Number(x), Number(y), tol);
      if (!same && !accept?.(n, i, x, y)) return `${n}[${i}]: ${String(x)} vs ${String(y)}`;
    }
  }
  return undefined;
}

const halves = (d: unknown) => (d instanceof Uint16Array ? Array.from(d, halfToNumber) : (d as ArrayLike<number>));

/**
 * Where the element-wise tolerance itself is wrong for an op, a narrower rule for that op alone:
 * - DFT and STFT: an exact result of 0 comes out of the transform as rounding noise of the size of
 *   the inputs (onnxruntime's test_dft gives -1.1e-4 where the answer is 0 and |x| sums to ~1e3),
 *   so the relative tolerance means nothing there. Every output is bounded by the sum of |x| over
 *   the feeds, and float32 rounding of the transform by a few ulps of that: the floor is 1e-6 of
 *   it, absolute, only for these ops.
 * - StringSplit's count of an empty input string: ONNX's reference (Python's str.split, which mlx
 *   follows) splits '' on a delimiter into one empty substring, onnxruntime into none; the count
 *   1 vs 0 is accepted exactly where the input string is empty (the substrings output is covered
 *   by the short run's allowance for the dims it changes).
 */
function acceptFor(c: FuzzCase): Accept | undefined {
  if (/DFT|STFT|(^|_)(dft|stft)(_|$)/.test(c.label)) {
    let sum = 0;
    for (const t of Object.values(c.feeds)) {
      if (!isFloatType(t.dtype)) continue;
      const vals = t.dtype === T.FLOAT16 ? Array.from(t.data as Uint16Array, halfToNumber) : Array.from(t.data as ArrayLike<number>);
      for (const v of vals) if (Number.isFinite(v)) sum += Math.abs(v);
    }
    const floor = 1e-6 * sum;
    return (_n, _i, x, y) => typeof x === 'number' && typeof y === 'number' && Math.abs(x - y) <= floor;
  }
  if (c.label === 'ai.onnx::StringSplit') {
    const input = Object.values(c.feeds).find((t) => t.dtype === T.STRING);
    if (!input) return undefined;
    const strings = input.data as unknown as string[];
    // The count output is the second one (y1_0 in a generated single-node case).
    return (n, i, x, y) => /^y1_/.test(n) && strings[i] === '' && Number(x) === 1 && Number(y) === 0;
  }
  return undefined;
}

const isFloatType = (t: number) => t === T.FLOAT || t === T.DOUBLE || t === T.FLOAT16;

function nonFinite(c: FuzzCase): boolean {
  return /edge value|extreme values/.test(c.mutation) || Object.values(c.feeds).some(extreme);
}

async function runOn(c: FuzzCase, provider: 'mlx' | 'cpu', maxTensorBytes: number, runs: number): Promise<Outputs[]> {
  const options =
    provider === 'mlx'
      ? ({
          executionProviders: [{ name: 'mlx', device: 'cpu', maxTensorBytes }],
        } as unknown as import('onnxruntime-node').InferenceSession.SessionOptions)
      : { executionProviders: ['cpu'], intraOpNumThreads: 1, interOpNumThreads: 1 };
  const s = await ort.InferenceSession.create(c.model, options);
  try {
    const outs: Outputs[] = [];
    for (let r = 0; r < runs; r++) outs.push(await s.run(ortFeeds(c.feeds)));
    return outs;
  } finally {
    await s.release();
  }
}

/**
 * Mismatches where onnxruntime, not mlx, departs from the spec, and mlx's result is checked
 * against the ONNX suite's expected output elsewhere (test/conformance/passing.txt). They count as
 * unverified (the reference cannot verify them), with the reason, not as mismatched. Each entry
 * is as narrow as the evidence: the cases named, the output named.
 */
/** Whether the case's model has a Cast (or CastLike) whose saturate is neither 0 nor 1, to a type that is not float8. */
function castWithOddSaturate(c: FuzzCase): boolean {
  const FLOAT8 = [T.FLOAT8E4M3FN, T.FLOAT8E4M3FNUZ, T.FLOAT8E5M2, T.FLOAT8E5M2FNUZ] as number[];
  try {
    const g = decodeModel(c.model).graph;
    return g.nodes.some((n) => {
      const sat = n.attributes.get('saturate');
      if (sat?.type !== 'int' || sat.value === 0 || sat.value === 1) return false;
      if (n.opType === 'CastLike') {
        const like = c.feeds[n.inputs[1]]?.dtype ?? g.initializers.get(n.inputs[1])?.dtype;
        return like !== undefined && !FLOAT8.includes(like);
      }
      const to = n.attributes.get('to');
      return n.opType === 'Cast' && to?.type === 'int' && !FLOAT8.includes(to.value);
    });
  } catch {
    return false;
  }
}

const KNOWN_DIVERGENCES: { label: RegExp; detail: RegExp; test?: (d: string, c: FuzzCase) => boolean; why: string }[] = [
  {
    // saturate only concerns float8 targets (the spec). onnxruntime 1.30 returns zeros or
    // uninitialised memory for, e.g., uint8 -> double with saturate=-1 (different values run to run).
    label: /^ai\.onnx::Cast(Like)?$|^test_cast/,
    detail: /^\w+\[\d+\]: /,
    test: (_d, c) => castWithOddSaturate(c),
    why: 'Cast/CastLike with saturate outside {0, 1} to a type that is not float8: onnxruntime returns zeros or uninitialised memory, the spec ignores saturate there',
  },
  {
    // test_attention_4d_with_past_and_present_qk_matmul_bias_3d_mask_causal and its 4d-mask
    // siblings pass the conformance test, qk_matmul_output included.
    label: /^test_attention_.*qk_matmul.*(mask|causal)/,
    detail: /^qk_matmul_output\[\d+\]: /,
    why: "Attention's qk_matmul_output after the mask (modes 1, 2): onnxruntime leaves attn_mask out and fills causal positions with the lowest float, the ONNX reference adds the mask and uses -inf",
  },
  {
    // noop_with_empty_axes with no axes: "the output tensor would be equivalent to input tensor"
    // (the spec; ONNX's reference returns the data). onnxruntime still applies the element-wise
    // part: |x| (L1, L2), x² (SumSquare), log x (LogSum). Only a value that is exactly that of
    // mlx's (mlx returning x) is accepted.
    label: /^ai\.onnx::Reduce(L1|L2|SumSquare|LogSum)$|^test_reduce_(l1|l2|sum_square|log_sum)_/,
    detail: /^\w+\[\d+\]: \S+ vs \S+$/,
    test: (d) => {
      const [, a, b] = /: (\S+) vs (\S+)$/.exec(d)!.map(Number);
      const near = (p: number, q: number) => Math.abs(p - q) <= 1e-5 * Math.max(1, Math.abs(q));
      return near(Math.abs(a), b) || near(a * a, b) || (a > 0 && near(Math.log(a), b)) || (a < 0 && Number.isNaN(b));
    },
    why: 'Reduce* with noop_with_empty_axes and no axes returns its input (the spec); onnxruntime applies |x|, x² or log x',
  },
  {
    // With no time steps the final states are the initial ones (the recurrence runs zero times);
    // onnxruntime 1.30 returns zeros for Y_h and uninitialised memory for Y_c (values change run
    // to run). Only where the sequence axis of X is 0 or a sequence_lens entry is 0.
    label: /^structured::rnn::|^test_(lstm|gru|rnn|simple_rnn)_|^ai\.onnx::(LSTM|GRU|RNN)$/,
    detail: /^(yh|yc|Y_h|Y_c|y1_0|y2_0)\[\d+\]: /,
    test: (_d, c) => emptySequence(c),
    why: 'LSTM/GRU/RNN over an empty sequence: the final states are the initial ones; onnxruntime returns zeros (Y_h) and uninitialised memory (Y_c)',
  },
  {
    // onnxruntime-node 1.30's Gather of strings fills every other element of a row with '' (a
    // [3, 2] table gathered by [0, 1] gives a, '', c, '' for a, b, c, d); mlx returns the rows.
    label: /^structured::strings::Gather|^ai\.onnx::Gather$/,
    detail: /^\w+\[\d+\]: .+ vs $/,
    why: "Gather of strings: onnxruntime returns '' for every other element of the gathered rows",
  },
];

/** Whether the case's LSTM/GRU/RNN node has an X whose sequence axis (by layout) is 0, or a sequence length of 0. */
function emptySequence(c: FuzzCase): boolean {
  try {
    const g = decodeModel(c.model).graph;
    return g.nodes.some((n) => {
      if (!['LSTM', 'GRU', 'RNN'].includes(n.opType)) return false;
      const x = n.inputs[0];
      const dims = c.feeds[x]?.dims ?? g.initializers.get(x)?.dims;
      const layout = n.attributes.get('layout');
      const axis = layout?.type === 'int' && layout.value === 1 ? 1 : 0;
      if (dims !== undefined && Number(dims[axis]) === 0) return true;
      // A sequence_lens of 0 for some batch entry: that entry's sequence is empty.
      const lens = n.inputs[4] ? (c.feeds[n.inputs[4]] ?? g.initializers.get(n.inputs[4])) : undefined;
      return !!lens && Array.from(lens.data as ArrayLike<number | bigint>).some((v) => Number(v) === 0);
    });
  } catch {
    return false;
  }
}

const ORT_UNAVAILABLE =
  /NOT_IMPLEMENTED|Could not find an implementation|is not implemented|not supported|Unsupported model IR version|is under development|No Op registered/i;

export async function runCase(
  c: FuzzCase,
  key: string,
  maxTensorBytes: number,
  tell: (m: ToParent) => void,
  timeoutMs = 30_000,
): Promise<CaseResult> {
  const head = { key, id: c.id, source: c.source, label: c.label, mutation: c.mutation };
  tell({ type: 'phase', key, phase: 'mlx' });
  if (c.special) return { ...head, ...(await runSpecial(c, c.special, timeoutMs)), reference: 'skipped' };
  let mine: Outputs[] | undefined;
  let mineError: unknown;
  try {
    mine = await runOn(c, 'mlx', maxTensorBytes, c.runs);
  } catch (e) {
    mineError = e;
  }
  const partial: Omit<CaseResult, 'reference'> = mine
    ? { ...head, outcome: 'unverified', detail: 'ran' }
    : { ...head, outcome: classifyError(mineError), detail: line(mineError) };
  tell({ type: 'phase', key, phase: 'ort', partial });
  let ref: Outputs | undefined;
  let refError: unknown;
  try {
    [ref] = await runOn(c, 'cpu', maxTensorBytes, 1);
  } catch (e) {
    refError = e;
  }
  const reference: CaseResult['reference'] = ref ? 'ok' : ORT_UNAVAILABLE.test(line(refError)) ? 'unavailable' : 'error';
  if (!mine) {
    const detail = ref ? `${partial.detail} (onnxruntime ran)` : `${partial.detail} (onnxruntime: ${line(refError).slice(0, 160)})`;
    return { ...partial, detail, reference };
  }
  const random = RANDOM_OPS.test(c.label);
  for (let r = 1; r < mine.length; r++) {
    const d = compare(mine[r], mine[0], true, !random);
    if (d) return { ...head, outcome: 'mismatched', detail: `run ${r + 1} differs from run 1: ${d}`, reference };
  }
  if (!ref) {
    if (reference === 'unavailable')
      return { ...head, outcome: 'unverified', detail: `onnxruntime: ${line(refError).slice(0, 200)}`, reference };
    return { ...head, outcome: 'mismatched', detail: `ran where onnxruntime refused: ${line(refError).slice(0, 300)}`, reference };
  }
  // Quantized models (the shared QDQ and int4 ones) differ by a quantization step where a rounding differs.
  const d = compare(mine[0], ref, false, !random, /qdq|int4|Quantize|QLinear|MatMulNBits/i.test(c.label), acceptFor(c));
  const known = d ? KNOWN_DIVERGENCES.find((k) => k.label.test(c.label) && k.detail.test(d) && (k.test?.(d, c) ?? true)) : undefined;
  if (d && known) return { ...head, outcome: 'unverified', detail: `onnxruntime differs from the spec (${known.why}): ${d}`, reference };
  return d
    ? { ...head, outcome: 'mismatched', detail: d, reference, nonFinite: nonFinite(c) }
    : { ...head, outcome: 'matched', detail: '', reference };
}

// ---- procedures (hostile.ts: sessions, memlimit, cli) ----

const pkgDir = fileURLToPath(new URL('../..', import.meta.url));
const threads = () => Number(/Threads:\s+(\d+)/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? 0);
/** This process's child processes (fallback hosts, the procedures' own). */
function children(): number {
  let n = 0;
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === process.pid) n++;
    } catch {
      // gone
    }
  }
  return n;
}
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Spawned {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
}

/** Runs a command to its end or `ms`, then kills it (and its process group). */
function runFor(cmd: string, args: string[], ms: number): Promise<Spawned> {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { cwd: pkgDir, stdio: ['ignore', 'pipe', 'pipe'], detached: true, env: { ...process.env, FUZZ_CHILD: '' } });
    let [stdout, stderr, timedOut] = ['', '', false];
    p.stdout.on('data', (d: Buffer) => (stdout = (stdout + d).slice(-4000)));
    p.stderr.on('data', (d: Buffer) => (stderr = (stderr + d).slice(-4000)));
    const kill = () => {
      try {
        process.kill(-p.pid!, 'SIGKILL');
      } catch {
        // already gone
      }
    };
    const timer = setTimeout(() => {
      timedOut = true;
      kill();
    }, ms);
    p.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, timedOut });
    });
  });
}

const tailOf = (s: string) =>
  s
    .trim()
    .split('\n')
    .filter((l) => l.trim())
    .slice(-2)
    .join(' | ')
    .slice(0, 300);

/** The outcome of a command that should end with a clean error (or run): hung, crashed, unclear or clean. */
function judge(r: Spawned, what: string): Pick<CaseResult, 'outcome' | 'detail'> {
  if (r.timedOut) return { outcome: 'hung', detail: `${what}: no end within the limit; ${tailOf(r.stderr)}` };
  if (r.signal) return { outcome: 'crashed', detail: `${what}: signal ${r.signal}; ${tailOf(r.stderr)}` };
  if (INTERNAL.test(r.stderr) || /\n\s+at .*\.(ts|js):\d+/.test(r.stderr))
    return { outcome: 'unclear-error', detail: `${what}: ${tailOf(r.stderr)}` };
  return { outcome: 'error', detail: `${what}: exit code ${r.code}; ${tailOf(r.stderr)}` };
}

/** Code that limits the running process's address space to what it maps now plus `mib` (prlimit --as). */
const limitSelf = (mib: number) => `{
  const { readFileSync } = await import('node:fs');
  const { execFileSync } = await import('node:child_process');
  const vm = Number(/VmSize:\\s+(\\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'))[1]) * 1024;
  execFileSync('prlimit', ['--pid', String(process.pid), '--as=' + (vm + ${mib} * 2 ** 20)]);
}`;

async function runSpecial(c: FuzzCase, s: Special, timeoutMs: number): Promise<Pick<CaseResult, 'outcome' | 'detail'>> {
  const limit = Math.max(2000, Math.min(timeoutMs / 2, 20_000));
  if (s.kind === 'sessions') {
    const options = {
      executionProviders: [{ name: 'mlx', device: 'cpu', ...(s.fallback && { fallback: 'cpu', disabledOps: ['Relu'] }) }],
    } as unknown as import('onnxruntime-node').InferenceSession.SessionOptions;
    const once = async () => {
      const session = await ort.InferenceSession.create(c.model, options);
      await session.run(ortFeeds(c.feeds));
      await session.release();
    };
    for (let k = 0; k < 3; k++) await once();
    await pause(300);
    const [t0, k0] = [threads(), children()];
    for (let k = 0; k < s.count; k++) await once();
    await pause(300);
    const [t1, k1] = [threads(), children()];
    const detail = `threads ${t0} -> ${t1}, child processes ${k0} -> ${k1} after ${s.count} sessions`;
    return t1 > t0 + 2 || k1 > k0 ? { outcome: 'mismatched', detail } : { outcome: 'matched', detail };
  }
  const dir = mkdtempSync(join(tmpdir(), 'fuzz-special-'));
  try {
    if (s.kind === 'memlimit') {
      const model = join(dir, 'm.onnx');
      writeFileSync(model, c.model);
      // The session is made first, then the address space is limited (ulimit -v, as prlimit on
      // the running process: node under tsx cannot start below ~10 GiB, V8 reserves wasm memory)
      // to what it maps then plus limitMiB, then the model runs.
      const code = `
        const ort = (await import('onnxruntime-node')).default;
        await import('@mlx/ort-ep');
        const report = (e) => console.log(JSON.stringify({ name: e?.constructor?.name, code: e?.code, message: String(e?.message) }));
        let s;
        try {
          s = await ort.InferenceSession.create(process.argv[1], { executionProviders: [{ name: 'mlx', device: 'cpu', maxTensorBytes: 2 ** 40, maxSessionBytes: 2 ** 40 }] });
        } catch (e) { report(e); process.exit(0); }
        ${limitSelf(s.limitMiB)}
        console.log('started');
        try {
          await s.run({ x: new ort.Tensor('float32', Float32Array.of(0.5), [1]) });
          console.log(JSON.stringify({ ran: true }));
        } catch (e) { report(e); }`;
      const r = await runFor(process.execPath, ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', code, model], limit);
      const first = r.stdout.trim().split('\n')[0] ?? '';
      if (first.startsWith('{')) return { outcome: 'error', detail: `create() refused: ${first.slice(0, 300)}` };
      if (first !== 'started') return judge(r, `before the limit of ${s.limitMiB} MiB`);
      const last = r.stdout.trim().split('\n').pop()!;
      if (last.startsWith('{')) {
        const j = JSON.parse(last) as { ran?: boolean; name?: string; code?: string; message?: string };
        if (j.ran) return { outcome: 'matched', detail: 'ran under the limit' };
        const clean = /^ERR_MLX/.test(j.code ?? '') && !INTERNAL.test(j.message ?? '');
        return { outcome: clean ? 'error' : 'unclear-error', detail: `${j.name}: ${(j.message ?? '').slice(0, 300)}` };
      }
      return judge(r, `under a limit of ${s.limitMiB} MiB more`);
    }
    // cli
    let target = dir;
    if (s.target === 'dev-zero') target = '/dev/zero';
    else if (s.target === 'fifo') {
      target = join(dir, 'model.onnx');
      execFileSync('mkfifo', [target]);
    }
    // As bin/mlx-ort.js runs the built CLI: main(argv), its error's message on stderr, exit code 1;
    // with 4 GiB of address space more than it maps once loaded (/dev/zero must not take the machine).
    const code = `
      const { main } = await import(${JSON.stringify(pathToFileURL(join(pkgDir, 'src/cli.ts')).href)});
      ${limitSelf(4096)}
      await main(process.argv.slice(1)).catch((e) => { console.error(e instanceof Error ? e.message : e); process.exit(1); });`;
    const r = await runFor(
      process.execPath,
      ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', code, s.command, target],
      limit,
    );
    if (!r.timedOut && !r.signal && r.code === 0) return { outcome: 'mismatched', detail: `mlx-ort ${s.command} accepted ${s.target}` };
    return judge(r, `mlx-ort ${s.command} ${s.target}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// ---- the process ----

// Only as the harness's child (it sets FUZZ_CHILD): imported elsewhere (a test runner's worker also has
// process.send), this module must not answer its parent.
if (process.send && process.env.FUZZ_CHILD === '1') {
  const tell = (m: ToParent) => process.send!(m);
  process.on('message', async (m: ToChild) => {
    if (m.type !== 'run') return;
    for (const item of m.items) {
      tell({ type: 'phase', key: item.key, phase: 'generate' });
      let c: FuzzCase;
      try {
        c = 'file' in item ? readCaseFile(item.file) : generateCase(item.seed, item.index, m.roots);
      } catch (e) {
        tell({
          type: 'result',
          result: {
            key: item.key,
            id: item.key,
            source: '?',
            label: '?',
            mutation: '',
            outcome: 'skipped',
            detail: `generator: ${line(e)}`,
            reference: 'skipped',
          },
        });
        continue;
      }
      tell({ type: 'result', result: await runCase(c, item.key, m.maxTensorBytes, tell, m.timeoutMs) });
    }
    tell({ type: 'done' });
  });
  tell({ type: 'ready' });
}
