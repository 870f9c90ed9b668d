// @mlx/sys: finds and loads the native library and declares its functions with koffi.
// Raw declarations only: no ownership, no defaults, no caching of MLX state.
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import * as nodeModule from 'node:module';
import { delimiter, dirname, isAbsolute, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { prototypes, type MlxCFunctions } from './generated/bindings.js';
import { glibcTooOld, glibcVersion } from './libc.js';
import { ownManifestVersion } from './manifest.js';
import { callbackTypes, enumTypes, handleTypes, structTypes } from './generated/ctypes.js';

export type { MlxCFunctions } from './generated/bindings.js';
export { prototypes, functionCount } from './generated/bindings.js';
export type { MlxHandle } from './types.js';
export { glibcVersion } from './libc.js';
/** mlx-c's enum values. */
export { MlxDtype, MlxDeviceType, MlxCompileMode, MlxFftNorm } from './generated/ctypes.js';

/**
 * This module's URL: import.meta.url, or in a CommonJS bundle (where the bundler empties
 * import.meta) the bundle's own file. webpack writes the URL the source had where it was built
 * (a folder that need not exist where the bundle runs): see otherRequirers.
 */
const selfUrl: string = import.meta.url ?? pathToFileURL(__filename).href;
/**
 * createRequire through the module's namespace: webpack replaces a createRequire imported by name
 * with its own require where the argument is a constant, and with undefined where it is not.
 */
const requireAt = (where: string): NodeJS.Require => nodeModule.createRequire(where);
const require = requireAt(selfUrl);
/**
 * Where packages are looked for after this package's own dependencies: the working folder's
 * project, and the script node was started with (a bundled application, whose native packages
 * are installed beside it, whatever the working folder).
 */
function otherRequirers(): NodeJS.Require[] {
  const out = [requireAt(join(process.cwd(), 'package.json'))];
  // The application's own script: absolute and outside node_modules (not a runner or a CLI).
  const script = process.argv[1];
  if (script && isAbsolute(script) && !script.split(/[\\/]/).includes('node_modules')) out.push(requireAt(script));
  return out;
}
type Koffi = typeof import('koffi');
// koffi is required on first load, not at import: importing this package loads nothing native.
let koffi: Koffi | undefined;

/**
 * koffi's native module, loaded from its package without koffi's entry script: that script also
 * loads the build tools bundled into it (Node's https, zlib and crypto modules, for downloading
 * prebuilt binaries at install time), which cost a fresh process ~10 ms for nothing a program that
 * calls functions uses. The native module exports koffi's whole API (the entry wraps it to add
 * deprecated aliases: handle, callback, lib.cdecl...). Undefined where it is not where koffi's own
 * entry would first look on this platform (musl, other CPUs, a bundle without koffi's folder), or
 * where it does not load or is not the package's version: koffi's entry then does its own search.
 */
function koffiNative(): Koffi | undefined {
  try {
    const manifest = require.resolve('koffi/package.json');
    const { version } = require(manifest) as { version?: string };
    const file = join(dirname(manifest), 'build', 'koffi', `${process.platform}_${process.arch}`, 'koffi.node');
    if (!existsSync(file)) return undefined;
    const native = require(file) as Koffi & { version?: string };
    return native.version === version ? native : undefined;
  } catch {
    return undefined;
  }
}

function getKoffi(): Koffi {
  if (koffi) return koffi;
  koffi = koffiNative();
  if (koffi) return koffi;
  try {
    koffi = require('koffi') as Koffi;
  } catch (e) {
    // A bundle keeps koffi external: it is installed beside the application.
    for (const r of otherRequirers()) {
      try {
        koffi = r('koffi') as Koffi;
        return koffi;
      } catch {
        // not reachable from there
      }
    }
    throw e;
  }
  return koffi;
}

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
  /** The raw functions: each declared on its first call (until then a stub that declares it). */
  fn: MlxCFunctions;
  /** Function `name` of `fn`, declared now if it was not (callers that keep a function use this). */
  resolve(name: string): ((...a: unknown[]) => unknown) & { async: (...a: unknown[]) => unknown };
  types: MlxCTypes;
  koffi: Koffi;
}

