// com.microsoft integer matmuls that dynamic quantization (onnxruntime.quantization.quantize_dynamic)
// writes: DynamicQuantizeMatMul (A quantized to uint8 on the fly from its range) and
// MatMulIntegerToFloat (both operands already 8-bit). Y = (A - a_zp)·(B - b_zp) · a_scale · b_scale
// (+ bias), the integer product exact (quant-math's split float32 products), scales per tensor or
// per column of B.
//
// A's dynamic parameters follow onnxruntime's kernel: the range widened to hold 0, scale
// (max - min) / 255 (1 when the range is empty), zero point round(-min / scale) half away from
// zero, values rounded half to even.
import * as mx from '@mlx/core';
import { OnnxDataType } from '../../onnx/index.js';
import type { OpContext, OpEntry, OpResult } from '../../registry/types.js';
import { msOp } from '../../registry/op.js';
import { exactIntMatmul, matmulOperand, zeroPointBound } from '../helpers/quant-math.js';

/** A per-tensor or per-column (last axis of B, N) parameter as a broadcastable array. */
function perColumn(ctx: OpContext, i: number, N: number, name: string): mx.Array {
  const p = ctx.input(i);
  if (p.size !== 1 && p.size !== N)
    throw new RangeError(`${ctx.where}: ${name} has ${p.size} values; it must be a scalar or one per column (${N})`);
  return mx.reshape(p, p.size === 1 ? [] : [N]);
}

/** (x - zp) in int32, zp per tensor or per column of B. */
function centred(x: mx.Array, zp: mx.Array | undefined): mx.Array {
  const x32 = mx.astype(x, 'int32');
  return zp ? mx.subtract(x32, mx.astype(zp, 'int32')) : x32;
}

/** (a - a_zp) @ (B - b_zp), exactly: B (input 1, its zero point input `ibz`) once per session when constant. */
function integerProduct(ctx: OpContext, a: mx.Array, aType: number, ibz: number): mx.Array {
  const K = ctx.shape(1).at(-2);
  if (ctx.shape(0).at(-1) !== K) throw new RangeError(`${ctx.where}: A's last axis ${ctx.shape(0).at(-1)} does not match B's ${K}`);
  const N = ctx.shape(1).at(-1) ?? 1;
  const b = matmulOperand(ctx, 1, ibz, () => centred(ctx.input(1), ctx.optional(ibz) ? perColumn(ctx, ibz, N, 'b_zero_point') : undefined));
  return exactIntMatmul(a, b, zeroPointBound(aType));
}

function finish(ctx: OpContext, product: mx.Array, multiplier: mx.Array, biasAt: number): OpResult[] {
  let y = mx.multiply(mx.astype(product, 'float32'), multiplier);
  const bias = ctx.optional(biasAt);
  if (bias) y = mx.add(y, mx.astype(bias, 'float32'));
  return [y];
}

/**
 * `x` quantized to uint8 from its own range (or each row's, `perRow`), as onnxruntime's dynamic
 * kernels do: (q - zp) in int32 and the scale.
 */
export function dynamicQuantizeU8(x: mx.Array, perRow = false): { centred: mx.Array; scale: mx.Array } {
  const a = mx.astype(x, 'float32');
  const range = (f: (a: mx.Array, axis?: number, opts?: { keepdims?: boolean }) => mx.Array) =>
    perRow ? f(a, -1, { keepdims: true }) : f(a);
  const lo = a.size ? mx.minimum(range(mx.min), 0) : mx.array(0);
  const hi = a.size ? mx.maximum(range(mx.max), 0) : mx.array(0);
  const scale = mx.where(mx.equal(hi, lo), 1, mx.divide(mx.subtract(hi, lo), 255));
  const zp = mx.floor(mx.add(mx.clip(mx.divide(mx.negative(lo), scale), 0, 255), 0.5));
  const q = mx.clip(mx.add(mx.round(mx.divide(a, scale), 0), zp), 0, 255);
  return { centred: mx.subtract(mx.astype(q, 'int32'), mx.astype(zp, 'int32')), scale };
}

function dynamicQuantizeMatMul(ctx: OpContext): OpResult[] {
  const N = ctx.shape(1).at(-1) ?? 1;
  const a = dynamicQuantizeU8(ctx.input(0));
  const product = integerProduct(ctx, a.centred, OnnxDataType.UINT8, 3);
  return finish(ctx, product, mx.multiply(a.scale, mx.astype(perColumn(ctx, 2, N, 'b_scale'), 'float32')), 4);
}

function matMulIntegerToFloat(ctx: OpContext): OpResult[] {
  const N = ctx.shape(1).at(-1) ?? 1;
  const aScale = ctx.input(2);
  if (aScale.size !== 1) throw new RangeError(`${ctx.where}: a per-column a_scale is not supported (a scalar is)`);
  const aZp = ctx.optional(4);
  if (aZp && aZp.size !== 1) throw new RangeError(`${ctx.where}: a per-column a_zero_point is not supported (a scalar is)`);
  const product = integerProduct(ctx, centred(ctx.input(0), aZp ? mx.reshape(aZp, []) : undefined), ctx.elemType(0), 5);
  const multiplier = mx.multiply(mx.astype(mx.reshape(aScale, []), 'float32'), mx.astype(perColumn(ctx, 3, N, 'b_scale'), 'float32'));
  return finish(ctx, product, multiplier, 6);
}

const EIGHT_BIT = new Set<number>([OnnxDataType.INT8, OnnxDataType.UINT8]);
const eightBit = (op: string, inputs: number[]) => (ctx: { inputType(i: number): number | undefined }) => {
  const bad = inputs.map((i) => ctx.inputType(i)).find((t) => t !== undefined && !EIGHT_BIT.has(t));
  return bad === undefined ? undefined : `${op} takes int8/uint8 operands, not element type ${bad}`;
};

export const quantMatMulOps: OpEntry[] = [
  msOp('DynamicQuantizeMatMul', 1, { check: eightBit('DynamicQuantizeMatMul', [1]), run: dynamicQuantizeMatMul }),
  msOp('MatMulIntegerToFloat', 1, {
    check: eightBit('MatMulIntegerToFloat', [0, 1]),
    run: matMulIntegerToFloat,
    note: 'a_scale and a_zero_point per tensor',
  }),
];
