// One model's runs: the eager path (every run walks the plan) and the compiled path (a
// SignatureProgram per feed signature, in an LRU cache), both written as generators the drivers
// run synchronously or without blocking.
import { OnnxDataType, dataTypeName, type HostTensor } from '../onnx/index.js';
import type * as mx from '@mlx/core';
import { mxDtypeOf } from '../runtime/convert.js';
import type { ConstantStore } from '../runtime/uploads.js';
import type { Value } from '../runtime/value.js';
import { Analysis } from './analysis.js';
import { compileSetup } from './compile-setup.js';
import { Env, RunState, type MemoryLimits } from './env.js';
import { FeedMemo } from './feeds.js';
import { outputsOf, type EvalRequest, type GraphProgram } from './run.js';
import { HOST_ONLY, SignatureProgram, type OneCallMode } from './signature.js';

export interface CompileStats {
  /** Runs whose signature had a program already. */
  hits: number;
  /** Runs that analysed a new signature (they run eagerly, and the next run of it is traced). */
  misses: number;
  /**
   * Runs of a new signature that ran eagerly without an analysis: after MISS_STREAK misses in a
   * row (signatures that never come back, e.g. a cache fed from the host one row longer every
   * run), a signature is analysed on its second run only.
   */
  unanalysed: number;
  /** Programs dropped by the LRU. */
  evictions: number;
  /** Programs held now. */
  size: number;
  /** Replays that run() evaluated on the calling thread (shortEvalMs) rather than on the worker. */
  inlineEvals: number;
  /** Runs (run() or runSync()) that took one native call: a replay's program run whole, on either thread. */
  oneCalls: number;
}

export interface RunnerOptions {
  compiled: boolean;
  device: 'cpu' | 'gpu';
  limits: MemoryLimits;
  /** Most signatures kept (LRU). */
  maxSignatures: number;
  /** The session's stream (one-call runs read their results through it). */
  stream?: mx.Stream;
  /** Whether large results go to pooled host blocks (MlxSessionOptions.outputMemory); default true. */
  pooledResults?: boolean;
}

/**
 * Most values one shape signature is specialized on (a scalar feed read on the host, e.g. a sample
 * rate that picks an If branch): past that many, the feed is taken as data again (a step).
 */
const MAX_VALUE_SIGNATURES = 4;

/**
 * Misses in a row after which a new signature's first run is eager and
 * unanalysed: an analysis (and the program it builds) pays only when the signature comes back,
 * and a loop whose shapes grow every run never does.
 */
export const MISS_STREAK = 8;

/** Feeds that may be fixed by value: one-element integer or bool host tensors. */
function specializable(f: HostTensor | Value): f is HostTensor {
  if ('kind' in f) return false;
  const dt = f.dtype;
  const integral =
    dt === OnnxDataType.BOOL ||
    (dt >= OnnxDataType.UINT8 && dt <= OnnxDataType.INT64) ||
    dt === OnnxDataType.UINT32 ||
    dt === OnnxDataType.UINT64;
  return integral && f.data.length === 1;
}

/** What a shape signature learned about its feeds' values (see valueFeeds). */
interface ValueSpecialization {
  /** The feeds whose values join the signature key; empty: none (the feeds are data). */
  names: string[];
  /** The value keys seen so far. */
  seen: Set<string>;
}

export class ModelRunner {
  private readonly programs = new Map<string, SignatureProgram>();
  /**
   * By shape signature: the one-element integer feeds whose data its first run read on the host
   * (alone deciding the read: an If on a fed flag, a fed sample rate). Each of their values gets a
   * program of its own, in which those reads are static; after MAX_VALUE_SIGNATURES values the
   * signature stops specializing (names emptied) and those reads are steps again.
   */
  private readonly valueFeeds = new Map<string, ValueSpecialization>();
  readonly stats: CompileStats = { hits: 0, misses: 0, unanalysed: 0, evictions: 0, size: 0, inlineEvals: 0, oneCalls: 0 };
  /** Misses (analysed or not) in a row, until a long run of replays (replayed()). */
  private missStreak = 0;
  /** Replays since the last miss. */
  private replayStreak = 0;
  /** Programs hit once already (their first hit traced them). */
  private readonly hitOnce = new WeakSet<SignatureProgram>();
  /** Keys of the last signatures run once unanalysed (insertion order: the oldest goes first). */
  private readonly sightings = new Set<string>();

  constructor(
    readonly program: GraphProgram,
    readonly constants: ConstantStore,
    readonly options: RunnerOptions,
  ) {}

  /** The feeds the session checked last (MlxSession.checkRun), and their signature key. */
  readonly feedMemo = new FeedMemo();

