// The native library, loaded on first use, its per-thread error messages, and MlxError.
// Importing @mlx/core loads nothing native: `fn` starts as stubs that load the library on their
// first call and then replace themselves with the real function (which @mlx/sys declares then), so
// later calls cost nothing extra and a process declares only the functions it calls; `koffi`
// reaches the koffi module the same way.
import { loadMlxC, prototypes, type MlxC, type MlxCFunctions } from '@mlx/sys';

let C: MlxC | undefined;
/** Where the native library was loaded from; '' until it loads (on first use, or loadNativeLibrary()). */
export let nativeLibraryPath = '';
const onLoad: ((c: MlxC) => void)[] = [];

/** Loads the native library (once) and returns it; every native call goes through here the first time. */
export function native(): MlxC {
  if (C) return C;
  const c = loadMlxC();
  Object.setPrototypeOf(koffi, c.koffi);
  C = c;
  nativeLibraryPath = c.path;
  installErrorHandler(c);
  for (const f of onLoad) f(c);
  return c;
}

/** Runs `f` once the library is loaded (at once if it already is). */
export function whenLoaded(f: (c: MlxC) => void): void {
  if (C) f(C);
  else onLoad.push(f);
}

/** Whether the native library is loaded in this process. */
export function nativeLoaded(): boolean {
  return C !== undefined;
}

function stubs(): MlxCFunctions {
  const o: Record<string, unknown> = {};
  for (const proto of prototypes) {
    const name = /(\w+)\(/.exec(proto)![1];
    const real = () => {
      const f = native().resolve(name);
      o[name] = f;
      return f;
    };
    const stub = (...a: unknown[]) => real()(...a);
    (stub as unknown as { async: unknown }).async = (...a: unknown[]) => real().async(...a);
    o[name] = stub;
  }
  return o as unknown as MlxCFunctions;
}

/** The raw functions (stubs until the library loads). */
export const fn: MlxCFunctions = stubs();

// Until the library loads, reading any property of `koffi` loads it (the Proxy below is its
// prototype); native() then makes the koffi module itself the prototype.
export const koffi: MlxC['koffi'] = Object.create(
  new Proxy(
    {},
    {
      get(_t, key) {
        return Reflect.get(native().koffi, key);
      },
    },
  ),
);

/** The brand of MlxError: the same key in every copy of @mlx/core (ESM and CJS instances, versions). */
const MLX_ERROR = Symbol.for('@mlx/core.MlxError');

/** MLX's and the native library's wording of a failed allocation (alloc_guard.cpp, MLXC_CATCH). */
const ALLOCATION_FAILURE = /\[malloc(_or_wait)?\] Unable to allocate|std::bad_alloc/;

/**
 * An error reported by MLX (or by this binding on MLX's behalf), with the C function that failed.
 * `MlxError.is(e)` and `instanceof` recognise one thrown by any copy of @mlx/core.
 */
export class MlxError extends Error {
  /** A stable code, also on each instance (unless it is an allocation failure: ALLOCATION_CODE). */
  static readonly code = 'ERR_MLX';
  /**
   * The code of an allocation failure: MLX (or the native library) could not get the memory an
   * array or its own bookkeeping needed ("[malloc] Unable to allocate N bytes."), as when an array
   * is larger than memory or the process runs under `ulimit -v`. The process stays usable.
   */
  static readonly ALLOCATION_CODE = 'ERR_MLX_ALLOCATION';
  readonly code: 'ERR_MLX' | 'ERR_MLX_ALLOCATION';

  /** Whether `e` is an MlxError of any copy of @mlx/core. */
  static is(e: unknown): e is MlxError {
    return typeof e === 'object' && e !== null && (e as Record<symbol, unknown>)[MLX_ERROR] === true;
  }

  static override [Symbol.hasInstance](e: unknown): boolean {
    return Function.prototype[Symbol.hasInstance].call(MlxError, e) || MlxError.is(e);
  }

  constructor(
    /** MLX's own message. */
    readonly mlxMessage: string,
    /** The C function that returned the error, e.g. `mlx_matmul`. */
    readonly functionName: string,
    options?: { cause?: unknown },
  ) {
    super(`${functionName}: ${mlxMessage}`, options);
    this.name = 'MlxError';
    this.code = ALLOCATION_FAILURE.test(mlxMessage) ? MlxError.ALLOCATION_CODE : MlxError.code;
    Object.defineProperty(this, MLX_ERROR, { value: true });
  }
}

let pendingCallbackError: unknown;

// MLX reports errors synchronously, on the thread of the failing call, through the library's
// handler; its default one would exit the process. The library's thread-error handler
// (mlxc_use_thread_errors) keeps the message with the OS thread that failed, and the call's
// non-zero return makes this thread take it (mlxc_take_error). No JS callback is the handler: a
// callback belongs to one JS thread, and worker threads each load this module and call in on
// their own OS thread.
function installErrorHandler(c: MlxC): void {
  c.resolve('mlxc_use_thread_errors')();
}

let errorBuf = Buffer.alloc(1024);
/** This thread's last error message from the library, taken (so it is reported once). */
function takeMessage(): string | undefined {
  const len = [0];
  check0(fn.mlxc_take_error(errorBuf, errorBuf.length, len as never));
  const n = Number(len[0]);
  if (n >= errorBuf.length) {
    errorBuf = Buffer.alloc(n + 1);
    check0(fn.mlxc_take_error(errorBuf, errorBuf.length, len as never));
  }
  return n ? errorBuf.subarray(0, Math.min(n, errorBuf.length - 1)).toString('utf8') : undefined;
}
const check0 = (rc: number) => {
  if (rc !== 0) throw new MlxError('could not read the error message', 'mlxc_take_error');
};

/** A JS callback (closure body) threw: keep the error so the failing native call rethrows it. */
export function recordCallbackError(e: unknown): void {
  if (pendingCallbackError === undefined) pendingCallbackError = e;
}

export function throwLastError(functionName: string): never {
  const msg = takeMessage() ?? 'unknown error (no message reported)';
  const cbErr = pendingCallbackError;
  pendingCallbackError = undefined;
  if (cbErr !== undefined) {
    if (cbErr instanceof Error) throw cbErr;
    throw new MlxError(`callback threw ${String(cbErr)}`, functionName, { cause: cbErr });
  }
  throw new MlxError(msg, functionName);
}

/** Throws an MlxError for a non-zero return code. */
export function check(rc: number, functionName: string): void {
  if (rc !== 0) throwLastError(functionName);
  pendingCallbackError = undefined;
}

/** Constructors return an empty handle on failure. */
export function checkHandle<H extends { ctx: unknown }>(h: H, functionName: string): H {
  if (!h.ctx) throwLastError(functionName);
  return h;
}