let types: MlxCTypes | undefined;
/** Declares the ABI's types (from spec/types.ts, through src/generated/ctypes.ts) in dependency order. */
function declareTypes(): MlxCTypes {
  if (types) return types;
  const koffi = getKoffi();
  const handles: Record<string, unknown> = {};
  for (const n of handleTypes) handles[n] = koffi.struct(n, { ctx: 'void*' });
  for (const n of enumTypes) koffi.alias(n, 'int');
  for (const [n, fields] of Object.entries(structTypes)) koffi.struct(n, fields);
  const callbacks: Record<string, unknown> = {};
  for (const [n, proto] of Object.entries(callbackTypes)) callbacks[n] = koffi.proto(proto);
  types = { handles, callbacks };
  return types;
}

const here = dirname(fileURLToPath(selfUrl));
const libName = process.platform === 'darwin' ? 'libmlxc.dylib' : 'libmlxc.so';
/** Where this repository's build puts the library (from src/ or dist/). */
export const repoLibraryPath = join(here, '..', 'native', 'build', libName);

/**
 * An operating system as `process.platform` names it (Node's own NodeJS.Platform, spelled out so
 * that these declarations need no @types/node).
 */
export type Platform = 'aix' | 'android' | 'darwin' | 'freebsd' | 'haiku' | 'linux' | 'openbsd' | 'sunos' | 'win32' | 'cygwin' | 'netbsd';

/** A prebuilt platform package: `@mlx/sys-<platform>`, holding lib/libmlxc and what it needs. */
export interface PlatformPackage {
  name: string;
  os: Platform;
  cpu: string;
  /** 'glibc' where the package needs it. */
  libc?: 'glibc';
  /** The oldest glibc its library loads on (that of the MLX wheel it is built from). */
  glibc?: string;
  /** The MLX backend its libmlx was built with (MLX_BACKEND selects by this). */
  backend: 'cpu' | 'cuda' | 'metal';
  /** Not a dependency of @mlx/sys: installed by hand where wanted. */
  optIn?: boolean;
}

/** The oldest glibc the Linux packages load on: MLX's manylinux wheels are built for glibc 2.35. */
export const GLIBC_FLOOR = '2.35';

/** Every platform package, in the order the loader tries those that fit this machine. */
export const platformPackages: readonly PlatformPackage[] = [
  { name: '@mlx/sys-linux-x64-cuda13', os: 'linux', cpu: 'x64', libc: 'glibc', glibc: GLIBC_FLOOR, backend: 'cuda', optIn: true },
  { name: '@mlx/sys-linux-x64-gnu', os: 'linux', cpu: 'x64', libc: 'glibc', glibc: GLIBC_FLOOR, backend: 'cpu' },
  { name: '@mlx/sys-darwin-arm64', os: 'darwin', cpu: 'arm64', backend: 'metal' },
];

/** The platform packages that fit this machine (os, cpu, libc), CUDA first. */
export function platformPackagesForHost(): PlatformPackage[] {
  const fits = platformPackages.filter((p) => p.os === process.platform && p.cpu === process.arch);
  if (fits.some((p) => p.libc) && !glibcVersion()) return [];
  return fits;
}

/** Why a fitting platform package cannot load here (an older glibc than it was built against), or undefined. */
function platformPackageUnfit(p: PlatformPackage): string | undefined {
  return p.libc === 'glibc' && p.glibc ? glibcTooOld(p.glibc, glibcVersion()) : undefined;
}

let ownVersion: string | null | undefined;
/**
 * This package's version: a platform package must have the same one. Null where this code runs
 * bundled into an application (the package.json beside it is then the application's, or none):
 * the platform package's version cannot be checked there.
 */
