// The onnxruntime-common backend named 'mlx'. An install can hold several copies of
// onnxruntime-common (this package's peer, the exact version onnxruntime-node and onnxruntime-web
// each pin), and each copy ships a CommonJS and an ESM module instance with its own backend
// registry. One backend object is registered into every instance that can be found (see
// registerEverywhere); registerMlxBackend(ort) covers bundled copies.
//
// Importing this module loads nothing native: the backend's init() loads MLX, the way
// onnxruntime-web starts its wasm, so `executionProviders: ['mlx', 'cpu']` falls back to the next
// provider, with onnxruntime's own warning, when the native library is missing.
//
// Priority: -10. onnxruntime-common picks a backend by priority only when a session names no
// execution providers; a low priority means importing this package never changes which backend
// existing code gets. `executionProviders: ['mlx']` selects it explicitly.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { loadNativeLibrary } from '@mlx/core';
import type { Backend, InferenceSession, InferenceSessionHandler, OnnxValue, SessionHandler, Tensor } from 'onnxruntime-common';
import * as ortEsm from 'onnxruntime-common';
import { OnnxDataType, dataTypeName, type HostTensor } from '../onnx/index.js';
import { MlxSession, type MlxSessionOptions, type TensorMetadata } from '../session.js';
import { asHost, type Value } from '../runtime/value.js';
import { InvalidFeedError, OrtMlxError } from '../errors.js';

export const MLX_BACKEND_NAME = 'mlx';
export const MLX_BACKEND_PRIORITY = -10;

/**
 * Options of the 'mlx' execution provider. It is an onnxruntime `ExecutionProviderOption` of any
 * onnxruntime-common copy (it has `name`), so `mlx({...})` fits `executionProviders` whichever
 * onnxruntime package the types come from.
 */
export interface MlxExecutionProviderOption {
  readonly name: 'mlx';
  /** 'gpu' (Metal/CUDA where MLX has it) or 'cpu'. Default: MLX's default device. */
  device?: 'gpu' | 'cpu';
  /** The compiled path (per input signature, traced with mlx.compile and replayed). Default true. */
  compiled?: boolean;
  /** float32 products on a GPU: 'fp32' (default) or 'tf32' (see MlxSessionOptions.precision). */
  precision?: 'fp32' | 'tf32';
  /** Memory limits of a run, in bytes (see MlxSessionOptions). */
  maxTensorBytes?: number;
  maxSessionBytes?: number;
  /** Input signatures whose compiled programs are kept. Default 16. */
  maxSignatures?: number;
  /** run() evaluates a replay whose last evaluation took under this many ms on the calling thread. Default 1 (see MlxSessionOptions.shortEvalMs). */
  shortEvalMs?: number;
  /** Where large results land on the host: 'auto' (default), 'pooled' or 'fresh' (see MlxSessionOptions.outputMemory). */
  outputMemory?: 'auto' | 'pooled' | 'fresh';
  /** Nodes MLX does not take: 'cpu' runs them on onnxruntime (default where it resolves), 'none' refuses the model (see MlxSessionOptions.fallback). */
  fallback?: 'cpu' | 'none';
  /** Op types the MLX provider declines, so that they fall back ('Softmax', 'com.microsoft::Attention'). */
  disabledOps?: string[];
  /** Plan-time graph rewrites (fused GELU, norms, MatMul + bias, ...): true (default), false, or names. */
  graphRewrites?: MlxSessionOptions['graphRewrites'];
}

declare module 'onnxruntime-common' {
  // eslint-disable-next-line @typescript-eslint/no-namespace
  namespace InferenceSession {
    interface ExecutionProviderOptionMap {
      mlx: MlxExecutionProviderOption;
    }
  }
}

/** The 'mlx' provider's options without the name, for mlx({...}). */
export type MlxProviderOptions = Omit<MlxExecutionProviderOption, 'name'>;

/**
 * The 'mlx' execution provider with options, typed for `executionProviders` of onnxruntime-node,
 * onnxruntime-web or onnxruntime-common: `executionProviders: [mlx({ device: 'gpu' }), 'cpu']`.
 */
export function mlx(options: MlxProviderOptions = {}): MlxExecutionProviderOption {
  return { ...options, name: MLX_BACKEND_NAME };
}

type OrtModule = { Tensor: typeof Tensor; registerBackend: (name: string, backend: Backend, priority: number) => void };

