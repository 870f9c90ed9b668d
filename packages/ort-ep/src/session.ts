// MlxSession: a planned model and its runs, over host tensors. The onnxruntime-common backend
// (backend/handler.ts) wraps it; it is also the lower-level API for element types that
// onnxruntime-common's Tensor cannot hold (bfloat16, float8, int4 as unpacked bytes). Its options
// are in execute/options.ts, feed checks in execute/feeds.ts, result collection in
// execute/outputs.ts.
import { writeFileSync } from 'node:fs';
import { basename } from 'node:path';
import { isMainThread } from 'node:worker_threads';
import * as mx from '@mlx/core';
import { allocHost, readModelFile, subgraphsOf, type GraphIR, type HostTensor, type ModelIR } from './onnx/index.js';
import { cpuBackendMayResolve, resolveCpuBackend, type CpuBackend } from './runtime/onnxruntime.js';
import { ConstantStore } from './runtime/uploads.js';
import { asHost, type Value } from './runtime/value.js';
import { planModel, prepareModel } from './plan/prepare.js';
import { driveAsync, driveSync, evalAsync, evalSync, within, type RunStreams } from './execute/driver.js';
import { giveStreams, takeStreams } from './execute/stream-pool.js';
import { deviceArrays, donateFeeds, validateFeeds } from './execute/feeds.js';
import { foldConstants, makeConstantsResident, registerConstants } from './execute/fold.js';
import { checkSessionOptions, type MlxRunOptions, type MlxSessionOptions, type TensorMetadata, metadataOf } from './execute/options.js';
import { collectOutputs } from './execute/outputs.js';
import { checkStartOptions, notify, progress } from './execute/progress.js';
import { GraphProgram } from './execute/run.js';
import { Profiler } from './execute/profiler.js';
import { SessionLog, type LogSeverity } from './execute/log.js';
import type { RewriteCounts, RewriteTarget } from './plan/rewrite/index.js';
import { encodeGraph, encodeModel } from './onnx/encode.js';
import { FUSED_DOMAIN } from './ops/mlx/fused.js';
import { ModelRunner, type CompileStats } from './execute/runner.js';
import { HOST_ONLY, type OneCallMode } from './execute/signature.js';
import type { RunState } from './execute/env.js';
import { buildValueAndGrad, capturedArrayError, type GradTarget, type ValueAndGradOptions, type ValueAndGradResult } from './grad.js';
import {
  allFinite,
  applyStep,
  checkParameters,
  LossScaler,
  checkTrainStep,
  parameterNames,
  readParameters,
  writeParameters,
  type ParameterTarget,
  type TrainStepOptions,
  type TrainStepResult,
} from './train.js';
import { saveModel, type SaveModelOptions } from './save-model.js';
import {
  InvalidFeedError,
  OrtMlxError,
  RuntimeTypeRefusal,
  UnsupportedOperatorError,
  allocationError,
  isAllocationFailure,
  messageOf,
  type UnsupportedNode,
} from './errors.js';

export type { MlxProgressEvent, MlxRunOptions, MlxSessionOptions, TensorMetadata } from './execute/options.js';

/** A loop of awaited runs evaluated on the calling thread lets the event loop turn at least this often (turnEventLoop). */
export const TURN_EVERY_MS = 2;
/** When a run last let the event loop turn (performance.now()), process-wide. */
let lastTurn = Number.NEGATIVE_INFINITY;

/**
 * A promise that resolves once the event loop has turned (a setImmediate), where TURN_EVERY_MS
 * have passed since a run last let it turn; undefined otherwise (the run then resolves in
 * microtasks). A run evaluated on the calling thread ends without the loop turning, so a loop of
 * awaited runs would hold timers and I/O for good; a turn after every one cost a 7M decoder's
 * 0.6 ms step ~20 us, and more in the caches the loop's own work evicts. Every 2 ms, timers and I/O
 * wait no longer than a 2 ms run would make them wait.
 */
function turnEventLoop(): Promise<void> | undefined {
  if (performance.now() - lastTurn < TURN_EVERY_MS) return undefined;
  return new Promise<void>((resolve) =>
    setImmediate(() => {
      lastTurn = performance.now();
      resolve();
    }),
  );
}

/**
 * The form of a one-call run (ModelRunner.runHost) for a run's options, or undefined where the
 * options rule the path out (pre-allocated or pinned outputs, terminate): a run whose results go
 * to the host or stay on the device (keepOnDevice), with donated device feeds or none.
 */
function oneCallMode(o: MlxRunOptions): OneCallMode | undefined {
  if (o.pinnedOutputs === true || (Array.isArray(o.pinnedOutputs) && o.pinnedOutputs.length) || o.terminate) return undefined;
  if (o.outputBuffers) for (const _ in o.outputBuffers) return undefined;
  const keep = o.keepOnDevice;
  if (!o.donate?.length && (!keep || (Array.isArray(keep) && keep.length === 0))) return HOST_ONLY;
  return {
    keep: keep === true ? () => true : Array.isArray(keep) && keep.length ? (n) => keep.includes(n) : () => false,
    donate: new Set(o.donate ?? []),
  };
}

export class MlxSession {
  readonly inputNames: string[];
  readonly outputNames: string[];
  readonly inputMetadata: TensorMetadata[];
  readonly outputMetadata: TensorMetadata[];
  private released = false;
  private runner: ModelRunner;
  /** The session's log (logSeverityLevel; off when unset). */
  private log = new SessionLog(undefined);
  /** The graph rewrites create() applied, by name (valueAndGrad refuses initializers some of them derive). */
  private rewrites: RewriteCounts = {};
  /** The profile being recorded (enableProfiling, startProfiling), if any. */
  private profiler: Profiler | undefined;
  /** When the session's initialization (after loading and planning) began, for its profile event. */
  private initStart = 0;
  /**
   * Nodes re-planned onto the fallback after their check refused the element types they met at
   * run time (RuntimeTypeRefusal), for every later run of the session.
   */
  private readonly forced = new Map<object, string>();
  /** Runs of this session, one at a time, in the order they were asked for. */
  private queue: Promise<unknown> = Promise.resolve();
  /** trainStep's loss scaling for float16 mixed precision when the caller passes none (made on first use). */
  private lossScaler?: LossScaler;

