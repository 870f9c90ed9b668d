// Matrix products: MatMul, Gemm, MatMulInteger, QLinearMatMul, Einsum, Det.
// MLX multiplies matrices only in floating point, so integer products go through helpers that
// stay exact (quant-math.ts) instead of a float matmul that would round large sums.
import * as mx from '@mlx/core';
import type { Attrs } from '../registry/attrs.js';
import type { OpContext, OpEntry, OpResult } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { decodeMiniFloatArray, encodeMiniFloatArray, isMiniFloat } from './helpers/minifloat.js';
import {
  broadcastIntMatmul,
  exactIntMatmul,
  matmulOperand,
  minusZeroPoint,
  optionalQuantInput,
  quantInput,
  saturateRound,
  typed,
  zeroPointBound,
} from './helpers/quant-math.js';

/**
 * numpy matmul for every numeric dtype ONNX allows (integers exactly). Floats go through
 * smallMatmul: MLX's matmul, except float32 with few rows on the CPU (decoding), which runs the
 * native kernel that reads the weights in place.
 */
function matmulAny(a: mx.Array, b: mx.Array): mx.Array {
  if (mx.isFloating(a.dtype)) return mx.ext.smallMatmul(a, b);
  return broadcastIntMatmul(a, b);
}

const matmulEntry: OpEntry = onnxOp('MatMul', 1, {
  note: 'integer operands multiply exactly (broadcast multiply-and-sum; MLX matmul is float-only)',
  run: (ctx) => [matmulAny(ctx.input(0), ctx.input(1))],
});

// ---------------------------------------------------------------------------------------------
// Gemm: Y = alpha * A' @ B' + beta * C, A and B 2-D, C unidirectionally broadcast to Y.

interface GemmParams {
  transA: boolean;
  transB: boolean;
  alpha: number;
  beta: number;
}

const parseGemm = (attrs: Attrs): GemmParams => ({
  transA: attrs.int('transA', 0) !== 0,
  transB: attrs.int('transB', 0) !== 0,
  alpha: attrs.float('alpha', 1),
  beta: attrs.float('beta', 1),
});

function gemm(ctx: OpContext<GemmParams>): mx.Array {
  const { transA, transB, alpha, beta } = ctx.params;
  // A and B are matrices (onnxruntime's shape inference refuses other ranks): never broadcast.
  for (const [i, name] of [
    [0, 'A'],
    [1, 'B'],
  ] as const) {
    const r = ctx.shape(i).length;
    if (r !== 2) throw new RangeError(`Gemm: input ${name} must have rank 2, got rank ${r}`);
  }
  let a = ctx.input(0);
  let b = ctx.input(1);
  if (transA) a = mx.transpose(a);
  if (transB) b = mx.transpose(b);
  const c = beta !== 0 ? ctx.optional(2) : undefined;
  if (mx.isFloating(a.dtype)) {
    if (c) {
      // A bias row ([N] or [1, N]) at unit scales is the small-row kernel's bias (addmm elsewhere).
      const n = b.shape[1];
      const row = alpha === 1 && beta === 1 && c.size === n && n > 0 && c.shape[c.ndim - 1] === n && c.ndim <= 2;
      if (row) return mx.ext.smallMatmul(a, b, c.ndim === 1 ? c : mx.reshape(c, [n]));
      return mx.addmm(c, a, b, alpha, beta);
    }
    const y = mx.ext.smallMatmul(a, b);
    return alpha === 1 ? y : mx.multiply(y, alpha);
  }
  // Integer Gemm: the product is exact; alpha/beta scale in the integer type (ONNX keeps it).
  let y = broadcastIntMatmul(a, b);
  if (alpha !== 1) y = mx.astype(mx.multiply(y, Math.trunc(alpha)), a.dtype);
  if (c) {
    y = mx.add(y, beta === 1 ? c : mx.astype(mx.multiply(c, Math.trunc(beta)), a.dtype));
  }
  return mx.astype(y, a.dtype);
}

const gemmEntry = onnxOp('Gemm', 1, {
  parse: parseGemm,
  run: (ctx) => [gemm(ctx)],
});

// ---------------------------------------------------------------------------------------------
// MatMulInteger / QLinearMatMul: zero points per tensor, per row of A (axis -2), per column of B.

function rowsAxis(x: mx.Array): number {
  return Math.max(x.ndim - 2, 0);
}

/** (A - a_zp) @ (B - b_zp) in int32, exactly. */
function integerProduct(ctx: OpContext, ia: number, iaz: number, ib: number, ibz: number): mx.Array {
  const a = quantInput(ctx, ia);
  const a0 = minusZeroPoint(a, optionalQuantInput(ctx, iaz), rowsAxis(a));
  // B (usually the constant weight) as float32 once per session, with its bounds from its data.
  const b0 = matmulOperand(ctx, ib, ibz, () => {
    const b = quantInput(ctx, ib);
    return minusZeroPoint(b, optionalQuantInput(ctx, ibz), b.ndim - 1);
  });
  return exactIntMatmul(a0, b0, zeroPointBound(ctx.elemType(ia)));
}

const matmulIntegerEntry: OpEntry = onnxOp('MatMulInteger', 10, {
  note: 'exact int32: float32 products, split into 4-bit halves when a sum could pass 2^24; inner dimensions over 65535 refused at run time',
  run: (ctx) => [integerProduct(ctx, 0, 2, 1, 3)],
});

