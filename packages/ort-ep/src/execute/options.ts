// The options of an MlxSession and of its runs, and what a session says of its inputs and outputs.
// Types only (and metadataOf): the session (session.ts), the executor and the backend share them.
import { checkSeverity, type MlxLogEntry } from './log.js';
import { dataTypeName, type ExternalDataSpec, type HostTensor, type ValueInfoIR } from '../onnx/index.js';
import type { OpRegistry } from '../registry/registry.js';
import type { CpuBackendName } from '../runtime/onnxruntime.js';
import type { RewriteSelection } from '../plan/rewrite/index.js';

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
   * waits that long, as it waits for building the graph. Default 2 (on 2 cores another process's
   * load made a 0.6 ms decode step measure over 1 ms now and then, and each such step sent the loop
   * through the hops, 0.3-0.5 ms each); 0: run() always evaluates off
   * the JS thread. The first runs of a signature (analysis, trace) always do. On the CPU, an eager
   * run (compiled: false, or a new signature run unanalysed) evaluates on the calling thread when
   * the previous eager run's evaluation took under this.
   */
  shortEvalMs?: number;
  /**
   * Where results of 1 MiB and more land on the host: 'pooled' in host blocks from @mlx/core's
   * pool (hostBuffer: page-locked on MLX's CUDA build, so the copy engine writes them directly,
   * and their pages exist already), 'fresh' in new ArrayBuffers, 'auto' (default) pooled, but fresh
   * for a CPU session in a worker thread (blocks still held when a worker ends are never returned):
   * a loop of runs then writes its results into the same pages, as onnxruntime-node's results are
   * memory of its own allocator (into new ones, GPT-2 small's 51 MB of logits cost ~50 ms of a
   * 0.5 s CPU run in page faults and collections). Either way the tensors are ordinary host tensors
   * (onnxruntime-common location 'cpu'); a block returns to the pool when its data is garbage
   * collected (@mlx/core's hostMemory bounds the pool and trims it). `pinnedOutputs`
   * (preferredOutputLocation 'cpu-pinned') asks for blocks from 64 KiB, whatever this says.
   */
  outputMemory?: 'auto' | 'pooled' | 'fresh';
  /**
   * The most bytes one tensor of a run may take. A node whose result would be larger, or an
   * evaluation that would allocate a larger array, fails with ResourceLimitError before anything is
   * allocated. Default: half of MLX's memory limit for the device (mx.memory.limit()).
   */
  maxTensorBytes?: number;
  /**
   * The most bytes one evaluation may hold at once (its new arrays, each freed after its last
   * reader, the results kept). Default: MLX's memory limit.
   */
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
  /**
   * Warms the session up inside create(), before it resolves: `true`, or the values of symbolic
   * dimensions (`{ dims: { sequence: 128 } }`; others are 1). Runs `warmup()` on zeros of each
   * input's declared shape, so that the first request replays an analysed and traced signature
   * (on a GPU, with its kernels built). Warm only the signature requests will use.
   */
  warmup?: boolean | { dims?: Record<string, number> };
  /**
   * Called as the session works through what can take seconds the first time: loading and
   * planning the model, uploading its constants, opening fallback sessions, warm-up runs, and runs
   * that meet a new feed signature (the first analyses it; the second traces it and evaluates the
   * trace, which on a GPU builds its kernels). A throw from the callback becomes a process warning.
   */
  onProgress?: (event: MlxProgressEvent) => void;
  /**
   * Profiles the session from its creation (onnxruntime's option of the same name): events go to
   * a Chrome-trace JSON file in onnxruntime's format, written by endProfiling() (or release()).
   * startProfiling() starts a profile later. See src/execute/profiler.ts for the events.
   */
  enableProfiling?: boolean;
  /**
   * onnxruntime's freeDimensionOverrides: sizes for the inputs' symbolic dimensions, by dim_param
   * or by denotation ('DATA_BATCH'): feeds must have them (inputs' metadata show the file's shape,
   * as onnxruntime's do).
   * Names that match no dimension are ignored, as onnxruntime ignores them.
   */
  freeDimensionOverrides?: Readonly<Record<string, number>>;
  /**
   * onnxruntime's optimizedModelFilePath: the model as planned (after the plan-time rewrites) is
   * written there as ONNX; fused nodes are in the domain 'mlx.fused', which only this provider runs.
   */
  optimizedModelFilePath?: string;
  /**
   * onnxruntime's logSeverityLevel: 0 verbose (each node's placement, the partitions, the rewrites,
   * each run's path), 1 info (a summary, new input signatures), 2 warning (nodes falling back),
   * 3 error, 4 fatal. Unset: the session logs nothing. See src/execute/log.ts.
   */
  logSeverityLevel?: 0 | 1 | 2 | 3 | 4;
  /** onnxruntime's logId: names the session in its log entries. */
  logId?: string;
  /** Receives the log's entries (at logSeverityLevel and above) instead of stderr. */
  onLog?: (entry: MlxLogEntry) => void;
  /** Which GPU: MLX runs one per process, device 0 (other values are refused). */
  deviceId?: number;
  /** The profile file's path before `_<date>.json`. Default 'onnxruntime_profile_' (in the working folder), as onnxruntime's. */
  profileFilePrefix?: string;
}