  /** Results of POOLED_RESULT_BYTES and more are read into pooled host blocks (outputMemory). */
  private readonly pooledResults: boolean;
  /** run() evaluates a replay whose last evaluation took under this on the calling thread (shortEvalMs). */
  private readonly shortEvalMs: number;
  /** The last evaluation of an eager run (no replay, no analysis) by run(), in ms: under shortEvalMs, the next one is inline on the CPU. */
  private eagerEvalMs = Number.POSITIVE_INFINITY;

  private constructor(
    readonly model: ModelIR,
    private program: GraphProgram,
    private constants: ConstantStore,
    readonly options: MlxSessionOptions,
    readonly name: string,
    /** The session's own streams: any thread may evaluate them, so runs evaluate off the JS thread. */
    private readonly streams: RunStreams,
    /** The nodes MLX does not take (they run in fallback partitions). */
    private unsupported: UnsupportedNode[] = [],
    /**
     * The CPU backend of the fallback partitions: loaded at create() when the plan has one, else on
     * a re-plan that needs one.
     */
    private cpu: CpuBackend | undefined,
    /** Whether a fallback may be used at all (fallback is not 'none', as create() decided it). */
    private readonly fallbackAllowed: boolean,
  ) {
    const memory = options.outputMemory ?? 'auto';
    if (memory !== 'auto' && memory !== 'pooled' && memory !== 'fresh')
      throw new TypeError(`outputMemory must be 'auto', 'pooled' or 'fresh', got '${String(memory)}'`);
    // 'auto' is pooled on the CPU too: a new ArrayBuffer a run costs a large result its page
    // faults and the collector's work (GPT-2 small's logits ~50 ms of a 0.5 s run). Not in a
    // worker thread on the CPU: blocks its results still hold when it ends are never collected.
    this.pooledResults =
      memory === 'pooled' || (memory === 'auto' && (isMainThread || (streams.main.device.type === 'gpu' && mx.cudaAvailable())));
    const short = options.shortEvalMs ?? 2;
    if (typeof short !== 'number' || !(short >= 0) || short > 1000)
      throw new TypeError(`shortEvalMs must be a number of milliseconds from 0 to 1000, got ${String(short)}`);
    this.shortEvalMs = short;
    const g = model.graph;
    const user = g.inputs.filter((i) => !g.inputsWithDefaults.has(i.name));
    this.inputNames = user.map((i) => i.name);
    this.inputMetadata = user.map(metadataOf);
    this.outputNames = g.outputs.map((o) => o.name);
    this.outputMetadata = g.outputs.map(metadataOf);
    this.runner = this.newRunner();
  }

  private newRunner(): ModelRunner {
    const options = this.options;
    const budget = mx.memory.limit();
    return new ModelRunner(this.program, this.constants, {
      compiled: options.compiled ?? true,
      maxSignatures: options.maxSignatures ?? 16,
      device: this.streams.main.device.type,
      stream: this.streams.main,
      pooledResults: this.pooledResults,
      limits: {
        maxTensorBytes: limitOption(options.maxTensorBytes, 'maxTensorBytes') ?? Math.floor(budget / 2),
        maxSessionBytes: limitOption(options.maxSessionBytes, 'maxSessionBytes') ?? budget,
      },
    });
  }

  /**
   * After a RuntimeTypeRefusal: plans the model again with the refused node on the fallback (its
   * enclosing If/Loop/Scan with it), swaps the new program in, and says whether the run may be
   * tried again (not without a CPU backend, nor for a node already re-planned). The weights MLX
   * holds are read back to the host for the new plan and uploaded again, once per re-plan.
   */
  private replan(e: RuntimeTypeRefusal): boolean {
    if (this.forced.has(e.target)) return false;
    if (!this.cpu && this.fallbackAllowed) this.cpu = resolveCpuBackend(this.options.cpuBackend);
    if (!this.cpu) return false;
    this.forced.set(e.target, e.reason);
    const old = { program: this.program, constants: this.constants, runner: this.runner };
    within(this.streams, () => restoreInitializers(old.program));
    const { plan, unsupported } = planModel(this.model, {
      registry: this.options.registry,
      modelName: this.name,
      disabledOps: this.options.disabledOps,
      partition: true,
      forced: this.forced,
    });
    const program = new GraphProgram(plan, this.cpu);
    const constants = new ConstantStore(this.streams.main.device.type === 'gpu');
    registerConstants(program, constants);
    within(this.streams, () => {
      foldConstants(program, constants);
      makeConstantsResident(program, constants);
    });
    old.runner.release();
    releaseDeviceConstants(old.program);
    old.constants.release();
    old.program.releaseFallbacks();
    this.program = program;
    this.constants = constants;
    this.unsupported = unsupported;
    this.runner = this.newRunner();
    return true;
  }

  static async create(source: string | Uint8Array | ArrayBuffer, options: MlxSessionOptions = {}): Promise<MlxSession> {
    const bytes =
      typeof source === 'string'
        ? readModelFile(source, mx.populatedBytes)
        : source instanceof Uint8Array
          ? source
          : new Uint8Array(source);
    const name = typeof source === 'string' ? basename(source) : '<bytes>';
    checkStartOptions(options);
    const session = MlxSession.createSync(bytes, { ...options, modelPath: typeof source === 'string' ? source : undefined }, name);
    try {
      if (session.program.fallbacks.size) await progress(options, name, 'fallback', () => session.openFallbacks());
      const w = options.warmup;
      if (w) await session.warmup({ dims: typeof w === 'object' ? w.dims : undefined });
    } catch (e) {
      session.release();
      throw e;
    }
    session.profiler?.add('Session', 'session_initialization', session.initStart, performance.now());
    return session;
  }

