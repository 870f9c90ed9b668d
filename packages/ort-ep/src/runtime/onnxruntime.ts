// onnxruntime's CPU backend, for the nodes MLX does not take (fallback partitions, plan/partition.ts):
// onnxruntime-node when it resolves, else onnxruntime-web's wasm backend. Both are optional peer
// dependencies, resolved lazily (only for a model that has fallback partitions) from the user's
// project first, then from this package, so the copy the application uses is the one that runs.
import { dataTypeName, type HostTensor } from '../onnx/index.js';
import { hostToOrtData, onnxTypeOfOrt, ortCanHold, ortDataToHost } from './ort-tensor.js';
import { requireOptional, resolvesOptional } from './packages.js';

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
  /**
   * Where the module was resolved from: the fallback partitions run in a child process that loads
   * it (runtime/fallback-host.ts). Without it (a module handed in), they run in this process.
   */
  modulePath?: string;
}

const resolved = new Map<CpuBackendName, CpuBackend | null>();

function load(name: CpuBackendName): CpuBackend | undefined {
  const known = resolved.get(name);
  if (known !== undefined) return known ?? undefined;
  let modulePath: string | undefined;
  const ort = requireOptional<OrtModule>(name, (m, req) => {
    const ok = typeof (m as OrtModule)?.InferenceSession?.create === 'function' && typeof (m as OrtModule).Tensor === 'function';
    if (ok) modulePath = req.resolve(name);
    return ok;
  });
  const found: CpuBackend | null = ort ? { name, ort, executionProvider: name === 'onnxruntime-node' ? 'cpu' : 'wasm', modulePath } : null;
  resolved.set(name, found);
  return found ?? undefined;
}

/**
 * The CPU backend for fallback partitions: onnxruntime-node where it resolves, else onnxruntime-web
 * (wasm); `only` picks one (tests). Undefined when neither resolves.
 */
/**
 * Whether a CPU backend for fallback partitions may resolve (`only`: that one), judged by finding
 * the package without loading it: planning asks this, and the backend itself is loaded only for a
 * model that has a fallback partition (loading onnxruntime-node costs about 10 ms).
 */
export function cpuBackendMayResolve(only?: CpuBackendName): boolean {
  const known = (name: CpuBackendName) => resolved.get(name) !== null && (resolved.has(name) || resolvesOptional(name));
  return only ? known(only) : known('onnxruntime-node') || known('onnxruntime-web');
}

export function resolveCpuBackend(only?: CpuBackendName): CpuBackend | undefined {
  if (only) return load(only);
  return load('onnxruntime-node') ?? load('onnxruntime-web');
}

// Tensors cross to and from onnxruntime through runtime/ort-tensor.ts (one converter for the
// fallback and the backend).

/** A host tensor as an onnxruntime Tensor: the data is shared, not copied (int4/uint4 are packed). */
export function toOrtTensor(ort: OrtModule, t: HostTensor, where: string): OrtTensor {
  if (!ortCanHold(t.dtype))
    throw new Error(
      `${where}: element type ${dataTypeName(t.dtype)} cannot be handed to onnxruntime (onnxruntime-common's Tensor has no such type)`,
    );
  const { type, data } = hostToOrtData(t);
  return new ort.Tensor(type, data, t.dims);
}

/** An onnxruntime Tensor as a host tensor: the data is shared, not copied (int4/uint4 are unpacked). */
export function fromOrtTensor(t: OrtTensor, where: string): HostTensor {
  const dtype = onnxTypeOfOrt(t.type);
  if (dtype === undefined) throw new Error(`${where}: onnxruntime returned a tensor of type '${t.type}', which is not taken here`);
  if (t.location && t.location !== 'cpu') throw new Error(`${where}: onnxruntime returned a tensor on '${t.location}'`);
  return ortDataToHost(dtype, t.dims, t.data);
}
