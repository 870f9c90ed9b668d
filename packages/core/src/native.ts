// The loaded library, the process-wide error handler, and MlxError.
import { loadMlxC, type MlxC } from '@mlx/sys';

export const C: MlxC = loadMlxC();
export const fn = C.fn;
export const koffi: MlxC['koffi'] = C.koffi;

/** An error reported by MLX (or by this binding on MLX's behalf), with the C function that failed. */
export class MlxError extends Error {
  constructor(
    /** MLX's own message. */
    readonly mlxMessage: string,
    /** The C function that returned the error, e.g. `mlx_matmul`. */
    readonly functionName: string,
    options?: { cause?: unknown },
  ) {
    super(`${functionName}: ${mlxMessage}`, options);
    this.name = 'MlxError';
  }
}

let lastMessage: string | undefined;
let pendingCallbackError: unknown;

// MLX reports errors synchronously, on the thread of the failing call, through this handler; the
// default one in the library would exit the process. The handler only records the message: the
// call's non-zero return turns it into an exception.
const handler = koffi.register(
  (msg: string) => {
    lastMessage = msg;
  },
  koffi.pointer(C.types.callbacks.mlx_error_handler_func as never),
);
fn.mlx_set_error_handler(handler, null, null);

/** A JS callback (closure body) threw: keep the error so the failing native call rethrows it. */
export function recordCallbackError(e: unknown): void {
  if (pendingCallbackError === undefined) pendingCallbackError = e;
}

export function throwLastError(functionName: string): never {
  const msg = lastMessage ?? 'unknown error (no message reported)';
  const cbErr = pendingCallbackError;
  lastMessage = undefined;
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