  /**
   * Makes the onnxruntime sessions of the fallback partitions whose input types are known before
   * any run (the others are made on their first run), so that onnxruntime's refusal of a
   * sub-model surfaces at create().
   */
  private async openFallbacks(): Promise<void> {
    const plan = this.program.plan;
    const known = (name: string): number | undefined => {
      const c = plan.constants.get(name);
      if (c?.kind === 'host') return c.tensor.dtype;
      if (c?.kind === 'device') return c.onnxType;
      return undefined;
    };
    const runners = [...this.program.fallbacks.values()];
    // A sub-model that cannot even be written (a synchronous throw) is refused like one onnxruntime refuses.
    const results = await Promise.allSettled(runners.map(async (r) => r.prepare(known)));
    const refused = results.flatMap((r, k) => (r.status === 'rejected' ? [`${runners[k].where}: ${messageOf(r.reason)}`] : []));
    if (refused.length)
      throw new UnsupportedOperatorError(
        this.name,
        this.unsupported,
        `onnxruntime (the fallback) cannot run them either:\n  ${refused.join('\n  ')}`,
      );
  }

  /** The fallback partitions, in run order: their nodes' op types, and how many times onnxruntime ran each. */
  get fallbackStats(): { partition: number; ops: string[]; inputs: string[]; outputs: string[]; runs: number; backend: string }[] {
    return [...this.program.fallbacks.values()].map((r) => ({
      partition: r.partition.index,
      ops: r.partition.nodes.map((pn) => pn.node.opType),
      inputs: [...r.partition.inputs],
      outputs: [...r.partition.outputs],
      runs: r.runs,
      backend: r.backend.name,
    }));
  }

  /** @internal */
  static createSync(bytes: Uint8Array, options: MlxSessionOptions & { modelPath?: string }, name = '<bytes>'): MlxSession {
    checkSessionOptions(options);
    // MLX_ORT_FALLBACK=none|cpu sets the default (tests that must measure MLX alone, deployments that want no fallback).
    const fallback = options.fallback ?? fallbackFromEnv();
    if (options.device === 'gpu' && !mx.gpuAvailable()) throw new OrtMlxError(noGpuMessage());
    if (fallback !== undefined && fallback !== 'cpu' && fallback !== 'none')
      throw new TypeError(`fallback must be 'cpu' or 'none', got '${String(fallback)}'`);
    // onnxruntime is loaded only for a model with a fallback partition (below).
    const mayFallBack = fallback !== 'none' && cpuBackendMayResolve(options.cpuBackend);
    const t0 = performance.now();
    const profiler = options.enableProfiling ? new Profiler(options.profileFilePrefix ?? DEFAULT_PROFILE_PREFIX, t0) : undefined;
    notify(options, { phase: 'load', state: 'start', model: name });
    if (options.deviceId !== undefined && options.deviceId !== 0)
      throw new OrtMlxError(`deviceId ${options.deviceId}: MLX runs on one GPU per process, device 0`);
    const log = new SessionLog(options.logSeverityLevel, options.logId ?? '', options.onLog);
    const { model, plan, unsupported, rewrites } = prepareModel(bytes, {
      modelPath: options.modelPath,
      externalData: options.externalData,
      registry: options.registry,
      modelName: name,
      disabledOps: options.disabledOps,
      partition: mayFallBack,
      rewrites: options.graphRewrites,
      rewriteTarget: rewriteTargetFor(options.device ?? mx.defaultDevice().type),
      freeDimensionOverrides: options.freeDimensionOverrides,
    });
    if (options.optimizedModelFilePath) writeOptimizedModel(model, options.optimizedModelFilePath, name);
    if (log.level !== undefined) logPlan(log, name, plan, unsupported, rewrites, mayFallBack);
    const cpu =
      mayFallBack && (unsupported.length || plan.nodes.some((pn) => pn.fallback)) ? resolveCpuBackend(options.cpuBackend) : undefined;
    const threads = options.intraOpNumThreads;
    if (threads !== undefined && threads !== 0) {
      if (!Number.isInteger(threads) || threads < 0 || threads > 1024)
        throw new TypeError(`intraOpNumThreads must be an integer from 0 to 1024, got ${String(threads)}`);
      mx.setCpuThreads(threads);
    }
    if (unsupported.length && !cpu) {
      const hint =
        fallback === 'none'
          ? ''
          : fallback === 'cpu'
            ? `fallback 'cpu' was asked for, but ${options.cpuBackend ?? 'neither onnxruntime-node nor onnxruntime-web'} resolves: install one to run these nodes on onnxruntime`
            : 'install onnxruntime-node (or onnxruntime-web) to run these nodes on onnxruntime (fallback)';
      throw new UnsupportedOperatorError(name, unsupported, hint);
    }
    const program = new GraphProgram(plan, cpu);
    const device = options.device ?? mx.defaultDevice().type;
    const constants = new ConstantStore(device === 'gpu');
    registerConstants(program, constants);
    if (options.precision !== undefined && options.precision !== 'fp32' && options.precision !== 'tf32') {
      throw new TypeError(`precision must be 'fp32' or 'tf32', got '${String(options.precision)}'`);
    }
    // Unless the process already chose (MLX_ENABLE_TF32 set by the user or an earlier session).
    if (device === 'gpu' && process.env.MLX_ENABLE_TF32 === undefined)
      process.env.MLX_ENABLE_TF32 = options.precision === 'tf32' ? '1' : '0';
    // From the process's pool: MLX never frees a stream (nor its thread), so released sessions give theirs back.
    const streams = takeStreams(device);
    notify(options, { phase: 'load', state: 'end', model: name, ms: performance.now() - t0 });
    const t1 = performance.now();
    profiler?.add('Session', options.modelPath ? 'model_loading_uri' : 'model_loading_array', t0, t1, {
      nodes: plan.nodes.length,
      fallback_nodes: unsupported.length,
    });
    notify(options, { phase: 'upload', state: 'start', model: name });
    try {
      within(streams, () => {
        foldConstants(program, constants);
        makeConstantsResident(program, constants);
      });
    } catch (e) {
      releaseDeviceConstants(program);
      constants.release();
      giveStreams(streams);
      throw e;
    }
    notify(options, { phase: 'upload', state: 'end', model: name, ms: performance.now() - t1 });
    const session = new MlxSession(model, program, constants, options, name, streams, unsupported, cpu, fallback !== 'none');
    session.profiler = profiler;
    session.rewrites = rewrites;
    session.initStart = t1;
    session.log = log;
    return session;
  }

