// MlxSession: a planned model and its runs, over host tensors. The onnxruntime-common backend
// (backend.ts) wraps it; it is also the lower-level API for element types that
// onnxruntime-common's Tensor cannot hold (bfloat16, float8, int4 as unpacked bytes).
import { basename } from 'node:path';
import * as mx from '@mlx/core';
import {
  OnnxDataType,
  allocHost,
  dataTypeName,
  readRegularFile,
  type ExternalDataSpec,
  type HostTensor,
  type ModelIR,
  type TypeIR,
  type ValueInfoIR,
} from './onnx/index.js';
import type { OpRegistry } from './registry/registry.js';
import { resolveCpuBackend, type CpuBackend, type CpuBackendName } from './runtime/onnxruntime.js';
import { ConstantStore } from './runtime/uploads.js';
import { asHost, shapeOf, type Value } from './runtime/value.js';
import { checkDestination, downloadInto, downloadPinned } from './runtime/convert.js';
import { planModel, prepareModel } from './plan/prepare.js';
import type { RewriteSelection } from './plan/rewrite/index.js';
import { driveAsync, driveSync, evalAsync, evalSync, within, type RunStreams } from './execute/driver.js';
import { foldConstants, makeConstantsResident, registerConstants } from './execute/fold.js';
import { GraphProgram } from './execute/run.js';
import { ModelRunner, type CompileStats } from './execute/runner.js';
import type { RunState } from './execute/env.js';
import {
  InvalidFeedError,
  OnnxLoadError,
  OrtMlxError,
  RuntimeTypeRefusal,
  UnsupportedOperatorError,
  messageOf,
  type UnsupportedNode,
} from './errors.js';

export interface MlxSessionOptions {
  /** Where MLX runs the model: 'gpu' (Metal or CUDA, where available) or 'cpu'. Default: MLX's default device. */
  device?: 'gpu' | 'cpu';
  /**
   * The compiled path (default true): per feed signature, shape math is folded once and the
   * device work is traced with mlx.compile and replayed. The first run of a signature runs
   * eagerly and learns the signature; the second traces. false: every run walks the plan.
   */
  compiled?: boolean;
  /**
   * float32 matrix products and convolutions on a GPU: 'fp32' (the default, as onnxruntime's CUDA
   * provider does) or 'tf32', MLX's default, which rounds operands to 10 mantissa bits on the matrix
   * units: about 3e-4 relative error per product, enough to miss onnxruntime's outputs by 1e-3..1e-2
   * on transformer models. MLX reads the choice once per process (MLX_ENABLE_TF32), when the first
   * GPU product runs: the first session's setting holds for the process.
   */
  precision?: 'fp32' | 'tf32';
  /** Feed signatures whose compiled programs are kept (LRU). Default 16. */
  maxSignatures?: number;
  /**
   * run() of a compiled signature whose previous evaluation took under this many milliseconds
   * evaluates on the calling thread: handing a sub-millisecond graph to the worker thread and
   * back costs a good part of its compute (tens of microseconds on a CPU). The event loop then
   * waits that long, as it waits for building the graph. Default 1; 0: run() always evaluates off
   * the JS thread. The first runs of a signature (analysis, trace) always do.
   */
  shortEvalMs?: number;
  /**
   * Where results of 1 MiB and more land on the host: 'pooled' in host blocks from @mlx/core's
   * pool (hostBuffer: page-locked on MLX's CUDA build, so the copy engine writes them directly,
   * and their pages exist already), 'fresh' in new ArrayBuffers, 'auto' (default) pooled for GPU
   * sessions on MLX's CUDA build and fresh elsewhere. Either way the tensors are ordinary host
   * tensors (onnxruntime-common location 'cpu'); a block returns to the pool when its data is
   * garbage collected. `pinnedOutputs` (preferredOutputLocation 'cpu-pinned') asks for blocks
   * from 64 KiB, whatever this says.
   */
  outputMemory?: 'auto' | 'pooled' | 'fresh';
  /**
   * The most bytes one tensor of a run may take. A node whose result would be larger, or an
   * evaluation that would allocate a larger array, fails with ResourceLimitError before anything is
   * allocated. Default: half of MLX's memory limit for the device (mx.memory.limit()).
   */
  maxTensorBytes?: number;
  /** The most bytes one evaluation may allocate in all (each new array counted once). Default: MLX's memory limit. */
  maxSessionBytes?: number;
  /**
   * Nodes MLX does not take: 'cpu' (the default where onnxruntime-node or onnxruntime-web resolves)
   * runs them on onnxruntime's CPU backend, in partitions made at create(); 'none' refuses the
   * model with UnsupportedOperatorError (the default where neither resolves).
   */
  fallback?: 'cpu' | 'none';
  /**
   * Op types the MLX provider declines, so that they fall back ('Softmax', or with a domain
   * 'com.microsoft::Attention'): for testing, and for working around a bug.
   */
  disabledOps?: string[];
  /** @internal Which CPU backend runs fallback partitions (default: onnxruntime-node, else onnxruntime-web). */
  cpuBackend?: CpuBackendName;
  /** External data for models created from bytes (onnxruntime-common's `externalData`). */
  externalData?: ExternalDataSpec[];
  /** An alternative op registry (tests, experiments). */
  registry?: OpRegistry;
  /**
   * Plan-time graph rewrites (src/plan/rewrite): exporters' spellings of GELU, RMS and layer norm,
   * MatMul + bias and Pow(x, 2|3) become one op each. true (the default), false, or the names to
   * keep ('gelu', 'rms-norm', 'layer-norm', 'matmul-add', 'pow'). MLX_ORT_REWRITES=0 (or a
   * comma-separated list) sets the default.
   */
  graphRewrites?: RewriteSelection;
  /**
   * CPU threads (onnxruntime's session option of the same name): the fused CPU kernels' pool and
   * OpenBLAS, which MLX's CPU matrix products and convolutions run on. Both are per process, so
   * the last session that sets it wins. 0 or unset: left as is (default: every core this process
   * may use; OPENBLAS_NUM_THREADS for BLAS).
   */
  intraOpNumThreads?: number;
}

