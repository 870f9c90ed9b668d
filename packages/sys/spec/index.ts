import type { FnSpec } from './dsl.js';
import { ops } from './ops.js';
import { fast } from './fast.js';
import { linalg } from './linalg.js';
import { random } from './random.js';
import { fft } from './fft.js';
import { array, string, vector, device, stream, closure, transforms, memory, error } from './runtime.js';
import { extensions } from './extensions.js';
import { cpu } from './cpu.js';
import { layers } from './layers.js';
import { epilogue } from './epilogue.js';
import { gemm } from './gemm.js';
import { conv } from './conv.js';

/** Every exported function, by group. The group names the generated C++ file and the README row. */
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
  extensions,
  cpu,
  layers,
  epilogue,
  gemm,
  conv,
};
