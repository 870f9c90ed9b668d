// Layout ops: Pad, CenterCropPad, DepthToSpace, SpaceToDepth, Trilu.
import * as mx from '@mlx/core';
import type { Attrs } from '../registry/attrs.js';
import type { OpContext, OpEntry } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { RefusedNodeError } from '../errors.js';
import { checkResultShape } from './helpers/bounds.js';
import { hostNumbers, intsIfGiven, normAxes, oneNumber } from './helpers/util.js';

// ---------------------------------------------------------------------------------------------
// Pad. Pads come as [begin per axis..., end per axis...]: the attribute `paddings` (opset 1),
// `pads` (2-10), or input 1 (11+), over every axis or over input 3's axes (18+).
// Negative pads crop; cropping is done first, then padding.

const padModes = new Set(['constant', 'reflect', 'edge', 'wrap']);

interface PadParams {
  mode: string;
  /** The pads attribute (`paddings` in opset 1) before opset 11; input 1 after. */
  pads?: number[];
  /** Constant mode's value attribute, before opset 11 (input 2 after). */
  value: number;
}

function parsePad(attrs: Attrs, opset: number): PadParams {
  const mode = attrs.string('mode', 'constant');
  if (!padModes.has(mode) || (mode === 'wrap' && opset < 19)) throw new RangeError(`Pad mode '${mode}' is not defined at opset ${opset}`);
  const pads = opset < 2 ? attrs.ints('paddings') : opset < 11 ? attrs.ints('pads') : undefined;
  return { mode, pads, value: opset < 11 ? attrs.float('value', 0) : 0 };
}

function padAmounts(ctx: OpContext<PadParams>, rank: number): { begin: number[]; end: number[] } {
  let pads: number[];
  let axes = Array.from({ length: rank }, (_, i) => i);
  if (ctx.params.pads) pads = ctx.params.pads;
  else {
    pads = hostNumbers(ctx.host(1));
    if (ctx.opset >= 18 && ctx.has(3)) axes = normAxes(hostNumbers(ctx.host(3)), rank);
  }
  const k = axes.length;
  if (pads.length !== 2 * k) throw new RangeError(`Pad: ${pads.length} pads for ${k} axes`);
  const begin = new Array<number>(rank).fill(0);
  const end = new Array<number>(rank).fill(0);
  axes.forEach((a, i) => {
    begin[a] = pads[i];
    end[a] = pads[k + i];
  });
  return { begin, end };
}

/** The value constant mode fills with, in x's dtype. */
function padValue(ctx: OpContext<PadParams>, x: mx.Array): mx.Array {
  const given = ctx.opset >= 11 ? ctx.optional(2) : undefined;
  if (!given) return mx.scalar(ctx.params.value, x.dtype);
  const v = mx.reshape(given, []);
  return v.dtype === x.dtype ? v : mx.astype(v, x.dtype);
}

/**
 * Source positions along an axis of size n padded by b in front and e behind, computed on the
 * device (a host table would loop over every output position): wrap repeats the axis with period
 * n; reflect (numpy's) mirrors about the edge elements, which are not repeated, period 2(n - 1).
 */
function padSources(mode: string, b: number, e: number, n: number): mx.Array {
  // Positions -b .. n + e - 1 fit int32 once the result's shape has been checked; MLX's integer
  // remainder takes the divisor's sign (Python's), so it lands in [0, period).
  const j = mx.arange(-b, n + e, 1, 'int32');
  if (mode === 'wrap') return mx.remainder(j, n);
  if (n === 1) return mx.zerosLike(j);
  const p = 2 * (n - 1);
  const m = mx.remainder(j, p);
  return mx.where(mx.less(m, n), m, mx.subtract(p, m));
}

/** reflect/wrap, axis by axis: slices around the axis where the pads fit in it, else a gather of positions. */
function padByGather(x: mx.Array, mode: string, begin: number[], end: number[]): mx.Array {
  let y = x;
  begin.forEach((b, axis) => {
    const e = end[axis];
    if (!b && !e) return;
    const n = y.shape[axis];
    if (n === 0) throw new RangeError(`Pad: mode '${mode}' cannot pad an empty axis ${axis}`);
    y = padBySlices(y, mode, b, e, axis) ?? mx.take(y, padSources(mode, b, e, n), axis);
  });
  return y;
}

/**
 * One axis padded by b in front and e behind, where the pads fit in it (reflect: at most n - 1
 * each, wrap: at most n): the axis between a slice of it in front and one behind (reversed for
 * reflect), one concatenation. A gather of computed positions would check them on every run.
 */