/** A step of MlxSessionOptions.onProgress: each phase reports its start and its end (with ms). */
export interface MlxProgressEvent {
  phase: 'load' | 'upload' | 'fallback' | 'warmup' | 'analyse' | 'trace';
  state: 'start' | 'end';
  /** The model (its file name, or '<bytes>'). */
  model: string;
  /** Milliseconds the phase took (on 'end'). */
  ms?: number;
  /** What the phase is about: 'run 1 of 2' for warm-up runs. */
  detail?: string;
}

/** Per-run choices of MlxSession.run / runSync. */
export interface MlxRunOptions {
  /** A name for the run (onnxruntime's RunOptions.tag): its profile event and log entries carry it. */
  tag?: string;
  /** This run's log level (onnxruntime's RunOptions.logSeverityLevel), over the session's. */
  logSeverityLevel?: 0 | 1 | 2 | 3 | 4;
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

export function metadataOf(v: ValueInfoIR): TensorMetadata {
  const t = v.type;
  if (t.kind !== 'tensor') return { name: v.name, isTensor: false, elemType: 0, type: t.kind, shape: [] };
  return {
    name: v.name,
    isTensor: true,
    elemType: t.elemType,
    type: dataTypeName(t.elemType),
    // As onnxruntime's: the file's shape, before freeDimensionOverrides.
    shape: (t.declared ?? t.shape ?? []).map((d) => (d === null || d === undefined ? -1 : d)),
  };
}

const describe = (v: unknown): string =>
  typeof v === 'string' ? `'${v}'` : Array.isArray(v) ? `[${v.map(describe).join(', ')}]` : String(v);

/**
 * The session options whose values create() would otherwise trip over later with a JavaScript error
 * ("sel is not iterable"): each checked for its type, a TypeError naming the option and the value.
 */
export function checkSessionOptions(options: MlxSessionOptions): void {
  if (typeof options !== 'object' || options === null) throw new TypeError(`session options must be an object, got ${describe(options)}`);
  const o = options as Record<string, unknown>;
  const rewrites = o.graphRewrites;
  if (rewrites !== undefined && typeof rewrites !== 'boolean' && !(Array.isArray(rewrites) && rewrites.every((n) => typeof n === 'string')))
    throw new TypeError(`graphRewrites must be true, false or a list of rewrite names, got ${describe(rewrites)}`);
  const disabled = o.disabledOps;
  if (disabled !== undefined && !(Array.isArray(disabled) && disabled.every((n) => typeof n === 'string')))
    throw new TypeError(`disabledOps must be an array of op types ('Softmax', 'com.microsoft::Attention'), got ${describe(disabled)}`);
  if (o.device !== undefined && o.device !== 'gpu' && o.device !== 'cpu')
    throw new TypeError(`device must be 'gpu' or 'cpu', got ${describe(o.device)}`);
  if (o.compiled !== undefined && typeof o.compiled !== 'boolean')
    throw new TypeError(`compiled must be true or false, got ${describe(o.compiled)}`);
  checkSeverity(o.logSeverityLevel, 'logSeverityLevel');
  if (o.logId !== undefined && typeof o.logId !== 'string') throw new TypeError(`logId must be a string, got ${describe(o.logId)}`);
  if (o.onLog !== undefined && typeof o.onLog !== 'function') throw new TypeError(`onLog must be a function, got ${describe(o.onLog)}`);
  const fdo = o.freeDimensionOverrides;
  if (fdo !== undefined) {
    if (typeof fdo !== 'object' || fdo === null || Array.isArray(fdo))
      throw new TypeError(`freeDimensionOverrides must be an object of dimension names to sizes, got ${describe(fdo)}`);
    for (const [k, v] of Object.entries(fdo))
      if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0)
        throw new TypeError(`freeDimensionOverrides: '${k}' must be a non-negative integer, got ${describe(v)}`);
  }
  if (o.optimizedModelFilePath !== undefined && (typeof o.optimizedModelFilePath !== 'string' || o.optimizedModelFilePath === ''))
    throw new TypeError(`optimizedModelFilePath must be a non-empty string, got ${describe(o.optimizedModelFilePath)}`);
  if (o.deviceId !== undefined && !(typeof o.deviceId === 'number' && Number.isSafeInteger(o.deviceId) && o.deviceId >= 0))
    throw new TypeError(`deviceId must be a non-negative integer, got ${describe(o.deviceId)}`);
  if (o.enableProfiling !== undefined && typeof o.enableProfiling !== 'boolean')
    throw new TypeError(`enableProfiling must be true or false, got ${describe(o.enableProfiling)}`);
  if (o.profileFilePrefix !== undefined && (typeof o.profileFilePrefix !== 'string' || o.profileFilePrefix === ''))
    throw new TypeError(`profileFilePrefix must be a non-empty string, got ${describe(o.profileFilePrefix)}`);
  const sigs = o.maxSignatures;
  if (sigs !== undefined && !(typeof sigs === 'number' && Number.isSafeInteger(sigs) && sigs >= 1))
    throw new TypeError(`maxSignatures must be a positive integer, got ${describe(sigs)}`);
}
