// The onnxruntime-common backend object ('mlx', registered by backend/register.ts) and its session
// handler: onnxruntime-common's feeds, fetches and options in, an MlxSession's run, Tensors of the
// caller's onnxruntime-common copy out.
import { loadNativeLibrary } from '@mlx/core';
import type { Backend, InferenceSession, InferenceSessionHandler, OnnxValue, SessionHandler, Tensor } from 'onnxruntime-common';
import * as ortEsm from 'onnxruntime-common';
import { dataTypeName, type HostTensor, type ModelIR } from '../onnx/index.js';
import { MlxSession } from '../session.js';
import type { TensorMetadata } from '../execute/options.js';
import { asHost, type Value } from '../runtime/value.js';
import { InvalidFeedError } from '../errors.js';
import { type MlxDeviceBuffer, deviceBufferOf, deviceToTensor, gpuBufferTypes } from './device-buffer.js';
import { outputLocations, sessionOptionsOf } from './options.js';
import { copyInto, directDestination, hostToTensor, tensorToHost, type TensorModule } from './tensors.js';

/** The parts of an onnxruntime-common module the backend uses. */
export type OrtModule = TensorModule & { registerBackend: (name: string, backend: Backend, priority: number) => void };

const NOTHING_BOUND: ReadonlyMap<string, { tensor: Tensor; buffer?: MlxDeviceBuffer }> = new Map();

/**
 * A run option of this backend's own (a registered symbol, so no string key of onnxruntime's can
 * collide with it, and every copy of this package reads the same one): the names of outputs this
 * run returns as 'gpu-buffer' tensors, on top of preferredOutputLocation's. generate() asks for its
 * presents and logits with it, so that a session made without preferredOutputLocation still keeps
 * the cache on the device and downloads only the token.
 */
export const KEEP_ON_DEVICE: unique symbol = Symbol.for('@mlx/ort-ep.keepOnDevice');

/** The names a run's options ask to keep on the device (KEEP_ON_DEVICE), if any. */
function keptByRun(options: InferenceSession.RunOptions | undefined): ReadonlySet<string> | undefined {
  const names = (options as { [KEEP_ON_DEVICE]?: unknown } | undefined)?.[KEEP_ON_DEVICE];
  if (names === undefined) return undefined;
  if (!Array.isArray(names) || names.some((n) => typeof n !== 'string'))
    throw new TypeError('mlx execution provider: the keep-on-device run option must be an array of output names');
  return new Set(names as string[]);
}

/** A feed: a host tensor, or the device Value behind a 'gpu-buffer' tensor of this backend. */
function feedOf(name: string, t: OnnxValue): HostTensor | Value {
  const tensor = t as Tensor;
  if (tensor && typeof tensor === 'object' && tensor.location === 'none')
    throw new InvalidFeedError(`input '${name}' is a tensor that was disposed`);
  if (tensor && typeof tensor === 'object' && tensor.location === 'gpu-buffer') {
    const b = deviceBufferOf(tensor);
    if (!b) throw new InvalidFeedError(`input '${name}' is a 'gpu-buffer' tensor that the MLX backend did not make`);
    if (b.disposed) throw new InvalidFeedError(`input '${name}' is a device tensor that was already disposed`);
    return b.value!;
  }
  return tensorToHost(name, t);
}

function metadata(m: TensorMetadata): InferenceSession.ValueMetadata {
  if (!m.isTensor) return { name: m.name, isTensor: false };
  return { name: m.name, isTensor: true, type: m.type as Tensor.Type, shape: m.shape };
}

export class MlxSessionHandler implements InferenceSessionHandler {
  readonly inputNames: readonly string[];
  readonly outputNames: readonly string[];
  readonly inputMetadata: readonly InferenceSession.ValueMetadata[];
  readonly outputMetadata: readonly InferenceSession.ValueMetadata[];

  constructor(
    private readonly ort: OrtModule,
    private readonly session: MlxSession,
    /** Outputs returned as 'gpu-buffer' tensors (preferredOutputLocation). */
    private readonly onDevice: ReadonlySet<string> = new Set(),
    /** Outputs read into pooled host blocks, returned as 'cpu-pinned' tensors. */
    private readonly pinned: ReadonlySet<string> = new Set(),
  ) {
    this.inputNames = session.inputNames;
    this.outputNames = session.outputNames;
    this.inputMetadata = session.inputMetadata.map(metadata);
    this.outputMetadata = session.outputMetadata.map(metadata);
  }

