// The project's own CPU kernels (native/src/kernels/), by concept. Each takes any array on any
// stream and runs the library's kernel where it can (float32 on a CPU stream), MLX's ops elsewhere.
// They are not MLX's API: @mlx/core generates their safe functions into its `ext` namespace, apart
// from MLX's ops.
import type { FnSpec } from '../dsl.js';
import { cpu } from './cpu.js';
import { activation } from './activation.js';
import { norm } from './norm.js';
import { gemm } from './gemm.js';
import { conv } from './conv.js';
import { pool } from './pool.js';
import { rnn } from './rnn.js';
import { attention } from './attention.js';
import { indices } from './indices.js';
import { optim } from './optim.js';

/** By group; `kernels/<concept>` names the generated C++ file (native/generated/kernels/<concept>.cpp) and the README row. */
export const kernels: Record<string, FnSpec[]> = {
  'kernels/cpu': cpu,
  'kernels/activation': activation,
  'kernels/norm': norm,
  'kernels/gemm': gemm,
  'kernels/conv': conv,
  'kernels/pool': pool,
  'kernels/rnn': rnn,
  'kernels/attention': attention,
  'kernels/indices': indices,
  'kernels/optim': optim,
};
