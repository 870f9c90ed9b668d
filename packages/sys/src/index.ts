// @mlx/sys: finds and loads the native library and declares its functions with koffi.
// Raw declarations only: no ownership, no defaults, no caching of MLX state.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { prototypes, type MlxCFunctions } from './generated/bindings.js';
import { callbackTypes, enumTypes, handleTypes, structTypes } from './generated/ctypes.js';

export type { MlxCFunctions } from './generated/bindings.js';
export { prototypes, functionCount } from './generated/bindings.js';
export type { MlxHandle } from './types.js';
/** mlx-c's enum values. */
export { MlxDtype, MlxDeviceType, MlxCompileMode, MlxFftNorm } from './generated/ctypes.js';

const require = createRequire(import.meta.url);
type Koffi = typeof import('koffi');
const koffi: Koffi = require('koffi');

/** The koffi types the declarations use, for callers that register callbacks or decode memory. */
export interface MlxCTypes {
  handles: Record<string, unknown>;
  callbacks: Record<string, unknown>;
}

export interface MlxC {
  /** The path (or name) the library was loaded from. */
  path: string;
  /** Functions of the spec that this library does not export (an older system libmlxc). */
  missing: string[];
  fn: MlxCFunctions;
  types: MlxCTypes;
  koffi: Koffi;
}

let types: MlxCTypes | undefined;
/** Declares the ABI's types (from spec/types.ts, through src/generated/ctypes.ts) in dependency order. */
function declareTypes(): MlxCTypes {
  if (types) return types;
  const handles: Record<string, unknown> = {};
  for (const n of handleTypes) handles[n] = koffi.struct(n, { ctx: 'void*' });
  for (const n of enumTypes) koffi.alias(n, 'int');
  for (const [n, fields] of Object.entries(structTypes)) koffi.struct(n, fields);
  const callbacks: Record<string, unknown> = {};
  for (const [n, proto] of Object.entries(callbackTypes)) callbacks[n] = koffi.proto(proto);
  types = { handles, callbacks };
  return types;
}

const here = dirname(fileURLToPath(import.meta.url));
/** Where this repository's build puts the library (from src/ or dist/). */
export const repoLibraryPath = join(here, '..', 'native', 'build', process.platform === 'darwin' ? 'libmlxc.dylib' : 'libmlxc.so');

/** The candidates, in the order they are tried. */
export function libraryCandidates(): { path: string; why: string }[] {
  const c: { path: string; why: string }[] = [];
  if (process.env.MLX_C_LIBRARY) c.push({ path: process.env.MLX_C_LIBRARY, why: 'MLX_C_LIBRARY' });
  c.push({ path: repoLibraryPath, why: 'built by this repository (tools/dev setup)' });
  if (process.platform === 'darwin') {
    c.push({ path: '/opt/homebrew/lib/libmlxc.dylib', why: 'Homebrew (Apple Silicon)' });
    c.push({ path: '/usr/local/lib/libmlxc.dylib', why: 'Homebrew (Intel) or /usr/local' });
    c.push({ path: 'libmlxc.dylib', why: 'the system loader path' });
  } else {
    c.push({ path: '/usr/local/lib/libmlxc.so', why: '/usr/local' });
    c.push({ path: 'libmlxc.so', why: 'the system loader path' });
  }
  return c;
}

export class MlxLibraryNotFoundError extends Error {
  constructor(readonly attempts: { path: string; why: string; error: string }[]) {
    super(
      `could not load the MLX C library. Tried:\n${attempts.map((a) => `  - ${a.path} (${a.why}): ${a.error}`).join('\n')}\n` +
        `Fix: run \`tools/dev setup\` in the repository (builds packages/sys/native), or point MLX_C_LIBRARY at a libmlxc built from ml-explore/mlx-c.`,
    );
    this.name = 'MlxLibraryNotFoundError';
  }
}

let loaded: MlxC | undefined;
let libmlx: unknown;

/**
 * MLX_LIBMLX names the libmlx the native library should use (MLX's CUDA build, say, whose ABI is
 * the CPU build's for the same version): it is loaded first, so that libmlxc's dependency on
 * libmlx.so binds to it (the dynamic linker reuses a loaded library of the same soname).
 */
function preloadLibmlx(): void {
  const path = process.env.MLX_LIBMLX;
  if (!path || libmlx) return;
  if (!existsSync(path)) throw new MlxLibraryNotFoundError([{ path, why: 'MLX_LIBMLX', error: 'no such file' }]);
  try {
    libmlx = koffi.load(path);
  } catch (e) {
    throw new MlxLibraryNotFoundError([{ path, why: 'MLX_LIBMLX', error: (e as Error).message }]);
  }
}

// MLX_SYS_COUNT_CALLS=1 wraps every function to count its calls (benchmarks: FFI calls per run).
// Off by default: the wrapper costs a JS call per native call.
const counting = process.env.MLX_SYS_COUNT_CALLS === '1';
const counts = new Map<string, number>();

function countCalls(name: string, f: (...a: unknown[]) => unknown): unknown {
  const wrapped = (...a: unknown[]) => {
    counts.set(name, (counts.get(name) ?? 0) + 1);
    return f(...a);
  };
  const async = (f as unknown as { async?: (...a: unknown[]) => void }).async;
  if (async) {
    (wrapped as unknown as { async: unknown }).async = (...a: unknown[]) => {
      counts.set(name, (counts.get(name) ?? 0) + 1);
      return async.apply(f, a);
    };
  }
  return wrapped;
}

/**
 * Native calls made so far, per function, when the library was loaded with MLX_SYS_COUNT_CALLS=1
 * (undefined otherwise). For benchmarks; the counts keep growing (compare two readings).
 */
export function nativeCallCounts(): ReadonlyMap<string, number> | undefined {
  return counting ? counts : undefined;
}

/**
 * Loads the library once and declares every function: MLX_C_LIBRARY when set (and then nothing else),
 * else this repository's build, else a system libmlxc.
 */
export function loadMlxC(): MlxC {
  if (loaded) return loaded;
  declareTypes();
  preloadLibmlx();
  const attempts: { path: string; why: string; error: string }[] = [];
  for (const cand of libraryCandidates()) {
    // An explicit MLX_C_LIBRARY is authoritative: falling back to another library would run code
    // the user did not ask for, so a bad path stops the search.
    const explicit = cand.why === 'MLX_C_LIBRARY';
    if (cand.path.includes('/') && !existsSync(cand.path)) {
      attempts.push({ ...cand, error: 'no such file' });
      if (explicit) break;
      continue;
    }
    let lib: ReturnType<Koffi['load']>;
    try {
      lib = koffi.load(cand.path);
    } catch (e) {
      attempts.push({ ...cand, error: (e as Error).message });
      if (explicit) break;
      continue;
    }
    const fn: Record<string, unknown> = {};
    const missing: string[] = [];
    for (const proto of prototypes) {
      const name = /(\w+)\(/.exec(proto)![1];
      try {
        fn[name] = counting ? countCalls(name, lib.func(proto)) : lib.func(proto);
      } catch {
        missing.push(name);
        fn[name] = () => {
          throw new Error(`${name} is not exported by ${cand.path}`);
        };
      }
    }
    loaded = { path: cand.path, missing, fn: fn as unknown as MlxCFunctions, types: declareTypes(), koffi };
    return loaded;
  }
  throw new MlxLibraryNotFoundError(attempts);
}