const ortTypeToOnnx: Record<string, number> = {
  float32: OnnxDataType.FLOAT,
  uint8: OnnxDataType.UINT8,
  int8: OnnxDataType.INT8,
  uint16: OnnxDataType.UINT16,
  int16: OnnxDataType.INT16,
  int32: OnnxDataType.INT32,
  int64: OnnxDataType.INT64,
  string: OnnxDataType.STRING,
  bool: OnnxDataType.BOOL,
  float16: OnnxDataType.FLOAT16,
  float64: OnnxDataType.DOUBLE,
  uint32: OnnxDataType.UINT32,
  uint64: OnnxDataType.UINT64,
  int4: OnnxDataType.INT4,
  uint4: OnnxDataType.UINT4,
};

function unpack4(data: Uint8Array | Int8Array, n: number, signed: boolean): Int8Array | Uint8Array {
  const out = signed ? new Int8Array(n) : new Uint8Array(n);
  for (let i = 0; i < n; i++) {
    const byte = data[i >> 1] & 0xff;
    let v = i & 1 ? byte >> 4 : byte & 0x0f;
    if (signed && v >= 8) v -= 16;
    out[i] = v;
  }
  return out;
}

/** onnxruntime-common holds int4/uint4 packed two per byte, in a Uint8Array for both. */
function pack4(data: ArrayLike<number>): Uint8Array {
  const out = new Uint8Array((data.length + 1) >> 1);
  for (let i = 0; i < data.length; i++) {
    const v = data[i] & 0x0f;
    out[i >> 1] |= i & 1 ? v << 4 : v;
  }
  return out;
}

/**
 * The device memory behind an onnxruntime-common Tensor of location 'gpu-buffer' that this backend
 * hands out (`tensor.gpuBuffer`): an MLX array that stays where the session computed it. Feeding
 * the tensor to a run of any 'mlx' session uses the array without a copy. The Tensor's `getData()`
 * downloads it; `dispose()` frees it. `value` is undefined once it is disposed.
 */
export class MlxDeviceBuffer {
  /**
   * Set by the tensor's owner to let the next run that reads it consume it (as a donated feed,
   * MlxRunOptions.donate): MLX may then write that run's outputs into its memory, e.g. a growing
   * KV cache's new rows. The tensor is disposed by that run. generate() sets it on its caches.
   */
  consumable = false;
  constructor(public value: Extract<Value, { kind: 'device' }> | undefined) {}
  get disposed(): boolean {
    return !this.value || this.value.array.disposed;
  }
  dispose(): void {
    this.value?.array.dispose();
    this.value?.reserve?.buffer.dispose();
    this.value = undefined;
  }
}

/** The MlxDeviceBuffer of a Tensor this backend made, else undefined. */
export function deviceBufferOf(t: unknown): MlxDeviceBuffer | undefined {
  const tensor = t as Tensor;
  if (!tensor || typeof tensor !== 'object' || tensor.location !== 'gpu-buffer') return undefined;
  const b = tensor.gpuBuffer as unknown;
  return b instanceof MlxDeviceBuffer ? b : undefined;
}

/** onnxruntime-common's 'gpu-buffer' tensors take these element types (tensor-impl.ts). */
const gpuBufferTypes = new Set(['float32', 'float16', 'int32', 'int64', 'uint32', 'uint8', 'bool']);

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

/** An onnxruntime-common Tensor as a host tensor (data is not copied where layouts agree). */
export function tensorToHost(name: string, t: OnnxValue): HostTensor {
  const tensor = t as Tensor;
  if (!tensor || typeof tensor !== 'object' || !('type' in tensor) || !('dims' in tensor)) {
    throw new InvalidFeedError(`input '${name}' is not a Tensor`);
  }
  if (tensor.location && tensor.location !== 'cpu' && tensor.location !== 'cpu-pinned') {
    throw new InvalidFeedError(
      `input '${name}' is on '${tensor.location}'; the MLX backend takes CPU tensors and its own 'gpu-buffer' tensors`,
    );
  }
  const dtype = ortTypeToOnnx[tensor.type];
  if (dtype === undefined)
    throw new InvalidFeedError(`input '${name}' has tensor type '${tensor.type}', which the MLX backend does not take`);
  const dims = [...tensor.dims];
  const n = dims.reduce((a, b) => a * b, 1);
  let data = tensor.data as HostTensor['data'];
  if (tensor.type === 'int4' || tensor.type === 'uint4') data = unpack4(tensor.data as Uint8Array, n, tensor.type === 'int4');
  else if (tensor.type === 'float16' && !(data instanceof Uint16Array)) {
    // Float16Array (where the runtime has it): take its bits.
    const src = data as unknown as ArrayBufferView;
    data = new Uint16Array(src.buffer, src.byteOffset, n);
  }
  return { dtype, dims, data };
}

