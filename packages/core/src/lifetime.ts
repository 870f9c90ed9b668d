// Lifetimes of native handles: explicit dispose() (and `using`), scopes that free everything created
// inside them except what they return, and a FinalizationRegistry as a safety net for handles the
// program forgot. The finalizer is a net, not a plan: MLX memory is only returned promptly by dispose.
import type { MlxHandle } from '@mlx/sys';
import { fn, koffi } from './native.js';

export interface Disposable {
  dispose(): void;
  readonly disposed: boolean;
}

const finalizer = new FinalizationRegistry<MlxHandle>((h) => {
  if (h.ctx) {
    fn.mlx_array_free(h);
    h.ctx = null;
  }
});

// dispose() hands its handle to a batch, freed in one native call (mlxc_array_free_many) when the
// batch is full, before any evaluation and before memory figures are read: a run that drops a
// hundred intermediates costs one call, not a hundred. The handle is unusable at once.
const BATCH = 256;
const batch = new BigUint64Array(BATCH);
let batched = 0;

/** @internal Called by Array.dispose: the handle's array is freed with the next batch. */
export function freeLater(h: MlxHandle): void {
  batch[batched++] = typeof h.ctx === 'bigint' ? h.ctx : BigInt(koffi.address(h.ctx) as bigint | number);
  h.ctx = null;
  if (batched === BATCH) flushDisposed();
}

/**
 * Frees the arrays whose dispose() is still batched. Evaluation and the memory figures call it
 * first, so callers rarely need to; it is cheap when nothing is pending.
 */
export function flushDisposed(): void {
  if (batched === 0) return;
  const n = batched;
  batched = 0;
  fn.mlxc_array_free_many(batch, n);
}

type Scope = Set<Disposable>;
const scopes: Scope[] = [];

/** @internal Called by every new Array. */
export function trackArray(owner: Disposable, handle: MlxHandle): void {
  finalizer.register(owner, handle, owner);
  scopes.at(-1)?.add(owner);
}

/** @internal Called by Array.dispose. */
export function untrackArray(owner: Disposable): void {
  finalizer.unregister(owner);
  for (let i = scopes.length - 1; i >= 0; i--) if (scopes[i].delete(owner)) break;
}

function gather(value: unknown, out: Set<Disposable>, seen = new Set<unknown>()): void {
  if (value === null || typeof value !== 'object' || seen.has(value)) return;
  seen.add(value);
  if (typeof (value as Disposable).dispose === 'function' && 'disposed' in (value as object)) {
    out.add(value as Disposable);
    return;
  }
  if (globalThis.Array.isArray(value)) for (const v of value) gather(v, out, seen);
  else if (value instanceof Map) for (const v of value.values()) gather(v, out, seen);
  else if (Object.getPrototypeOf(value) === Object.prototype) for (const v of Object.values(value)) gather(v, out, seen);
}

/**
 * Runs `body` and disposes every array created inside it, except the ones it returns (found in the
 * returned value, arrays and plain objects included) and the ones passed to `keep`. Kept arrays
 * move to the enclosing scope. `body` must be synchronous.
 */
export function scope<T>(body: () => T): T {
  const mine: Scope = new Set();
  scopes.push(mine);
  let result: T;
  try {
    result = body();
    if (result instanceof Promise) throw new TypeError('scope() takes a synchronous function; await outside it');
  } catch (e) {
    scopes.pop();
    for (const d of mine) if (!d.disposed) d.dispose();
    throw e;
  }
  scopes.pop();
  const keepers = new Set<Disposable>();
  gather(result, keepers);
  const parent = scopes.at(-1);
  for (const d of mine) {
    if (keepers.has(d)) parent?.add(d);
    else if (!d.disposed) d.dispose();
  }
  return result;
}

/** Takes an array out of the current scope so that it survives it. */
export function keep<T extends Disposable>(d: T): T {
  const cur = scopes.at(-1);
  if (cur?.delete(d)) scopes.at(-2)?.add(d);
  return d;
}

/** Takes an array out of every scope: it lives until disposed (or collected). */
export function persist<T extends Disposable>(d: T): T {
  for (const s of scopes) s.delete(d);
  return d;
}

/** Disposes every disposable found in `value` (arrays, nested arrays, plain objects). */
export function dispose(value: unknown): void {
  const all = new Set<Disposable>();
  gather(value, all);
  for (const d of all) if (!d.disposed) d.dispose();
}

/**
 * Runs synchronous `body` with `into` collecting every array created inside it (instead of the
 * enclosing scope). Nothing is disposed: the owner of `into` disposes what it collected when it is
 * done, e.g. after an asynchronous computation made of several synchronous steps.
 */
export function collect<T>(into: Set<Disposable>, body: () => T): T {
  scopes.push(into);
  try {
    return body();
  } finally {
    scopes.pop();
  }
}
