// Integer arithmetic shared by the quantized ops (QuantizeLinear, QLinearMatMul, ConvInteger, ...):
// value ranges of the quantized types, saturating round-half-to-even, and integer matmuls that
// stay exact although MLX multiplies matrices only in floating point.
import * as mx from '@mlx/core';
import { OnnxDataType } from '../../onnx/index.js';
import type { OpContext } from '../../registry/types.js';
import type { Value } from '../../runtime/value.js';
import { mxDtypeOf } from '../../runtime/convert.js';
import { isMiniFloat } from './minifloat.js';

/** [lowest, highest] of an integer quantized type, or undefined for other types. */
export function qRange(onnxType: number): [number, number] | undefined {
  switch (onnxType) {
    case OnnxDataType.INT8:
      return [-128, 127];
    case OnnxDataType.UINT8:
      return [0, 255];
    case OnnxDataType.INT16:
      return [-32768, 32767];
    case OnnxDataType.UINT16:
      return [0, 65535];
    case OnnxDataType.INT32:
      return [-2147483648, 2147483647];
    case OnnxDataType.INT4:
      return [-8, 7];
    case OnnxDataType.UINT4:
      return [0, 15];
    case OnnxDataType.INT2:
      return [-2, 1];
    case OnnxDataType.UINT2:
      return [0, 3];
    default:
      return undefined;
  }
}

/** The MLX dtype that holds a quantized integer type, one value per element (4- and 2-bit unpacked). */
export function qStorage(onnxType: number): mx.Dtype | undefined {
  if (onnxType === OnnxDataType.INT2) return 'int8';
  if (onnxType === OnnxDataType.UINT2) return 'uint8';
  return qRange(onnxType) ? mxDtypeOf(onnxType) : undefined;
}

/** A device value keeping its ONNX type where MLX holds it wider (int4 in int8, ...). */
export function typed(array: mx.Array, onnxType: number): Value {
  return { kind: 'device', array, onnxType };
}

/** round-half-to-even, clamp to the type's range, and store: the tail of every quantizer. */
export function saturateRound(v: mx.Array, onnxType: number): mx.Array {
  const range = qRange(onnxType);
  const dtype = qStorage(onnxType);
  if (!range || !dtype) throw new TypeError(`element type ${onnxType} is not an integer quantized type`);
  return mx.astype(mx.clip(mx.round(v, 0), range[0], range[1]), dtype);
}

/** Input i of a quantized op as an MLX array, including the 2-bit and float8 types the converter does not map. */
export function quantInput(ctx: OpContext, i: number): mx.Array {
  const t = ctx.elemType(i);
  if (mxDtypeOf(t)) return ctx.input(i);
  // Float8/float4 codes are held as their bytes.
  const dtype = qStorage(t) ?? (isMiniFloat(t) ? 'uint8' : undefined);
  const host = ctx.host(i);
  if (!dtype || !ArrayBuffer.isView(host.data)) throw new TypeError(`${ctx.where}: element type ${t} is not supported on MLX`);
  return mx.Array.fromTypedArray(host.data, host.dims, dtype);
}

/** Optional input i (a zero point) as quantInput gives it, or undefined when omitted. */
export function optionalQuantInput(ctx: OpContext, i: number): mx.Array | undefined {
  return ctx.has(i) ? quantInput(ctx, i) : undefined;
}

// float32 adds integers exactly while every partial sum stays below 2^24.
const EXACT = 2 ** 24;

/** Splits each byte of `q` along its last axis into its 8/bits fields, low bits first (bits 8: `q`). */
export function unpackFields(q: mx.Array, bits: number): mx.Array {
  if (bits === 8) return q;
  const mask = (1 << bits) - 1;
  const fields = Array.from({ length: 8 / bits }, (_, j) => mx.bitwiseAnd(mx.rightShift(q, j * bits), mask));
  return mx.reshape(mx.stack(fields, -1), [...q.shape.slice(0, -1), q.shape[q.ndim - 1] * (8 / bits)]);
}

