// com.microsoft RotaryEmbedding and MRotaryEmbedding (Qwen-VL's multimodal rotary), on
// @mlx/kernels' rotary embedding, and the position rows that GroupQueryAttention's and
// PagedAttention's do_rotary share.
import * as mx from '@mlx/core';
import { checkedIndices } from '../helpers/bounds.js';
import type { Attrs } from '../../registry/attrs.js';
import type { OpContext, OpEntry } from '../../registry/types.js';
import { msOp } from '../../registry/op.js';
import { rotaryEmbedding as rotate } from '@mlx/kernels';

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
    interleaved: attrs.int('interleaved', 0) === 1,
    rotaryDim: attrs.int('rotary_embedding_dim', 0),
    heads: attrs.int('num_heads', 0),
    packedBatching: attrs.int('is_packed_batching', 0) !== 0,
  };
  if (p.rotaryDim > 0 && p.heads <= 0) throw new RangeError('RotaryEmbedding needs num_heads when rotary_embedding_dim is set');
  return p;
}

/**
 * Positions [B or 1, S] as int64 rows of a cos/sin cache of `rows` rows, checked to lie in it: a
 * single element is an offset for positions 0..S-1.
 */
export function rotaryPositions(ctx: OpContext<unknown>, positions: mx.Array, rows: number, seq: number): mx.Array {
  let pos = mx.astype(positions, 'int64');
  if (pos.size === 1) pos = mx.add(mx.reshape(pos, [1, 1]), mx.reshape(mx.arange(0, seq, 1, 'int64'), [1, seq]));
  return checkedIndices(ctx, pos, rows, `position (a cos/sin cache of ${rows} rows)`, { negative: false });
}

/** cos/sin rows for positions [B or 1, S] (a single element is an offset for 0..S-1): [B or 1, S, rd/2]. */
export function rotaryTables(
  ctx: OpContext<unknown>,
  positions: mx.Array,
  cosCache: mx.Array,
  sinCache: mx.Array,
  seq: number,
): [mx.Array, mx.Array] {
  const safe = rotaryPositions(ctx, positions, cosCache.shape[0], seq);
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
  const cos = ctx.input(2);
  const positionIds = rotaryPositions(ctx, ctx.input(1), cos.shape[0], S); // [B|1, S]
  // The gathered [B|1, S, rd/2] rows broadcast over the head axis: 1 for BNSH, 2 for BSNH.
  const y = rotate(heads, { cos, sin: ctx.input(3), positionIds, interleaved, rotaryDim: rd, headAxis: four ? 1 : 2 });
  return four ? y : mx.reshape(y, x.shape);
}

// ---------------------------------------------------------------------------------------------
// MRotaryEmbedding: as RotaryEmbedding, with position_ids [3, B, S] (temporal, height, width
// streams) and each cos/sin column taken from the stream mrope_section assigns it: contiguous
// sections (mrope_layout 0, Qwen2-VL) or H and W every third column (mrope_layout 1, Qwen3-VL).
// cos and sin are multiplied by `scale`.

interface MRotaryParams {
  interleaved: boolean;
  rotaryDim: number;
  heads: number;
  section: number[];
  layout: number;
  scale: number;
}

function parseMRotary(attrs: Attrs): MRotaryParams {
  const p = {
    interleaved: attrs.int('interleaved', 0) === 1,
    rotaryDim: attrs.int('rotary_embedding_dim', 0),
    heads: attrs.int('num_heads', 0),
    section: attrs.ints('mrope_section'),
    layout: attrs.int('mrope_layout', 0),
    scale: attrs.float('scale', 1),
  };
  if (p.section.length !== 3 || p.section.some((n) => n < 0))
    throw new RangeError(`MRotaryEmbedding mrope_section must be 3 non-negative sizes, not [${p.section.join(', ')}]`);
  if (p.layout !== 0 && p.layout !== 1) throw new RangeError(`MRotaryEmbedding mrope_layout must be 0 or 1, not ${p.layout}`);
  if (p.rotaryDim > 0 && p.heads <= 0) throw new RangeError('MRotaryEmbedding needs num_heads when rotary_embedding_dim is set');
  return p;
}

