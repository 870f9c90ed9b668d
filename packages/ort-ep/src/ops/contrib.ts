// onnxruntime's contrib operators (domain com.microsoft) that exported transformer graphs use:
// the GELU family, BiasAdd, FusedMatMul, RotaryEmbedding here; the fused normalisations in
// contrib-norm.ts, MatMulNBits in contrib-nbits.ts and the attention ops in contrib-attention.ts.
// Semantics follow onnxruntime's docs/ContribOperators.md and its CPU kernels.
import * as mx from '@mlx/core';
import type { CheckContext, OpContext, OpEntry } from '../registry/types.js';
import { gelu } from './activation.js';
import { contribAttentionOps } from './contrib-attention.js';
import { matMulNBitsOps } from './contrib-nbits.js';
import { contribNormOps } from './contrib-norm.js';

const MS = 'com.microsoft';

const optional = (ctx: OpContext, i: number) => (ctx.inputCount > i && ctx.has(i) ? ctx.input(i) : undefined);

function simple(opType: string, f: (ctx: OpContext) => mx.Array, check?: (ctx: CheckContext) => string | undefined): OpEntry {
  return { domain: MS, opType, since: 1, check, run: (ctx) => [f(ctx)] };
}

/** x + bias where the bias input is present. */
function withBias(ctx: OpContext, i: number): mx.Array {
  const b = optional(ctx, i);
  return b ? mx.add(ctx.input(0), b) : ctx.input(0);
}

// ---------------------------------------------------------------------------------------------
// FusedMatMul: alpha · op(A) · op(B), op transposing the last two axes where transA/transB is set.

function fusedMatMulCheck(ctx: CheckContext): string | undefined {
  if (ctx.attrs.int('transBatchA', 0) || ctx.attrs.int('transBatchB', 0)) return 'FusedMatMul with transBatchA/transBatchB is not supported';
  return undefined;
}

function lastTwoSwapped(a: mx.Array): mx.Array {
  if (a.ndim < 2) return a;
  const axes = a.shape.map((_, i) => i);
  [axes[a.ndim - 2], axes[a.ndim - 1]] = [axes[a.ndim - 1], axes[a.ndim - 2]];
  return mx.transpose(a, axes);
}

function fusedMatMul(ctx: OpContext): mx.Array {
  let a = ctx.input(0);
  let b = ctx.input(1);
  if (ctx.attrs.int('transA', 0)) a = lastTwoSwapped(a);
  if (ctx.attrs.int('transB', 0)) b = lastTwoSwapped(b);
  const y = mx.matmul(a, b);
  const alpha = ctx.attrs.float('alpha', 1);
  return alpha === 1 ? y : mx.multiply(y, alpha);
}

// ---------------------------------------------------------------------------------------------
// RotaryEmbedding: input [B, S, hidden] or [B, N, S, H]; position_ids [B, S] (or [1]: an offset
// for positions 0..S-1); cos/sin caches [max_pos, rotary_dim / 2]. The first rotary_dim channels
// of each head rotate (halves, or interleaved pairs); the rest pass through.

function rotaryCheck(ctx: CheckContext): string | undefined {
  if (ctx.attrs.int('is_packed_batching', 0)) return 'RotaryEmbedding with is_packed_batching (ragged batches) is not supported';
  if (ctx.attrs.int('rotary_embedding_dim', 0) > 0 && ctx.attrs.int('num_heads', 0) <= 0) return 'RotaryEmbedding needs num_heads when rotary_embedding_dim is set';
  return undefined;
}

/** Rotates x [..., S, ?, rd] by cos/sin broadcastable to [..., rd/2]. */
export function rotate(x: mx.Array, cos: mx.Array, sin: mx.Array, interleaved: boolean): mx.Array {
  const rd = x.shape[x.ndim - 1];
  const half = rd / 2;
  let x1: mx.Array;
  let x2: mx.Array;
  const lead = x.shape.slice(0, -1);
  if (interleaved) {
    const pairs = mx.reshape(x, [...lead, half, 2]);
    [x1, x2] = mx.split(pairs, 2, -1).map((p) => mx.squeeze(p, -1));
  } else {
    [x1, x2] = mx.split(x, 2, -1);
  }
  const o1 = mx.subtract(mx.multiply(x1, cos), mx.multiply(x2, sin));
  const o2 = mx.add(mx.multiply(x2, cos), mx.multiply(x1, sin));
  return interleaved ? mx.reshape(mx.stack([o1, o2], -1), [...lead, rd]) : mx.concatenate([o1, o2], -1);
}

/** cos/sin rows for the positions: [B or 1, S, rd/2]. */
export function rotaryTables(ctx: OpContext, posIndex: number, cosIndex: number, seq: number): [mx.Array, mx.Array] {
  let pos = mx.astype(ctx.input(posIndex), 'int32');
  if (pos.size === 1) pos = mx.add(mx.reshape(pos, [1, 1]), mx.reshape(mx.arange(0, seq, 1, 'int32'), [1, seq]));
  const take = (i: number) => mx.take(ctx.input(i), pos, 0);
  return [take(cosIndex), take(cosIndex + 1)];
}

function rotaryEmbedding(ctx: OpContext): mx.Array {
  const x = ctx.input(0);
  const interleaved = ctx.attrs.int('interleaved', 0) !== 0;
  const rd = ctx.attrs.int('rotary_embedding_dim', 0) || ctx.shape(2)[1] * 2;
  const four = x.ndim === 4;
  const [B, S] = four ? [x.shape[0], x.shape[2]] : [x.shape[0], x.shape[1]];
  let heads: mx.Array; // [B, S, N, H] or [B, N, S, H]
  if (four) heads = x;
  else {
    const n = ctx.attrs.int('num_heads', 0) || x.shape[2] / rd;
    heads = mx.reshape(x, [B, S, n, x.shape[2] / n]);
  }
  const H = heads.shape[3];
  let [cos, sin] = rotaryTables(ctx, 1, 2, S); // [B|1, S, rd/2]
  // Broadcast over the head axis: [B, 1, S, rd/2] for BNSH, [B, S, 1, rd/2] for BSNH.
  const axis = four ? 1 : 2;
  cos = mx.expandDims(cos, axis);
  sin = mx.expandDims(sin, axis);
  const lo = [0, 0, 0, 0];
  const rot = rd === H ? heads : mx.slice(heads, lo, [...heads.shape.slice(0, 3), rd], [1, 1, 1, 1]);
  let y = rotate(rot, cos, sin, interleaved);
  if (rd < H) y = mx.concatenate([y, mx.slice(heads, [0, 0, 0, rd], heads.shape, [1, 1, 1, 1])], -1);
  return four ? y : mx.reshape(y, x.shape);
}

export const contribOps: OpEntry[] = [
  simple('Gelu', (ctx) => gelu(ctx.input(0), 'none')),
  simple('BiasGelu', (ctx) => gelu(withBias(ctx, 1), 'none')),
  simple('FastGelu', (ctx) => gelu(withBias(ctx, 1), 'tanh')),
  simple('QuickGelu', (ctx) => {
    const x = ctx.input(0);
    return mx.multiply(x, mx.sigmoid(mx.multiply(x, ctx.attrs.float('alpha', 1.702))));
  }),
  simple('BiasAdd', (ctx) => mx.add(mx.add(ctx.input(0), ctx.input(1)), ctx.input(2))),
  simple('FusedMatMul', fusedMatMul, fusedMatMulCheck),
  simple('RotaryEmbedding', rotaryEmbedding, rotaryCheck),
  ...contribNormOps,
  ...matMulNBitsOps,
  ...contribAttentionOps,
];
