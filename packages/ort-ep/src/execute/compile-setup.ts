// Process-wide set-up of MLX's compile for the compiled path, once per device:
// - No C++ compiler at run time by default. On the CPU, MLX's compile builds each new fused kernel
//   by writing C++ and running the system compiler (g++: seconds per kernel, on a model's first
//   runs). So CPU sessions trace and simplify without fusing (compile mode 'no_fuse'): the replay
//   is still one compiled graph, and the fusions that matter are the project's own precompiled
//   kernels, which plan-time rewrites put in (GELU, norms, softmax, activations with a bias, conv
//   and matmul epilogues). MLX_ORT_CPU_JIT=1 opts into MLX's CPU fusion (where g++ exists): fewer
//   passes over memory on long elementwise chains, after seconds of compiling per new kernel.
// - GPU sessions fuse (Metal and CUDA build kernels without a host compiler). The mode is
//   process-wide in MLX, so where CPU sessions have put the process in 'no_fuse', a GPU segment's
//   call switches fusion on around itself.
// - MLX_ORT_FUSION=0 turns fusion off everywhere.
// - The CPU kernel cache (JIT only): MLX writes kernels to $TMPDIR/mlx/<version>/cpu, which a reboot
//   empties. That folder is made a link to a lasting one, MLX_ORT_CACHE_DIR, else
//   $XDG_CACHE_HOME/mlx-ort, else ~/.cache/mlx-ort (each holding <version>/cpu), so a second
//   process (or boot) reuses the kernels instead of compiling them again.
import { spawnSync } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, readlinkSync, symlinkSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import * as mx from '@mlx/core';

export interface CompileSetup {
  /** Whether mx.compile traces on this device (false: segments run eagerly). */
  traced: boolean;
  /** Whether traces on this device fuse elementwise chains (on the CPU: MLX's JIT, MLX_ORT_CPU_JIT=1). */
  fusion: boolean;
  /** Where fused CPU kernels are kept, when fusion is on and this device is the CPU. */
  kernelCache?: string;
}

const setups = new Map<string, CompileSetup>();

/** The folder the CPU kernels of this MLX version are kept in. */
export function kernelCacheDir(): string {
  const base = process.env.MLX_ORT_CACHE_DIR || join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'mlx-ort');
  return join(base, mx.version(), 'cpu');
}

function hasCxxCompiler(): boolean {
  const r = spawnSync('g++', ['--version'], { stdio: 'ignore' });
  return r.status === 0;
}

/** Points MLX's temporary kernel folder at the lasting one; leaves an existing folder alone. */
function linkKernelCache(): string | undefined {
  const lasting = kernelCacheDir();
  const temp = join(tmpdir(), 'mlx', mx.version(), 'cpu');
  try {
    mkdirSync(lasting, { recursive: true });
    if (existsSync(temp) || isLink(temp)) return isLink(temp) && readlinkSync(temp) === lasting ? lasting : temp;
    mkdirSync(dirname(temp), { recursive: true });
    symlinkSync(lasting, temp, 'dir');
    return lasting;
  } catch {
    // Another process made it first, or the folders are not writable: MLX uses its own.
    return existsSync(temp) ? temp : undefined;
  }
}

function isLink(p: string): boolean {
  try {
    return lstatSync(p).isSymbolicLink();
  } catch {
    return false;
  }
}

/** Set once a CPU session put the process in 'no_fuse' while fusion is wanted on the GPU. */
let cpuUnfused = false;

export function compileSetup(device: 'cpu' | 'gpu'): CompileSetup {
  let s = setups.get(device);
  if (s) return s;
  const fusionAllowed = process.env.MLX_ORT_FUSION !== '0';
  if (!fusionAllowed) mx.setCompileMode('no_fuse');
  if (device === 'gpu') {
    s = { traced: true, fusion: fusionAllowed };
  } else {
    let jit = fusionAllowed && process.env.MLX_ORT_CPU_JIT === '1';
    if (jit && !hasCxxCompiler()) {
      jit = false;
      process.emitWarning(
        'MLX_ORT_CPU_JIT=1 asks for MLX\'s CPU fusion, but no C++ compiler (g++) is found: the compiled path traces without fusing',
        { code: 'MLX_ORT_NO_COMPILER' },
      );
    }
    if (!jit && fusionAllowed) {
      mx.setCompileMode('no_fuse');
      cpuUnfused = true;
    }
    s = { traced: true, fusion: jit, kernelCache: jit ? linkKernelCache() : undefined };
  }
  setups.set(device, s);
  return s;
}

/**
 * Calls a compiled segment of `device`. A GPU segment traced while CPU sessions keep the process
 * in 'no_fuse' gets fusion for its own call (and the mode back afterwards); otherwise the call is
 * made as it is, with no native call added.
 */
export function callCompiled<T>(setup: CompileSetup, device: 'cpu' | 'gpu', call: () => T): T {
  if (device !== 'gpu' || !cpuUnfused || !setup.fusion) return call();
  mx.setCompileMode('enabled');
  try {
    return call();
  } finally {
    mx.setCompileMode('no_fuse');
  }
}
