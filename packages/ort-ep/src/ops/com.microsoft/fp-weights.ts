// com.microsoft MatMulBlockQuantizedFp8Weight and MatMulBlockQuantizedFp4Weight: matmuls with
// float8 (E4M3) or NVFP4 (E2M1 with E4M3 block scales) weights, as ContribOperators.md defines them
// (onnxruntime runs them on CUDA only):
//  - Fp8: W[n, k] = e4m3(B[n, k]) · b_scale[n, k / block]; with a_scale, A is first rounded to
//    e4m3 on the scale (A = e4m3(A / a_scale) · a_scale, saturating at ±448);
//  - Fp4: W[n, k] = e2m1(B) · weight_scale_2 · e4m3(weight_scale[n, k / block]), B packed two
//    values per byte (low nibble first); input_scale is accepted and ignored, as specified.
// Y = A · Wᵀ (+ bias) in the activation's type; the weights are decoded through 256-entry tables.
import * as mx from '@mlx/core';
import { OnnxDataType } from '../../onnx/index.js';
import type { OpContext, OpEntry, OpResult } from '../../registry/types.js';
import { msOp, invalidNode } from '../../registry/op.js';
import { decodeMiniFloatArray } from '../helpers/minifloat.js';
import { quantInput } from '../helpers/quant-math.js';

/** Per-block values [N, blocks] spread over K columns: [N, K]. */
function spreadBlocks(s: mx.Array, block: number, K: number): mx.Array {
  const wide = mx.repeat(s, block, 1);
  return wide.shape[1] === K ? wide : mx.slice(wide, [0, 0], [wide.shape[0], K], [1, 1]);
}

function checkedBlocks(ctx: OpContext<number>, s: mx.Array, N: number, K: number, name: string): void {
  const blocks = Math.ceil(K / ctx.params);
  if (s.ndim !== 2 || s.shape[0] !== N || s.shape[1] !== blocks)
    throw new RangeError(`${ctx.where}: ${name} of shape [${s.shape.join(', ')}] is not [${N}, ${blocks}] (block_size ${ctx.params})`);
}

/** x rounded to float8 E4M3 (3 mantissa bits, subnormals below 2^-6, saturating at ±448), on the device. */
function roundToE4M3(x: mx.Array): mx.Array {
  const a = mx.abs(x);
  const e = mx.maximum(mx.floor(mx.log2(mx.maximum(a, 2 ** -20))), -6);
  const step = mx.power(mx.scalar(2, 'float32'), mx.subtract(e, 3));
  const r = mx.minimum(mx.multiply(mx.round(mx.divide(a, step), 0), step), 448);
  return mx.where(mx.isnan(x), x, mx.multiply(mx.sign(x), r));
}

function matmulOut(ctx: OpContext<number>, a: mx.Array, w: mx.Array, biasAt: number): OpResult[] {
  const dtype = ctx.input(0).dtype;
  let y = mx.matmul(a, mx.transpose(mx.astype(w, dtype)));
  const bias = ctx.optional(biasAt);
  if (bias) y = mx.add(y, bias);
  return [y];
}

function fp8Weight(ctx: OpContext<number>): OpResult[] {
  const a = ctx.input(0);
  const [N, K] = ctx.shape(1);
  if (ctx.shape(0).at(-1) !== K) throw new RangeError(`${ctx.where}: A's last axis ${ctx.shape(0).at(-1)} is not B's K ${K}`);
  const scales = ctx.input(2);
  checkedBlocks(ctx, scales, N, K, 'b_scale');
  const w = mx.multiply(
    decodeMiniFloatArray(quantInput(ctx, 1), OnnxDataType.FLOAT8E4M3FN),
    spreadBlocks(mx.astype(scales, 'float32'), ctx.params, K),
  );
  const aScale = ctx.optional(3);
  let act = a;
  if (aScale) {
    const s = mx.astype(mx.reshape(aScale, []), 'float32');
    act = mx.astype(mx.multiply(roundToE4M3(mx.divide(mx.astype(a, 'float32'), s)), s), a.dtype);
  }
  return matmulOut(ctx, act, w, 4);
}

function fp4Weight(ctx: OpContext<number>): OpResult[] {
  const [N, half] = ctx.shape(1);
  const K = 2 * half;
  if (ctx.shape(0).at(-1) !== K) throw new RangeError(`${ctx.where}: A's last axis ${ctx.shape(0).at(-1)} is not 2 · B's ${half}`);
  const packed = ctx.input(1);
  const codes = mx.reshape(mx.stack([mx.bitwiseAnd(packed, 0x0f), mx.rightShift(packed, 4)], -1), [N, K]);
  const scales = ctx.input(2);
  checkedBlocks(ctx, scales, N, K, 'weight_scale');
  const blockScales = decodeMiniFloatArray(scales, OnnxDataType.FLOAT8E4M3FN);
  const global = mx.astype(mx.reshape(ctx.input(3), []), 'float32');
  const w = mx.multiply(
    mx.multiply(decodeMiniFloatArray(codes, OnnxDataType.FLOAT4E2M1), global),
    spreadBlocks(blockScales, ctx.params, K),
  );
  return matmulOut(ctx, ctx.input(0), w, 5);
}

const halfTypes = new Set<number>([OnnxDataType.FLOAT16, OnnxDataType.BFLOAT16, OnnxDataType.FLOAT]);
const activationCheck = (op: string) => (ctx: { inputType(i: number): number | undefined }) => {
  const t = ctx.inputType(0);
  return t !== undefined && !halfTypes.has(t) ? `${op} takes float16, bfloat16 (or float) activations, not element type ${t}` : undefined;
};

function blockSize(def: number) {
  return (attrs: { int(name: string, def?: number): number }): number => {
    const b = attrs.int('block_size', def);
    if (b < 1) throw invalidNode(`block_size ${b} must be positive`);
    return b;
  };
}

export const fpWeightOps: OpEntry[] = [
  msOp('MatMulBlockQuantizedFp8Weight', 1, {
    parse: blockSize(128),
    check: activationCheck('MatMulBlockQuantizedFp8Weight'),
    run: fp8Weight,
    note: 'weights decoded through a table each run',
  }),
  msOp('MatMulBlockQuantizedFp4Weight', 1, {
    parse: blockSize(16),
    check: activationCheck('MatMulBlockQuantizedFp4Weight'),
    run: fp4Weight,
    note: 'weights decoded through a table each run',
  }),
];
