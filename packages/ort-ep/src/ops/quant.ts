// QuantizeLinear, DequantizeLinear (per tensor, per axis, blocked; 2/4/8/16-bit integers, float8
// and float4 codes) and DynamicQuantizeLinear. One entry per op covers opsets 10..25: later
// versions only add attributes (axis 13, saturate 19, block_size/output_dtype 21, precision 23)
// and types, each read with its default.
import * as mx from '@mlx/core';
import { OnnxDataType } from '../onnx/index.js';
import type { Attrs } from '../registry/attrs.js';
import type { CheckContext, OpContext, OpEntry, OpResult } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { mxDtypeOf } from '../runtime/convert.js';
import { decodeMiniFloatArray, encodeMiniFloatArray, isMiniFloat } from './helpers/minifloat.js';
import { qRange, quantInput, saturateRound, typed } from './helpers/quant-math.js';
import { mxType, normAxis } from './helpers/util.js';

/** A scale or zero point shaped to broadcast against x: per tensor, per axis, or blocked along axis. */
function alongAxis(p: mx.Array, xShape: readonly number[], axis: number, blockSize: number): mx.Array {
  if (p.size === 1) return mx.reshape(p, []);
  if (!blockSize) {
    if (p.ndim !== 1) throw new RangeError(`a scale of shape [${p.shape.join(', ')}] needs block_size for blocked quantization`);
    return mx.reshape(
      p,
      xShape.map((_d, i) => (i === axis ? p.size : 1)),
    );
  }
  // Blocked: every scale covers block_size consecutive elements along axis (the last block may be short).
  const repeated = mx.repeat(p, blockSize, axis);
  const stop = repeated.shape.map((d, i) => (i === axis ? xShape[axis] : d));
  return mx.slice(
    repeated,
    repeated.shape.map(() => 0),
    stop,
    repeated.shape.map(() => 1),
  );
}

/** The attributes of QuantizeLinear and DequantizeLinear (each opset adds some; absent ones take their defaults). */
interface QuantParams {
  axis: number;
  /** 0: per tensor or per axis; else blocked along axis (opset 21). */
  blockSize: number;
  /** 0: the zero point's type, else uint8 (QuantizeLinear) or the scale's type (DequantizeLinear). */
  outputDtype: number;
  /** Float8 outputs saturate out-of-range values (opset 19). */
  saturate: boolean;
  /** The type QuantizeLinear divides in, 0 for the promoted type of x and the scale (opset 23). */
  precision: number;
}

const parseQuant = (attrs: Attrs): QuantParams => ({
  axis: attrs.int('axis', 1),
  blockSize: attrs.int('block_size', 0),
  outputDtype: attrs.int('output_dtype', 0),
  saturate: attrs.int('saturate', 1) !== 0,
  precision: attrs.int('precision', 0),
});

/** The quantization axis, normalised only where a per-axis or blocked scale needs it (rank-1 inputs keep the default 1). */
function geometry(ctx: OpContext<QuantParams>, x: mx.Array): { axis: number; block: number } {
  const perTensor = ctx.shape(1).reduce((a, b) => a * b, 1) === 1;
  return { axis: perTensor ? 0 : normAxis(ctx.params.axis, x.ndim), block: ctx.params.blockSize };
}

/** Element types the quantizers can produce or read: integers, float8 and float4 codes. */
function quantizable(t: number): boolean {
  return qRange(t) !== undefined || isMiniFloat(t);
}

// ---------------------------------------------------------------------------------------------
// QuantizeLinear: y = saturate(round(x / scale) + zero_point); float8/float4: the code of x / scale.

function outputTypeOf(p: QuantParams, zeroPointType: number | undefined): number {
  return zeroPointType ?? (p.outputDtype || OnnxDataType.UINT8);
}

function quantize(ctx: OpContext<QuantParams>): OpResult[] {
  const x = ctx.input(0);
  const { axis, block } = geometry(ctx, x);
  const scale = alongAxis(ctx.input(1), x.shape, axis, block);
  const yType = outputTypeOf(ctx.params, ctx.has(2) ? ctx.elemType(2) : undefined);
  // The division runs in `precision` when given, else in the promoted type of x and the scale.
  const precision = ctx.params.precision;
  const p = precision ? mxType(precision, ctx.where) : undefined;
  const q = p ? mx.divide(mx.astype(x, p), mx.astype(scale, p)) : mx.divide(x, scale);
  if (isMiniFloat(yType)) {
    // Float8 ignores the zero point (the reference does); float4 adds it before rounding.
    let v = mx.astype(q, 'float32');
    if (yType === OnnxDataType.FLOAT4E2M1 && ctx.has(2))
      v = mx.add(v, alongAxis(decodeMiniFloatArray(quantInput(ctx, 2), yType), x.shape, axis, block));
    return [typed(encodeMiniFloatArray(v, yType, ctx.params.saturate || yType === OnnxDataType.FLOAT4E2M1), yType)];
  }
  let r = mx.round(mx.astype(q, 'float32'), 0);
  if (ctx.has(2)) r = mx.add(r, alongAxis(mx.astype(quantInput(ctx, 2), 'float32'), x.shape, axis, block));
  // A NaN (x / 0 for x = 0, a NaN x or scale) is the type's lowest value, as in onnxruntime (its
  // conversion to int gives the lowest int, which the clamp to the range keeps or raises to 0).
  const low = qRange(yType)?.[0];
  if (low !== undefined) r = mx.where(mx.isnan(r), mx.array(low, 'float32'), r);
  return [typed(saturateRound(r, yType), yType)];
}

