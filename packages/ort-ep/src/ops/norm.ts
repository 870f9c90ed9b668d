// Normalisations: BatchNormalization, LayerNormalization, InstanceNormalization,
// GroupNormalization, LpNormalization, MeanVarianceNormalization, LRN.
// Statistics are computed in float32 at least (ONNX's stash_type 1) and results cast back to the
// input's type, so float16 models do not lose the variance to rounding.
import * as mx from '@mlx/core';
import type { Attrs } from '../registry/attrs.js';
import type { OpContext, OpEntry, OpResult } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { layerNorm, layerNormWithStats } from '@mlx/kernels';
import { normAxis } from './helpers/util.js';

/** float16/bfloat16 widen to float32 for statistics (ONNX's stash_type 1); float32/float64 stay. */
const stash = (x: mx.Array): mx.Array => (x.dtype === 'float16' || x.dtype === 'bfloat16' ? mx.astype(x, 'float32') : x);

/** A per-channel [C] parameter shaped to broadcast along axis 1 of a rank-`rank` input. */
function perChannel(p: mx.Array, rank: number): mx.Array {
  if (p.ndim !== 1 || rank < 2) return p;
  return mx.reshape(p, [p.size, ...new Array(rank - 2).fill(1)]);
}

/** Mean and biased variance over `axes` (kept), in the stash type. */
function moments(x: mx.Array, axes: number[]): [mx.Array, mx.Array] {
  const mean = mx.mean(x, axes, { keepdims: true });
  const variance = mx.mean(mx.square(mx.subtract(x, mean)), axes, { keepdims: true });
  return [mean, variance];
}

// ---------------------------------------------------------------------------------------------
// BatchNormalization: inference with the given statistics; training_mode (opset 14+) uses the
// batch's statistics and also returns the updated running mean and variance.

const epsilonOf = (attrs: Attrs): number => attrs.float('epsilon', 1e-5);
/** stash_type 1: statistics in float32 (at least). */
const stashOf = (attrs: Attrs): boolean => attrs.int('stash_type', 1) === 1;

interface BatchNormParams {
  epsilon: number;
  momentum: number;
  /** Opset 14+: normalise with the batch's statistics and return the running ones. */
  training: boolean;
}

const parseBatchNorm = (attrs: Attrs, opset: number): BatchNormParams => ({
  epsilon: epsilonOf(attrs),
  momentum: attrs.float('momentum', 0.9),
  training: opset >= 14 && attrs.int('training_mode', 0) !== 0,
});

function batchNorm(ctx: OpContext<BatchNormParams>): OpResult[] {
  const x = ctx.input(0);
  const r = x.ndim;
  const eps = ctx.params.epsilon;
  // Before opset 9, spatial=0 gives per-activation parameters of shape x.shape[1:]: those broadcast as they are.
  const xs = stash(x);
  if (!ctx.params.training) {
    // Inference is one affine map per channel, x * a + c with a = scale / sqrt(var + eps) and
    // c = bias - mean * a, as onnxruntime's kernel computes it; a and c are made once per session
    // when the statistics are constants.
    const [a, c] = ctx.prepared([1, 2, 3, 4], `affine ${r}`, () => {
      const [scale, bias, mean, variance] = [1, 2, 3, 4].map((i) => stash(perChannel(ctx.input(i), r)));
      const k = mx.divide(scale, mx.sqrt(mx.add(variance, eps)));
      return [k, mx.subtract(bias, mx.multiply(mean, k))];
    });
    return [mx.astype(mx.add(mx.multiply(xs, a), c), x.dtype)];
  }
  const [scale, bias, mean, variance] = [1, 2, 3, 4].map((i) => stash(perChannel(ctx.input(i), r)));
  const normalise = (m: mx.Array, v: mx.Array) =>
    mx.astype(mx.add(mx.multiply(mx.divide(mx.subtract(xs, m), mx.sqrt(mx.add(v, eps))), scale), bias), x.dtype);
  const axes = Array.from({ length: r }, (_, i) => i).filter((i) => i !== 1);
  const [bm, bv] = moments(xs, axes);
  const momentum = ctx.params.momentum;
  const running = (old: mx.Array, batch: mx.Array) =>
    mx.astype(mx.add(mx.multiply(mx.reshape(old, [-1]), momentum), mx.multiply(mx.reshape(batch, [-1]), 1 - momentum)), ctx.input(3).dtype);
  return [normalise(bm, bv), running(mean, bm), running(variance, bv)];
}