  /** The signature key of feeds and fetches: the memo's where the session just matched these very feeds. */
  private keyOf(feeds: Record<string, HostTensor | Value>, fetches: readonly string[]): string {
    const memo = this.feedMemo;
    if (memo.matched !== feeds) return signatureKey(feeds, fetches);
    memo.key ??= signatureKey(feeds, fetches);
    return memo.key;
  }

  /** A new run's state. */
  newRun(): RunState {
    return new RunState(this.constants, this.program.plan.modelName, this.options.limits);
  }

  /** Builds the outputs of one run in `run` (lazily; the caller evaluates them). */
  *run(run: RunState, feeds: Record<string, HostTensor | Value>, fetches: readonly string[]): Generator<EvalRequest, Value[], void> {
    const env = new Env(this.program.plan, run);
    if (!this.options.compiled) return yield* this.runEagerly(env, feeds, fetches);
    const shapeKey = this.keyOf(feeds, fetches);
    let spec = this.valueFeeds.get(shapeKey);
    let key = shapeKey;
    if (spec?.names.length) {
      const values = valueKey(feeds, spec.names);
      if (!spec.seen.has(values) && spec.seen.size >= MAX_VALUE_SIGNATURES) {
        // Too many values: the feeds are data again; the specialized programs go.
        spec.names = [];
        for (const [k, p] of this.programs) {
          if (!k.startsWith(`${shapeKey}\u0002`)) continue;
          p.dispose();
          this.programs.delete(k);
        }
        this.stats.size = this.programs.size;
      } else {
        spec.seen.add(values);
        key += values;
      }
    }
    const known = this.programs.get(key);
    if (known) {
      this.stats.hits++;
      // A program's first hit traces it; its later ones replay it (replayed()).
      if (this.hitOnce.has(known)) this.replayed();
      else this.hitOnce.add(known);
      // Most recently used last.
      this.programs.delete(key);
      this.programs.set(key, known);
      this.setFeeds(env, run, feeds, known.fixed);
      return yield* known.run(env);
    }
    this.replayStreak = 0;
    if (this.missStreak >= MISS_STREAK && !this.sightings.delete(key)) {
      // A streak of new signatures: this one is analysed if it comes back.
      this.sightings.add(key);
      // As many as the LRU holds: one that comes back after more new ones than that would have
      // been evicted before its next run (a loop over more lengths than maxSignatures) anyway.
      if (this.sightings.size > this.options.maxSignatures) this.sightings.delete(this.sightings.values().next().value!);
      this.stats.unanalysed++;
      run.unanalysed = true;
      return yield* this.runEagerly(env, feeds, fetches);
    }
    this.missStreak++;
    this.stats.misses++;
    // Feeds fixed by value in this signature stay host tensors and are not data (not marked).
    const fixed = new Set(spec?.names);
    const names = Object.keys(feeds);
    const candidates = spec ? 0 : names.reduce((m, n, i) => (i < 30 && specializable(feeds[n]) ? m | (1 << i) : m), 0);
    const analysis = new Analysis(candidates);
    run.analysis = analysis;
    this.setFeeds(env, run, feeds, fixed);
    names.forEach((n, i) => {
      if (!fixed.has(n)) analysis.markFeed(env.values.get(n)!, i < 30 ? 1 << i : 0);
    });
    yield* this.program.runNodes(this.program.order(fetches), env);
    run.analysis = undefined;
    if (!spec) {
      const readFeeds = names.filter((_, i) => i < 30 && analysis.hostReadFeeds & (1 << i));
      spec = { names: readFeeds, seen: new Set() };
      this.valueFeeds.set(shapeKey, spec);
      // The next run of this shape signature analyses again with those feeds fixed.
      if (readFeeds.length) return outputsOf(env, fetches);
    }
    const sig = SignatureProgram.fromAnalysis(
      this.program,
      fetches,
      analysis,
      env,
      this.constants,
      compileSetup(this.options.device),
      [...fixed],
      this.options.stream,
      this.options.pooledResults ?? true,
    );
    this.programs.set(key, sig);
    while (this.programs.size > this.options.maxSignatures) {
      const [oldest, p] = this.programs.entries().next().value!;
      p.dispose();
      this.programs.delete(oldest);
      this.stats.evictions++;
    }
    this.stats.size = this.programs.size;
    return outputsOf(env, fetches);
  }

  /**
   * A replay. Twice as many in a row as the LRU holds programs end a streak of misses: the
   * workload repeats now. Fewer do not: a loop over one length after another fed again (a second
   * generation of the same prompt) replays the programs of its first lengths, and would then
   * analyse and trace the next stretch of lengths every time.
   */
  private replayed(): void {
    if (++this.replayStreak >= 2 * this.options.maxSignatures) this.missStreak = 0;
  }

