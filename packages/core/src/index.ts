// @mlx/core: safe MLX arrays for TypeScript.
export { Array, array, scalar, type ArrayLike, type ArrayOptions, type NestedData, type NewDataOptions } from './array.js';
export {
  dtypes,
  itemsize,
  isFloating,
  isInteger,
  isUnsigned,
  typedArrayCtor,
  float16BitsToNumber,
  numberToFloat16Bits,
  bfloat16BitsToNumber,
  float32ToBfloat16Bits,
  type Dtype,
  type TypedArray,
  type TypedArrayFor,
} from './dtype.js';
export { MlxError } from './native.js';
export { scope, keep, persist, dispose, collect, flushDisposed, type Disposable } from './lifetime.js';
export {
  Device,
  Stream,
  defaultDevice,
  setDefaultDevice,
  defaultStream,
  defaultStreamOf,
  newStream,
  withStream,
  synchronize,
  gpuAvailable,
  metalAvailable,
  cudaAvailable,
  type DeviceType,
  type StreamLike,
  type OpOptions,
} from './stream.js';
export {
  Closure,
  compile,
  cpuCompileAvailable,
  captureGraph,
  vjp,
  jvp,
  valueAndGrad,
  grad,
  customVjp,
  differentiating,
  checkpoint,
  evaluate,
  asyncEval,
  enableCompile,
  disableCompile,
  setCompileMode,
  type CompiledFunction,
  type CompileMode,
} from './transforms.js';
export { memory } from './memory.js';
export { hostBuffer, hostMemory, hostSizeClass, populatedBytes, HOST_BLOCK_MIN_BYTES, type HostMemoryStats } from './host.js';
export {
  convPackHost,
  convPanelsSplit,
  cpuThreads,
  setCpuThreads,
  cpuKernelsUseAvx2,
  cpuKernelsUseAvx512,
  greedyRows,
  packDensePanels,
  transposeHost,
} from './cpu.js';
export type { FftNorm } from './enums.js';
export * from './ops.js';
export { fastOps as fast, linalgOps as linalg, randomOps as random, fftOps as fft } from './generated/ops.js';
/** The project's own CPU kernels (not MLX's ops): `ext.smallMatmul`, `ext.convGemm`, ... (README, "The project's kernels: ext"). */
export { extOps as ext } from './generated/ext.js';

export { nativeCallCounts } from '@mlx/sys';
/**
 * `nativeLibraryPath`: where the native library was loaded from ('' until it loads: importing this
 * package loads nothing native; the first MLX call, or loadNativeLibrary(), loads it).
 */
export { nativeLibraryPath, nativeLoaded } from './native.js';
import { native } from './native.js';
/** Loads the native library now (it otherwise loads on first use) and returns its path. Throws MlxLibraryNotFoundError. */
export function loadNativeLibrary(): string {
  return native().path;
}
export { MlxLibraryNotFoundError } from '@mlx/sys';
export { version } from './info.js';
export { HostProgram, hostProgramStaticRuns, type HostSlot } from './host-program.js';
export { evalInBackground, evaluateWithin, graphBytes, inlineEvalTasks, type EvalLimits, type BackgroundOptions } from './eval.js';
/** Optimizers (SGD, AdamW) over records of named arrays, gradient clipping and accumulation (README, "Training"). */
export * as optim from './optim.js';