export function sysVersion(): string | null {
  if (ownVersion === undefined) {
    try {
      ownVersion = ownManifestVersion(require('../package.json'));
    } catch {
      ownVersion = null;
    }
  }
  return ownVersion;
}

/**
 * Where a platform package is installed: resolved from this package, then from the working
 * directory's project and the script node runs.
 */
function resolvePlatformPackage(name: string): string | undefined {
  const froms = [require, ...otherRequirers()];
  for (const r of froms) {
    try {
      return dirname(r.resolve(`${name}/package.json`));
    } catch {
      // not reachable from there
    }
  }
  return undefined;
}

export type MlxBackendChoice = 'auto' | 'cpu' | 'cuda' | 'metal';

/** MLX_BACKEND: which platform package to use ('auto' by default; 'cuda' and 'metal' are authoritative). */
export function backendChoice(): MlxBackendChoice {
  const v = (process.env.MLX_BACKEND ?? 'auto').toLowerCase() || 'auto';
  if (v === 'auto' || v === 'cpu' || v === 'cuda' || v === 'metal') return v;
  throw new MlxLibraryNotFoundError([], `MLX_BACKEND must be auto, cpu, cuda or metal, got '${process.env.MLX_BACKEND}'`);
}

export interface LibraryCandidate {
  path: string;
  why: string;
  /** Why it is skipped without trying to load it (a platform package of another version). */
  skip?: string;
}

/**
 * The candidates, in the order they are tried: MLX_C_LIBRARY; this repository's build when it
 * exists (a checkout builds its own, so a stale platform package never wins there); the platform
 * packages that fit this machine (MLX_BACKEND narrows them unless MLX_LIBMLX is set); the repository
 * build's path where it does not exist; a system libmlxc.
 */
