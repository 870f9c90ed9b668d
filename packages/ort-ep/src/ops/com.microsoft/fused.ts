// onnxruntime's contrib operators (domain com.microsoft) that exported transformer graphs use:
// the GELU family, BiasAdd and FusedMatMul here; the fused normalisations and
// EmbedLayerNormalization in norm.ts, MatMulNBits in nbits.ts, RotaryEmbedding in
// rotary.ts, Attention and GroupQueryAttention in attention.ts.
// Semantics follow onnxruntime's docs/ContribOperators.md and its CPU kernels.
import * as mx from '@mlx/core';
import type { Attrs } from '../../registry/attrs.js';
import type { CheckContext, OpContext, OpEntry } from '../../registry/types.js';
import { msOp } from '../../registry/op.js';
import { gelu } from '../activation.js';

/** An entry with one output: f's. */
function simple<P = undefined>(
  opType: string,
  f: (ctx: OpContext<P>) => mx.Array,
  opts: { parse?: (attrs: Attrs) => P; check?: (ctx: CheckContext<P>) => string | undefined } = {},
): OpEntry<P> {
  return msOp<P>(opType, 1, { ...opts, run: (ctx) => [f(ctx)] });
}

// ---------------------------------------------------------------------------------------------
// FusedMatMul: alpha · op(A) · op(B), op transposing the last two axes where transA/transB is set.

interface FusedMatMulParams {
  transA: boolean;
  transB: boolean;
  alpha: number;
  transBatch: boolean;
}

const parseFusedMatMul = (attrs: Attrs): FusedMatMulParams => ({
  transA: attrs.int('transA', 0) !== 0,
  transB: attrs.int('transB', 0) !== 0,
  alpha: attrs.float('alpha', 1),
  transBatch: attrs.int('transBatchA', 0) !== 0 || attrs.int('transBatchB', 0) !== 0,
});

function lastTwoSwapped(a: mx.Array): mx.Array {
  if (a.ndim < 2) return a;
  const axes = a.shape.map((_, i) => i);
  [axes[a.ndim - 2], axes[a.ndim - 1]] = [axes[a.ndim - 1], axes[a.ndim - 2]];
  return mx.transpose(a, axes);
}

function fusedMatMul(ctx: OpContext<FusedMatMulParams>): mx.Array {
  let a = ctx.input(0);
  let b = ctx.input(1);
  if (ctx.params.transA) a = lastTwoSwapped(a);
  if (ctx.params.transB) b = lastTwoSwapped(b);
  const y = mx.isFloating(a.dtype) ? mx.ext.smallMatmul(a, b) : mx.matmul(a, b);
  const alpha = ctx.params.alpha;
  return alpha === 1 ? y : mx.multiply(y, alpha);
}

/**
 * A per-channel bias of X's last axis: 1-D of its size, as onnxruntime's kernels require ("Input 1
 * is expected to have 1 dimensions"); mlx would broadcast any shape.
 */
function lastAxisBias(ctx: OpContext<unknown>, i: number): mx.Array | undefined {
  const b = ctx.optional(i);
  if (!b) return b;
  const x = ctx.input(0);
  const c = x.shape[x.ndim - 1];
  if (b.ndim !== 1 || b.shape[0] !== c)
    throw new RangeError(`${ctx.node.opType}: the bias must have shape [${c}] (X's last axis), got [${b.shape.join(', ')}]`);
  return b;
}

export const fusedOps: OpEntry[] = [
  simple('Gelu', (ctx) => gelu(ctx.input(0), 'none')),
  simple('BiasGelu', (ctx) => gelu(ctx.input(0), 'none', lastAxisBias(ctx, 1))),
  simple('FastGelu', (ctx) => gelu(ctx.input(0), 'tanh', lastAxisBias(ctx, 1))),
  simple(
    'QuickGelu',
    (ctx) => {
      const x = ctx.input(0);
      return mx.multiply(x, mx.sigmoid(mx.multiply(x, ctx.params)));
    },
    { parse: (attrs) => attrs.float('alpha', 1.702) },
  ),
  // The reference EP's com.microsoft Sigmoid: ONNX's Sigmoid under onnxruntime's domain.
  simple('Sigmoid', (ctx) => mx.sigmoid(ctx.input(0))),
  simple('BiasAdd', (ctx) => mx.add(mx.add(ctx.input(0), ctx.input(1)), ctx.input(2))),
  // GatedAdd: X + Y · gate (gate [..., 1] per row), the product rounded to T before the add.
  simple('GatedAdd', (ctx) => mx.add(ctx.input(0), mx.multiply(ctx.input(1), ctx.input(2)))),
  simple('FusedMatMul', fusedMatMul, {
    parse: parseFusedMatMul,
    check: (ctx) => (ctx.params.transBatch ? 'FusedMatMul with transBatchA/transBatchB is not supported' : undefined),
  }),
];