/** A scale given per tensor or along `axis` of a result of rank `rank`. */
function scaleAlong(s: mx.Array, axis: number, rank: number): mx.Array {
  if (s.ndim !== 1 || s.size === 1) return s;
  return mx.reshape(
    s,
    Array.from({ length: rank }, (_, i) => (i === axis ? s.size : 1)),
  );
}

/** A float8 operand of QLinearMatMul-21 as float32 values minus its (decoded) zero point. */
function float8Operand(ctx: OpContext, i: number, iz: number): mx.Array {
  const f = ctx.elemType(i);
  const x = decodeMiniFloatArray(quantInput(ctx, i), f);
  return ctx.has(iz) ? mx.subtract(x, decodeMiniFloatArray(quantInput(ctx, iz), f)) : x;
}

/** (A - a_zp) @ (B - b_zp) as float32: exact int32 for integer operands, float for float8 ones (opset 21). */
function qlinearProduct(ctx: OpContext): mx.Array {
  const isF8 = (i: number) => isMiniFloat(ctx.elemType(i));
  if (!isF8(0) && !isF8(3)) return mx.astype(integerProduct(ctx, 0, 2, 3, 5), 'float32');
  const side = (i: number, iz: number, axis: (x: mx.Array) => number) => {
    if (isF8(i)) return float8Operand(ctx, i, iz);
    const x = quantInput(ctx, i);
    return mx.astype(minusZeroPoint(x, optionalQuantInput(ctx, iz), axis(x)), 'float32');
  };
  return mx.matmul(
    side(0, 2, rowsAxis),
    side(3, 5, (b) => b.ndim - 1),
  );
}

function qlinearMatmul(ctx: OpContext): OpResult[] {
  const acc = qlinearProduct(ctx);
  const rank = acc.ndim;
  const aScale = scaleAlong(ctx.input(1), rank - 2, rank);
  const bScale = scaleAlong(ctx.input(4), rank - 1, rank);
  // The reference forms the multiplier in the scales' own type (float16 rounds it), then applies it.
  const multiplier = mx.astype(mx.divide(mx.multiply(aScale, bScale), ctx.input(6)), 'float32');
  const yType = ctx.elemType(7);
  const y = mx.multiply(acc, multiplier);
  if (isMiniFloat(yType))
    return [typed(encodeMiniFloatArray(mx.add(y, decodeMiniFloatArray(quantInput(ctx, 7), yType)), yType, true), yType)];
  return [typed(saturateRound(mx.add(y, mx.astype(quantInput(ctx, 7), 'float32')), yType), yType)];
}

const qlinearMatmulEntry: OpEntry = onnxOp('QLinearMatMul', 10, {
  note: 'float8 operands (opset 21) multiply in float32; the float8 result saturates',
  run: qlinearMatmul,
});

// ---------------------------------------------------------------------------------------------
// Einsum: MLX's einsum takes ONNX's equations (implicit output, ellipsis, repeated indices).

const einsumEntry = onnxOp('Einsum', 12, {
  note: 'integer operands contract in float32 (exact while sums stay below 2^24)',
  parse: (attrs) => attrs.string('equation').replace(/\s+/g, ''),
  run: (ctx) => {
    const eq = ctx.params;
    const ops = Array.from({ length: ctx.inputCount }, (_, i) => ctx.input(i));
    const t = ops[0].dtype;
    // Integer einsums contract in float32 (MLX has no integer matmul) and cast back.
    if (!mx.isFloating(t))
      return [
        mx.astype(
          mx.einsum(
            eq,
            ops.map((o) => mx.astype(o, 'float32')),
          ),
          t,
        ),
      ];
    return [mx.einsum(eq, ops)];
  },
});

// ---------------------------------------------------------------------------------------------
// Det: LU factorisation (MLX runs it on the CPU only); det = prod(diag(U)) * (-1)^swaps.

function det(x: mx.Array): mx.Array {
  const dtype = x.dtype;
  if (x.ndim < 2 || x.shape[x.ndim - 1] !== x.shape[x.ndim - 2])
    throw new RangeError(`Det takes square matrices [..., M, M], got shape [${x.shape.join(', ')}]`);
  const n = x.shape[x.ndim - 1];
  if (n === 0) return mx.ones(x.shape.slice(0, -2), dtype);
  const work = dtype === 'float64' ? x : mx.astype(x, 'float32');
  const [lu, pivots] = mx.linalgLuFactor(work, { stream: 'cpu' });
  const diag = mx.diagonal(lu, 0, -2, -1);
  const swaps = mx.sum(mx.notEqual(mx.astype(pivots, 'int32'), mx.arange(0, n, 1, 'int32')), -1);
  const sign = mx.subtract(1, mx.multiply(mx.remainder(mx.astype(swaps, work.dtype), 2), 2));
  return mx.astype(mx.multiply(mx.prod(diag, -1), sign), dtype);
}

const detEntry: OpEntry = onnxOp('Det', 11, {
  note: 'LU factorisation on the CPU stream (MLX has no GPU LU); float16 computes in float32',
  run: (ctx) => [det(ctx.input(0))],
});

export const matmulOps: OpEntry[] = [matmulEntry, gemmEntry, matmulIntegerEntry, qlinearMatmulEntry, einsumEntry, detEntry];