  /** A run of the eager path: the feeds as they are (host tensors stay on the host), every needed node walked. */
  private *runEagerly(
    env: Env,
    feeds: Record<string, HostTensor | Value>,
    fetches: readonly string[],
  ): Generator<EvalRequest, Value[], void> {
    for (const [name, f] of Object.entries(feeds))
      env.values.set(name, 'kind' in f ? (f as Value) : { kind: 'host', tensor: f as HostTensor });
    yield* this.program.runNodes(this.program.order(fetches), env);
    return outputsOf(env, fetches);
  }

  /**
   * The signature program that runs these feeds in one native call (SignatureProgram.runHost /
   * runHostAsync), with its last evaluation's time; undefined where none does (the caller then
   * runs the usual way). The feeds are checked already. The caller counts the run it takes
   * (countOneCall).
   */
  oneCall(
    feeds: Record<string, HostTensor | Value>,
    fetches: readonly string[],
    mode: OneCallMode = HOST_ONLY,
  ): { program: SignatureProgram; evalMs: number } | undefined {
    if (!this.options.compiled) return undefined;
    const shapeKey = this.keyOf(feeds, fetches);
    const spec = this.valueFeeds.get(shapeKey);
    let key = shapeKey;
    if (spec?.names.length) {
      for (const n of spec.names) if ('kind' in feeds[n]) return undefined;
      const values = valueKey(feeds, spec.names);
      if (!spec.seen.has(values)) return undefined;
      key += values;
    }
    const known = this.programs.get(key);
    const evalMs = known?.hostRunMs(feeds, mode);
    if (!known || evalMs === undefined) return undefined;
    this.programs.delete(key);
    this.programs.set(key, known);
    return { program: known, evalMs };
  }

  /** The run in one native call on this thread (oneCall), or undefined. */
  runHost(
    feeds: Record<string, HostTensor | Value>,
    fetches: readonly string[],
    modelName: string,
    mode: OneCallMode = HOST_ONLY,
  ): Record<string, HostTensor | Value> | undefined {
    const one = this.oneCall(feeds, fetches, mode);
    if (!one) return undefined;
    this.countOneCall();
    return one.program.runHost(feeds, modelName, mode);
  }

  /** Counts a run that took one native call (a signature hit too). */
  countOneCall(): void {
    this.stats.hits++;
    this.replayed();
    this.stats.oneCalls++;
  }

  /** Compiled-path feeds: tensors MLX can hold go to the device; others (strings) stay on the host. */
  private setFeeds(env: Env, run: RunState, feeds: Record<string, HostTensor | Value>, fixed?: ReadonlySet<string>): void {
    let device: Set<string> | undefined;
    for (const [name, f] of Object.entries(feeds)) {
      if ('kind' in f && f.kind === 'device') (device ??= new Set()).add(name);
      let v: Value = 'kind' in f ? (f as Value) : { kind: 'host', tensor: f as HostTensor };
      if (v.kind === 'host' && mxDtypeOf(v.tensor.dtype) && !fixed?.has(name))
        v = { kind: 'device', array: run.toArray(v, name), onnxType: v.tensor.dtype };
      env.values.set(name, v);
    }
    if (device) run.deviceFeeds = device;
  }

  /** The signatures' program shapes, for tests and diagnostics. */
  describe(): ReturnType<SignatureProgram['describe']>[] {
    return [...this.programs.values()].map((p) => p.describe());
  }

  release(): void {
    for (const p of this.programs.values()) p.dispose();
    this.programs.clear();
    this.stats.size = 0;
  }
}

/** The values of the feeds `names` (one-element host tensors), for the signature key. */
function valueKey(feeds: Record<string, HostTensor | Value>, names: readonly string[]): string {
  let key = '\u0002';
  for (const n of names) key += `${n}=${String((feeds[n] as HostTensor).data[0])};`;
  return key;
}

function signatureKey(feeds: Record<string, HostTensor | Value>, fetches: readonly string[]): string {
  let key = fetches.join('\0') + '\u0001';
  for (const name of Object.keys(feeds).sort()) {
    const f = feeds[name];
    const v: Value = 'kind' in f ? (f as Value) : { kind: 'host', tensor: f as HostTensor };
    if (v.kind === 'host') key += `${name}:${dataTypeName(v.tensor.dtype)}[${v.tensor.dims.join(',')}];`;
    else if (v.kind === 'device') key += `${name}:${dataTypeName(v.onnxType)}[${v.array.shape.join(',')}];`;
    else key += `${name}:${v.kind};`;
  }
  return key;
}
