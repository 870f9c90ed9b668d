// The onnxruntime-common backend named 'mlx'. onnxruntime-common ships a CommonJS and an ESM module
// instance, each with its own backend registry (onnxruntime-node uses the CommonJS one), so the
// backend is registered into both; registerMlxBackend(ort) covers bundled copies.
//
// Priority: -10. onnxruntime-common picks a backend by priority only when a session names no
// execution providers; a low priority means importing this package never changes which backend
// existing code gets. `executionProviders: ['mlx']` selects it explicitly.
import { createRequire } from 'node:module';
import type { Backend, InferenceSession, InferenceSessionHandler, OnnxValue, SessionHandler, Tensor } from 'onnxruntime-common';
import * as ortEsm from 'onnxruntime-common';
import { OnnxDataType, dataTypeName, type HostTensor } from './onnx/index.js';
import { MlxSession, type MlxSessionOptions, type TensorMetadata } from './session.js';
import { InvalidFeedError } from './errors.js';

export const MLX_BACKEND_NAME = 'mlx';
export const MLX_BACKEND_PRIORITY = -10;

/** Options of the 'mlx' execution provider. */
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

/** An onnxruntime-common Tensor as a host tensor (data is not copied where layouts agree). */
export function tensorToHost(name: string, t: OnnxValue): HostTensor {
  const tensor = t as Tensor;
  if (!tensor || typeof tensor !== 'object' || !('type' in tensor) || !('dims' in tensor)) {
    throw new InvalidFeedError(`input '${name}' is not a Tensor`);
  }
  if (tensor.location && tensor.location !== 'cpu') {
    throw new InvalidFeedError(`input '${name}' is on '${tensor.location}'; the MLX backend takes CPU tensors`);
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

export function hostToTensor(ort: OrtModule, t: HostTensor): Tensor {
  const type = dataTypeName(t.dtype);
  let data = t.data as ArrayLike<number>;
  if (t.dtype === OnnxDataType.INT4 || t.dtype === OnnxDataType.UINT4) data = pack4(data);
  if (t.dtype === OnnxDataType.BFLOAT16 || !(type in ortTypeToOnnx)) {
    throw new Error(`output element type ${type} cannot be held by onnxruntime-common's Tensor; use MlxSession from @mlx/ort-ep`);
  }
  return new ort.Tensor(type as 'float32', data as Float32Array, t.dims);
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
  ) {
    this.inputNames = session.inputNames;
    this.outputNames = session.outputNames;
    this.inputMetadata = session.inputMetadata.map(metadata);
    this.outputMetadata = session.outputMetadata.map(metadata);
  }

  async run(feeds: SessionHandler.FeedsType, fetches: SessionHandler.FetchesType): Promise<SessionHandler.ReturnType> {
    const host: Record<string, HostTensor> = {};
    for (const [name, v] of Object.entries(feeds)) host[name] = tensorToHost(name, v);
    const names = Object.keys(fetches);
    const out = await this.session.run(host, names.length ? names : [...this.outputNames]);
    const result: SessionHandler.ReturnType = {};
    for (const [name, v] of Object.entries(out)) {
      if (!('dims' in v))
        throw new Error(`output '${name}' is a ${(v as { kind: string }).kind}, which onnxruntime-common cannot return from this backend`);
      result[name] = hostToTensor(this.ort, v as HostTensor);
    }
    return result;
  }

  async dispose(): Promise<void> {
    this.session.release();
  }
  startProfiling(): void {}
  endProfiling(): void {}
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
    graphRewrites: mine?.graphRewrites,
    intraOpNumThreads: options?.intraOpNumThreads,
  };
}

export function createMlxBackend(ort: OrtModule): Backend {
  return {
    async init() {},
    async createInferenceSessionHandler(uriOrBuffer, options) {
      const session = await MlxSession.create(uriOrBuffer, providerOptions(options));
      return new MlxSessionHandler(ort, session);
    },
  };
}

const registered = new WeakSet<object>();

/** Registers the 'mlx' backend with an onnxruntime-common module object (e.g. a bundled copy). */
export function registerMlxBackend(ort: OrtModule): void {
  if (registered.has(ort)) return;
  ort.registerBackend(MLX_BACKEND_NAME, createMlxBackend(ort), MLX_BACKEND_PRIORITY);
  registered.add(ort);
}

registerMlxBackend(ortEsm as unknown as OrtModule);
try {
  const require = createRequire(import.meta.url);
  const ortCjs = require('onnxruntime-common') as OrtModule;
  if ((ortCjs as unknown) !== ortEsm) registerMlxBackend(ortCjs);
} catch {
  // No CommonJS copy reachable: ESM-only environments.
}
