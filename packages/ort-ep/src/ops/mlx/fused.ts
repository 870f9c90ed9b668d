// The ops that plan-time rewrites (src/plan/rewrite/) put in place of the patterns exporters
// write: domain mlx.fused, never in a model file. Each computes what its pattern computed; on the
// CPU, float32 runs the native fused kernels, elsewhere MLX's own ops.
import * as mx from '@mlx/core';
import type { Attrs } from '../../registry/attrs.js';
import type { OpContext, OpEntry } from '../../registry/types.js';
import { gelu } from '../activation.js';
import { convProduct, parseConv, type ConvParams } from '../conv.js';
import { fusedAttention, parseFusedAttention } from './attention.js';

export const FUSED_DOMAIN = 'mlx.fused';

const entry = <P>(opType: string, parse: (a: Attrs) => P, run: (ctx: OpContext<P>) => mx.Array, note: string): OpEntry<P> => ({
  domain: FUSED_DOMAIN,
  opType,
  since: 1,
  parse,
  run: (ctx) => [run(ctx)],
  note,
});

const epsilon = (a: Attrs) => a.float('epsilon');
/** A 1-D parameter the fused kernels take as is; anything else is applied by broadcasting afterwards. */
const lastAxisVector = (p: mx.Array | undefined, x: mx.Array) => !p || (p.ndim === 1 && p.shape[0] === x.shape[x.ndim - 1]);

/** smallMatmul's bias: the native small-row kernel's epilogue on the CPU, addmm's C term elsewhere. */
function matMulAdd(ctx: OpContext<undefined>): mx.Array {
  return mx.smallMatmul(ctx.input(0), ctx.input(1), ctx.input(2));
}

interface ConvEpilogueParams extends ConvParams {
  lo: number;
  hi: number;
}

/** Conv (+ residual) (+ Relu/Clip) with the bias, residual and clamp in one pass after the product. */
function convEpilogue(ctx: OpContext<ConvEpilogueParams>): mx.Array {
  const { y, channelsLast } = convProduct(ctx);
  const bias = channelsLast ? ctx.optional(2) : undefined;
  const residual = ctx.has(3) ? ctx.input(3) : undefined;
  return mx.convEpilogue(y, bias ?? null, residual ?? null, ctx.params.lo, ctx.params.hi, channelsLast);
}

function rmsNorm(ctx: OpContext<number>): mx.Array {
  const x = ctx.input(0);
  const w = ctx.optional(1);
  if (x.ndim === 0) throw new RangeError('RMSNorm of a scalar');
  if (lastAxisVector(w, x)) return mx.fusedRmsNorm(x, w ?? null, ctx.params);
  return mx.multiply(mx.fusedRmsNorm(x, null, ctx.params), w!);
}

function layerNorm(ctx: OpContext<number>): mx.Array {
  const x = ctx.input(0);
  const w = ctx.optional(1);
  const b = ctx.optional(2);
  if (x.ndim === 0) throw new RangeError('LayerNorm of a scalar');
  if (lastAxisVector(w, x) && lastAxisVector(b, x)) return mx.fusedLayerNorm(x, w ?? null, b ?? null, ctx.params);
  let y = mx.fusedLayerNorm(x, null, null, ctx.params);
  if (w) y = mx.multiply(y, w);
  return b ? mx.add(y, b) : y;
}

export const mlxFusedOps: OpEntry[] = [
  entry(
    'Gelu',
    (a) => a.string('approximate', 'none'),
    (ctx) => gelu(ctx.input(0), ctx.params, ctx.optional(1)),
    'GELU (erf or tanh form) of x (+ bias), from the rewrite of its decomposition',
  ),
  entry('MatMulAdd', () => undefined, matMulAdd, 'MatMul with a constant matrix and a constant bias vector, as one addmm'),
  entry(
    'Attention',
    parseFusedAttention,
    fusedAttention,
    "MatMul(Softmax(masks(MatMul(q, kᵀ) × scale)), v), from the rewrite of decomposed attention: MLX's fused attention where it takes the shapes",
  ),
  entry(
    'Conv',
    (a) => ({ ...parseConv(a), lo: a.float('lo', Number.NEGATIVE_INFINITY), hi: a.float('hi', Number.POSITIVE_INFINITY) }),
    convEpilogue,
    'Conv (+ residual Add) (+ Relu/Clip), from the rewrite of that chain: bias, residual and clamp in one pass after the product',
  ),
  entry('RMSNorm', epsilon, rmsNorm, 'RMS normalisation over the last axis (× weight), from the rewrite of its decomposition'),
  entry('LayerNorm', epsilon, layerNorm, 'layer normalisation over the last axis (× weight + bias), from the rewrite of its decomposition'),
];