/** The stream (0 T, 1 H, 2 W) of each of the half rotary columns. */
function streamOfColumn(p: MRotaryParams, half: number): number[] {
  const out = new Array<number>(half).fill(0);
  if (p.layout === 0) {
    let col = 0;
    for (let s = 0; s < 3; s++) for (let i = 0; i < p.section[s] && col < half; i++) out[col++] = s;
  } else {
    for (let s = 1; s < 3; s++) for (let i = s; i < p.section[s] * 3 && i < half; i += 3) out[i] = s;
  }
  return out;
}

function mRotaryEmbedding(ctx: OpContext<MRotaryParams>): mx.Array {
  const p = ctx.params;
  const x = ctx.input(0);
  const four = x.ndim === 4;
  if (x.ndim !== 3 && !four) throw new RangeError(`${ctx.where}: input must be 3-D or 4-D, not ${x.ndim}-D`);
  const [B, S] = four ? [x.shape[0], x.shape[2]] : [x.shape[0], x.shape[1]];
  if (!four && p.heads <= 0) throw new RangeError(`${ctx.where}: a 3-D input needs num_heads`);
  const heads = four ? x : mx.reshape(x, [B, S, p.heads, x.shape[2] / p.heads]);
  const H = heads.shape[3];
  const rd = p.rotaryDim || H;
  // Sized before the per-column tables are built on the host.
  if (!Number.isSafeInteger(rd) || rd <= 0 || rd % 2 !== 0 || rd > H)
    throw new RangeError(`${ctx.where}: rotary_embedding_dim ${rd} is not a positive even size within the head size ${H}`);
  const half = rd / 2;
  const cosCache = ctx.input(2);
  const sinCache = ctx.input(3);
  if (cosCache.ndim !== 2 || cosCache.shape[1] !== half)
    throw new RangeError(`${ctx.where}: cos_cache of shape [${cosCache.shape.join(', ')}] does not have ${half} columns`);
  if (p.section[0] + p.section[1] + p.section[2] !== half)
    throw new RangeError(`${ctx.where}: mrope_section [${p.section.join(', ')}] does not add up to rotary_embedding_dim / 2 = ${half}`);
  const posShape = ctx.shape(1);
  if (posShape.length !== 3 || posShape[0] !== 3 || posShape[1] !== B || posShape[2] !== S)
    throw new RangeError(`${ctx.where}: position_ids of shape [${posShape.join(', ')}] is not [3, ${B}, ${S}]`);
  const rows = cosCache.shape[0];
  const pos = checkedIndices(ctx, ctx.input(1), rows, `position (a cos/sin cache of ${rows} rows)`, { negative: false });
  // [3, B, S, half] per stream, then each column from its stream: [B, S, half].
  const streams = streamOfColumn(p, half);
  const pick = mx.Array.fromTypedArray(
    Int32Array.from(streams, (s, col) => s * half + col),
    [half],
    'int32',
  );
  const combine = (cache: mx.Array) => {
    const perStream = mx.split(mx.take(cache, pos, 0), 3, 0).map((a) => mx.squeeze(a, 0));
    const c = mx.take(mx.concatenate(perStream, -1), pick, -1);
    return p.scale === 1 ? c : mx.multiply(c, p.scale);
  };
  // [B, S, half] tables broadcast over the head axis: 1 for BNSH, 2 for BSNH.
  const y = rotate(heads, {
    cos: combine(cosCache),
    sin: combine(sinCache),
    interleaved: p.interleaved,
    rotaryDim: rd,
    headAxis: four ? 1 : 2,
  });
  return four ? y : mx.reshape(y, x.shape);
}

export const msRotaryOps: OpEntry[] = [
  msOp('RotaryEmbedding', 1, {
    parse: parseRotary,
    check: (ctx) => (ctx.params.packedBatching ? 'RotaryEmbedding with is_packed_batching (ragged batches) is not supported' : undefined),
    run: (ctx) => [rotaryEmbedding(ctx)],
  }),
  msOp('MRotaryEmbedding', 1, {
    parse: parseMRotary,
    check: (ctx) =>
      ctx.attrs.int('is_packed_batching', 0) !== 0
        ? 'MRotaryEmbedding with is_packed_batching (ragged batches) is not supported'
        : undefined,
    run: (ctx) => [mRotaryEmbedding(ctx)],
  }),
];
