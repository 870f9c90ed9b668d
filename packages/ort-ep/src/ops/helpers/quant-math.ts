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

/** The largest magnitude of either 4-bit half (nibbles) of integers of magnitude at most `bound`. */
const halfBound = (bound: number) => Math.max(Math.ceil(bound / 16), 15);

/** A bilinear product (matmul, conv) of float32 operands. */
export type FloatProduct = (a: mx.Array, b: mx.Array) => mx.Array;

/**
 * The right operand of exact integer products (a matmul's B, a conv's weight), integers minus
 * their zero point held as float32 (exact below 2^24), with what bounds the products' sums: every
 * partial sum of an output element is at most max|a| * l1 in magnitude, l1 the largest sum of
 * |b| that one output element takes (a column of B, a filter), at most terms * max|b|.
 */
export interface IntOperand {
  /** The integer values as float32, in the layout the product takes. */
  f: mx.Array;
  /**
   * int32 [max |value|, l1] from the data: read once evaluated (the operand prepared once per
   * session from constants), else (made per run, or traced) the type's bounds stand in.
   */
  stats: mx.Array;
  /** The largest |value| the operand's type allows. */
  typeBound: number;
  /** Products summed per output element. */
  terms: number;
  /** The bounds read from stats, kept. */
  known?: { bound: number; l1: number };
}

/**
 * An IntOperand of int32 values `b` (`f`: them as float32, in the product's layout), the sums
 * of one output element running over `sumAxes` of `b`.
 */
export function intOperand(b: mx.Array, f: mx.Array, sumAxes: number[], typeBound: number, terms: number): IntOperand {
  const abs = mx.abs(b);
  const stats = b.size ? mx.stack([mx.max(abs), mx.max(mx.sum(abs, sumAxes))]) : mx.zeros([2], 'int32');
  return { f, stats, typeBound, terms };
}

/** The bounds of an IntOperand: from its data where already computed, else from its type. */
function boundsOf(b: IntOperand): { bound: number; l1: number } {
  if (b.known) return b.known;
  if (!b.stats.isAvailable()) return { bound: b.typeBound, l1: b.terms * b.typeBound };
  const [bound, l1] = b.stats.toTypedArray() as Int32Array;
  b.known = { bound, l1 };
  return b.known;
}

/**
 * A matmul's right operand B (input ib) minus its zero point (input izp, per tensor or per
 * column; `centre` makes the int32 difference) as an IntOperand: for constant B made once per
 * session, its bounds then from the data (weights rarely reach their type's extremes).
 */
export function matmulOperand(ctx: OpContext, ib: number, izp: number, centre: () => mx.Array): IntOperand {
  return ctx.prepared([ib, izp], `exact operand ${ib}`, () => {
    const b0 = centre();
    const rowsAxis = Math.max(b0.ndim - 2, 0);
    return intOperand(b0, mx.astype(b0, 'float32'), [rowsAxis], zeroPointBound(ctx.elemType(ib)), b0.shape[rowsAxis] ?? 1);
  });
}

/**
 * An exact int32 bilinear product (`f`: matmul, conv) of int32 `a` (|a| <= boundA) and `b`,
 * computed in float32: one product when no partial sum can reach 2^24; else `a` split into 4-bit
 * halves stacked along `stackAxis` (rows of a matmul, the batch of a conv), so that one product
 * reads `b` once; else (very long sums) `b` split too. The halves recombine in int32.
 */
export function exactIntProduct(f: FloatProduct, a: mx.Array, b: IntOperand, boundA: number, stackAxis: number): mx.Array {
  const p = (x: mx.Array, y: mx.Array) => mx.astype(mx.round(f(mx.astype(x, 'float32'), y), 0), 'int32');
  const { bound, l1 } = boundsOf(b);
  if (boundA * l1 < EXACT) return p(a, b.f);
  const axis = stackAxis < 0 ? stackAxis + a.ndim : stackAxis;
  const n = a.shape[axis];
  // [hi; lo] along `axis` times y, recombined as 16 * hi + lo.
  const stacked = (y: mx.Array) => {
    const both = p(mx.concatenate(nibbles(a), axis), y);
    const at = both.ndim - a.ndim + axis;
    const [hi, lo] = mx.splitSections(both, [n], at);
    return mx.add(mx.multiply(hi, 16), lo);
  };
  const hA = halfBound(boundA);
  if (hA * l1 < EXACT) return stacked(b.f);
  if (b.terms * hA * halfBound(bound) >= EXACT)
    throw new RangeError(`an integer product of ${b.terms} terms cannot be computed exactly in float32`);
  const [bh, bl] = nibbles(mx.astype(b.f, 'int32'));
  return mx.add(mx.multiply(stacked(mx.astype(bh, 'float32')), 16), stacked(mx.astype(bl, 'float32')));
}

/** Exact int32 (a @ b) of bounded int32 `a` and `b` (numpy rules for 1-D operands). */
export function exactIntMatmul(a: mx.Array, b: IntOperand, boundA: number): mx.Array {
  const a2 = a.ndim === 1 ? mx.expandDims(a, 0) : a;
  const b2 = b.f.ndim === 1 ? { ...b, f: mx.expandDims(b.f, 1) } : b;
  // smallMatmul: the native kernel for few rows (an RNN step, decoding) on the CPU, else MLX's.
  let r = exactIntProduct((x, y) => mx.ext.smallMatmul(x, y), a2, b2, boundA, -2);
  if (b.f.ndim === 1) r = mx.squeeze(r, -1);
  if (a.ndim === 1) r = mx.squeeze(r, -2);
  return r;
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