  /** Hits, misses and evictions of the compiled path's signature cache. */
  get compileStats(): Readonly<CompileStats> {
    return { ...this.runner.stats };
  }

  /** @internal The shape of each cached signature's program (segments, steps, traced segments). */
  describeSignatures(): ReturnType<ModelRunner['describe']> {
    return this.runner.describe();
  }

  /**
   * @internal Whether run() may fetch `name`: an output, or a value a node of the plan produces
   * (values the plan folded away or aliased are not there). For `mlx-ort bisect`.
   */
  canFetch(name: string): boolean {
    return this.outputNames.includes(name) || this.program.plan.producer.has(name);
  }

  private checkRun(feeds: Record<string, HostTensor | Value>, fetches: readonly string[]): void {
    if (this.released) throw new OrtMlxError(`model ${this.name}: session was released`);
    // The feeds and fetches of the last checked run again (same names, types, dims, lengths): the
    // checks below are functions of exactly these, and passed then.
    const memo = this.runner.feedMemo;
    if (memo.matches(feeds, fetches)) return;
    validateFeeds(this.name, this.model.graph, this.inputNames, feeds);
    for (const f of fetches) {
      if (!this.outputNames.includes(f) && !this.program.plan.producer.has(f))
        throw new InvalidFeedError(`model ${this.name}: unknown output '${f}' (outputs are: ${this.outputNames.join(', ')})`);
    }
    memo.remember(feeds, fetches);
  }

  private newRun(options: MlxRunOptions): RunState {
    const run = this.runner.newRun();
    const keep = options.keepOnDevice;
    run.donated = new Set(options.donate ?? []);
    run.terminated = () => options.terminate === true;
    run.keptOnDevice = (name) => keep === true || (Array.isArray(keep) && keep.includes(name));
    run.profiler = this.profiler;
    return run;
  }

  /** A run's end: its profile event (where `profiler` records) and its VERBOSE log entry, each with the path that ran it. */
  private endRun(path: string, start: number, options: MlxRunOptions, profiler: Profiler | undefined): void {
    profiler?.add('Session', 'model_run', start, performance.now(), { path, ...tagOf(options) });
    const level = (options.logSeverityLevel ?? this.log.level) as LogSeverity | undefined;
    this.log.log(
      0,
      'run',
      () =>
        `model ${this.name}: run${options.tag ? ` '${options.tag}'` : ''} by the ${path} path, ${(performance.now() - start).toFixed(3)} ms`,
      level,
    );
  }

  /** Which path ran `run`, for its profile event. */
  private pathOf(run: RunState): string {
    if (run.replaying) return run.freshTrace ? 'trace' : 'replay';
    return (this.options.compiled ?? true) && !run.unanalysed ? 'analyse' : 'eager';
  }

  /** Starts a profile (onnxruntime's InferenceSession.startProfiling); one already running goes on. */
  startProfiling(): void {
    this.profiler ??= new Profiler(this.options.profileFilePrefix ?? DEFAULT_PROFILE_PREFIX);
  }

  /**
   * Ends the profile and writes it (onnxruntime's format; see src/execute/profiler.ts). Returns
   * the file's path, or undefined when no profile was running.
   */
  endProfiling(): string | undefined {
    const p = this.profiler;
    this.profiler = undefined;
    return p?.write();
  }

  /**
   * Whether the run whose graph was just built meets its feed signature for the first time
   * ('analyse': it ran eagerly, recording what each node reads) or traces it ('trace': its
   * evaluation, next, builds the kernels on a GPU); reports the start of that phase.
   */
  private firstUse(run: RunState, missesBefore: number): 'analyse' | 'trace' | undefined {
    const phase = run.freshTrace ? 'trace' : this.runner.stats.misses > missesBefore ? 'analyse' : undefined;
    if (phase) notify(this.options, { phase, state: 'start', model: this.name });
    if (phase)
      this.log.log(1, 'signature', () =>
        phase === 'analyse'
          ? `model ${this.name}: a new input signature, analysed on this run (node by node); the next run of it traces it`
          : `model ${this.name}: tracing the input signature analysed before; later runs of it replay the trace`,
      );
    return phase;
  }

  /** Runs synchronously (blocks the thread for the compute). For scripts; servers want run(). */
  runSync(
    feeds: Record<string, HostTensor | Value>,
    fetches: string[] = this.outputNames,
    options: MlxRunOptions = {},
  ): Record<string, HostTensor | Value> {
    for (;;) {
      try {
        return this.runSyncOnce(feeds, fetches, options);
      } catch (e) {
        if (isAllocationFailure(e)) throw allocationError(e, this.name);
        if (!(e instanceof RuntimeTypeRefusal) || options.donate?.length || !this.replan(e)) throw e;
      }
    }
  }