function padBySlices(x: mx.Array, mode: string, b: number, e: number, axis: number): mx.Array | undefined {
  const n = x.shape[axis];
  const reflect = mode === 'reflect';
  if (reflect ? b > n - 1 || e > n - 1 : b > n || e > n) return undefined;
  const part = (start: number, stop: number, step: number) =>
    mx.slice(
      x,
      x.shape.map((_, d) => (d === axis ? start : 0)),
      // MLX reads a negative stop as counting from the end: down through index 0 is -(n + 1).
      x.shape.map((s, d) => (d === axis ? (stop < 0 ? -(n + 1) : stop) : s)),
      x.shape.map((_, d) => (d === axis ? step : 1)),
    );
  const parts: mx.Array[] = [];
  // reflect: positions b .. 1 in front, n - 2 .. n - 1 - e behind; wrap: n - b .. n - 1, then 0 .. e - 1.
  if (b) parts.push(reflect ? part(b, 0, -1) : part(n - b, n, 1));
  parts.push(x);
  if (e) parts.push(reflect ? part(n - 2, n - 2 - e, -1) : part(0, e, 1));
  return mx.concatenate(parts, axis);
}

function padRun(ctx: OpContext<PadParams>): mx.Array {
  let x = ctx.input(0);
  const dims = x.shape;
  const { begin, end } = padAmounts(ctx, dims.length);
  // The result's shape, checked before anything is built: pads are integers (an int64 pad past
  // 2^53 is not exact here, and far past any dimension anyway), no axis ends below size 0
  // (onnxruntime refuses those too), none passes MLX's dimensions or the memory budget.
  dims.forEach((d, a) => {
    const [b, e] = [begin[a], end[a]];
    if (!Number.isSafeInteger(b) || !Number.isSafeInteger(e))
      throw new RangeError(`Pad: pads ${b} and ${e} of axis ${a} are not integers in ±2^53`);
    if (d + b + e < 0) throw new RangeError(`Pad: pads ${b} and ${e} would give axis ${a} of size ${d} the negative size ${d + b + e}`);
  });
  checkResultShape(
    ctx,
    dims.map((d, a) => d + begin[a] + end[a]),
    x.itemsize,
    'Pad',
  );
  const lo = begin.map((b) => Math.max(0, b));
  const hi = end.map((e) => Math.max(0, e));
  // Negative pads remove elements from the padded axis. Where the removal stays within x's own
  // elements it is done first (less to pad); where it reaches into the other side's padding (an
  // axis shorter than its negative pads: [0] padded by [2, -2]), the axis is padded first and the
  // result cut from it.
  const cropFirst = dims.every((d, a) => Math.max(0, -begin[a]) + Math.max(0, -end[a]) <= d);
  if (cropFirst && (begin.some((v) => v < 0) || end.some((v) => v < 0))) {
    const start = begin.map((b) => Math.max(0, -b));
    const stop = end.map((e, i) => dims[i] - Math.max(0, -e));
    x = mx.slice(
      x,
      start,
      stop,
      dims.map(() => 1),
    );
  }
  let y = x;
  if (lo.some((v) => v) || hi.some((v) => v)) {
    const mode = ctx.params.mode;
    const axes = dims.map((_, i) => i);
    if (mode === 'constant') {
      const value = padValue(ctx, x);
      // MLX's Pad has no VJP for its value (it returns x's alone, and crashes when both are
      // asked): while differentiating, a value given as an input fills the padding by a select.
      if (mx.differentiating() && ctx.opset >= 11 && ctx.optional(2)) {
        const inside = mx.pad(mx.ones(x.shape, 'bool'), axes, lo, hi, mx.scalar(false, 'bool'), 'constant');
        y = mx.where(inside, mx.pad(x, axes, lo, hi, mx.scalar(0, x.dtype), 'constant'), value);
      } else y = mx.pad(x, axes, lo, hi, value, 'constant');
    } else if (mode === 'edge') y = mx.pad(x, axes, lo, hi, mx.scalar(0, x.dtype), 'edge');
    else y = padByGather(x, mode, lo, hi);
  }
  if (cropFirst) return y;
  const start = begin.map((b) => Math.max(0, -b));
  return mx.slice(
    y,
    start,
    dims.map((d, a) => start[a] + d + begin[a] + end[a]),
    dims.map(() => 1),
  );
}

const padEntry = onnxOp('Pad', 1, {
  note: 'negative pads crop before positive ones pad; reflect and wrap may pad past the axis length',
  parse: parsePad,
  run: (ctx) => [padRun(ctx)],
});

// ---------------------------------------------------------------------------------------------
// CenterCropPad: each listed axis is cropped or zero-padded to its target, centred (the odd
// unit goes to the end in both directions, as the reference does).

const centerCropPadEntry = onnxOp('CenterCropPad', 18, {
  parse: (attrs) => intsIfGiven(attrs, 'axes'),
  run: (ctx) => {
    let x = ctx.input(0);
    const dims = x.shape;
    const target = hostNumbers(ctx.host(1));
    const axes = ctx.params ? normAxes(ctx.params, dims.length) : dims.map((_, i) => i);
    if (target.length !== axes.length) throw new RangeError(`CenterCropPad: ${target.length} sizes for ${axes.length} axes`);
    const start = dims.map(() => 0);
    const stop = [...dims];
    const lo = dims.map(() => 0);
    const hi = dims.map(() => 0);
    axes.forEach((a, i) => {
      const t = target[i];
      const diff = Math.abs(t - dims[a]);
      if (t < dims[a]) [start[a], stop[a]] = [Math.floor(diff / 2), Math.floor(diff / 2) + t];
      else if (t > dims[a]) [lo[a], hi[a]] = [Math.floor(diff / 2), diff - Math.floor(diff / 2)];
    });
    x = mx.slice(
      x,
      start,
      stop,
      dims.map(() => 1),
    );
    if (lo.some((v) => v) || hi.some((v) => v))
      x = mx.pad(
        x,
        dims.map((_, i) => i),
        lo,
        hi,
        mx.scalar(0, x.dtype),
        'constant',
      );
    return [x];
  },
});