/** Per-run choices of MlxSession.run / runSync. */
export interface MlxRunOptions {
  /**
   * Outputs returned as device Values (`{ kind: 'device', array, onnxType }`) instead of host
   * tensors: true for all, or the names. Nothing is downloaded for them; the caller owns each
   * array and disposes it (`value.array.dispose()`), or feeds it to a later run.
   */
  keepOnDevice?: boolean | readonly string[];
  /**
   * Device feeds the run may consume (KV caches): their arrays are disposed once the graph is
   * built, before evaluation, so that MLX can write results into their buffers in place (a
   * GroupQueryAttention present written over its past, a growing cache's rows appended to its
   * reserve). The caller must not use them afterwards.
   */
  donate?: readonly string[];
  /**
   * Set to true while run() is in progress to stop it (onnxruntime-common's RunOptions.terminate):
   * read between the steps of the run (a long Loop or Scan pauses every ten milliseconds or so),
   * which then fails with RunTerminatedError.
   */
  terminate?: boolean;
  /**
   * Pre-allocated outputs, by name: the result is read straight into the tensor's data (no
   * intermediate copy; memory that is reused has its pages already, which on a GPU makes the
   * download run at the bus's rate). Its element type and dims must be the result's, and its data
   * a typed array of the class results come in (InvalidFeedError otherwise, before anything is
   * written). The returned tensor is this one.
   */
  outputBuffers?: Readonly<Record<string, HostTensor>>;
  /**
   * Outputs read into pooled host blocks (@mlx/core's hostBuffer: page-locked memory on MLX's CUDA
   * build, which the copy engine writes directly): true for all, or the names. A block goes back
   * to the pool when its data is garbage collected. Results under 64 KiB, and any once the pool
   * is at its limit, come in ordinary memory; `pinned: true` on a result says it got a block.
   */
  pinnedOutputs?: boolean | readonly string[];
}

export interface TensorMetadata {
  name: string;
  isTensor: boolean;
  /** ONNX element type code, and its name as onnxruntime-common spells it. */
  elemType: number;
  type: string;
  /** Each dimension: a number, a symbolic name, or -1 where unknown. */
  shape: (number | string)[];
}