/** 4-bit fields (integers 0..15 along the last axis) two a byte, low nibble first, as uint8; an odd count gets a zero last field. */
export function packNibbles(n: mx.Array): mx.Array {
  let u = mx.astype(n, 'uint8');
  const last = u.shape[u.ndim - 1];
  if (last % 2) u = mx.concatenate([u, mx.zeros([...u.shape.slice(0, -1), 1], 'uint8')], -1);
  const pairs = mx.reshape(u, [...u.shape.slice(0, -1), Math.ceil(last / 2), 2]);
  const [lo, hi] = mx.splitSections(pairs, [1], -1).map((a) => mx.squeeze(a, -1));
  return mx.bitwiseOr(lo, mx.leftShift(hi, 4));
}

/** Splits x = 16 * hi + lo with 0 <= lo < 16 (arithmetic shift keeps the sign in hi). */
function nibbles(x: mx.Array): [mx.Array, mx.Array] {
  return [mx.rightShift(x, 4), mx.bitwiseAnd(x, 15)];
}

/** A bilinear product (matmul, conv) of float32 operands. */
export type FloatProduct = (a: mx.Array, b: mx.Array) => mx.Array;

/**
 * An exact int32 bilinear product of int32 operands (|a| <= boundA, |b| <= boundB, `terms`
 * products summed per output element) computed in float32. When one float32 product could lose
 * bits, the operands are split into 4-bit halves and the partial products recombined in int32.
 */
export function exactIntProduct(f: FloatProduct, a: mx.Array, b: mx.Array, terms: number, boundA: number, boundB: number): mx.Array {
  const p = (x: mx.Array, y: mx.Array) => mx.astype(mx.round(f(mx.astype(x, 'float32'), mx.astype(y, 'float32')), 0), 'int32');
  if (terms * boundA * boundB < EXACT) return p(a, b);
  const [ah, al] = nibbles(a);
  if (terms * 16 * boundB < EXACT) return mx.add(mx.multiply(p(ah, b), 16), p(al, b));
  if (terms * 256 >= EXACT) throw new RangeError(`an integer product of ${terms} terms cannot be computed exactly in float32`);
  const [bh, bl] = nibbles(b);
  const mid = mx.add(p(ah, bl), p(al, bh));
  return mx.add(mx.add(mx.multiply(p(ah, bh), 256), mx.multiply(mid, 16)), p(al, bl));
}

/** Exact int32 (a @ b) of bounded int32 operands (numpy rules for 1-D operands). */
export function exactIntMatmul(a: mx.Array, b: mx.Array, boundA: number, boundB: number): mx.Array {
  return exactIntProduct((x, y) => mx.matmul(x, y), a, b, a.shape[a.ndim - 1] ?? 1, boundA, boundB);
}

/** Integer matmul of any integer dtype by broadcast multiply-and-sum: exact, but O(M*K*N) memory. */
export function broadcastIntMatmul(a: mx.Array, b: mx.Array): mx.Array {
  const a2 = a.ndim === 1 ? mx.expandDims(a, 0) : a;
  const b2 = b.ndim === 1 ? mx.expandDims(b, 1) : b;
  let r = mx.sum(mx.multiply(mx.expandDims(a2, -1), mx.expandDims(b2, -3)), -2);
  if (b.ndim === 1) r = mx.squeeze(r, -1);
  if (a.ndim === 1) r = mx.squeeze(r, -2);
  return mx.astype(r, a.dtype);
}

/** Subtracts a zero point given per tensor (scalar or [1]) or along `axis` (1-D of that length), in int32. */
export function minusZeroPoint(x: mx.Array, zp: mx.Array | undefined, axis: number): mx.Array {
  const x32 = mx.astype(x, 'int32');
  if (!zp) return x32;
  let z = mx.astype(zp, 'int32');
  if (z.ndim === 1 && z.size > 1) {
    const shape = x.shape.map((d, i) => (i === axis ? d : 1));
    z = mx.reshape(z, shape);
  }
  return mx.subtract(x32, z);
}

/** The largest magnitude an integer type minus its zero point can reach. */
export function zeroPointBound(onnxType: number): number {
  const r = qRange(onnxType);
  return r ? r[1] - r[0] : 2 ** 31;
}
