// onnxruntime's CPU backend, for the nodes MLX does not take (fallback partitions, plan/partition.ts):
// onnxruntime-node when it resolves, else onnxruntime-web's wasm backend. Both are optional peer
// dependencies, resolved lazily (only for a model that has fallback partitions) from the user's
// project first, then from this package, so the copy the application uses is the one that runs.
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { OnnxDataType, dataTypeName, packSubByte, unpackSubByte, type HostTensor } from '../onnx/index.js';

/** The parts of an onnxruntime module (onnxruntime-node or onnxruntime-web) used here. */
export interface OrtModule {
  InferenceSession: { create(model: Uint8Array, options?: object): Promise<OrtSession> };
  Tensor: new (type: string, data: unknown, dims: readonly number[]) => OrtTensor;
}
export interface OrtTensor {
  type: string;
  dims: readonly number[];
  data: unknown;
  location?: string;
}
export interface OrtSession {
  run(feeds: Record<string, OrtTensor>, fetches?: readonly string[]): Promise<Record<string, OrtTensor>>;
  release(): Promise<void>;
}

export type CpuBackendName = 'onnxruntime-node' | 'onnxruntime-web';

export interface CpuBackend {
  name: CpuBackendName;
  ort: OrtModule;
  /** The execution provider asked for: 'cpu' (onnxruntime-node) or 'wasm' (onnxruntime-web). */
  executionProvider: 'cpu' | 'wasm';
}

const resolved = new Map<CpuBackendName, CpuBackend | null>();

/** Where a package is looked for: the working folder's project first, then this package's own dependencies. */
function requireFrom(): NodeJS.Require[] {
  const out: NodeJS.Require[] = [];
  try {
    out.push(createRequire(join(process.cwd(), 'package.json')));
  } catch {
    // No usable working folder.
  }
  out.push(createRequire(import.meta.url));
  return out;
}

function load(name: CpuBackendName): CpuBackend | undefined {
  const known = resolved.get(name);
  if (known !== undefined) return known ?? undefined;
  let found: CpuBackend | null = null;
  for (const req of requireFrom()) {
    try {
      const ort = req(name) as OrtModule;
      if (typeof ort?.InferenceSession?.create !== 'function' || typeof ort.Tensor !== 'function') continue;
      found = { name, ort, executionProvider: name === 'onnxruntime-node' ? 'cpu' : 'wasm' };
      break;
    } catch {
      // Not installed there (or it failed to load: a missing native binary); try the next place.
    }
  }
  resolved.set(name, found);
  return found ?? undefined;
}

/**
 * The CPU backend for fallback partitions: onnxruntime-node where it resolves, else onnxruntime-web
 * (wasm); `only` picks one (tests). Undefined when neither resolves.
 */
export function resolveCpuBackend(only?: CpuBackendName): CpuBackend | undefined {
  if (only) return load(only);
  return load('onnxruntime-node') ?? load('onnxruntime-web');
}

// Element types onnxruntime-common's Tensor holds, and how the host layout maps onto them.

/** A host tensor as an onnxruntime Tensor: the data is shared, not copied (int4/uint4 are packed). */
export function toOrtTensor(ort: OrtModule, t: HostTensor, where: string): OrtTensor {
  const type = dataTypeName(t.dtype);
  if (!ORT_TYPES.has(t.dtype))
    throw new Error(`${where}: element type ${type} cannot be handed to onnxruntime (onnxruntime-common's Tensor has no such type)`);
  let data: unknown = t.data;
  if (t.dtype === OnnxDataType.INT4 || t.dtype === OnnxDataType.UINT4) data = packSubByte(t.data as ArrayLike<number>, 4);
  return new ort.Tensor(type, data, t.dims);
}

/** An onnxruntime Tensor as a host tensor: the data is shared, not copied (int4/uint4 are unpacked). */
export function fromOrtTensor(t: OrtTensor, where: string): HostTensor {
  const dtype = ORT_NAMES.get(t.type);
  if (dtype === undefined) throw new Error(`${where}: onnxruntime returned a tensor of type '${t.type}', which is not taken here`);
  if (t.location && t.location !== 'cpu') throw new Error(`${where}: onnxruntime returned a tensor on '${t.location}'`);
  const dims = [...t.dims];
  const n = dims.reduce((a, b) => a * b, 1);
  let data = t.data as HostTensor['data'];
  if (dtype === OnnxDataType.INT4 || dtype === OnnxDataType.UINT4)
    data = unpackSubByte(data as Uint8Array, n, 4, dtype === OnnxDataType.INT4);
  else if (dtype === OnnxDataType.FLOAT16 && !(data instanceof Uint16Array)) {
    // Float16Array, where the runtime has it: take its bits.
    const v = data as unknown as ArrayBufferView;
    data = new Uint16Array(v.buffer, v.byteOffset, n);
  }
  return { dtype, dims, data };
}

const ORT_TYPES = new Set<number>([
  OnnxDataType.FLOAT,
  OnnxDataType.UINT8,
  OnnxDataType.INT8,
  OnnxDataType.UINT16,
  OnnxDataType.INT16,
  OnnxDataType.INT32,
  OnnxDataType.INT64,
  OnnxDataType.STRING,
  OnnxDataType.BOOL,
  OnnxDataType.FLOAT16,
  OnnxDataType.DOUBLE,
  OnnxDataType.UINT32,
  OnnxDataType.UINT64,
  OnnxDataType.INT4,
  OnnxDataType.UINT4,
]);
const ORT_NAMES = new Map<string, number>([...ORT_TYPES].map((t) => [dataTypeName(t), t]));

/** Whether onnxruntime-common's Tensor can carry this element type across. */
export const ortCanHold = (dtype: number): boolean => ORT_TYPES.has(dtype);