export function hostToTensor(ort: OrtModule, t: HostTensor & { pinned?: boolean }): Tensor {
  const type = dataTypeName(t.dtype);
  let data = t.data as ArrayLike<number>;
  if (t.dtype === OnnxDataType.INT4 || t.dtype === OnnxDataType.UINT4) data = pack4(data);
  if (t.dtype === OnnxDataType.BFLOAT16 || !(type in ortTypeToOnnx)) {
    throw new Error(`output element type ${type} cannot be held by onnxruntime-common's Tensor; use MlxSession from @mlx/ort-ep`);
  }
  // Data in a pooled host block (preferredOutputLocation 'cpu-pinned').
  if (t.pinned) return ort.Tensor.fromPinnedBuffer(type as 'float32', data as Float32Array, t.dims);
  return new ort.Tensor(type as 'float32', data as Float32Array, t.dims);
}

/** A device Value as a 'gpu-buffer' Tensor owning its array (see MlxDeviceBuffer). */
function deviceToTensor(ort: OrtModule, v: Extract<Value, { kind: 'device' }>, where: string): Tensor {
  const buffer = new MlxDeviceBuffer(v);
  return ort.Tensor.fromGpuBuffer(buffer as never, {
    dataType: dataTypeName(v.onnxType) as Tensor.GpuBufferDataTypes,
    dims: v.array.shape,
    download: async () => {
      if (!buffer.value) throw new OrtMlxError(`${where}: the device tensor was disposed`);
      return hostToTensor(ort, asHost(buffer.value, where)).data as never;
    },
    dispose: () => buffer.dispose(),
  });
}

/**
 * Where a session returns each output, from `preferredOutputLocation`: 'gpu-buffer' outputs stay
 * on the device; 'cpu-pinned' ones are read into pooled host blocks (page-locked on MLX's CUDA
 * build); the rest into fresh ArrayBuffers.
 */
function outputLocations(
  options: InferenceSession.SessionOptions | undefined,
  outputNames: readonly string[],
): { onDevice: Set<string>; pinned: Set<string> } {
  const pref = options?.preferredOutputLocation;
  const where = (name: string) => (typeof pref === 'string' || pref === undefined ? pref : pref[name]);
  const known = new Set(['cpu', 'cpu-pinned', 'gpu-buffer']);
  if (pref !== undefined && typeof pref === 'object')
    for (const name of Object.keys(pref))
      if (!outputNames.includes(name)) throw new TypeError(`preferredOutputLocation names '${name}', which is not an output of the model`);
  const onDevice = new Set<string>();
  const pinned = new Set<string>();
  for (const name of outputNames) {
    const loc = where(name);
    if (loc === undefined) continue;
    if (!known.has(loc))
      throw new TypeError(
        `mlx execution provider: preferredOutputLocation '${loc}' is not supported (use 'cpu', 'cpu-pinned' or 'gpu-buffer')`,
      );
    if (loc === 'gpu-buffer') onDevice.add(name);
    if (loc === 'cpu-pinned') pinned.add(name);
  }
  return { onDevice, pinned };
}

/**
 * A pre-allocated CPU tensor whose data a result can be read into directly: same element type,
 * an unpacked typed array (not int4's packed bytes, not a Float16Array).
 */
function directDestination(t: Tensor): HostTensor | undefined {
  if (t.location !== 'cpu' && t.location !== 'cpu-pinned') return undefined;
  const dtype = ortTypeToOnnx[t.type];
  if (dtype === undefined || t.type === 'int4' || t.type === 'uint4' || t.type === 'string') return undefined;
  if (!ArrayBuffer.isView(t.data) || (t.type === 'float16' && !(t.data instanceof Uint16Array))) return undefined;
  return { dtype, dims: [...t.dims], data: t.data as HostTensor['data'] };
}

function metadata(m: TensorMetadata): InferenceSession.ValueMetadata {
  if (!m.isTensor) return { name: m.name, isTensor: false };
  return { name: m.name, isTensor: true, type: m.type as Tensor.Type, shape: m.shape };
}

