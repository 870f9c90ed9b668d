// Host tensors become MLX arrays at most once: constants (initializers, folded results) once per
// session, in a ConstantStore the session owns and releases; other host values once per run.
import * as mx from '@mlx/core';
import type { HostTensor } from '../onnx/index.js';
import { upload } from './convert.js';

/**
 * A GPU's uploads go over the bus in one transfer (on MLX's CUDA build, host-made arrays live in
 * unified memory and would otherwise move page by page when a kernel first reads them).
 */
function toDevice(a: mx.Array, gpu: boolean): mx.Array {
  if (gpu && a.nbytes >= 1 << 20) a.prefetch('device');
  return a;
}

/** Every array a ConstantStore made resident (a model constant held by MLX only). */
const residentArrays = new WeakSet<mx.Array>();

/**
 * Whether `a` is a constant that a session moved to MLX for good (makeResident): ops that prepare
 * a constant once on the host (packing, layouts) can key that work on the array and read it back
 * once with OpContext.host.
 */
export function isResidentConstant(a: mx.Array): boolean {
  return residentArrays.has(a);
}

/** The uploads of a session's constant host tensors, kept until release(). */
export class ConstantStore {
  /** `gpu`: the session runs on a GPU (uploads are moved there at once). */
  constructor(readonly gpu = false) {}

  private readonly tensors = new Set<HostTensor>();
  private readonly arrays = new Map<HostTensor, mx.Array>();
  private readonly reshapes = new Map<HostTensor, Map<string, mx.Array>>();
  private readonly resident: mx.Array[] = [];

  /** Declares `t` a constant: its upload is kept for the session's life. */
  add(t: HostTensor): void {
    this.tensors.add(t);
  }
  has(t: HostTensor): boolean {
    return this.tensors.has(t);
  }
  /** The upload of constant `t` (made on first use). */
  array(t: HostTensor): mx.Array {
    let a = this.arrays.get(t);
    if (!a || a.disposed) {
      a = mx.persist(toDevice(upload(t, !this.gpu), this.gpu));
      this.arrays.set(t, a);
    }
    return a;
  }
  /**
   * Constant `t` uploaded in another shape of the same elements (`dims` concrete, of t's size),
   * made once: a reshape at run time is a graph node in every run and every compiled replay.
   * t's own upload is made only if something reads t as it is.
   */
  reshaped(t: HostTensor, dims: readonly number[]): mx.Array {
    const key = dims.join(',');
    let m = this.reshapes.get(t);
    if (!m) this.reshapes.set(t, (m = new Map()));
    let a = m.get(key);
    if (!a || a.disposed) {
      a = mx.persist(toDevice(upload({ ...t, dims: [...dims] }, !this.gpu), this.gpu));
      m.set(key, a);
    }
    return a;
  }
  /**
   * Moves constant `t` to MLX for good: uploads it (unless it is already), forgets the host
   * tensor, and returns the array, which the store frees on release(). The caller drops its
   * references to `t`, so that its data (or the file bytes it still points into) can be collected.
   */
  makeResident(t: HostTensor): mx.Array {
    const a = this.array(t);
    this.arrays.delete(t);
    this.tensors.delete(t);
    this.resident.push(a);
    residentArrays.add(a);
    return a;
  }

  /** Values derived from constants (OpContext.prepared), by owner and tag, with the inputs they were made from. */
  private readonly preparedValues = new Map<object, Map<string, { from: readonly unknown[]; value: unknown; arrays: mx.Array[] }>>();

  /**
   * make()'s value, made once per session for `owner` (a node) and `tag` while `from` (the input
   * values it derives from, compared by identity) stay the same. Its arrays are evaluated at once
   * and kept, off every run's scope, until release() or until `from` changes.
   */
  prepared<T>(owner: object, tag: string, from: readonly unknown[], make: () => T): T {
    let byTag = this.preparedValues.get(owner);
    if (!byTag) this.preparedValues.set(owner, (byTag = new Map()));
    const hit = byTag.get(tag);
    if (hit && this.current(hit, from)) return hit.value as T;
    if (hit) for (const a of hit.arrays) if (!a.disposed) a.dispose();
    const value = make();
    const arrays = arraysIn(value);
    for (const a of arrays) mx.persist(a);
    if (arrays.length) mx.evaluate(arrays);
    byTag.set(tag, { from, value, arrays });
    return value;
  }

  /** The prepared value of `owner` and `tag` when it was made from `from` (and is still held), else undefined. */
  preparedIfMade<T>(owner: object, tag: string, from: readonly unknown[]): T | undefined {
    const hit = this.preparedValues.get(owner)?.get(tag);
    return hit && this.current(hit, from) ? (hit.value as T) : undefined;
  }

  private current(p: { from: readonly unknown[]; arrays: mx.Array[] }, from: readonly unknown[]): boolean {
    return p.from.length === from.length && p.from.every((v, i) => v === from[i]) && p.arrays.every((a) => !a.disposed);
  }

  /** Frees every upload and prepared value; the store can be used again (uploads are made anew). */
  release(): void {
    for (const a of this.arrays.values()) a.dispose();
    for (const a of this.resident) a.dispose();
    for (const byTag of this.preparedValues.values())
      for (const p of byTag.values()) for (const a of p.arrays) if (!a.disposed) a.dispose();
    for (const m of this.reshapes.values()) for (const a of m.values()) a.dispose();
    this.arrays.clear();
    this.reshapes.clear();
    this.resident.length = 0;
    this.preparedValues.clear();
  }
}

/** The arrays of a prepared value: an array, or arrays in (nested) lists and plain objects. */
function arraysIn(v: unknown, into: mx.Array[] = []): mx.Array[] {
  if (v instanceof mx.Array) into.push(v);
  else if (Array.isArray(v)) for (const x of v) arraysIn(x, into);
  else if (v && typeof v === 'object' && Object.getPrototypeOf(v) === Object.prototype) for (const x of Object.values(v)) arraysIn(x, into);
  return into;
}

/** Per-run uploads of non-constant host tensors; the run's scope frees them. */
export class RunUploads {
  private readonly arrays = new Map<HostTensor, mx.Array>();
  constructor(private readonly constants: ConstantStore) {}
  array(t: HostTensor): mx.Array {
    if (this.constants.has(t)) return this.constants.array(t);
    let a = this.arrays.get(t);
    if (!a || a.disposed) {
      a = toDevice(upload(t), this.constants.gpu);
      this.arrays.set(t, a);
    }
    return a;
  }
  /** A constant's upload in the shape `dims` (ConstantStore.reshaped), or undefined when t is no constant. */
  reshapedConstant(t: HostTensor, dims: readonly number[]): mx.Array | undefined {
    return this.constants.has(t) ? this.constants.reshaped(t, dims) : undefined;
  }
}
