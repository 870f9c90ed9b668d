// com.microsoft GatherBlockQuantized: Gather on a blockwise-quantized table (the int4 embedding
// of ONNX Runtime GenAI's decoders), dequantized after the gather: y = (q - zero_point) · scale,
// with one scale (and zero point) per `block_size` elements along quantize_axis.
//
// Data is uint8 (2, 4 or 8 bits packed low bits first along the last axis, which must be the
// quantize axis, gathered along axis 0), int4/uint4 (held one value per element, any axes), or
// float8/float4 codes (symmetric: no zero points; block_size 0 is one block per row).
// Zero points: uint8 ones packed like the data along the block axis (default 2^(bits-1));
// int4/uint4 ones of the data's type (default 0). The final block along quantize_axis may be
// partial. Only the gathered rows are unpacked and dequantized, never the whole table. An index
// outside [-s, s) gives zeros, as the spec says (unlike Gather).
import * as mx from '@mlx/core';
import { OnnxDataType } from '../../onnx/index.js';
import type { Attrs } from '../../registry/attrs.js';
import type { CheckContext, OpContext, OpEntry } from '../../registry/types.js';
import { msOp, invalidNode } from '../../registry/op.js';
import { decodeMiniFloatArray, isMiniFloat } from '../helpers/minifloat.js';
import { quantInput, unpackFields } from '../helpers/quant-math.js';
import { normAxis } from '../helpers/util.js';

interface GbqParams {
  gatherAxis: number;
  quantizeAxis: number;
  block: number;
  bits: number;
}

// A bits or block_size the contrib spec rules out makes the node invalid: refused everywhere, never
// handed to onnxruntime (its kernel divides by block_size unchecked: SIGFPE on 0).
function parseGbq(attrs: Attrs): GbqParams {
  const block = attrs.int('block_size', 128);
  const bits = attrs.int('bits', 4);
  if (![2, 4, 8].includes(bits)) throw invalidNode(`GatherBlockQuantized bits ${bits} is not 2, 4 or 8`);
  if (block !== 0 && !(block >= 16 && (block & (block - 1)) === 0))
    throw invalidNode(`GatherBlockQuantized block_size ${block} is not a power of two >= 16`);
  return { gatherAxis: attrs.int('gather_axis', 0), quantizeAxis: attrs.int('quantize_axis', 1), block, bits };
}

const FOUR_BIT = new Set<number>([OnnxDataType.INT4, OnnxDataType.UINT4]);