class MlxSessionHandler implements InferenceSessionHandler {
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
    const inputs: Record<string, HostTensor | Value> = {};
    for (const [name, v] of Object.entries(feeds)) inputs[name] = feedOf(name, v);
    const names = Object.keys(fetches);
    const wanted = names.length ? names : [...this.outputNames];
    const bound = new Map<string, { tensor: Tensor; buffer?: MlxDeviceBuffer }>();
    for (const name of wanted) {
      const t = fetches[name] as Tensor | null | undefined;
      if (t) bound.set(name, { tensor: t, buffer: deviceBufferOf(t) });
    }
    const donate: string[] = [];
    const consumed: MlxDeviceBuffer[] = [];
    for (const [name, v] of Object.entries(feeds)) {
      const own = deviceBufferOf(v);
      if (own?.consumable && ![...bound.values()].some((b) => b.tensor === v)) {
        donate.push(name);
        consumed.push(own);
        continue;
      }
      for (const b of bound.values()) if (b.buffer && b.tensor === v && !donate.includes(name)) donate.push(name);
    }
    // A pre-allocated tensor decides where its output goes; otherwise preferredOutputLocation does.
    const keep = wanted.filter((n) => (bound.has(n) ? !!bound.get(n)!.buffer : this.onDevice.has(n)));
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
        // The caller may set RunOptions.terminate while the run is in progress.
        get terminate() {
          return options?.terminate === true;
        },
      });
    } finally {
      for (const b of consumed) if (b.disposed) b.value = undefined;
    }
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
  startProfiling(): void {}
  endProfiling(): void {}
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

/** Copies a host output into a pre-allocated CPU tensor of the same type and shape. */
function copyInto(dst: Tensor, src: Tensor, name: string): void {
  if (dst.location !== 'cpu' && dst.location !== 'cpu-pinned')
    throw new InvalidFeedError(`output '${name}': a pre-allocated tensor on '${dst.location}' that the MLX backend did not make`);
  if (dst.type !== src.type || dst.dims.length !== src.dims.length || dst.dims.some((d, i) => d !== src.dims[i]))
    throw new InvalidFeedError(
      `output '${name}' is ${src.type} [${src.dims.join(', ')}], but its pre-allocated tensor is ${dst.type} [${dst.dims.join(', ')}]`,
    );
  (dst.data as unknown as { set(a: ArrayLike<unknown>): void }).set(src.data as ArrayLike<unknown>);
}