function metadataOf(v: ValueInfoIR): TensorMetadata {
  const t = v.type;
  if (t.kind !== 'tensor') return { name: v.name, isTensor: false, elemType: 0, type: t.kind, shape: [] };
  return {
    name: v.name,
    isTensor: true,
    elemType: t.elemType,
    type: dataTypeName(t.elemType),
    shape: (t.shape ?? []).map((d) => (d === null || d === undefined ? -1 : d)),
  };
}

export class MlxSession {
  readonly inputNames: string[];
  readonly outputNames: string[];
  readonly inputMetadata: TensorMetadata[];
  readonly outputMetadata: TensorMetadata[];
  private released = false;
  private runner: ModelRunner;
  /**
   * Nodes re-planned onto the fallback after their check refused the element types they met at
   * run time (RuntimeTypeRefusal), for every later run of the session.
   */
  private readonly forced = new Map<object, string>();
  /** Runs of this session, one at a time, in the order they were asked for. */
  private queue: Promise<unknown> = Promise.resolve();

  /** Results of POOLED_RESULT_BYTES and more are read into pooled host blocks (outputMemory). */
  private readonly pooledResults: boolean;
  /** run() evaluates a replay whose last evaluation took under this on the calling thread (shortEvalMs). */
  private readonly shortEvalMs: number;

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
    /** The CPU backend of the fallback partitions, when one resolves (and fallback is not 'none'). */
    private readonly cpu?: CpuBackend,
  ) {
    const memory = options.outputMemory ?? 'auto';
    if (memory !== 'auto' && memory !== 'pooled' && memory !== 'fresh')
      throw new TypeError(`outputMemory must be 'auto', 'pooled' or 'fresh', got '${String(memory)}'`);
    this.pooledResults = memory === 'pooled' || (memory === 'auto' && streams.main.device.type === 'gpu' && mx.cudaAvailable());
    const short = options.shortEvalMs ?? 1;
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
    if (!this.cpu || this.forced.has(e.target)) return false;
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
    const bytes = typeof source === 'string' ? readModelFile(source) : source instanceof Uint8Array ? source : new Uint8Array(source);
    const name = typeof source === 'string' ? basename(source) : '<bytes>';
    const session = MlxSession.createSync(bytes, { ...options, modelPath: typeof source === 'string' ? source : undefined }, name);
    try {
      await session.openFallbacks();
    } catch (e) {
      session.release();
      throw e;
    }
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
    // MLX_ORT_FALLBACK=none|cpu sets the default (tests that must measure MLX alone, deployments that want no fallback).
    const fallback = options.fallback ?? fallbackFromEnv();
    if (fallback !== undefined && fallback !== 'cpu' && fallback !== 'none')
      throw new TypeError(`fallback must be 'cpu' or 'none', got '${String(fallback)}'`);
    const cpu = fallback === 'none' ? undefined : resolveCpuBackend(options.cpuBackend);
    const { model, plan, unsupported } = prepareModel(bytes, {
      modelPath: options.modelPath,
      externalData: options.externalData,
      registry: options.registry,
      modelName: name,
      disabledOps: options.disabledOps,
      partition: !!cpu,
      rewrites: options.graphRewrites,
    });
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
    const streams: RunStreams = { main: mx.newStream(device, { anyThread: true }) };
    if (device === 'gpu') streams.cpu = mx.newStream('cpu', { anyThread: true });
    within(streams, () => {
      foldConstants(program, constants);
      makeConstantsResident(program, constants);
    });
    return new MlxSession(model, program, constants, options, name, streams, unsupported, cpu);
  }

  /** Hits, misses and evictions of the compiled path's signature cache. */
  get compileStats(): Readonly<CompileStats> {
    return { ...this.runner.stats };
  }

  /** @internal The shape of each cached signature's program (segments, steps, traced segments). */
  describeSignatures(): ReturnType<ModelRunner['describe']> {
    return this.runner.describe();
  }

  private validateFeeds(feeds: Record<string, HostTensor | Value>): void {
    const g = this.model.graph;
    const known = new Map(g.inputs.map((i) => [i.name, i]));
    for (const name of Object.keys(feeds)) {
      if (!known.has(name))
        throw new InvalidFeedError(`model ${this.name}: unknown input '${name}' (inputs are: ${this.inputNames.join(', ')})`);
    }
    for (const name of this.inputNames) {
      if (!(name in feeds)) throw new InvalidFeedError(`model ${this.name}: missing input '${name}'`);
    }
    for (const [name, f] of Object.entries(feeds)) {
      const info = known.get(name)!;
      if (info.type.kind === 'map') this.validateMapFeed(name, info.type, f);
      if (info.type.kind !== 'tensor') continue;
      if ('kind' in f && f.kind === 'device') {
        this.validateDeviceFeed(name, info, f);
        continue;
      }
      if ('kind' in f && f.kind !== 'host') continue;
      const t = ('kind' in f ? f.tensor : f) as HostTensor;
      const want = info.type.elemType;
      if (want && t.dtype !== want) {
        throw new InvalidFeedError(
          `model ${this.name}: input '${name}' expects element type ${dataTypeName(want)}, got ${dataTypeName(t.dtype)}`,
        );
      }
      const shape = info.type.shape;
      if (!shape) continue;
      if (shape.length !== t.dims.length) {
        throw new InvalidFeedError(
          `model ${this.name}: input '${name}' expects rank ${shape.length} (shape [${shape.map((d) => d ?? '?').join(', ')}]), got rank ${t.dims.length} (shape [${t.dims.join(', ')}])`,
        );
      }
      shape.forEach((d, i) => {
        if (typeof d === 'number' && d >= 0 && t.dims[i] !== d) {
          throw new InvalidFeedError(
            `model ${this.name}: input '${name}' expects dimension ${i} to be ${d}, got ${t.dims[i]} (shape [${t.dims.join(', ')}])`,
          );
        }
      });
      const n = t.dims.reduce((a, b) => a * b, 1);
      const len = t.dtype === OnnxDataType.COMPLEX64 ? t.data.length / 2 : t.data.length;
      if (len !== n)
        throw new InvalidFeedError(
          `model ${this.name}: input '${name}' has ${len} elements but its shape [${t.dims.join(', ')}] needs ${n}`,
        );
    }
  }

  /** A map feed (ai.onnx.ml): a map Value of the input's key and value types, 1-D keys and values of one length. */
  private validateMapFeed(name: string, type: Extract<TypeIR, { kind: 'map' }>, f: HostTensor | Value): void {
    const bad = (why: string) => new InvalidFeedError(`model ${this.name}: input '${name}' ${why}`);
    if (!('kind' in f) || f.kind !== 'map')
      throw bad(`is a map: feed { kind: 'map', keys, values } (1-D host tensors), got a ${'kind' in f ? f.kind : 'tensor'}`);
    if (f.keys.dtype !== type.keyType) throw bad(`expects ${dataTypeName(type.keyType)} keys, got ${dataTypeName(f.keys.dtype)}`);
    const valueType = type.value?.kind === 'tensor' ? type.value.elemType : undefined;
    if (valueType && f.values.dtype !== valueType)
      throw bad(`expects ${dataTypeName(valueType)} values, got ${dataTypeName(f.values.dtype)}`);
    const n = f.keys.data.length;
    if (
      f.keys.dims.length !== 1 ||
      f.values.dims.length !== 1 ||
      f.keys.dims[0] !== n ||
      f.values.dims[0] !== n ||
      f.values.data.length !== n
    )
      throw bad(
        `needs 1-D keys and values of one length, got keys [${f.keys.dims.join(', ')}] (${n} elements) and values [${f.values.dims.join(', ')}] (${f.values.data.length} elements)`,
      );
  }

  /** A device feed: a live array of the input's element type, rank and static dimensions. */
  private validateDeviceFeed(name: string, info: ValueInfoIR, f: Extract<Value, { kind: 'device' }>): void {
    if (f.array.disposed)
      throw new InvalidFeedError(`model ${this.name}: input '${name}' is a device array that was already disposed (or donated to a run)`);
    // A lazy array made on another thread's streams cannot be evaluated by the run's worker: evaluate it here.
    if (!f.array.isAvailable()) f.array.eval();
    if (info.type.kind !== 'tensor') return;
    const want = info.type.elemType;
    if (want && f.onnxType !== want)
      throw new InvalidFeedError(
        `model ${this.name}: input '${name}' expects element type ${dataTypeName(want)}, got ${dataTypeName(f.onnxType)}`,
      );
    const shape = info.type.shape;
    const dims = f.array.shape;
    if (shape && (shape.length !== dims.length || shape.some((d, i) => typeof d === 'number' && d >= 0 && dims[i] !== d)))
      throw new InvalidFeedError(
        `model ${this.name}: input '${name}' expects shape [${shape.map((d) => d ?? '?').join(', ')}], got [${dims.join(', ')}]`,
      );
  }

  private checkRun(feeds: Record<string, HostTensor | Value>, fetches: readonly string[]): void {
    if (this.released) throw new OrtMlxError(`model ${this.name}: session was released`);
    this.validateFeeds(feeds);
    for (const f of fetches) {
      if (!this.outputNames.includes(f) && !this.program.plan.producer.has(f))
        throw new InvalidFeedError(`model ${this.name}: unknown output '${f}' (outputs are: ${this.outputNames.join(', ')})`);
    }
  }

  private newRun(options: MlxRunOptions): RunState {
    const run = this.runner.newRun();
    const keep = options.keepOnDevice;
    run.donated = new Set(options.donate ?? []);
    run.terminated = () => options.terminate === true;
    run.keptOnDevice = (name) => keep === true || (Array.isArray(keep) && keep.includes(name));
    return run;
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
    const run = this.newRun(options);
    try {
      const values = driveSync(this.streams, run, this.runner.run(run, feeds, fetches));
      donateFeeds(feeds, options.donate, values);
      const t0 = performance.now();
      evalSync(this.streams, run, deviceArrays(values));
      run.replaying?.evaluated(performance.now() - t0);
      return within(this.streams, () => this.collect(fetches, values, run, options));
    } finally {
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
      const run = this.newRun(options);
      run.deferSyncs = true;
      try {
        const values = await driveAsync(this.streams, run, this.runner.run(run, feeds, fetches));
        donateFeeds(feeds, options.donate, values);
        const arrays = deviceArrays(values);
        const t0 = performance.now();
        // A replay (every segment traced, no steps, kernels built) whose last evaluation was short:
        // on this thread, without the hop to the worker and back (shortEvalMs).
        const replay = run.replaying;
        if (replay && run.budgetKnown && !run.freshTrace && replay.lastEvalMs() < this.shortEvalMs) {
          evalSync(this.streams, run, arrays);
          replay.evaluated(performance.now() - t0);
          this.runner.stats.inlineEvals++;
          // Everything so far ran in microtasks: let the event loop turn (timers, I/O) before the
          // result resolves, as a worker's completion would, so that a loop of awaited runs never
          // starves it.
          await new Promise<void>((resolve) => setImmediate(resolve));
        } else {
          await evalAsync(this.streams, run, arrays);
          replay?.evaluated(performance.now() - t0);
        }
        return within(this.streams, () => this.collect(fetches, values, run, options));
      } finally {
        mx.dispose([...run.arrays]);
      }
    }
  }

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
    for (let r = 0; r < ((this.options.compiled ?? true) ? 2 : 1); r++) {
      const t0 = performance.now();
      await this.run(feeds);
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

  /**
   * Outputs on the host: tensors as HostTensors, sequences as sequences of host values; those in
   * `keep` as device Values whose arrays the caller now owns (taken out of the run's arrays, or a
   * new handle where the run does not own the array: a feed, a constant, an output named twice).
   */
  private collect(fetches: readonly string[], values: Value[], run: RunState, options: MlxRunOptions): Record<string, HostTensor | Value> {
    const out: Record<string, HostTensor | Value> = {};
    const kept = new Set<mx.Array>();
    const { keepOnDevice: keep, pinnedOutputs: pin, outputBuffers: into } = options;
    const keepIt = (name: string) => keep === true || (Array.isArray(keep) && keep.includes(name));
    const pinIt = (name: string) => pin === true || (Array.isArray(pin) && pin.includes(name));
    const pooled = (a: mx.Array) => this.pooledResults && a.nbytes >= POOLED_RESULT_BYTES;
    if (into)
      for (const name of Object.keys(into))
        if (!fetches.includes(name)) throw new InvalidFeedError(`outputBuffers names '${name}', which this run does not fetch`);
    // Every pre-allocated output is checked before any is written.
    fetches.forEach((name, i) => {
      const dst = into?.[name];
      const v = values[i];
      if (!dst || keepIt(name)) return;
      if (v.kind !== 'device' && v.kind !== 'host')
        throw new InvalidFeedError(`output '${name}' is a ${v.kind}; a pre-allocated buffer holds only a tensor`);
      checkDestination(dst, v.kind === 'device' ? v.onnxType : v.tensor.dtype, shapeOf(v, `output '${name}'`), `output '${name}'`);
    });
    const toHost = (v: Value, where: string): Value =>
      v.kind === 'device'
        ? { kind: 'host', tensor: asHost(v, where) }
        : v.kind === 'sequence'
          ? { ...v, items: v.items.map((x) => toHost(x, where)) }
          : v;
    fetches.forEach((name, i) => {
      const v = values[i];
      if (keepIt(name) && v.kind === 'device') {
        const own = (a: mx.Array) => {
          if (!kept.has(a) && run.arrays.delete(a)) {
            kept.add(a);
            return a;
          }
          return mx.copy(a).eval();
        };
        const array = own(v.array);
        // A growing cache's reserve goes with its view (execute/kv-append.ts).
        const reserve = v.reserve && !v.reserve.buffer.disposed ? { axis: v.reserve.axis, buffer: own(v.reserve.buffer) } : undefined;
        out[name] = reserve ? { kind: 'device', array, onnxType: v.onnxType, reserve } : { kind: 'device', array, onnxType: v.onnxType };
        return;
      }
      const dst = into?.[name];
      if (dst && v.kind === 'device') out[name] = downloadInto(v.array, v.onnxType, dst, `output '${name}'`);
      else if (dst && v.kind === 'host') {
        (dst.data as unknown as { set(a: ArrayLike<unknown>): void }).set(v.tensor.data as ArrayLike<unknown>);
        out[name] = dst;
      } else if (v.kind === 'device' && pinIt(name)) out[name] = downloadPinned(v.array, v.onnxType);
      else if (v.kind === 'device' && pooled(v.array)) {
        // In a pooled block, but an ordinary host tensor to the caller.
        const host = downloadPinned(v.array, v.onnxType);
        delete host.pinned;
        out[name] = host;
      } else out[name] = v.kind === 'host' || v.kind === 'device' ? asHost(v, `output '${name}'`) : toHost(v, `output '${name}'`);
    });
    return out;
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    // A run in flight keeps its arrays until it ends; the session's own state goes now.
    this.runner.release();
    releaseDeviceConstants(this.program);
    this.constants.release();
    void this.queue.then(() => {
      this.program.releaseFallbacks();
      this.streams.main.dispose();
      this.streams.cpu?.dispose();
    });
  }
}