  private runSyncOnce(
    feeds: Record<string, HostTensor | Value>,
    fetches: string[],
    options: MlxRunOptions,
  ): Record<string, HostTensor | Value> {
    this.checkRun(feeds, fetches);
    const start = performance.now();
    const mode = oneCallMode(options);
    if (mode) {
      const done = this.runner.runHost(feeds, fetches, this.name, mode);
      if (done) {
        this.profileOneCall(start, options);
        return done;
      }
    }
    const run = this.newRun(options);
    const misses = this.runner.stats.misses;
    try {
      const values = driveSync(this.streams, run, this.runner.run(run, feeds, fetches));
      donateFeeds(feeds, options.donate, values);
      const phase = this.firstUse(run, misses);
      const t0 = performance.now();
      evalSync(this.streams, run, deviceArrays(values));
      run.replaying?.evaluated(performance.now() - t0);
      if (phase) notify(this.options, { phase, state: 'end', model: this.name, ms: performance.now() - start });
      return this.collect(fetches, values, run, options);
    } finally {
      this.endRun(this.pathOf(run), start, options, run.profiler);
      mx.dispose([...run.arrays]);
    }
  }

  /**
   * Runs without blocking the event loop: the lazy graph is built in short synchronous steps and
   * MLX evaluates off the JS thread. Runs of one session queue in order; runs of different
   * sessions overlap.
   */
  run(
    feeds: Record<string, HostTensor | Value>,
    fetches: string[] = this.outputNames,
    options: MlxRunOptions = {},
  ): Promise<Record<string, HostTensor | Value>> {
    const result = this.queue.then(async () => {
      // A node whose check refuses the element types it meets (RuntimeTypeRefusal) moves to the
      // fallback, and the run starts again on the new plan (not when it donated feeds: they are gone).
      for (;;) {
        try {
          return await this.runOnce(feeds, fetches, options);
        } catch (e) {
          // Where no step named it (uploading the feeds, reading the outputs back): the run's.
          if (isAllocationFailure(e)) throw allocationError(e, this.name);
          if (!(e instanceof RuntimeTypeRefusal) || options.donate?.length || !this.replan(e)) throw e;
          await this.openFallbacks();
        }
      }
    });
    this.queue = result.catch(() => undefined);
    return result;
  }

  private async runOnce(
    feeds: Record<string, HostTensor | Value>,
    fetches: string[],
    options: MlxRunOptions,
  ): Promise<Record<string, HostTensor | Value>> {
    {
      this.checkRun(feeds, fetches);
      const start = performance.now();
      // A replay in one native call: on this thread when its last evaluation was short
      // (shortEvalMs; runsInline), on the stream's evaluation thread otherwise.
      const mode = oneCallMode(options);
      const one = mode && this.runner.oneCall(feeds, fetches, mode);
      const short = one?.program.hostRunsInline(this.shortEvalMs);
      const running = one && !short ? one.program.runHostAsync(feeds, this.name, mode) : undefined;
      if (one && (short || running)) {
        this.runner.countOneCall();
        const done = running ? await running : one.program.runHost(feeds, this.name, mode);
        this.profileOneCall(start, options);
        if (short) {
          this.runner.stats.inlineEvals++;
          // As below: the event loop turns before the result resolves, at least every TURN_EVERY_MS.
          const turn = turnEventLoop();
          if (turn) await turn;
        }
        return done;
      }
      const run = this.newRun(options);
      run.deferSyncs = true;
      const misses = this.runner.stats.misses;
      try {
        const values = await driveAsync(this.streams, run, this.runner.run(run, feeds, fetches));
        donateFeeds(feeds, options.donate, values);
        const phase = this.firstUse(run, misses);
        const arrays = deviceArrays(values);
        const t0 = performance.now();
        // A replay (every segment traced, no steps, kernels built) whose last evaluation was short:
        // on this thread, without the hop to the worker and back (shortEvalMs).
        const replay = run.replaying;
        // An eager run (compiled: false, or a signature run unanalysed) on the CPU whose last such
        // evaluation was short: on this thread too (a cache fed from the host, a new shape every step).
        const eager =
          !replay && !run.analysis && !run.freshTrace && this.streams.main.device.type === 'cpu' && this.runner.stats.misses === misses;
        if (
          (replay && run.budgetKnown && !run.freshTrace && replay.lastEvalMs() < this.shortEvalMs) ||
          (eager && this.eagerEvalMs < this.shortEvalMs)
        ) {
          evalSync(this.streams, run, arrays);
          replay?.evaluated(performance.now() - t0);
          if (eager) this.eagerEvalMs = performance.now() - t0;
          this.runner.stats.inlineEvals++;
          // Everything so far ran in microtasks: let the event loop turn (timers, I/O) before the
          // result resolves, as a worker's completion would, so that a loop of awaited runs never
          // starves it (turnEventLoop: at least every TURN_EVERY_MS).
          const turn = turnEventLoop();
          if (turn) await turn;
        } else {
          await evalAsync(this.streams, run, arrays);
          replay?.evaluated(performance.now() - t0);
          if (eager) this.eagerEvalMs = performance.now() - t0;
        }
        if (phase) notify(this.options, { phase, state: 'end', model: this.name, ms: performance.now() - start });
        return this.collect(fetches, values, run, options);
      } finally {
        this.endRun(this.pathOf(run), start, options, run.profiler);
        mx.dispose([...run.arrays]);
      }
    }
  }

  /** The run's results on the host (or kept on the device), timed as a 'download' event when profiling. */
  private collect(fetches: string[], values: Value[], run: RunState, options: MlxRunOptions): Record<string, HostTensor | Value> {
    const t0 = run.profiler ? performance.now() : 0;
    const out = within(this.streams, () => collectOutputs(fetches, values, run, options, this.pooledResults));
    if (run.profiler) {
      let bytes = 0;
      for (const v of Object.values(out)) if (!('kind' in v)) bytes += (v.data as { byteLength?: number }).byteLength ?? 0;
      run.profiler.add('Session', 'download', t0, performance.now(), { bytes });
    }
    return out;
  }

  /** The events of a run that took the one-call path: one replay, feeds in and results out included. */
  private profileOneCall(start: number, options: MlxRunOptions): void {
    this.profiler?.add('Session', 'program_replay', start, performance.now(), { path: 'one-call', nodes: this.program.plan.nodes.length });
    this.endRun('one-call', start, options, this.profiler);
  }

