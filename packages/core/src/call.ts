// Per-call plumbing for generated and curated ops: scalar arguments become temporary arrays,
// vectors of arrays are built and freed, results are unwrapped.
import type { MlxHandle } from '@mlx/sys';
import { Array, scalar, type ArrayLike } from './array.js';
import { isFloating, isInteger, type Dtype } from './dtype.js';
import { check, checkHandle, fn } from './native.js';

export const NULL_HANDLE: MlxHandle = Object.freeze({ ctx: null }) as MlxHandle;

/**
 * The array whose dtype decides the dtype of JS scalars beside it: the first non-bool Array (so
 * `where(mask, x, 0)` gives 0 the dtype of x, not of the mask), else the first Array.
 */
export function firstArray(...xs: unknown[]): Array | undefined {
  let first: Array | undefined;
  for (const x of xs) {
    if (!(x instanceof Array)) continue;
    if (x.dtype !== 'bool') return x;
    first ??= x;
  }
  return first;
}

/** MLX's weak scalar rule: a JS scalar takes the dtype of the array it is combined with. */
export function scalarDtype(v: number | boolean | bigint, ref?: Array): Dtype {
  if (!ref) return typeof v === 'boolean' ? 'bool' : typeof v === 'bigint' ? 'int64' : 'float32';
  const d = ref.dtype;
  if (typeof v === 'boolean') return d;
  if (isFloating(d) || d === 'complex64') return d;
  if (isInteger(d)) return typeof v === 'bigint' || Number.isInteger(v) ? d : 'float32';
  // bool arrays
  return typeof v === 'bigint' ? 'int64' : Number.isInteger(v) ? 'int32' : 'float32';
}

export class CallTemps {
  private temps: Array[] = [];
  private vectors: MlxHandle[] = [];

  arg(x: ArrayLike, ref?: Array): Array {
    if (x instanceof Array) return x;
    if (typeof x !== 'number' && typeof x !== 'boolean' && typeof x !== 'bigint') {
      throw new TypeError(`expected an Array or a number, got ${x === null ? 'null' : typeof x}`);
    }
    const a = scalar(x, scalarDtype(x, ref));
    this.temps.push(a);
    return a;
  }

  vector(xs: readonly ArrayLike[]): MlxHandle {
    const ref = firstArray(...xs);
    const hs = xs.map((x) => this.arg(x, ref).handle);
    const v = checkHandle(fn.mlx_vector_array_new_data(hs, hs.length), 'mlx_vector_array_new_data');
    this.vectors.push(v);
    return v;
  }

  check(rc: number, name: string): void {
    check(rc, name);
  }

  release(): void {
    for (const a of this.temps) a.dispose();
    for (const v of this.vectors) fn.mlx_vector_array_free(v);
    this.temps = [];
    this.vectors = [];
  }
}

/** The Arrays of a vector handle (each a new reference; the vector stays the caller's). */
export function readVector(v: MlxHandle): Array[] {
  const n = Number(fn.mlx_vector_array_size(v));
  const out: Array[] = [];
  for (let i = 0; i < n; i++) {
    const h = { ctx: null };
    check(fn.mlx_vector_array_get(h, v, i), 'mlx_vector_array_get');
    out.push(Array.fromHandle(h));
  }
  return out;
}

/** Unwraps a vector result into Arrays and frees the vector. */
export function takeVector(v: MlxHandle): Array[] {
  try {
    return readVector(v);
  } finally {
    fn.mlx_vector_array_free(v);
  }
}

/** Builds a vector handle from arrays (the caller frees it). */
export function makeVector(xs: readonly Array[]): MlxHandle {
  return checkHandle(
    fn.mlx_vector_array_new_data(
      xs.map((x) => x.handle),
      xs.length,
    ),
    'mlx_vector_array_new_data',
  );
}