/** outputMemory 'pooled' and 'auto' read results of this size and more into host blocks. */
const POOLED_RESULT_BYTES = 1 << 20;

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

/** A model file's bytes; a path that is not a regular file (a FIFO, a folder) is an OnnxLoadError. */
function readModelFile(path: string): Uint8Array {
  try {
    return readRegularFile(path);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new OnnxLoadError(`cannot read the model file: ${code === 'ENOENT' ? 'no such file' : messageOf(e)}`, { model: path, cause: e });
  }
}

/**
 * Disposes the donated device feeds (MlxRunOptions.donate) once the graph is built, so that the
 * graph holds their arrays' only references and MLX may reuse their buffers for results. A feed
 * that is itself an output stays.
 */
function donateFeeds(feeds: Record<string, HostTensor | Value>, names: readonly string[] | undefined, outputs: readonly Value[]): void {
  if (!names?.length) return;
  const out = new Set(deviceArrays(outputs));
  for (const name of names) {
    const f = feeds[name];
    if (f && 'kind' in f && f.kind === 'device' && !out.has(f.array)) {
      f.array.dispose();
      if (f.reserve && !out.has(f.reserve.buffer)) f.reserve.buffer.dispose();
    }
  }
}

/** The device arrays among values (sequences included), to evaluate together. */
function deviceArrays(values: readonly Value[]): mx.Array[] {
  const out: mx.Array[] = [];
  const walk = (v: Value) => {
    if (v.kind === 'device') out.push(v.array);
    else if (v.kind === 'sequence') v.items.forEach(walk);
  };
  values.forEach(walk);
  return out;
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