  /**
   * The value of a scalar output, or of a loss the caller computes from the outputs with
   * `@mlx/core` ops, and its gradients with respect to named inputs and initializers (grad.ts):
   * MLX's valueAndGrad over an eager walk of the plan. Queued with the session's runs.
   */
  valueAndGrad(feeds: Record<string, HostTensor | Value>, options: ValueAndGradOptions): Promise<ValueAndGradResult> {
    const result = this.queue.then(() => this.gradOnce(feeds, options, true));
    this.queue = result.catch(() => undefined);
    return result;
  }

  /** valueAndGrad on the calling thread (it blocks for the compute). */
  valueAndGradSync(feeds: Record<string, HostTensor | Value>, options: ValueAndGradOptions): ValueAndGradResult {
    return this.gradOnce(feeds, options, false) as ValueAndGradResult;
  }

  private gradOnce(
    feeds: Record<string, HostTensor | Value>,
    options: ValueAndGradOptions,
    async: boolean,
    lossScale?: number,
  ): ValueAndGradResult | Promise<ValueAndGradResult> {
    this.checkRun(feeds, []);
    const run = this.runner.newRun();
    const finish = (): ValueAndGradResult => {
      const keep = { keepOnDevice: options.keepOnDevice === true };
      const value = Number(within(this.streams, () => built.value.toTypedArray())[0]);
      const wrt = [...options.wrt];
      return {
        value,
        grads: this.collect(wrt, built.grads, run, keep),
        outputs: this.collect(built.fetches, built.outputs, run, keep),
      };
    };
    let built: ReturnType<typeof buildValueAndGrad>;
    const fail = (e: unknown): never => {
      mx.dispose([...run.arrays]);
      throw isAllocationFailure(e) ? allocationError(e, this.name) : capturedArrayError(e, this.name);
    };
    try {
      built = within(this.streams, () =>
        mx.collect(run.arrays, () => buildValueAndGrad(this.gradTarget(), run, feeds, options, lossScale)),
      );
      const arrays = [built.value, ...deviceArrays(built.grads), ...deviceArrays(built.outputs)];
      if (!async) {
        evalSync(this.streams, run, arrays);
        const r = finish();
        mx.dispose([...run.arrays]);
        return r;
      }
      return evalAsync(this.streams, run, arrays).then(() => {
        try {
          const r = finish();
          mx.dispose([...run.arrays]);
          return r;
        } catch (e) {
          return fail(e);
        }
      }, fail);
    } catch (e) {
      return fail(e);
    }
  }

  private gradTarget(): GradTarget {
    return {
      modelName: this.name,
      program: this.program,
      inputNames: this.inputNames,
      outputNames: this.outputNames,
      rewrites: this.rewrites,
    };
  }

  // --- Training (train.ts, save-model.ts): parameters updated in place, trainStep, saveModel. ---

  /**
   * The current values of initializers by name (default: every floating-point one), as MLX
   * arrays the caller owns and disposes (copies: the session keeps its own).
   */
  parameters(names?: readonly string[]): Record<string, mx.Array> {
    return within(this.streams, () => readParameters(this.paramTarget(), names));
  }

  /**
   * Replaces initializers by new values (copied; shape and element type must match), for the runs
   * and valueAndGrads that start after it: folded nodes that read them run again, and the compiled
   * signatures, which captured the old values, are dropped.
   */
  setParameters(record: Record<string, mx.Array | HostTensor>): void {
    const stale: mx.Array[] = [];
    try {
      within(this.streams, () => writeParameters(this.paramTarget(), record, stale));
    } finally {
      if (stale.length) this.renewRunner(stale);
    }
  }

  /**
   * A new runner (no compiled signatures) for the runs to come; the old one and the arrays the
   * new parameters replaced are freed once the runs queued before have ended, which may still read them.
   */
  private renewRunner(stale: mx.Array[]): void {
    const old = this.runner;
    this.runner = this.newRunner();
    Object.assign(this.runner.stats, old.stats, { size: 0 });
    void this.queue.then(() => {
      old.release();
      mx.dispose(stale);
    });
  }

  /**
   * One training step: valueAndGrad of `output` with respect to the parameters `wrt` (default:
   * all), the optimizer's step, and the new values written into the session. Queued with runs.
   */
  trainStep(feeds: Record<string, HostTensor | Value>, options: TrainStepOptions): Promise<TrainStepResult> {
    checkTrainStep(options);
    const result = this.queue.then(async () => {
      const wrt = [...(options.wrt ?? parameterNames(this.paramTarget()))];
      checkParameters(this.paramTarget(), wrt, 'trainStep');
      const { mixedPrecision } = options;
      const scaler = mixedPrecision === 'float16' ? (options.lossScaler ?? (this.lossScaler ??= new LossScaler())) : undefined;
      const lossScale = scaler?.scale;
      const r = await this.gradOnce(
        feeds,
        {
          output: options.output,
          wrt,
          fetches: options.fetches,
          keepOnDevice: true,
          mixedPrecision,
          checkpoint: options.checkpoint,
          attention: options.attention,
        },
        true,
        lossScale,
      );
      const grads = wrt.map((n) => (r.grads[n] as Value & { kind: 'device' }).array);
      try {
        const scaled = lossScale === undefined ? {} : { lossScale };
        // float16: gradients that overflowed skip the step (parameters and optimizer untouched).
        if (scaler) {
          const finite = within(this.streams, () => allFinite(grads));
          scaler.update(finite);
          if (!finite) {
            const outputs = options.keepOnDevice ? r.outputs : hostOutputs(r.outputs);
            return { loss: r.value, skipped: true, ...scaled, outputs };
          }
        }
        const stale: mx.Array[] = [];
        let gradNorm: number | undefined;
        try {
          gradNorm = within(this.streams, () =>
            lossScale === undefined
              ? applyStep(this.paramTarget(), wrt, grads, options, stale)
              : // The gradients of the scaled loss, unscaled lazily: each group's division runs within the optimizer's step.
                mx.scope(() =>
                  applyStep(
                    this.paramTarget(),
                    wrt,
                    grads.map((g) => mx.divide(g, lossScale)),
                    options,
                    stale,
                  ),
                ),
          ).gradNorm;
        } finally {
          if (stale.length) this.renewRunner(stale);
        }
        const outputs = options.keepOnDevice ? r.outputs : hostOutputs(r.outputs);
        return {
          loss: r.value,
          ...(gradNorm === undefined ? {} : { gradNorm }),
          ...(scaler ? { skipped: false } : {}),
          ...scaled,
          outputs,
        };
      } finally {
        mx.dispose(grads);
        if (!options.keepOnDevice)
          mx.dispose(Object.values(r.outputs).map((v) => ('kind' in v && v.kind === 'device' ? v.array : undefined)));
      }
    });
    this.queue = result.catch(() => undefined);
    return result;
  }

