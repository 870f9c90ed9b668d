// com.microsoft RotaryEmbedding, and the rotation that GroupQueryAttention's do_rotary shares.
import * as mx from '@mlx/core';
import { checkedIndices } from '../helpers/bounds.js';
import type { Attrs } from '../../registry/attrs.js';
import type { OpContext, OpEntry } from '../../registry/types.js';
import { msOp } from '../../registry/op.js';

// ---------------------------------------------------------------------------------------------
// RotaryEmbedding: input [B, S, hidden] or [B, N, S, H]; position_ids [B, S] (or [1]: an offset
// for positions 0..S-1); cos/sin caches [max_pos, rotary_dim / 2]. The first rotary_dim channels
// of each head rotate (halves, or interleaved pairs); the rest pass through.

interface RotaryParams {
  interleaved: boolean;
  /** 0: twice the cache's width. */
  rotaryDim: number;
  /** 0: hidden / rotary_embedding_dim. */
  heads: number;
  packedBatching: boolean;
}

function parseRotary(attrs: Attrs): RotaryParams {
  const p = {
    interleaved: attrs.int('interleaved', 0) !== 0,
    rotaryDim: attrs.int('rotary_embedding_dim', 0),
    heads: attrs.int('num_heads', 0),
    packedBatching: attrs.int('is_packed_batching', 0) !== 0,
  };
  if (p.rotaryDim > 0 && p.heads <= 0) throw new RangeError('RotaryEmbedding needs num_heads when rotary_embedding_dim is set');
  return p;
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

/** cos/sin rows for positions [B or 1, S] (a single element is an offset for 0..S-1): [B or 1, S, rd/2]. */
export function rotaryTables(
  ctx: OpContext<unknown>,
  positions: mx.Array,
  cosCache: mx.Array,
  sinCache: mx.Array,
  seq: number,
): [mx.Array, mx.Array] {
  let pos = mx.astype(positions, 'int64');
  if (pos.size === 1) pos = mx.add(mx.reshape(pos, [1, 1]), mx.reshape(mx.arange(0, seq, 1, 'int64'), [1, seq]));
  const rows = cosCache.shape[0];
  const safe = checkedIndices(ctx, pos, rows, `position (a cos/sin cache of ${rows} rows)`, { negative: false });
  return [mx.take(cosCache, safe, 0), mx.take(sinCache, safe, 0)];
}

function rotaryEmbedding(ctx: OpContext<RotaryParams>): mx.Array {
  const x = ctx.input(0);
  const { interleaved } = ctx.params;
  const rd = ctx.params.rotaryDim || ctx.shape(2)[1] * 2;
  const four = x.ndim === 4;
  const [B, S] = four ? [x.shape[0], x.shape[2]] : [x.shape[0], x.shape[1]];
  let heads: mx.Array; // [B, S, N, H] or [B, N, S, H]
  if (four) heads = x;
  else {
    const n = ctx.params.heads || x.shape[2] / rd;
    heads = mx.reshape(x, [B, S, n, x.shape[2] / n]);
  }
  const H = heads.shape[3];
  let [cos, sin] = rotaryTables(ctx, ctx.input(1), ctx.input(2), ctx.input(3), S); // [B|1, S, rd/2]
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

export const msRotaryOps: OpEntry[] = [
  msOp('RotaryEmbedding', 1, {
    parse: parseRotary,
    check: (ctx) => (ctx.params.packedBatching ? 'RotaryEmbedding with is_packed_batching (ragged batches) is not supported' : undefined),
    run: (ctx) => [rotaryEmbedding(ctx)],
  }),
];