const batchNormEntry = onnxOp('BatchNormalization', 1, {
  note: 'training outputs from opset 14 (training_mode); the saved statistics outputs of opsets 1-13 are refused',
  parse: parseBatchNorm,
  check: (ctx) => {
    const outs = ctx.node.outputs.filter((o) => o).length;
    if (ctx.opset < 14 && outs > 1)
      return 'BatchNormalization training outputs (mean, var, saved_mean, saved_var) before opset 14 are not supported';
    return undefined;
  },
  run: batchNorm,
});

// ---------------------------------------------------------------------------------------------
// LayerNormalization: normalise over axes [axis, rank); optional Mean and InvStdDev outputs have
// the reduced axes kept as size 1.

/** The attributes of LayerNormalization, and of the RMS norms, which share them and their defaults. */
export interface LayerNormParams {
  axis: number;
  epsilon: number;
  stashFloat: boolean;
  /** stash_type itself: the element type of the Mean / InvStdDev outputs. */
  stashType: number;
}

export const parseLayerNorm = (attrs: Attrs): LayerNormParams => ({
  axis: attrs.int('axis', -1),
  epsilon: epsilonOf(attrs),
  stashFloat: stashOf(attrs),
  stashType: attrs.int('stash_type', 1),
});

/** ONNX element types stash_type may name (U in the schema: float, double, bfloat16) and their MLX dtypes. */
const STASH_TYPES: Record<number, mx.Dtype> = { 1: 'float32', 11: 'float64', 16: 'bfloat16' };

/**
 * Mean / InvStdDev in stash_type's element type, as the spec and onnxruntime have them (a float64
 * X with the default stash_type 1 gives float32 statistics).
 */
export function statsIn(p: LayerNormParams, a: mx.Array | undefined, op: string): mx.Array | undefined {
  if (!a) return a;
  const t = STASH_TYPES[p.stashType];
  if (!t)
    throw new RangeError(`${op} stash_type ${p.stashType} is not a float element type (1, 11 or 16) for its Mean and InvStdDev outputs`);
  return a.dtype === t ? a : mx.astype(a, t);
}

/**
 * LayerNormalization, on @mlx/kernels' layer norm (its fused kernel over the last axis; the
 * statistics spelled out, in float32 under stash_type 1, when Mean / InvStdDev are wanted); also
 * onnxruntime's opset 1-16 registration in the ONNX domain (com.microsoft/norm.ts).
 */
export function layerNormalization(ctx: OpContext<LayerNormParams>): OpResult[] {
  const x = ctx.input(0);
  const { axis, epsilon, stashFloat } = ctx.params;
  const options = { axis: normAxis(axis, x.ndim), eps: epsilon, upcast: stashFloat };
  if (!ctx.wants(1) && !ctx.wants(2)) return [layerNorm(x, ctx.input(1), ctx.optional(2), options)];
  const out = layerNormWithStats(x, ctx.input(1), ctx.optional(2), options);
  return [out.y, statsIn(ctx.params, out.mean, 'LayerNormalization'), statsIn(ctx.params, out.invStd, 'LayerNormalization')];
}

const layerNormEntry = onnxOp('LayerNormalization', 17, {
  parse: parseLayerNorm,
  run: layerNormalization,
});

// ---------------------------------------------------------------------------------------------
// InstanceNormalization and GroupNormalization: statistics per (sample, channel group) over the
// spatial axes.