  /**
   * The model with its current initializers as ONNX bytes; with `path`, also written there, and
   * initializers of 1 MiB and more (options.externalData) in a data file beside it.
   */
  saveModel(path?: string, options?: SaveModelOptions): Uint8Array {
    this.paramTarget();
    return within(this.streams, () => saveModel({ modelName: this.name, model: this.model, program: this.program }, path, options));
  }

  private paramTarget(): ParameterTarget {
    if (this.released) throw new OrtMlxError(`model ${this.name}: session was released`);
    return { modelName: this.name, program: this.program, constants: this.constants, rewrites: this.rewrites };
  }

  // --- End of training. ---

  /** The device the session runs on. */
  get device(): 'cpu' | 'gpu' {
    return this.streams.main.device.type;
  }

  /** The MLX backend that runs the session: 'cuda' or 'metal' on a GPU, 'cpu' otherwise. */
  get backend(): 'cpu' | 'cuda' | 'metal' {
    if (this.device === 'cpu') return 'cpu';
    return mx.cudaAvailable() ? 'cuda' : 'metal';
  }

  /**
   * Compiles ahead of the first real request. Runs the model on `feeds` (default: zeros of each
   * input's declared shape, symbolic or unknown dimensions taken from `dims`, else 1) as many
   * times as the compiled path needs to trace and compile that feed signature (twice; once with
   * `compiled: false`), so that MLX builds its kernels (on CUDA, NVRTC compiles them, seconds per
   * model on a cold kernel cache) now rather than on the first request. Returns each run's time.
   * Warm only the signatures that requests will use: each one is compiled separately.
   */
  async warmup(options: { feeds?: Record<string, HostTensor>; dims?: Record<string, number> } = {}): Promise<{ runsMs: number[] }> {
    const feeds = options.feeds ?? this.zeroFeeds(options.dims ?? {});
    const runsMs: number[] = [];
    const n = (this.options.compiled ?? true) ? 2 : 1;
    for (let r = 0; r < n; r++) {
      const t0 = performance.now();
      await progress(this.options, this.name, 'warmup', () => this.run(feeds), `run ${r + 1} of ${n}`);
      runsMs.push(performance.now() - t0);
    }
    return { runsMs };
  }

  private zeroFeeds(dims: Record<string, number>): Record<string, HostTensor> {
    const feeds: Record<string, HostTensor> = {};
    for (const m of this.inputMetadata) {
      if (!m.isTensor) throw new InvalidFeedError(`model ${this.name}: warmup: input '${m.name}' is a ${m.type}, not a tensor: pass feeds`);
      const shape = m.shape.map((d) => {
        const v = typeof d === 'string' ? dims[d] : d < 0 ? undefined : d;
        if (v !== undefined && (!Number.isInteger(v) || v < 0))
          throw new InvalidFeedError(
            `model ${this.name}: warmup: dimension '${String(d)}' of input '${m.name}' must be a non-negative integer, got ${v}`,
          );
        return v ?? 1;
      });
      feeds[m.name] = {
        dtype: m.elemType,
        dims: shape,
        data: allocHost(
          m.elemType,
          shape.reduce((a, b) => a * b, 1),
        ),
      };
    }
    return feeds;
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    // A profile never ended is written now, as onnxruntime writes it when its session ends.
    if (this.profiler?.events.length) {
      try {
        this.endProfiling();
      } catch (e) {
        process.emitWarning(`model ${this.name}: the profile could not be written: ${messageOf(e)}`);
      }
    }
    // A run in flight keeps its arrays until it ends; the session's own state goes now.
    this.runner.release();
    // onnxruntime's process goes now: a fallback partition in flight (a Loop of 2^40 iterations)
    // would otherwise keep the run, and this release, waiting without bound. That run fails.
    this.program.stopFallbacks();
    releaseDeviceConstants(this.program);
    this.constants.release();
    void this.queue.then(() => {
      this.program.releaseFallbacks();
      giveStreams(this.streams);
    });
  }
}

/** Why device 'gpu' cannot be had here, and what to install. */
function noGpuMessage(): string {
  const lib = mx.nativeLibraryPath ? ` (${mx.nativeLibraryPath})` : '';
  const fix =
    process.platform === 'darwin'
      ? process.arch === 'arm64'
        ? "install @mlx/sys-darwin-arm64 (MLX's Metal build)"
        : 'MLX has no GPU backend on Intel Macs'
      : process.platform === 'linux' && process.arch === 'x64'
        ? 'for an NVIDIA GPU, install @mlx/sys-linux-x64-cuda13 (CUDA 13 drivers) and set MLX_BACKEND=cuda or leave it unset'
        : `MLX has no GPU backend for ${process.platform}-${process.arch}`;
  return `device 'gpu' was asked for, but the MLX library loaded${lib} has no GPU backend (or no GPU answers): ${fix}; or use device 'cpu'`;
}