  /** The session's model (generate() reads its GroupQueryAttention nodes' cache layout). */
  get model(): ModelIR {
    return this.session.model;
  }

  /** Whether output `name` comes back as a 'gpu-buffer' tensor (preferredOutputLocation), unless pre-allocated. */
  keepsOnDevice(name: string): boolean {
    return this.onDevice.has(name);
  }

  /**
   * Feeds may be CPU tensors or this backend's 'gpu-buffer' tensors. A pre-allocated fetch that is
   * a device tensor gets the output bound into it; when that same tensor is also a feed (a KV
   * cache in shared-buffer mode: past and present one buffer), the run consumes the fed array so
   * that the output is written over it in place, and the tensor then holds the output.
   */
  async run(
    feeds: SessionHandler.FeedsType,
    fetches: SessionHandler.FetchesType,
    options?: InferenceSession.RunOptions,
  ): Promise<SessionHandler.ReturnType> {
    const kept = keptByRun(options);
    const plain = kept ? undefined : this.plainRun(feeds, fetches, options);
    if (plain) return plain;
    const inputs: Record<string, HostTensor | Value> = {};
    for (const [name, v] of Object.entries(feeds)) inputs[name] = feedOf(name, v);
    const names = Object.keys(fetches);
    const wanted = names.length ? names : [...this.outputNames];
    const bound = new Map<string, { tensor: Tensor; buffer?: MlxDeviceBuffer }>();
    for (const name of wanted) {
      const t = fetches[name] as Tensor | null | undefined;
      if (t) bound.set(name, { tensor: t, buffer: deviceBufferOf(t) });
    }
    // The tensors bound as outputs, and those of them that are device buffers (written in place).
    const boundTensors = new Set<Tensor>();
    const boundBuffers = new Set<Tensor>();
    for (const b of bound.values()) {
      boundTensors.add(b.tensor);
      if (b.buffer) boundBuffers.add(b.tensor);
    }
    const donate: string[] = [];
    const consumed: MlxDeviceBuffer[] = [];
    for (const [name, v] of Object.entries(feeds)) {
      const own = deviceBufferOf(v);
      if (own?.consumable && !boundTensors.has(v)) {
        donate.push(name);
        consumed.push(own);
        continue;
      }
      if (boundBuffers.has(v)) donate.push(name);
    }
    // A pre-allocated tensor decides where its output goes; otherwise preferredOutputLocation (and
    // the run's KEEP_ON_DEVICE) does.
    const keep = wanted.filter((n) => (bound.has(n) ? !!bound.get(n)!.buffer : this.onDevice.has(n) || !!kept?.has(n)));
    // Pre-allocated CPU tensors are read into directly where their layout allows.
    const outputBuffers: Record<string, HostTensor> = {};
    for (const [name, b] of bound) {
      const dst = b.buffer ? undefined : directDestination(b.tensor);
      if (dst) outputBuffers[name] = dst;
    }
    let out: Awaited<ReturnType<MlxSession['run']>>;
    try {
      out = await this.session.run(inputs, wanted, {
        keepOnDevice: keep,
        outputBuffers,
        pinnedOutputs: wanted.filter((n) => !bound.has(n) && this.pinned.has(n)),
        donate,
        ...(typeof options?.tag === 'string' && options.tag ? { tag: options.tag } : {}),
        ...(options?.logSeverityLevel !== undefined ? { logSeverityLevel: options.logSeverityLevel } : {}),
        // The caller may set RunOptions.terminate while the run is in progress.
        get terminate() {
          return options?.terminate === true;
        },
      });
    } finally {
      for (const b of consumed) if (b.disposed) b.value = undefined;
    }
    return this.results(out, bound, outputBuffers);
  }

