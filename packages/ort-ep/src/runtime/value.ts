// Values during execution and their conversions: host tensors (constants, shape math) and lazy MLX
// arrays, with the upload cache that turns a host tensor into an array at most once.
import * as mx from '@mlx/core';
import { OnnxDataType, type HostTensor } from '../onnx/index.js';
import { download, upload } from './convert.js';

/** A tensor during execution: on the host (constants, shape math) or an MLX array (lazy). */
export type Value =
  | { kind: 'host'; tensor: HostTensor }
  | { kind: 'device'; array: mx.Array; onnxType: number }
  | { kind: 'sequence'; items: Value[]; elemType: number }
  | { kind: 'none' };

// Host tensors are uploaded at most once per plan (initializers) or per run (everything else).
const uploads = new WeakMap<HostTensor, mx.Array>();
const persistent = new WeakSet<HostTensor>();

/** Uploads of `t` outlive the run that made them (initializers and folded constants). */
export function markPersistentTensor(t: HostTensor): void {
  persistent.add(t);
}

/** Frees the cached upload of `t`, if any. */
export function releaseUpload(t: HostTensor): void {
  uploads.get(t)?.dispose();
  uploads.delete(t);
}

export function asArray(v: Value, where: string): mx.Array {
  if (v.kind === 'device') return v.array;
  if (v.kind === 'host') {
    let a = uploads.get(v.tensor);
    if (!a || a.disposed) {
      a = upload(v.tensor);
      if (persistent.has(v.tensor)) mx.persist(a);
      uploads.set(v.tensor, a);
    }
    return a;
  }
  throw new Error(`${where}: expected a tensor, got a ${v.kind}`);
}

export function asHost(v: Value, where: string): HostTensor {
  if (v.kind === 'host') return v.tensor;
  if (v.kind === 'device') return download(v.array, v.onnxType);
  throw new Error(`${where}: expected a tensor, got a ${v.kind}`);
}

export function elemTypeOf(v: Value): number {
  if (v.kind === 'host') return v.tensor.dtype;
  if (v.kind === 'device') return v.onnxType;
  if (v.kind === 'sequence') return v.elemType;
  return OnnxDataType.UNDEFINED ?? 0;
}