/** What the log says of a new session's plan: each node's placement, the partitions, the rewrites. */
function logPlan(
  log: SessionLog,
  name: string,
  plan: GraphProgram['plan'],
  unsupported: readonly UnsupportedNode[],
  rewrites: RewriteCounts,
  mayFallBack: boolean,
): void {
  const why = new Map(unsupported.map((u) => [u.nodeName, u.reason]));
  let onMlx = 0;
  let onOrt = 0;
  let partitions = 0;
  for (const pn of plan.nodes) {
    if (pn.fallback) {
      partitions++;
      for (const inner of pn.fallback.nodes) {
        onOrt++;
        const reason = why.get(inner.node.name);
        log.log(
          0,
          'placement',
          () =>
            `node '${inner.node.name}' (${inner.node.opType}): onnxruntime, partition ${pn.fallback!.index}${reason ? ` (${reason})` : ' (between nodes MLX does not take)'}`,
        );
      }
    } else {
      onMlx++;
      log.log(
        0,
        'placement',
        () => `node '${pn.node.name}' (${pn.node.domain === 'ai.onnx' ? '' : `${pn.node.domain}::`}${pn.node.opType}): MLX`,
      );
    }
  }
  for (const pn of plan.nodes)
    if (pn.fallback)
      log.log(
        0,
        'partition',
        () =>
          `partition ${pn.fallback!.index}: ${pn.fallback!.nodes.length} node(s) on onnxruntime, inputs ${pn.fallback!.inputs.join(', ')}, outputs ${pn.fallback!.outputs.join(', ')}`,
      );
  const applied = Object.entries(rewrites).filter(([, n]) => n);
  log.log(0, 'rewrite', () =>
    applied.length ? `rewrites: ${applied.map(([r, n]) => `${r} x${n}`).join(', ')}` : 'rewrites: none applied',
  );
  log.log(
    1,
    'session',
    () => `model ${name}: ${onMlx} node(s) on MLX${onOrt ? `, ${onOrt} on onnxruntime in ${partitions} partition(s)` : ''}`,
  );
  if (onOrt && mayFallBack)
    log.log(
      2,
      'placement',
      () =>
        `model ${name}: ${onOrt} node(s) run on onnxruntime (the fallback), not on MLX: ${[...new Set(unsupported.map((u) => u.opType))].join(', ')}`,
    );
}

/** What the weight-layout rewrites need to know of the device a session runs on. */
function rewriteTargetFor(device: 'cpu' | 'gpu'): RewriteTarget {
  if (device === 'gpu') return { transposeWeights: true };
  return { packDense: mx.cpuKernelsUseAvx512() || mx.cpuKernelsUseAvx2() };
}

/**
 * The model as planned (rewritten, functions inlined) as an ONNX file: onnxruntime's
 * optimizedModelFilePath. Fused nodes keep their domain, 'mlx.fused' (opset 1), which only this
 * provider runs; a model without them loads anywhere.
 */
function writeOptimizedModel(model: ModelIR, path: string, name: string): void {
  const opsets = new Map(model.opsetImports);
  if (hasFusedNodes(model.graph)) opsets.set(FUSED_DOMAIN, 1);
  const bytes = encodeModel({ irVersion: model.irVersion, opsets, graph: encodeGraph(model.graph) });
  try {
    writeFileSync(path, bytes);
  } catch (e) {
    throw new OrtMlxError(`model ${name}: optimizedModelFilePath '${path}' could not be written: ${messageOf(e)}`, { cause: e });
  }
}

/** Whether the rewrites left a fused node in `graph` or one of its subgraphs. */
function hasFusedNodes(graph: GraphIR): boolean {
  return graph.nodes.some((n) => n.domain === FUSED_DOMAIN || subgraphsOf(n).some((s) => hasFusedNodes(s.graph)));
}

/** onnxruntime's default profile prefix (its files are onnxruntime_profile__<date>.json). */
const DEFAULT_PROFILE_PREFIX = 'onnxruntime_profile_';

/** RunOptions.tag, for a run's profile event. */
const tagOf = (options: MlxRunOptions): { tag?: string } => (options.tag ? { tag: options.tag } : {});

function fallbackFromEnv(): 'cpu' | 'none' | undefined {
  const v = process.env.MLX_ORT_FALLBACK;
  if (v === undefined || v === '') return undefined;
  if (v !== 'cpu' && v !== 'none') throw new TypeError(`MLX_ORT_FALLBACK must be 'cpu' or 'none', got '${v}'`);
  return v;
}

function limitOption(v: number | undefined, name: string): number | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0)
    throw new TypeError(`${name} must be a positive number of bytes, got ${String(v)}`);
  return Math.floor(v);
}

/** Frees the folded device constants of a program and its subprograms. */
function releaseDeviceConstants(program: GraphProgram): void {
  for (const v of program.plan.constants.values()) if (v.kind === 'device') v.array.dispose();
  for (const sub of program.subprograms.values()) releaseDeviceConstants(sub);
}

/**
 * Puts back into each graph the initializers makeConstantsResident dropped (a host copy of what
 * MLX holds), so that the graph can be planned again.
 */
function restoreInitializers(program: GraphProgram): void {
  const plan = program.plan;
  for (const name of plan.residentInitializers ?? []) {
    const v = plan.constants.get(name);
    if (v?.kind === 'device' && !plan.graph.initializers.has(name)) plan.graph.initializers.set(name, asHost(v, `initializer '${name}'`));
  }
  plan.residentInitializers = undefined;
  for (const sub of program.subprograms.values()) restoreInitializers(sub);
}

/** Device outputs of a training step as host tensors (the arrays stay the caller's to dispose). */
function hostOutputs(outputs: Record<string, HostTensor | Value>): Record<string, HostTensor | Value> {
  const out: Record<string, HostTensor | Value> = {};
  for (const [k, v] of Object.entries(outputs)) out[k] = 'kind' in v && v.kind === 'device' ? asHost(v, `output '${k}'`) : v;
  return out;
}