export function libraryCandidates(): LibraryCandidate[] {
  const c: LibraryCandidate[] = [];
  if (process.env.MLX_C_LIBRARY) c.push({ path: process.env.MLX_C_LIBRARY, why: 'MLX_C_LIBRARY' });
  const repo = { path: repoLibraryPath, why: 'built by this repository (tools/dev setup)' };
  const repoBuilt = existsSync(repoLibraryPath);
  if (repoBuilt) c.push(repo);
  const choice = process.env.MLX_LIBMLX ? 'auto' : backendChoice();
  for (const p of platformPackagesForHost()) {
    if (choice !== 'auto' && p.backend !== choice) continue;
    const dir = resolvePlatformPackage(p.name);
    const why = `platform package ${p.name}`;
    if (!dir) {
      c.push({ path: `${p.name}/lib/${libName}`, why, skip: 'not installed' });
      continue;
    }
    const version = (require(join(dir, 'package.json')) as { version?: string }).version;
    const own = sysVersion();
    const skip = own === null || version === own ? platformPackageUnfit(p) : `version ${version}, but @mlx/sys is ${own}`;
    c.push({ path: join(dir, 'lib', libName), why, skip });
  }
  // MLX_BACKEND=cuda or metal: that platform package or nothing.
  if (choice === 'cuda' || choice === 'metal') return c;
  if (!repoBuilt) c.push(repo);
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

/** What to install (or set) on this machine, for the error message. */
function installAdvice(): string {
  const fits = platformPackagesForHost().filter((p) => !p.optIn);
  const pkgs = fits.map((p) => p.name);
  const where = `${process.platform}-${process.arch}`;
  const install = pkgs.length
    ? `install the prebuilt library for ${where}: \`npm install ${pkgs.join(' ')}\` (an optional dependency of @mlx/sys, which is skipped when optional dependencies are omitted)` +
      (process.platform === 'linux' && process.arch === 'x64' ? '; for NVIDIA GPUs, `npm install @mlx/sys-linux-x64-cuda13`' : '')
    : `no prebuilt library exists for ${where}; build libmlxc (packages/sys/native) against MLX`;
  return `Fix: ${install}; or set MLX_C_LIBRARY to the path of a libmlxc. In a checkout of the repository, run \`tools/dev setup\`.`;
}

/** The brand of MlxLibraryNotFoundError: the same key in every copy of @mlx/sys. */
const NOT_FOUND = Symbol.for('@mlx/sys.MlxLibraryNotFoundError');

/** No candidate library loads. `MlxLibraryNotFoundError.is(e)` and `instanceof` recognise any copy's. */
export class MlxLibraryNotFoundError extends Error {
  /** A stable code, also on each instance. */
  static readonly code = 'ERR_MLX_LIBRARY_NOT_FOUND';
  readonly code = MlxLibraryNotFoundError.code;

  /** Whether `e` is an MlxLibraryNotFoundError of any copy of @mlx/sys. */
  static is(e: unknown): e is MlxLibraryNotFoundError {
    return typeof e === 'object' && e !== null && (e as Record<symbol, unknown>)[NOT_FOUND] === true;
  }

  static override [Symbol.hasInstance](e: unknown): boolean {
    return Function.prototype[Symbol.hasInstance].call(MlxLibraryNotFoundError, e) || MlxLibraryNotFoundError.is(e);
  }

  constructor(
    readonly attempts: { path: string; why: string; error: string }[],
    reason?: string,
  ) {
    super(
      `could not load the MLX C library${reason ? `: ${reason}` : ''}.` +
        (attempts.length ? ` Tried:\n${attempts.map((a) => `  - ${a.path} (${a.why}): ${a.error}`).join('\n')}` : '') +
        `\n${installAdvice()}`,
    );
    this.name = 'MlxLibraryNotFoundError';
    Object.defineProperty(this, NOT_FOUND, { value: true });
  }
}

let loaded: MlxC | undefined;
const preloaded: unknown[] = [];

/**
 * MLX_LIBMLX names the libmlx the native library should use (MLX's CUDA build, say, whose ABI is
 * the CPU build's for the same version): it is loaded first, so that libmlxc's dependency on
 * libmlx.so binds to it (the dynamic linker reuses a loaded library of the same soname).
 */
function preloadLibmlx(): void {
  const path = process.env.MLX_LIBMLX;
  if (!path || preloaded.length) return;
  if (!existsSync(path)) throw new MlxLibraryNotFoundError([{ path, why: 'MLX_LIBMLX', error: 'no such file' }]);
  try {
    preloaded.push(getKoffi().load(path));
  } catch (e) {
    throw new MlxLibraryNotFoundError([{ path, why: 'MLX_LIBMLX', error: (e as Error).message }]);
  }
}

/**
 * OpenBLAS (MLX's CPU BLAS on Linux) keeps its worker threads polling for work with sched_yield for
 * 2^28 cycles (about 0.1 s) after each call: beside the project's own thread pool, on a machine
 * with as many cores as threads, that polling takes a core from the kernels that run next (14% of
 * a BERT-base run's CPU time on 2 cores; its median run 8-12% slower). OpenBLAS reads
 * OPENBLAS_THREAD_TIMEOUT (2^n cycles, n from 4) once, when it loads: unless the user set it, it is
 * set to 4 here, before the library loads, so its workers sleep after a call.
 */
export function quietBlasThreads(env: Record<string, string | undefined> = process.env): void {
  if (env.OPENBLAS_THREAD_TIMEOUT === undefined) env.OPENBLAS_THREAD_TIMEOUT = '4';
}

/**
 * The NVIDIA libraries MLX's CUDA build needs, dependencies first. With MLX_CUDA_LIBRARY_PATH (folders
 * separated by the path delimiter; each searched with its `<name>/lib` subfolders, as in a pip
 * site-packages/nvidia folder), those found are loaded by path before the CUDA package's libmlxc,
 * so its dependencies bind to them. Without it they come from the system's loader path.
 */
const nvidiaLibraries = [
  'libnvJitLink.so.13',
  'libcublasLt.so.13',
  'libcublas.so.13',
  'libcusparse.so.12',
  'libcusolver.so.12',
  'libcufft.so.12',
  'libnvrtc.so.13',
  'libnvrtc-builtins.so.13.0',
  'libcudnn.so.9',
  'libnccl.so.2',
];

function preloadCudaLibraries(): void {
  const dirs = (process.env.MLX_CUDA_LIBRARY_PATH ?? '').split(delimiter).filter(Boolean);
  const search: string[] = [];
  for (const d of dirs) {
    search.push(d);
    try {
      for (const e of readdirSync(d)) if (existsSync(join(d, e, 'lib'))) search.push(join(d, e, 'lib'));
    } catch {
      throw new MlxLibraryNotFoundError([], `MLX_CUDA_LIBRARY_PATH names '${d}', which is not a readable folder`);
    }
  }
  for (const name of nvidiaLibraries) {
    const dir = search.find((d) => existsSync(join(d, name)));
    if (dir) preloaded.push(getKoffi().load(join(dir, name)));
  }
  const home = cudaHeadersHome(search);
  if (home) process.env.CUDA_HOME = home;
}

/**
 * MLX compiles kernels at run time against the CUDA runtime's headers, from CUDA_HOME, CUDA_PATH or
 * /usr/local/cuda. Without any of those, the headers of a pip NVIDIA folder (its cu13/include or
 * cuda_runtime/include) serve: returns the folder for CUDA_HOME (the parent of that include/), or
 * undefined where nothing needs setting. `libDirs` are the library folders searched for the CUDA libraries.
 */
export function cudaHeadersHome(
  libDirs: readonly string[],
  env: Record<string, string | undefined> = process.env,
  has: (path: string) => boolean = existsSync,
): string | undefined {
  if (env.CUDA_HOME || env.CUDA_PATH || has('/usr/local/cuda/include/cuda_runtime.h')) return undefined;
  return libDirs.map((d) => dirname(d)).find((d) => has(join(d, 'include', 'cuda_runtime.h')));
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
 * The libmlxc this process has loaded already (by another thread or another copy of this package),
 * from the memory map (Linux: /proc/self/maps; `maps` for tests); undefined where none is, or
 * where the map cannot be read (other systems: each copy then searches on its own).
 */
export function mappedLibrary(maps?: string): string | undefined {
  let text = maps;
  if (text === undefined) {
    if (process.platform !== 'linux') return undefined;
    try {
      text = readFileSync('/proc/self/maps', 'utf8');
    } catch {
      return undefined;
    }
  }
  for (const line of text.split('\n')) {
    // address perms offset dev inode path (the path may hold spaces; a deleted file says so)
    const m = /^\S+\s+\S+\s+\S+\s+\S+\s+\d+\s+(\/.*\/libmlxc\.(?:so|dylib))$/.exec(line);
    if (m) return m[1];
  }
  return undefined;
}

/** Whether loadMlxC() has loaded the library in this process (nothing loads at import). */
export function isMlxCLoaded(): boolean {
  return loaded !== undefined;
}

/**
 * The warning for a library loaded after this repository's own build failed to load (not merely
 * absent): in a checkout, a stale platform package (the packaging step leaves one) then runs in
 * place of the code just built, silently, until the build loads again (an unresolved symbol did it
 * once). Undefined where the chosen library is the repository's build or that build was not tried.
 */
export function fallbackWarning(
  attempts: readonly { path: string; why: string; error: string }[],
  chosen: { path: string; why: string },
): string | undefined {
  const repo = attempts.find((a) => a.path === repoLibraryPath && a.error !== 'no such file');
  if (!repo || chosen.path === repoLibraryPath) return undefined;
  return `@mlx/sys: this repository's build ${repo.path} could not be loaded (${repo.error}); using ${chosen.path} (${chosen.why}) instead, which may not hold the code just built`;
}

/**
 * Loads the library once, trying libraryCandidates() in order (each function is declared on its
 * first call). An explicit MLX_C_LIBRARY is authoritative (and then nothing else is tried), as is
 * MLX_BACKEND=cuda or metal.
 */
export function loadMlxC(): MlxC {
  if (loaded) return loaded;
  // One process, one libmlxc: a worker thread (its own instance of this module) or another copy of
  // @mlx/sys takes the library already loaded, whatever its own search would find. Two MLX
  // libraries in one process (the CUDA build loaded by a worker beside the CPU build the main
  // thread loaded) give wrong results and crashes.
  const mapped = mappedLibrary();
  const candidates = mapped ? [{ path: mapped, why: 'already loaded in this process' }] : libraryCandidates();
  const koffi = getKoffi();
  declareTypes();
  quietBlasThreads();
  preloadLibmlx();
  const attempts: { path: string; why: string; error: string }[] = [];
  for (const cand of candidates) {
    // An explicit MLX_C_LIBRARY is authoritative: falling back to another library would run code
    // the user did not ask for, so a bad path stops the search.
    const explicit = cand.why === 'MLX_C_LIBRARY';
    if (cand.skip) {
      attempts.push({ path: cand.path, why: cand.why, error: cand.skip });
      continue;
    }
    if (cand.path.includes('/') && !existsSync(cand.path)) {
      attempts.push({ path: cand.path, why: cand.why, error: 'no such file' });
      if (explicit) break;
      continue;
    }
    let lib: ReturnType<Koffi['load']>;
    try {
      if (cand.why === 'platform package @mlx/sys-linux-x64-cuda13') preloadCudaLibraries();
      lib = koffi.load(cand.path);
    } catch (e) {
      attempts.push({ path: cand.path, why: cand.why, error: (e as Error).message });
      if (explicit) break;
      continue;
    }
    // Each function is declared on its first call (koffi parses its prototype then): a process
    // calls a fraction of the 500-odd, and declaring them all costs milliseconds at load. Until
    // then `fn` holds a stub that declares the function, puts it in its place and calls it.
    type Native = ((...a: unknown[]) => unknown) & { async: (...a: unknown[]) => unknown };
    const protoOf = new Map(prototypes.map((p) => [/(\w+)\(/.exec(p)![1], p]));
    const fn: Record<string, Native> = {};
    const declared = new Set<string>();
    const missingNames = new Set<string>();
    /** Function `name`, declared now if it is not yet. */
    const resolve = (name: string): Native => {
      if (declared.has(name)) return fn[name];
      const proto = protoOf.get(name);
      if (!proto) throw new Error(`${name} is not a function of the spec`);
      let f: Native;
      try {
        f = (counting ? countCalls(name, lib.func(proto)) : lib.func(proto)) as Native;
      } catch {
        missingNames.add(name);
        const path = cand.path;
        f = (() => {
          throw new Error(`${name} is not exported by ${path}`);
        }) as unknown as Native;
        f.async = f;
      }
      declared.add(name);
      fn[name] = f;
      return f;
    };
    for (const name of protoOf.keys()) {
      const stub = ((...a: unknown[]) => resolve(name)(...a)) as Native;
      stub.async = (...a: unknown[]) => resolve(name).async(...a);
      fn[name] = stub;
    }
    const missing = (): string[] => {
      for (const name of protoOf.keys()) resolve(name);
      return [...missingNames];
    };
    const warning = fallbackWarning(attempts, cand);
    if (warning) process.emitWarning(warning, { code: 'MLX_SYS_REPO_BUILD_UNLOADABLE' });
    loaded = {
      path: cand.path,
      resolve,
      get missing() {
        return missing();
      },
      fn: fn as unknown as MlxCFunctions,
      types: declareTypes(),
      koffi,
    };
    return loaded;
  }
  throw new MlxLibraryNotFoundError(attempts);
}