function providerOptions(options?: InferenceSession.SessionOptions): MlxSessionOptions {
  const eps = options?.executionProviders ?? [];
  const mine = eps.find((e) => typeof e === 'object' && e !== null && (e as { name?: string }).name === MLX_BACKEND_NAME) as
    | MlxExecutionProviderOption
    | undefined;
  const device = mine?.device;
  if (device !== undefined && device !== 'gpu' && device !== 'cpu')
    throw new TypeError(`mlx execution provider: device must be 'gpu' or 'cpu', got '${String(device)}'`);
  const externalData = (options as { externalData?: MlxSessionOptions['externalData'] } | undefined)?.externalData;
  return {
    device,
    compiled: mine?.compiled,
    externalData,
    precision: mine?.precision,
    maxTensorBytes: mine?.maxTensorBytes,
    maxSessionBytes: mine?.maxSessionBytes,
    maxSignatures: mine?.maxSignatures,
    shortEvalMs: mine?.shortEvalMs,
    outputMemory: mine?.outputMemory,
    fallback: mine?.fallback,
    disabledOps: mine?.disabledOps,
    graphRewrites: mine?.graphRewrites,
    intraOpNumThreads: options?.intraOpNumThreads,
  };
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
      const session = await MlxSession.create(uriOrBuffer, providerOptions(options));
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

// One backend object per onnxruntime-common instance, made with that instance's Tensor class:
// onnxruntime-common rebuilds a result that is not `instanceof` its own Tensor from its `data`,
// which a 'gpu-buffer' tensor does not have on the host.

/** Names users write for 'mlx' by mistake: registered with a backend whose init() says what to write. */
const misspellings = ['MLX', 'Mlx', 'mlx-gpu', 'mlx-cpu', 'mlx_gpu', 'mlx_cpu', 'mlxep', 'mlx-ep'];
const hintBackend: Backend = {
  async init(name?: string) {
    throw new Error(
      `'${name}' is not an execution provider name: write 'mlx', with options as mlx({ device: 'gpu' }) or { name: 'mlx', device: 'gpu' }`,
    );
  },
  async createInferenceSessionHandler() {
    throw new Error("the MLX backend is named 'mlx'");
  },
};

const registered = new WeakMap<object, Backend>();

/** Where the backend went: one entry per onnxruntime-common module instance. */
export interface MlxRegistration {
  /** The folder of that onnxruntime-common copy ('' for a module object passed to registerMlxBackend). */
  path: string;
  version: string;
  format: 'esm' | 'cjs' | 'module';
}
const registrations: MlxRegistration[] = [];

/**
 * Registers the 'mlx' backend with an onnxruntime-common module object (a bundled copy, say).
 * Idempotent: an instance keeps the backend object it got first (two module objects of one
 * instance share it).
 */
export function registerMlxBackend(ort: OrtModule, where: MlxRegistration = { path: '', version: '', format: 'module' }): void {
  // Keyed by registerBackend itself: two module objects of one instance share it.
  const key = ort.registerBackend;
  if (registered.has(key)) return;
  const backend = createMlxBackend(ort);
  ort.registerBackend(MLX_BACKEND_NAME, backend, MLX_BACKEND_PRIORITY);
  for (const n of misspellings) {
    try {
      ort.registerBackend(n, hintBackend, MLX_BACKEND_PRIORITY);
    } catch {
      // the name is taken (another package's backend, or another copy of this one's hint)
    }
  }
  registered.set(key, backend);
  registrations.push(where);
}

/** The onnxruntime-common instances the backend is registered with. */
export function mlxRegistrations(): readonly MlxRegistration[] {
  return registrations;
}

/** The folder of the package that holds `file` and is named `name`. */
function packageRoot(file: string, name: string): string | undefined {
  for (let d = dirname(file); d !== dirname(d); d = dirname(d)) {
    try {
      const p = JSON.parse(readFileSync(join(d, 'package.json'), 'utf8')) as { name?: string };
      if (p.name === name) return d;
    } catch {
      // no package.json here
    }
  }
  return undefined;
}

/** The file an `exports` entry gives for `import` under Node (conditions node, import, default). */
function importTarget(exp: unknown): string | undefined {
  if (typeof exp === 'string') return exp;
  if (Array.isArray(exp)) return importTarget(exp[0]);
  if (!exp || typeof exp !== 'object') return undefined;
  const o = exp as Record<string, unknown>;
  if ('.' in o) return importTarget(o['.']);
  for (const c of ['node', 'import', 'default']) if (c in o) return importTarget(o[c]);
  return undefined;
}

/**
 * Registers the backend into every onnxruntime-common copy reachable from this package and from the
 * working directory, directly or through onnxruntime-node and onnxruntime-web: each copy's CommonJS
 * instance (require) and ESM instance (require of the ES module, Node 20.19+, so that this stays
 * synchronous and importing this package registers everything before the next line runs).
 */
function registerEverywhere(): void {
  let own = '';
  try {
    own = packageRoot(createRequire(import.meta.url).resolve('onnxruntime-common'), 'onnxruntime-common') ?? '';
  } catch {
    // only the ES module is reachable
  }
  // Another copy of this package (another version, installed beside this one) may hold 'mlx' in a
  // registry already: onnxruntime-common refuses a second backend object at the same priority,
  // and the first one stays. Importing never throws for that.
  try {
    registerMlxBackend(ortEsm as unknown as OrtModule, { path: own, version: ortEsm.env.versions.common ?? '', format: 'esm' });
  } catch {
    // kept the other copy's backend
  }
  const bases = [import.meta.url, join(process.cwd(), 'package.json')];
  const roots = new Set<string>();
  for (const base of bases) {
    const req = createRequire(base);
    const froms: NodeRequire[] = [req];
    for (const host of ['onnxruntime-node', 'onnxruntime-web']) {
      try {
        froms.push(createRequire(req.resolve(host)));
      } catch {
        // not installed there
      }
    }
    for (const r of froms) {
      try {
        const root = packageRoot(r.resolve('onnxruntime-common'), 'onnxruntime-common');
        if (root) roots.add(root);
      } catch {
        // no onnxruntime-common reachable from there
      }
    }
  }
  for (const root of roots) {
    let manifest: { version?: string; main?: string; exports?: unknown };
    try {
      manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
    } catch {
      continue;
    }
    const version = manifest.version ?? '';
    const req = createRequire(join(root, 'package.json'));
    const files: [string, 'cjs' | 'esm'][] = [];
    try {
      files.push([req.resolve(root), 'cjs']);
    } catch {
      // no CommonJS entry
    }
    const esm = importTarget(manifest.exports);
    if (esm) files.push([join(root, esm), 'esm']);
    for (const [file, format] of files) {
      try {
        const m = req(file) as OrtModule;
        if (typeof m?.registerBackend === 'function') registerMlxBackend(m, { path: root, version, format });
      } catch {
        // an instance that does not load (require of ESM before Node 20.19), or one where another
        // copy of this package holds the name: skipped
      }
    }
  }
}

registerEverywhere();
