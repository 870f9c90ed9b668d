// Host helpers for string tensors. MLX has no string dtype, so every string op is pure host code
// over `string[]` data; these helpers give them numpy broadcasting and typed constructors.
import { OnnxDataType, type HostTensor } from '../../onnx/index.js';
import { broadcastOffsets } from './shape-host.js';
import { broadcastShape } from './util.js';

export const isString = (t: HostTensor): boolean => t.dtype === OnnxDataType.STRING;

export function stringTensor(values: string[], dims: readonly number[]): HostTensor {
  return { dtype: OnnxDataType.STRING, dims: [...dims], data: values };
}

export function boolTensor(values: ArrayLike<boolean>, dims: readonly number[]): HostTensor {
  return { dtype: OnnxDataType.BOOL, dims: [...dims], data: Uint8Array.from(values as ArrayLike<unknown>, (v) => (v ? 1 : 0)) };
}

/** The strings of a host tensor, or an error naming the op when it holds something else. */
export function stringsOf(t: HostTensor, where: string): string[] {
  if (!isString(t) || !Array.isArray(t.data)) throw new TypeError(`${where}: expected a string tensor, got element type ${t.dtype}`);
  return t.data;
}

/** Applies `f` to the broadcast pairs of `a` and `b` (any element types: strings, numbers). */
export function broadcastPairs<T>(a: HostTensor, b: HostTensor, f: (x: unknown, y: unknown) => T): { dims: number[]; values: T[] } {
  const dims = broadcastShape(a.dims, b.dims);
  const oa = broadcastOffsets(a.dims, dims),
    ob = broadcastOffsets(b.dims, dims);
  const da = a.data as ArrayLike<unknown>,
    db = b.data as ArrayLike<unknown>;
  const values = Array.from(oa, (o, i) => f(da[o], db[ob[i]]));
  return { dims, values };
}

/**
 * Equal on string tensors (opset 19+ allows them), for the Equal entry in elementwise.ts to call
 * from its host() when its inputs are strings (they never reach MLX).
 */
export function stringEqual(a: HostTensor, b: HostTensor, where = 'Equal'): HostTensor {
  stringsOf(a, where);
  stringsOf(b, where);
  const { dims, values } = broadcastPairs(a, b, (x, y) => x === y);
  return boolTensor(values, dims);
}
