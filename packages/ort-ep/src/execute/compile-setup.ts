// Process-wide set-up of MLX's compile for the compiled path, once per device:
// - fusion: on by default; MLX_ORT_FUSION=0 turns it off (compile then traces and simplifies
//   without building fused kernels);
// - on the CPU, MLX builds each new fused kernel with the system C++ compiler (g++) and, where
//   there is none, skips compile altogether: then the compiled path runs its segments eagerly
//   (shape math stays folded per signature) and says so once;
// - the CPU kernel cache: MLX writes kernels to $TMPDIR/mlx/<version>/cpu, which a reboot
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

export function compileSetup(device: 'cpu' | 'gpu'): CompileSetup {
  let s = setups.get(device);
  if (s) return s;
  const fusion = process.env.MLX_ORT_FUSION !== '0';
  if (!fusion) mx.setCompileMode('no_fuse');
  if (device === 'cpu' && !hasCxxCompiler()) {
    s = { traced: false, fusion: false };
    process.emitWarning(
      'no C++ compiler (g++) found: MLX cannot compile on the CPU, so the compiled path runs its segments eagerly (shape math is still folded per signature)',
      { code: 'MLX_ORT_NO_COMPILER' },
    );
  } else {
    s = { traced: true, fusion, kernelCache: device === 'cpu' && fusion ? linkKernelCache() : undefined };
  }
  setups.set(device, s);
  return s;
}