function check(ctx: CheckContext<GbqParams>): string | undefined {
  const { block, bits } = ctx.params;
  const t = ctx.inputType(0);
  const fp = t !== undefined && isMiniFloat(t);
  // block_size 0 (one block per row) is this provider's reading for float8/float4 codes only.
  if (block === 0 && !fp)
    throw invalidNode(`GatherBlockQuantized block_size 0 is not a power of two >= 16 (0 is for float8/float4 data only)`);
  if (fp) return ctx.node.inputs[3] ? 'GatherBlockQuantized with float8/float4 data takes no zero_points' : undefined;
  if (t === OnnxDataType.UINT8) {
    if (![2, 4, 8].includes(bits)) return `GatherBlockQuantized with uint8 data and bits=${bits} is not supported (2, 4 and 8 are)`;
  } else if (t !== undefined && FOUR_BIT.has(t)) {
    if (bits !== 4) return `GatherBlockQuantized with int4/uint4 data needs bits=4, not ${bits}`;
  } else if (t !== undefined) {
    return `GatherBlockQuantized data of element type ${t} is not supported (uint8, int4, uint4, float8 and float4 are)`;
  }
  return undefined;
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

/** The spec's rule: an index outside [-s, s) yields zeros. Positions to gather (clamped) and which are in range. */
function gatherPositions(ctx: OpContext<GbqParams>, dim: number): [mx.Array, mx.Array] {
  const raw = mx.astype(mx.flatten(ctx.input(1)), 'int64');
  const inRange = mx.logicalAnd(mx.greaterEqual(raw, -dim), mx.less(raw, dim));
  const idx = mx.astype(mx.clip(mx.where(mx.less(raw, 0), mx.add(raw, dim), raw), 0, Math.max(dim - 1, 0)), 'int32');
  return [idx, inRange];
}

/** y with the slices of out-of-range indices (along the gathered axis `ga`) zeroed, as `dtype`. */
function zeroOutOfRange(y: mx.Array, inRange: mx.Array, ga: number, dtype: mx.Dtype): mx.Array {
  const maskShape = y.shape.map((d, i) => (i === ga ? d : 1));
  return mx.astype(mx.where(mx.reshape(inRange, maskShape), y, 0), dtype);
}

function outputShape(dims: number[], idxShape: number[], ga: number): number[] {
  return [...dims.slice(0, ga), ...idxShape, ...dims.slice(ga + 1)];
}

/**
 * Float8/float4 data: y = value(code) · scale of its block, no zero point; block_size 0 is one
 * block over the whole quantize axis, and a scales dimension of 1 off that axis broadcasts.
 */
function runMiniFloat(ctx: OpContext<GbqParams>, dims: number[], ga: number, qa: number): mx.Array[] {
  const type = ctx.elemType(0);
  const block = ctx.params.block || Math.max(dims[qa], 1);
  const blocks = Math.ceil(dims[qa] / block);
  const scales = ctx.input(2);
  if (scales.ndim !== dims.length || scales.shape.some((d, i) => (i === qa ? d !== blocks : d !== dims[i] && d !== 1)))
    throw new RangeError(
      `${ctx.where}: scales of shape [${scales.shape.join(', ')}] do not fit data [${dims.join(', ')}] in blocks of ${block}`,
    );
  const [idx, inRange] = gatherPositions(ctx, dims[ga]);
  const q = decodeMiniFloatArray(mx.take(quantInput(ctx, 0), idx, ga), type);
  let s = mx.astype(scales, 'float32');
  if (ga === qa) s = mx.take(s, mx.floorDivide(idx, block), ga);
  else {
    if (s.shape[ga] !== 1) s = mx.take(s, idx, ga);
    const wide = mx.repeat(s, block, qa);
    s =
      wide.shape[qa] === dims[qa]
        ? wide
        : mx.slice(
            wide,
            wide.shape.map(() => 0),
            wide.shape.map((d, i) => (i === qa ? dims[qa] : d)),
            wide.shape.map(() => 1),
          );
  }
  const y = zeroOutOfRange(mx.multiply(q, s), inRange, ga, scales.dtype);
  return [mx.reshape(y, outputShape(dims, ctx.shape(1), ga))];
}

function run(ctx: OpContext<GbqParams>): mx.Array[] {
  const p = ctx.params;
  const dims = ctx.shape(0);
  const rank = dims.length;
  const ga = normAxis(p.gatherAxis, rank, 'GatherBlockQuantized gather_axis');
  const qa = normAxis(p.quantizeAxis, rank, 'GatherBlockQuantized quantize_axis');
  if (isMiniFloat(ctx.elemType(0))) return runMiniFloat(ctx, dims, ga, qa);
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
  const [idx, inRange] = gatherPositions(ctx, dims[ga]);
  let q = mx.take(ctx.input(0), idx, ga);
  if (packed) q = unpackFields(q, p.bits);
  // Scales and zero points along the gathered axis: the same rows, or (gathering along the
  // quantized axis) the rows of the blocks the indices fall in.
  const sIdx = ga === qa ? mx.floorDivide(idx, p.block) : idx;
  const s = mx.take(scales, sIdx, ga);
  if (zp) {
    zp = mx.take(zp, sIdx, ga);
    if (packed) zp = head(unpackFields(zp, p.bits), qa, blocks);
  }
  // Spread the per-block values over their block's elements (cut at the partial last block).
  const spread = (a: mx.Array) => (ga === qa ? a : head(mx.repeat(a, p.block, qa), qa, qLen));
  const qf = mx.astype(q, 'float32');
  const centred = zp ? mx.subtract(qf, spread(mx.astype(zp, 'float32'))) : packed ? mx.subtract(qf, 2 ** (p.bits - 1)) : qf;
  const y = zeroOutOfRange(mx.multiply(centred, spread(mx.astype(s, 'float32'))), inRange, ga, scales.dtype);
  const outDims = outputShape(dims, idxShape, ga);
  if (qa !== ga) outDims[qa < ga ? qa : qa + idxShape.length - 1] = qLen;
  return [mx.reshape(y, outDims)];
}

export const gatherBlockQuantizedOps: OpEntry[] = [
  msOp('GatherBlockQuantized', 1, {
    parse: parseGbq,
    check,
    run,
    note: 'uint8 (2/4/8 bits), int4/uint4, float8 and float4 data',
  }),
];
