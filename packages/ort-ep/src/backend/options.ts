// The 'mlx' execution provider's options, as onnxruntime users write them
// (`executionProviders: [mlx({ device: 'gpu' })]`), and how they become MlxSession options.
import type { InferenceSession } from 'onnxruntime-common';
import type { MlxSessionOptions } from '../execute/options.js';

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
  /** run() evaluates a replay whose last evaluation took under this many ms on the calling thread. Default 2 (see MlxSessionOptions.shortEvalMs). */
  shortEvalMs?: number;
  /** Where large results land on the host: 'auto' (default), 'pooled' or 'fresh' (see MlxSessionOptions.outputMemory). */
  outputMemory?: 'auto' | 'pooled' | 'fresh';
  /** Nodes MLX does not take: 'cpu' runs them on onnxruntime (default where it resolves), 'none' refuses the model (see MlxSessionOptions.fallback). */
  fallback?: 'cpu' | 'none';
  /** Op types the MLX provider declines, so that they fall back ('Softmax', 'com.microsoft::Attention'). */
  disabledOps?: string[];
  /** Plan-time graph rewrites (fused GELU, norms, MatMul + bias, ...): true (default), false, or names. */
  graphRewrites?: MlxSessionOptions['graphRewrites'];
  /** Warm the session up inside create(): true, or { dims } of symbolic dimensions (see MlxSessionOptions.warmup). */
  warmup?: MlxSessionOptions['warmup'];
  /** Progress of the steps that can take seconds the first time (see MlxSessionOptions.onProgress). */
  onProgress?: MlxSessionOptions['onProgress'];
  /** Which GPU, as onnxruntime's GPU providers take it: MLX runs one per process, device 0. */
  deviceId?: number;
  /**
   * Outputs whose names start with 'present' (a KV cache: present.0.key, present.0.decoder.key, ...)
   * come back as 'gpu-buffer' tensors, to be fed back as the next run's pasts without a copy to or
   * from the host. preferredOutputLocation still decides for an output it names. Unlike
   * preferredOutputLocation's names, this fits every session of a model (an encoder without
   * presents too): the recipe for transformers.js, which gives one session_options to each.
   * Default false.
   */
  presentsOnDevice?: boolean;
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

/** The 'mlx' entry of `executionProviders` when it is an object (mlx({...})). */
function mlxOptionOf(options?: InferenceSession.SessionOptions): MlxExecutionProviderOption | undefined {
  const eps = options?.executionProviders ?? [];
  return eps.find((e) => typeof e === 'object' && e !== null && (e as { name?: string }).name === MLX_BACKEND_NAME) as
    | MlxExecutionProviderOption
    | undefined;
}

/** The session options of the 'mlx' provider entry of `executionProviders`, with the onnxruntime options it reads. */
export function sessionOptionsOf(options?: InferenceSession.SessionOptions): MlxSessionOptions {
  const mine = mlxOptionOf(options);
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
    // onnxruntime's 'disabled' level turns its graph optimizations off: here, the plan-time rewrites.
    graphRewrites: mine?.graphRewrites ?? (options?.graphOptimizationLevel === 'disabled' ? false : undefined),
    enableProfiling: options?.enableProfiling,
    logSeverityLevel: options?.logSeverityLevel,
    logId: options?.logId,
    freeDimensionOverrides: options?.freeDimensionOverrides,
    optimizedModelFilePath: options?.optimizedModelFilePath,
    deviceId: mine?.deviceId,
    profileFilePrefix: options?.profileFilePrefix,
    warmup: mine?.warmup,
    onProgress: mine?.onProgress,
    intraOpNumThreads: options?.intraOpNumThreads,
  };
}

/**
 * Where a session returns each output, from `preferredOutputLocation` (then, for the outputs it
 * leaves unset, the provider's `presentsOnDevice`): 'gpu-buffer' outputs stay on the device;
 * 'cpu-pinned' ones are read into pooled host blocks (page-locked on MLX's CUDA build); the rest
 * into fresh ArrayBuffers.
 */
export function outputLocations(
  options: InferenceSession.SessionOptions | undefined,
  outputNames: readonly string[],
): { onDevice: Set<string>; pinned: Set<string> } {
  const pref = options?.preferredOutputLocation;
  const presents = mlxOptionOf(options)?.presentsOnDevice;
  if (presents !== undefined && typeof presents !== 'boolean')
    throw new TypeError(`mlx execution provider: presentsOnDevice must be true or false, got ${JSON.stringify(presents)}`);
  const where = (name: string) => {
    const loc = typeof pref === 'string' || pref === undefined ? pref : pref[name];
    return loc === undefined && presents && name.startsWith('present') ? 'gpu-buffer' : loc;
  };
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
