// Small helpers shared by the op families: axes, host tensors for shape math, dtype checks.
import * as mx from '@mlx/core';
import { OnnxDataType, type HostTensor } from '../../onnx/index.js';
import { mxDtypeOf } from '../../runtime/convert.js';
import type { Attrs } from '../../registry/attrs.js';
import type { OpContext } from '../../registry/types.js';

/** Normalises a possibly negative axis against `rank`, with a clear error when out of range. */
export function normAxis(axis: number, rank: number, where = 'axis'): number {
  const a = axis < 0 ? axis + rank : axis;
  if (!Number.isInteger(a) || a < 0 || a >= Math.max(rank, 1)) throw new RangeError(`${where} ${axis} is out of range for rank ${rank}`);
  return a;
}

export const normAxes = (axes: readonly number[], rank: number): number[] => axes.map((a) => normAxis(a, rank));

/** Numbers of a small host tensor (int64 as numbers). */
export function hostNumbers(t: HostTensor): number[] {
  const out: number[] = [];
  const d = t.data as ArrayLike<number | bigint>;
  for (let i = 0; i < d.length; i++) out.push(Number(d[i]));
  return out;
}

export function hostInt64(values: readonly number[], dims: readonly number[] = [values.length]): HostTensor {
  return { dtype: OnnxDataType.INT64, dims: [...dims], data: BigInt64Array.from(values, (v) => BigInt(Math.trunc(v))) };
}

/** A host tensor of an ONNX type from JS numbers (for shape math on int32/int64/float). */
export function hostOf(dtype: number, values: readonly (number | bigint)[], dims: readonly number[]): HostTensor {
  switch (dtype) {
    case OnnxDataType.INT64:
      return { dtype, dims: [...dims], data: BigInt64Array.from(values, (v) => BigInt(typeof v === 'bigint' ? v : Math.trunc(v))) };
    case OnnxDataType.UINT64:
      return { dtype, dims: [...dims], data: BigUint64Array.from(values, (v) => BigInt(typeof v === 'bigint' ? v : Math.trunc(v))) };
    case OnnxDataType.INT32:
      return { dtype, dims: [...dims], data: Int32Array.from(values, Number) };
    case OnnxDataType.FLOAT:
      return { dtype, dims: [...dims], data: Float32Array.from(values, Number) };
    case OnnxDataType.DOUBLE:
      return { dtype, dims: [...dims], data: Float64Array.from(values, Number) };
    case OnnxDataType.BOOL:
      return { dtype, dims: [...dims], data: Uint8Array.from(values, (v) => (Number(v) ? 1 : 0)) };
    default:
      return { dtype, dims: [...dims], data: Int32Array.from(values, Number) };
  }
}

const intRanges: Partial<Record<mx.Dtype, [number | bigint, number | bigint]>> = {
  int8: [-128, 127],
  uint8: [0, 255],
  int16: [-32768, 32767],
  uint16: [0, 65535],
  int32: [-2147483648, 2147483647],
  uint32: [0, 4294967295],
  int64: [-(2n ** 63n), 2n ** 63n - 1n],
  uint64: [0n, 2n ** 64n - 1n],
};

/** [lowest, highest] value of an MLX dtype: the integer limits, false/true, ±Infinity for floats (the identities of max and min). */
export function dtypeRange(dtype: mx.Dtype): [number | bigint | boolean, number | bigint | boolean] {
  if (dtype === 'bool') return [false, true];
  return intRanges[dtype] ?? [-Infinity, Infinity];
}

export const sizeOf = (dims: readonly number[]): number => dims.reduce((a, b) => a * b, 1);

/** Whether two shapes are the same (rank and every dimension). */
export const sameDims = (a: readonly number[], b: readonly number[]): boolean => a.length === b.length && a.every((d, i) => d === b[i]);

/** The MLX dtype for an ONNX element type, or a clear error. */
export function mxType(onnxType: number, where: string): mx.Dtype {
  const d = mxDtypeOf(onnxType);
  if (!d) throw new TypeError(`${where}: element type ${onnxType} is not supported on MLX`);
  return d;
}

/** An int list attribute, or undefined when the node does not give it (its default depends on the input). */
export function intsIfGiven(attrs: Attrs, name: string): number[] | undefined {
  return attrs.has(name) ? attrs.ints(name) : undefined;
}

/** MLX promotes some results (integer division to float, bool masks, float scalars with ints): ONNX keeps the input's type. */
export function keepType(r: mx.Array, onnxType: number): mx.Array {
  const want = mxDtypeOf(onnxType);
  return want && r.dtype !== want ? mx.astype(r, want) : r;
}

/** An optional int list input (axes since opset 13/18), else `attribute`: the attribute of the same name (earlier opsets) as parse read it. */
export function axesFrom(ctx: OpContext, inputIndex: number, attribute: number[] | undefined): number[] | undefined {
  return optionalNumbers(ctx, inputIndex) ?? attribute;
}

/** The numbers of optional input i, read on the host (small, shape-like inputs), or undefined when it is omitted. */
export function optionalNumbers(ctx: OpContext, i: number): number[] | undefined {
  return ctx.has(i) ? hostNumbers(ctx.host(i)) : undefined;
}

/**
 * The one number of input i, a scalar-like input (an axis, k): a tensor of exactly one element
 * whose rank is one of `ranks` (onnxruntime refuses other shapes, e.g. CumSum's axis [2]).
 */
export function oneNumber(ctx: OpContext, i: number, what: string, ranks: readonly number[] = [0, 1]): number {
  const t = ctx.host(i);
  const n = sizeOf(t.dims);
  if (n !== 1 || !ranks.includes(t.dims.length))
    throw new RangeError(
      `${what} must be ${ranks.map((r) => (r === 0 ? 'a scalar' : 'a 1-D tensor of one element')).join(' or ')}, got shape [${t.dims.join(', ')}]`,
    );
  return hostNumbers(t)[0];
}

export const isFloatType = (t: number): boolean =>
  t === OnnxDataType.FLOAT || t === OnnxDataType.FLOAT16 || t === OnnxDataType.DOUBLE || t === OnnxDataType.BFLOAT16;

/** Broadcast shape of two shapes (numpy rules), or an error naming them. */
export function broadcastShape(a: readonly number[], b: readonly number[]): number[] {
  const n = Math.max(a.length, b.length);
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const x = a[a.length - n + i] ?? 1;
    const y = b[b.length - n + i] ?? 1;
    if (x !== y && x !== 1 && y !== 1) throw new RangeError(`shapes [${a.join(', ')}] and [${b.join(', ')}] do not broadcast`);
    out.push(x === 1 ? y : x);
  }
  return out;
}
