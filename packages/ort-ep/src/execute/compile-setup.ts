// Process-wide set-up of the compiled path's tracing, once per device:
// - No C++ compiler at run time by default. On the CPU, MLX's compile is only available where a
//   C++ compiler answers, and its fusion writes C++ and runs the compiler (g++) for every new fused
//   kernel: seconds per kernel on a model's first runs, and without a compiler, no tracing at all.
//   So CPU segments are captured instead (mx.captureGraph: traced once per signature, replayed from
//   native code, no simplification, no fusion); the fusions that matter are the project's own
//   precompiled kernels, which plan-time rewrites put in (GELU, norms, softmax, activations with a
//   bias, conv and matmul epilogues). MLX_ORT_CPU_JIT=1 opts into MLX's compile and fusion on the
//   CPU (where g++ exists): fewer passes over memory on long elementwise chains, after seconds of
//   compiling per new kernel.
// - GPU segments use MLX's compile on Metal, with fusion (its kernels build in milliseconds). On
//   CUDA they are captured like the CPU's and replayed by the static executor (gpuTracer), and
//   fused with MLX's compile only where MLX_ORT_FUSION=1: NVRTC builds every new fused kernel on
//   first use, and on a fresh H100 that took BERT-base's second run 64 s and GPT-2 small's 35 s
//   (21 ms and 113 ms unfused), for a steady state the same on BERT-base, 0-7% faster decoding,
//   13% on GPT-2 small (2026-12-06). MLX_ORT_FUSION=0 turns fusion off everywhere (compile mode
//   'no_fuse').
// - MLX's buffer cache on the CPU: MLX keeps freed buffers for reuse up to its cache limit, 32 MiB
//   by default on the CPU (Metal's and CUDA's default to their memory limit). A buffer over it was
//   handed back to the system at every free and mapped again at the next run, a page fault per
//   4 KiB: GPT-2 small's [256, 50257] logits, 51 MB, took 12,500 faults a run and its product
//   110-130 ms instead of ~100. A CPU session raises the limit to CPU_CACHE_LIMIT once per process
//   (MLX_ORT_CPU_CACHE_MB sets another; a limit already above it stays); mx.memory.clearCache()
//   gives the cached buffers back, and mx.memory.setCacheLimit() sets it anew.
// - The CPU kernel cache (JIT only): MLX writes kernels to $TMPDIR/mlx/<version>/cpu, which a reboot
//   empties. That folder is made a link to a lasting one, MLX_ORT_CACHE_DIR, else
//   $XDG_CACHE_HOME/mlx-ort, else ~/.cache/mlx-ort (each holding <version>/cpu), so a second
//   process (or boot) reuses the kernels instead of compiling them again.
import { existsSync, lstatSync, mkdirSync, readlinkSync, symlinkSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import * as mx from '@mlx/core';

export interface CompileSetup {
  /** Whether segments are traced on this device (false: they run eagerly). */
  traced: boolean;
  /** How: MLX's compile, or the native capture (mx.captureGraph, no C++ compiler). */
  tracer: 'compile' | 'capture';
  /** Whether traces fuse elementwise chains (on the CPU: MLX's JIT, MLX_ORT_CPU_JIT=1). */
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

/**
 * Whether GPU segments fuse: on CUDA only when MLX_ORT_FUSION is '1' (NVRTC builds each new fused
 * kernel on first use, tens of seconds a model on a cold cache); on Metal unless it is '0'.
 */
export function gpuFusion(cuda: boolean, env: string | undefined): boolean {
  return cuda ? env === '1' : env !== '0';
}

/**
 * How GPU segments are traced: on CUDA without fusion, captured (mx.captureGraph), so that a
 * one-call replay runs the trace's primitives in order from native code (the static executor's
 * GPU form: capture.cpp) instead of building the step's graph again for MLX's evaluation. A
 * 124.6M decode step on an H100 took 4.9-5.2 ms a run() with MLX's compile and 2.3-3.4 ms captured
 * (2026-12-07). With fusion, on Metal, or where MLX_ORT_GPU_CAPTURE is '0', MLX's compile.
 */
export function gpuTracer(cuda: boolean, fuse: boolean, env: string | undefined): 'compile' | 'capture' {
  return cuda && !fuse && env !== '0' ? 'capture' : 'compile';
}

/** MLX's buffer cache limit on the CPU once a session runs there (bytes), unless MLX_ORT_CPU_CACHE_MB says otherwise. */
export const CPU_CACHE_LIMIT = 1 << 30;

/**
 * The CPU buffer cache limit a session sets: MLX_ORT_CPU_CACHE_MB (a whole number of MiB, 0
 * included) where given, else CPU_CACHE_LIMIT, or the current limit where that is higher.
 */
export function cpuCacheLimit(current: number, env: string | undefined): number {
  if (env !== undefined && env !== '') {
    const mb = Number(env);
    if (!Number.isSafeInteger(mb) || mb < 0)
      throw new RangeError(`MLX_ORT_CPU_CACHE_MB must be a whole number of MiB (0 or more), got '${env}'`);
    return mb * 1024 * 1024;
  }
  return Math.max(current, CPU_CACHE_LIMIT);
}

export function compileSetup(device: 'cpu' | 'gpu'): CompileSetup {
  let s = setups.get(device);
  if (s) return s;
  if (device === 'cpu') {
    // MLX has no getter: set, read the old limit back, settle (the old one again on a bad value).
    const current = mx.memory.setCacheLimit(CPU_CACHE_LIMIT);
    let limit = current;
    try {
      limit = cpuCacheLimit(current, process.env.MLX_ORT_CPU_CACHE_MB);
    } finally {
      mx.memory.setCacheLimit(limit);
    }
  }
  const fusion = process.env.MLX_ORT_FUSION !== '0';
  if (device === 'gpu') {
    // The compile mode is the process's: a CUDA session without fusion also keeps an opted-in
    // CPU JIT (MLX_ORT_CPU_JIT=1) of the same process from fusing.
    const cuda = mx.cudaAvailable();
    const fuse = gpuFusion(cuda, process.env.MLX_ORT_FUSION);
    if (!fuse) mx.setCompileMode('no_fuse');
    s = { traced: true, tracer: gpuTracer(cuda, fuse, process.env.MLX_ORT_GPU_CAPTURE), fusion: fuse };
  } else if (!fusion) {
    mx.setCompileMode('no_fuse');
    s = { traced: true, tracer: 'capture', fusion: false };
  } else if (process.env.MLX_ORT_CPU_JIT === '1' && mx.cpuCompileAvailable()) {
    s = { traced: true, tracer: 'compile', fusion, kernelCache: linkKernelCache() };
  } else {
    if (process.env.MLX_ORT_CPU_JIT === '1')
      process.emitWarning(
        "MLX_ORT_CPU_JIT=1 asks for MLX's CPU fusion, but no C++ compiler (g++) is found: CPU segments are captured without fusing",
        { code: 'MLX_ORT_NO_COMPILER' },
      );
    s = { traced: true, tracer: 'capture', fusion: false };
  }
  setups.set(device, s);
  return s;
}