function instanceNorm(ctx: OpContext<number>): mx.Array {
  const x = ctx.input(0);
  if (x.ndim < 3)
    throw new RangeError(`InstanceNormalization: the input must have rank 3 or more ([N, C, spatial...]), got rank ${x.ndim}`);
  for (const [i, what] of [
    [1, 'scale'],
    [2, 'B'],
  ] as const) {
    const p = ctx.input(i);
    if (p.ndim !== 1 || p.shape[0] !== x.shape[1])
      throw new RangeError(`InstanceNormalization: ${what} must have shape [C] = [${x.shape[1]}], got [${p.shape.join(', ')}]`);
  }
  const xs = stash(x);
  const axes = Array.from({ length: x.ndim - 2 }, (_, i) => i + 2);
  const [mean, variance] = moments(xs, axes);
  const y = mx.divide(mx.subtract(xs, mean), mx.sqrt(mx.add(variance, ctx.params)));
  return mx.astype(mx.add(mx.multiply(y, perChannel(ctx.input(1), x.ndim)), perChannel(ctx.input(2), x.ndim)), x.dtype);
}

interface GroupNormParams {
  groups: number;
  epsilon: number;
  stashFloat: boolean;
}

const parseGroupNorm = (attrs: Attrs): GroupNormParams => ({
  groups: attrs.int('num_groups'),
  epsilon: epsilonOf(attrs),
  stashFloat: stashOf(attrs),
});

function groupNorm(ctx: OpContext<GroupNormParams>): mx.Array {
  const x = ctx.input(0);
  const [n, c] = x.shape;
  const { groups, epsilon } = ctx.params;
  const xs = ctx.params.stashFloat ? stash(x) : x;
  const grouped = mx.reshape(xs, [n, groups, -1]);
  const [mean, variance] = moments(grouped, [2]);
  const normed = mx.reshape(mx.divide(mx.subtract(grouped, mean), mx.sqrt(mx.add(variance, epsilon))), x.shape);
  // Opset 18 gives scale and bias per group; opset 21 per channel.
  const param = (i: number) => {
    const p = ctx.input(i);
    const perC = p.size === c ? p : mx.repeat(p, c / groups, 0);
    return perChannel(perC, x.ndim);
  };
  return mx.astype(mx.add(mx.multiply(normed, param(1)), param(2)), x.dtype);
}

// ---------------------------------------------------------------------------------------------
// LpNormalization, MeanVarianceNormalization, LRN

interface LpNormParams {
  axis: number;
  p: 1 | 2;
}

function parseLpNorm(attrs: Attrs): LpNormParams {
  const p = attrs.int('p', 2);
  if (p !== 1 && p !== 2) throw new RangeError(`LpNormalization p ${p} is not 1 or 2`);
  return { axis: attrs.int('axis', -1), p };
}

function lpNorm(ctx: OpContext<LpNormParams>): mx.Array {
  const x = ctx.input(0);
  const axis = normAxis(ctx.params.axis, x.ndim);
  const p = ctx.params.p;
  const norm = p === 1 ? mx.sum(mx.abs(x), axis, { keepdims: true }) : mx.sqrt(mx.sum(mx.square(x), axis, { keepdims: true }));
  // A zero norm gives zeros rather than NaN (the reference's rule).
  const zero = mx.equal(norm, 0);
  return mx.where(zero, mx.zerosLike(x), mx.divide(x, mx.where(zero, mx.onesLike(norm), norm)));
}

function mvn(ctx: OpContext<number[]>): mx.Array {
  const x = ctx.input(0);
  // The default axes [0, 2, 3] are those of an NCHW input: on other ranks onnxruntime normalizes over
  // the axes the input has and ignores the others, and so does this.
  const axes = [...new Set(ctx.params.filter((a) => a >= -x.ndim && a < x.ndim).map((a) => normAxis(a, x.ndim)))];
  if (!axes.length)
    throw new RangeError(`MeanVarianceNormalization: none of axes [${ctx.params.join(', ')}] is an axis of the rank-${x.ndim} input`);
  const xs = stash(x);
  const mean = mx.mean(xs, axes, { keepdims: true });
  // The function body: Var = E[x^2] - E[x]^2, y = (x - mean) / (sqrt(Var) + 1e-9).
  const variance = mx.subtract(mx.mean(mx.square(xs), axes, { keepdims: true }), mx.square(mean));
  return mx.astype(mx.divide(mx.subtract(xs, mean), mx.add(mx.sqrt(mx.maximum(variance, 0)), 1e-9)), x.dtype);
}