function quantizeCheck(ctx: CheckContext<QuantParams>): string | undefined {
  const zp = ctx.inputType(2);
  const t = zp ?? outputTypeOf(ctx.params, undefined);
  if (!quantizable(t)) return `QuantizeLinear to element type ${t} is not supported (integers up to 16 bits, float8 and float4 are)`;
  const s = ctx.inputType(1);
  if (s !== undefined && !mxDtypeOf(s))
    return `QuantizeLinear with a scale of element type ${s} is not supported on MLX (float8e8m0 scales have no MLX dtype)`;
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// DequantizeLinear: y = (x - zero_point) * scale, in float32, cast to output_dtype or the scale's type.

function dequantValues(ctx: OpContext, i: number): mx.Array {
  const t = ctx.elemType(i);
  return isMiniFloat(t) ? decodeMiniFloatArray(quantInput(ctx, i), t) : mx.astype(quantInput(ctx, i), 'float32');
}

function dequantize(ctx: OpContext<QuantParams>): mx.Array {
  const x = dequantValues(ctx, 0);
  const { axis, block } = geometry(ctx, x);
  const scaleIn = ctx.input(1);
  const scale = alongAxis(mx.astype(scaleIn, 'float32'), x.shape, axis, block);
  // Float8 zero points must be zero (the reference refuses others); integer ones shift.
  // int32 subtracts in int32, wrapping as onnxruntime's does (and exact: float32 is not past 2^24).
  const shifted = !ctx.has(2)
    ? x
    : ctx.elemType(0) === OnnxDataType.INT32
      ? mx.astype(
          mx.subtract(mx.astype(quantInput(ctx, 0), 'int32'), alongAxis(mx.astype(quantInput(ctx, 2), 'int32'), x.shape, axis, block)),
          'float32',
        )
      : !isMiniFloat(ctx.elemType(0))
        ? mx.subtract(x, alongAxis(dequantValues(ctx, 2), x.shape, axis, block))
        : x;
  const outType = ctx.params.outputDtype;
  return mx.astype(mx.multiply(shifted, scale), outType ? mxType(outType, ctx.where) : scaleIn.dtype);
}

function dequantizeCheck(ctx: CheckContext<QuantParams>): string | undefined {
  const t = ctx.inputType(0);
  if (t !== undefined && t !== OnnxDataType.INT32 && !quantizable(t)) return `DequantizeLinear of element type ${t} is not supported`;
  const s = ctx.inputType(1);
  if (s !== undefined && !mxDtypeOf(s))
    return `DequantizeLinear with a scale of element type ${s} is not supported on MLX (float8e8m0 scales have no MLX dtype)`;
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// DynamicQuantizeLinear: uint8 with scale and zero point from the range of x (widened to hold 0).

function dynamicQuantize(ctx: OpContext): OpResult[] {
  const x = mx.astype(ctx.input(0), 'float32');
  const lo = x.size ? mx.minimum(mx.min(x), 0) : mx.array(0);
  const hi = x.size ? mx.maximum(mx.max(x), 0) : mx.array(0);
  // An all-zero (or empty) input has max == min: the scale is 1, as onnxruntime returns it (and the
  // ONNX reference's own comment has it), not 0, which would divide by zero; y and the zero point stay 0.
  const scale = mx.where(mx.equal(hi, lo), 1, mx.divide(mx.subtract(hi, lo), 255));
  const zp = mx.clip(mx.round(mx.subtract(0, mx.divide(lo, scale)), 0), 0, 255);
  const y = saturateRound(mx.add(mx.round(mx.divide(x, scale), 0), zp), OnnxDataType.UINT8);
  return [y, mx.astype(scale, 'float32'), mx.astype(zp, 'uint8')];
}

export const quantOps: OpEntry[] = [
  onnxOp('QuantizeLinear', 10, {
    parse: parseQuant,
    check: quantizeCheck,
    run: quantize,
    note: 'float8/float4 outputs are codes computed with MLX integer ops; float8e8m0 scales are refused',
  }),
  onnxOp('DequantizeLinear', 10, {
    parse: parseQuant,
    check: dequantizeCheck,
    run: (ctx) => [dequantize(ctx)],
    note: 'float8e8m0 scales are refused',
  }),
  onnxOp('DynamicQuantizeLinear', 11, { run: dynamicQuantize }),
];