// ---------------------------------------------------------------------------------------------
// DepthToSpace / SpaceToDepth: a reshape, a transpose and a reshape.

interface DepthToSpaceParams {
  blocksize: number;
  /** mode CRD (opset 11+): column, row, depth; else DCR. */
  crd: boolean;
}

/**
 * blocksize must be positive (and, squared, a channel count): onnxruntime's CPU kernels divide by
 * it (and by its square, which wraps to 0 from 2^32) unchecked, so the node is refused outright,
 * before anything else about it decides whether it would go to the fallback.
 */
function parseBlocksize(attrs: Attrs, op: string): number {
  const b = attrs.int('blocksize');
  if (!(b >= 1 && b < 2 ** 31)) throw new RefusedNodeError(`${op} blocksize ${b} must be a positive int32`);
  return b;
}

function parseDepthToSpace(attrs: Attrs, opset: number): DepthToSpaceParams {
  const blocksize = parseBlocksize(attrs, 'DepthToSpace');
  const mode = opset >= 11 ? attrs.string('mode', 'DCR') : 'DCR';
  if (mode !== 'DCR' && mode !== 'CRD') throw new RangeError(`DepthToSpace mode '${mode}' is not DCR or CRD`);
  return { blocksize, crd: mode === 'CRD' };
}

function depthToSpace(ctx: OpContext<DepthToSpaceParams>): mx.Array {
  const x = ctx.input(0);
  const [n, c, h, w] = x.shape;
  const { blocksize: b, crd } = ctx.params;
  if (x.ndim !== 4 || c % (b * b) !== 0) throw new RangeError(`DepthToSpace: input [${x.shape.join(', ')}] does not fit blocksize ${b}`);
  const cc = c / (b * b);
  const t = crd
    ? mx.transpose(mx.reshape(x, [n, cc, b, b, h, w]), [0, 1, 4, 2, 5, 3])
    : mx.transpose(mx.reshape(x, [n, b, b, cc, h, w]), [0, 3, 4, 1, 5, 2]);
  return mx.reshape(t, [n, cc, h * b, w * b]);
}

function spaceToDepth(ctx: OpContext<number>): mx.Array {
  const x = ctx.input(0);
  const [n, c, h, w] = x.shape;
  const b = ctx.params;
  if (x.ndim !== 4 || h % b !== 0 || w % b !== 0)
    throw new RangeError(`SpaceToDepth: input [${x.shape.join(', ')}] does not fit blocksize ${b}`);
  const t = mx.transpose(mx.reshape(x, [n, c, h / b, b, w / b, b]), [0, 3, 5, 1, 2, 4]);
  return mx.reshape(t, [n, c * b * b, h / b, w / b]);
}

// ---------------------------------------------------------------------------------------------
// Trilu: keeps the upper (j - i >= k) or lower (j - i <= k) triangle of the last two axes.

function trilu(ctx: OpContext<boolean>): mx.Array {
  const x = ctx.input(0);
  if (x.ndim < 2) throw new RangeError(`Trilu: the input must have rank 2 or more, got rank ${x.ndim}`);
  const k = ctx.has(1) ? oneNumber(ctx, 1, 'Trilu: k') : 0;
  const [rows, cols] = x.shape.slice(-2);
  const diff = mx.subtract(mx.reshape(mx.arange(0, cols, 1, 'int32'), [1, cols]), mx.reshape(mx.arange(0, rows, 1, 'int32'), [rows, 1]));
  // k can be far outside int32 (INT64 sentinels): clamp it to a value with the same effect.
  const kk = Math.max(-rows - 1, Math.min(cols + 1, k));
  const keep = ctx.params ? mx.greaterEqual(diff, kk) : mx.lessEqual(diff, kk);
  return mx.where(keep, x, mx.zerosLike(x));
}

export const layoutOps: OpEntry[] = [
  padEntry,
  centerCropPadEntry,
  onnxOp('DepthToSpace', 1, { parse: parseDepthToSpace, run: (ctx) => [depthToSpace(ctx)] }),
  onnxOp('SpaceToDepth', 1, { parse: (attrs) => parseBlocksize(attrs, 'SpaceToDepth'), run: (ctx) => [spaceToDepth(ctx)] }),
  // upper: keep the upper triangle (the default), else the lower.
  onnxOp('Trilu', 14, { parse: (attrs) => attrs.int('upper', 1) !== 0, run: (ctx) => [trilu(ctx)] }),
];
