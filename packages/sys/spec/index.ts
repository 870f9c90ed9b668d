import type { FnSpec } from './dsl.js';
import { ops } from './ops.js';
import { fast } from './fast.js';
import { linalg } from './linalg.js';
import { random } from './random.js';
import { fft } from './fft.js';
import { array, string, vector, device, stream, closure, transforms, memory, error } from './runtime.js';
import { extensions } from './extensions/index.js';
import { kernels } from './kernels/index.js';

export { extensions, kernels };

/**
 * Every exported function, by group. The group names the generated C++ file and the README row.
 * Three kinds: MLX's API in mlx-c's conventions (runtime.ts, ops.ts, fast.ts, linalg.ts,
 * random.ts, fft.ts), this library's runtime additions (extensions/) and its own CPU kernels
 * (kernels/).
 */
export const spec: Record<string, FnSpec[]> = {
  array,
  string,
  vector,
  device,
  stream,
  closure,
  transforms,
  memory,
  error,
  ops,
  fast,
  linalg,
  random,
  fft,
  ...extensions,
  ...kernels,
};

/** Whether a group of the spec holds the project's own kernels (spec/kernels/), as opposed to MLX's API. */
export const isKernelGroup = (group: string): boolean => Object.hasOwn(kernels, group);
