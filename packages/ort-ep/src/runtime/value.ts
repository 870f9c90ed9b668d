// Values during execution and their conversions: host tensors (constants, shape math) and lazy
// MLX arrays.
import type * as mx from '@mlx/core';
import { OnnxDataType, type HostTensor } from '../onnx/index.js';
import { download } from './convert.js';

/**
 * A growing KV cache's buffer (execute/kv-append.ts): `array` is a view of its leading rows along
 * `axis`, and the rows after them are room for the next steps. Whoever owns the Value owns both.
 */
export interface KvReserve {
  buffer: mx.Array;
  axis: number;
}

/** A tensor during execution: on the host (constants, shape math) or an MLX array (lazy). */
export type Value =
  | { kind: 'host'; tensor: HostTensor }
  | { kind: 'device'; array: mx.Array; onnxType: number; reserve?: KvReserve }
  | { kind: 'sequence'; items: Value[]; elemType: number }
  | MapValue
  | { kind: 'none' };

/**
 * An ONNX map (ai.onnx.ml's ZipMap, DictVectorizer, CastMap): 1-D `keys` (int64 or string) and
 * `values` of one length, entry i mapping keys[i] to values[i]. Maps the provider makes have
 * unique keys in ascending order (onnxruntime's std::map); a fed map may have any order, and a
 * repeated key's last entry wins.
 */
export interface MapValue {
  kind: 'map';
  keys: HostTensor;
  values: HostTensor;
}

export const NONE: Value = Object.freeze({ kind: 'none' }) as Value;

export function asHost(v: Value, where: string): HostTensor {
  if (v.kind === 'host') return v.tensor;
  if (v.kind === 'device') return download(v.array, v.onnxType);
  throw new Error(`${where}: expected a tensor, got a ${v.kind}`);
}

export function elemTypeOf(v: Value): number {
  if (v.kind === 'host') return v.tensor.dtype;
  if (v.kind === 'device') return v.onnxType;
  if (v.kind === 'sequence') return v.elemType;
  return OnnxDataType.UNDEFINED;
}

/** The shape of a tensor value, known without evaluating. */
export function shapeOf(v: Value, where: string): number[] {
  if (v.kind === 'host') return v.tensor.dims;
  if (v.kind === 'device') return v.array.shape;
  throw new Error(`${where}: expected a tensor, got a ${v.kind}`);
}