interface LrnParams {
  size: number;
  alpha: number;
  beta: number;
  bias: number;
}

const parseLrn = (attrs: Attrs): LrnParams => ({
  size: attrs.int('size'),
  alpha: attrs.float('alpha', 1e-4),
  beta: attrs.float('beta', 0.75),
  bias: attrs.float('bias', 1),
});

function lrn(ctx: OpContext<LrnParams>): mx.Array {
  const x = ctx.input(0);
  const { size, alpha, beta, bias } = ctx.params;
  if (x.ndim < 3) throw new RangeError(`LRN needs an input of rank 3 or more ([N, C, ...]), got rank ${x.ndim}`);
  const c = x.shape[1];
  // One slice per window position: a window wider than the channels adds only zeros, so a size
  // past 2C - 1 is refused rather than folded (size 2^31 looped for minutes).
  if (!Number.isInteger(size) || size < 1) throw new RangeError(`LRN size ${size} must be a positive integer`);
  if (size > 2 * c + 1 && size > 4096) throw new RangeError(`LRN size ${size} is over the 4096 window positions this implementation folds`);
  const xs = stash(x);
  // Channel window [c - floor((size-1)/2), c + ceil((size-1)/2)]: a sum of shifted slices of the padded squares.
  const before = Math.floor((size - 1) / 2);
  const after = Math.ceil((size - 1) / 2);
  const padded = mx.pad(mx.square(xs), [1], [before], [after], mx.array(0, { dtype: xs.dtype }), 'constant');
  let sum: mx.Array | undefined;
  for (let k = 0; k < size; k++) {
    const start = padded.shape.map((_, i) => (i === 1 ? k : 0));
    const stop = padded.shape.map((d, i) => (i === 1 ? k + c : d));
    const s = mx.slice(
      padded,
      start,
      stop,
      padded.shape.map(() => 1),
    );
    sum = sum ? mx.add(sum, s) : s;
  }
  const denom = mx.power(mx.add(mx.multiply(sum!, alpha / size), bias), beta);
  let y = mx.divide(xs, denom);
  // onnxruntime slides the window with a running sum (add the square entering, subtract the one
  // leaving): once a non-finite square has left the window (inf - inf) the rest of the channels
  // at that position are NaN. Channel i is so where a square at a channel <= i - before - 1 is
  // (padded index <= i - 1).
  if (c > before + 1) {
    const bad = mx.astype(mx.logicalNot(mx.isfinite(padded)), 'float32');
    const seen = mx.cummax(bad, 1, { inclusive: false });
    const stop = seen.shape.map((d, i) => (i === 1 ? c : d));
    const left = mx.slice(
      seen,
      seen.shape.map(() => 0),
      stop,
      seen.shape.map(() => 1),
    );
    y = mx.where(mx.greater(left, mx.array(0, 'float32')), mx.array(Number.NaN, y.dtype), y);
  }
  return mx.astype(y, x.dtype);
}

/** An entry with one output: f's. */
const entry = <P>(opType: string, since: number, parse: (attrs: Attrs) => P, f: (ctx: OpContext<P>) => mx.Array): OpEntry<P> =>
  onnxOp(opType, since, { parse, run: (ctx) => [f(ctx)] });

export const normOps: OpEntry[] = [
  batchNormEntry,
  layerNormEntry,
  entry('InstanceNormalization', 1, epsilonOf, instanceNorm),
  entry('GroupNormalization', 18, parseGroupNorm, groupNorm),
  entry('LpNormalization', 1, parseLpNorm, lpNorm),
  entry('MeanVarianceNormalization', 9, (attrs) => attrs.ints('axes', [0, 2, 3]), mvn),
  entry('LRN', 1, parseLrn, lrn),
];
