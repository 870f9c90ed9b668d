// com.microsoft GatherBlockQuantized: Gather on a blockwise-quantized table (the int4 embedding
// of ONNX Runtime GenAI's decoders), dequantized after the gather: y = (q - zero_point) · scale,
// with one scale (and zero point) per `block_size` elements along quantize_axis.
//
// Data is uint8 (2, 4 or 8 bits packed low bits first along the last axis, which must be the
// quantize axis, gathered along axis 0) or int4/uint4 (held one value per element, any axes).
// Zero points: uint8 ones packed like the data along the block axis (default 2^(bits-1));
// int4/uint4 ones of the data's type (default 0). The final block along quantize_axis may be
// partial. Only the gathered rows are unpacked and dequantized, never the whole table. An index
// outside [-s, s) gives zeros, as the spec says (unlike Gather).
import * as mx from '@mlx/core';
import { OnnxDataType } from '../../onnx/index.js';
import type { Attrs } from '../../registry/attrs.js';
import type { CheckContext, OpContext, OpEntry } from '../../registry/types.js';
import { msOp } from '../../registry/op.js';
import { normAxis } from '../helpers/util.js';

interface GbqParams {
  gatherAxis: number;
  quantizeAxis: number;
  block: number;
  bits: number;
}

const parseGbq = (attrs: Attrs): GbqParams => ({
  gatherAxis: attrs.int('gather_axis', 0),
  quantizeAxis: attrs.int('quantize_axis', 1),
  block: attrs.int('block_size', 128),
  bits: attrs.int('bits', 4),
});

const FOUR_BIT = new Set<number>([OnnxDataType.INT4, OnnxDataType.UINT4]);

function check(ctx: CheckContext<GbqParams>): string | undefined {
  const { block, bits } = ctx.params;
  if (block < 16 || (block & (block - 1)) !== 0) return `GatherBlockQuantized block_size ${block} is not a power of two >= 16`;
  const t = ctx.inputType(0);
  if (t === OnnxDataType.UINT8) {
    if (![2, 4, 8].includes(bits)) return `GatherBlockQuantized with uint8 data and bits=${bits} is not supported (2, 4 and 8 are)`;
  } else if (t !== undefined && FOUR_BIT.has(t)) {
    if (bits !== 4) return `GatherBlockQuantized with int4/uint4 data needs bits=4, not ${bits}`;
  } else if (t !== undefined) {
    return `GatherBlockQuantized data of element type ${t} is not supported (uint8, int4 and uint4 are)`;
  }
  return undefined;
}

/** Splits each byte of `q` along its last axis into 8/bits fields, low bits first. */
function unpackLast(q: mx.Array, bits: number): mx.Array {
  if (bits === 8) return q;
  const mask = (1 << bits) - 1;
  const fields = Array.from({ length: 8 / bits }, (_, j) => mx.bitwiseAnd(mx.rightShift(q, j * bits), mask));
  return mx.reshape(mx.stack(fields, -1), [...q.shape.slice(0, -1), q.shape[q.ndim - 1] * (8 / bits)]);
}

/** `a` with its first `n` positions along `axis` (a shorter view of a longer axis). */
function head(a: mx.Array, axis: number, n: number): mx.Array {
  if (a.shape[axis] === n) return a;
  const stop = [...a.shape];
  stop[axis] = n;
  return mx.slice(
    a,
    a.shape.map(() => 0),
    stop,
    a.shape.map(() => 1),
  );
}

function run(ctx: OpContext<GbqParams>): mx.Array[] {
  const p = ctx.params;
  const dims = ctx.shape(0);
  const rank = dims.length;
  const ga = normAxis(p.gatherAxis, rank, 'GatherBlockQuantized gather_axis');
  const qa = normAxis(p.quantizeAxis, rank, 'GatherBlockQuantized quantize_axis');
  const packed = ctx.elemType(0) === OnnxDataType.UINT8;
  const components = packed ? 8 / p.bits : 1;
  if (packed && (ga !== 0 || qa !== rank - 1))
    throw new RangeError(
      `${ctx.where}: uint8 data needs gather_axis 0 and quantize_axis ${rank - 1} (the last), not ${p.gatherAxis} and ${p.quantizeAxis}`,
    );
  const qLen = dims[qa] * components;
  const blocks = Math.ceil(qLen / p.block);
  const scales = ctx.input(2);
  const want = dims.map((d, i) => (i === qa ? blocks : d));
  if (scales.ndim !== rank || scales.shape.some((d, i) => d !== want[i]))
    throw new RangeError(`${ctx.where}: scales of shape [${scales.shape.join(', ')}] do not match [${want.join(', ')}]`);
  let zp = ctx.optional(3);
  if (zp) {
    const zpWant = want.map((d, i) => (i === qa ? Math.ceil(d / components) : d));
    if (zp.ndim !== rank || zp.shape.some((d, i) => d !== zpWant[i]))
      throw new RangeError(`${ctx.where}: zero_points of shape [${zp.shape.join(', ')}] do not match [${zpWant.join(', ')}]`);
  }

  const idxShape = ctx.shape(1);
  // The spec's rule: an index outside [-s, s) yields zeros (the gather itself reads a clamped row).
  const raw = mx.astype(mx.flatten(ctx.input(1)), 'int64');
  const inRange = mx.logicalAnd(mx.greaterEqual(raw, -dims[ga]), mx.less(raw, dims[ga]));
  const idx = mx.astype(mx.clip(mx.where(mx.less(raw, 0), mx.add(raw, dims[ga]), raw), 0, Math.max(dims[ga] - 1, 0)), 'int32');
  let q = mx.take(ctx.input(0), idx, ga);
  if (packed) q = unpackLast(q, p.bits);
  // Scales and zero points along the gathered axis: the same rows, or (gathering along the
  // quantized axis) the rows of the blocks the indices fall in.
  const sIdx = ga === qa ? mx.floorDivide(idx, p.block) : idx;
  const s = mx.take(scales, sIdx, ga);
  if (zp) {
    zp = mx.take(zp, sIdx, ga);
    if (packed) zp = head(unpackLast(zp, p.bits), qa, blocks);
  }
  // Spread the per-block values over their block's elements (cut at the partial last block).
  const spread = (a: mx.Array) => (ga === qa ? a : head(mx.repeat(a, p.block, qa), qa, qLen));
  const qf = mx.astype(q, 'float32');
  const centred = zp ? mx.subtract(qf, spread(mx.astype(zp, 'float32'))) : packed ? mx.subtract(qf, 2 ** (p.bits - 1)) : qf;
  let y = mx.multiply(centred, spread(mx.astype(s, 'float32')));
  // Zero the slices of out-of-range indices: a mask along the gathered axis.
  const maskShape = y.shape.map((d, i) => (i === ga ? d : 1));
  y = mx.astype(mx.where(mx.reshape(inRange, maskShape), y, 0), scales.dtype);
  const outDims = [...dims.slice(0, ga), ...idxShape, ...dims.slice(ga + 1)];
  if (qa !== ga) outDims[qa < ga ? qa : qa + idxShape.length - 1] = qLen;
  return [mx.reshape(y, outDims)];
}

export const gatherBlockQuantizedOps: OpEntry[] = [
  msOp('GatherBlockQuantized', 1, {
    parse: parseGbq,
    check,
    run,
    note: 'uint8 (2/4/8 bits) and int4/uint4 data; float8/float4 data unsupported',
  }),
];