  /**
   * The usual run, on a path of its own: CPU feeds, no pre-allocated fetches, results to the host,
   * no tag or log level. run() built a dozen collections per run to find out that nothing was bound,
   * donated or kept, which in a small model's run was a fifth of its JavaScript. Undefined where any
   * of that is not so (run() then takes the general path).
   */
  private plainRun(
    feeds: SessionHandler.FeedsType,
    fetches: SessionHandler.FetchesType,
    options: InferenceSession.RunOptions | undefined,
  ): Promise<SessionHandler.ReturnType> | undefined {
    if (this.onDevice.size || this.pinned.size) return undefined;
    if (options && (options.tag !== undefined || options.logSeverityLevel !== undefined || options.terminate)) return undefined;
    let wanted: string[] | undefined;
    for (const name in fetches) {
      if (fetches[name]) return undefined;
      (wanted ??= []).push(name);
    }
    const inputs: Record<string, HostTensor | Value> = {};
    for (const name in feeds) {
      const t = feeds[name] as Tensor;
      if (t && typeof t === 'object' && t.location === 'gpu-buffer') return undefined;
      inputs[name] = feedOf(name, t);
    }
    // The caller may set RunOptions.terminate while the run is in progress.
    const runOptions = options
      ? {
          get terminate() {
            return options.terminate === true;
          },
        }
      : {};
    return this.session.run(inputs, wanted ?? [...this.outputNames], runOptions).then((out) => this.results(out, NOTHING_BOUND, {}));
  }

  /** The run's results as Tensors of the caller's onnxruntime-common, bound ones written in place. */
  private results(
    out: Record<string, HostTensor | Value>,
    bound: ReadonlyMap<string, { tensor: Tensor; buffer?: MlxDeviceBuffer }>,
    outputBuffers: Record<string, HostTensor>,
  ): SessionHandler.ReturnType {
    const result: SessionHandler.ReturnType = {};
    for (const [name, v] of Object.entries(out)) {
      const b = bound.get(name);
      if ('kind' in v && v.kind === 'device') {
        if (b?.buffer) {
          bindInto(b.tensor, b.buffer, v, name);
          result[name] = b.tensor;
        } else if (gpuBufferTypes.has(dataTypeName(v.onnxType))) result[name] = deviceToTensor(this.ort, v, `output '${name}'`);
        else {
          // Element types a 'gpu-buffer' tensor cannot hold come back on the CPU.
          result[name] = hostToTensor(this.ort, asHost(v, `output '${name}'`));
          v.array.dispose();
        }
        continue;
      }
      if (!('dims' in v))
        throw new Error(`output '${name}' is a ${(v as { kind: string }).kind}, which onnxruntime-common cannot return from this backend`);
      if (b && outputBuffers[name]) {
        result[name] = b.tensor;
        continue;
      }
      const t = hostToTensor(this.ort, v as HostTensor);
      if (b) {
        copyInto(b.tensor, t, name);
        result[name] = b.tensor;
      } else result[name] = t;
    }
    return result;
  }

  async dispose(): Promise<void> {
    this.session.release();
  }
  startProfiling(): void {
    this.session.startProfiling();
  }
  endProfiling(): void {
    this.session.endProfiling();
  }
}

/** Binds a device output into a pre-allocated device tensor, which must have its type and shape. */
function bindInto(tensor: Tensor, buffer: MlxDeviceBuffer, v: Extract<Value, { kind: 'device' }>, name: string): void {
  const dims = v.array.shape;
  if (tensor.type !== dataTypeName(v.onnxType) || dims.length !== tensor.dims.length || dims.some((d, i) => d !== tensor.dims[i])) {
    v.array.dispose();
    buffer.dispose();
    throw new InvalidFeedError(
      `output '${name}' is ${dataTypeName(v.onnxType)} [${dims.join(', ')}], but its pre-allocated tensor is ${tensor.type} [${tensor.dims.join(', ')}] (the pre-allocated tensor was consumed)`,
    );
  }
  if (buffer.value && buffer.value.array !== v.array) buffer.value.array.dispose();
  buffer.value = v;
}

/**
 * A backend object for onnxruntime-common's registerBackend. `ort` gives the Tensor class its
 * results are made with (onnxruntime-common wraps results of another copy's Tensor in its own).
 * init() loads the native library; its error (MlxLibraryNotFoundError) is what onnxruntime reports.
 */
export function createMlxBackend(ort: OrtModule = ortEsm as unknown as OrtModule): Backend {
  return {
    async init() {
      loadNativeLibrary();
    },
    async createInferenceSessionHandler(uriOrBuffer, options) {
      const session = await MlxSession.create(uriOrBuffer, sessionOptionsOf(options));
      try {
        const { onDevice, pinned } = outputLocations(options, session.outputNames);
        return new MlxSessionHandler(ort, session, onDevice, pinned);
      } catch (e) {
        session.release();
        throw e;
      }
    },
  };
}
