// Reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare, ArgMax/ArgMin.
// The axes move from an attribute to an optional input at opset 13 (ReduceSum) and 18 (the
// others); both forms share one translation. Reductions over zero elements give the reduction's
// identity (MLX's max/min/logsumexp refuse empty input, so those never reach MLX).
import * as mx from '@mlx/core';
import { OnnxDataType, type HostTensor } from '../onnx/index.js';
import type { Attrs } from '../registry/attrs.js';
import type { OpContext, OpEntry } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { mxDtypeOf } from '../runtime/convert.js';
import { isIntType } from './helpers/host-math.js';
import { axesFrom, dtypeRange, hostOf, intsIfGiven, normAxis, sizeOf } from './helpers/util.js';

type Kind = 'sum' | 'mean' | 'max' | 'min' | 'prod' | 'l1' | 'l2' | 'logsum' | 'logsumexp' | 'sumsquare';

/** The value a reduction over zero elements gives (the spec's "empty set" cases). */
function identity(kind: Kind, dtype: mx.Dtype): number | bigint | boolean {
  switch (kind) {
    case 'max':
      return dtypeRange(dtype)[0];
    case 'min':
      return dtypeRange(dtype)[1];
    case 'prod':
      return 1;
    case 'mean':
      // onnxruntime's mean of nothing is 0 (the spec leaves it undefined).
      return 0;
    case 'logsum':
    case 'logsumexp':
      // log(0) = -inf; an integer result takes C's conversion of it on x86-64, the lowest value.
      return mx.isFloating(dtype) ? -Infinity : dtypeRange(dtype)[0];
    default:
      return 0;
  }
}

/** Whether `axes` (normalized, distinct) are the last axes.length axes of a rank-`ndim` array. */
const trailingAxes = (axes: readonly number[], ndim: number): boolean =>
  axes.length > 0 && [...axes].sort((a, b) => a - b).every((a, i) => a === ndim - axes.length + i);

/** Keeps ONNX's output element type where MLX promotes (integer sums, means, norms). */
function keep(r: mx.Array, dtype: mx.Dtype): mx.Array {
  return r.dtype === dtype ? r : mx.astype(r, dtype);
}

/** A float-valued reduction back in the input's type: integers saturate, as onnxruntime's conversion from double does. */
const floatBack = (r: mx.Array, dtype: mx.Dtype): mx.Array =>
  isIntDtype(dtype) && mx.isFloating(r.dtype) ? saturatingCast(r, dtype) : keep(r, dtype);

/** Integer inputs of the float-valued reductions are computed in float32 and cast back. */
const inFloat = (x: mx.Array): mx.Array => (mx.isFloating(x.dtype) ? x : mx.astype(x, 'float32'));

// uint64 is left out: its range does not fit the int64 accumulator (and onnxruntime reduces no uint64).
const isIntDtype = (d: mx.Dtype): boolean => d.startsWith('int') || (d.startsWith('uint') && d !== 'uint64');

/** A float result converted to integer `dtype` as onnxruntime's double-to-integer casts do: out of range saturates (NaN as C's conversion gives it). */
function saturatingCast(r: mx.Array, dtype: mx.Dtype): mx.Array {
  const [lo, hi] = dtypeRange(dtype) as [number | bigint, number | bigint];
  // Powers of two bound the range exactly in float32 (hi + 1 and lo are representable).
  const above = mx.greaterEqual(r, mx.array(Number(hi) + 1, r.dtype));
  const below = mx.less(r, mx.array(Number(lo), r.dtype));
  const c = mx.astype(mx.where(mx.logicalOr(above, below), mx.zerosLike(r), r), dtype);
  return mx.where(above, mx.array(hi as number, { dtype }), mx.where(below, mx.array(lo as number, { dtype }), c));
}

/**
 * Sum, SumSquare, L1 and Prod of integers as onnxruntime has them: it accumulates integers in
 * double and converts back saturating, so an overflow gives the type's limit rather than
 * wrapping. Here the exact value comes from an int64 accumulation (exact where onnxruntime's
 * double is: below 2^53) and a float32 one says whether it left the type's range (or int64's).
 */
function saturatingIntReduce(kind: 'sum' | 'sumsquare' | 'l1' | 'prod', x: mx.Array, axes: number[], keepdims: boolean): mx.Array {
  const dtype = x.dtype;
  const opts = { keepdims };
  const wide = mx.astype(x, 'int64');
  const approxIn = mx.astype(x, 'float32');
  const term = (v: mx.Array) => (kind === 'sumsquare' ? mx.square(v) : kind === 'l1' ? mx.abs(v) : v);
  const acc = (v: mx.Array) => (kind === 'prod' ? mx.prod(v, axes, opts) : mx.sum(v, axes, opts));
  const exact = acc(term(wide));
  const approx = acc(term(approxIn));
  const [lo, hi] = dtypeRange(dtype) as [number | bigint, number | bigint];
  // Past 2^62 (in float32's estimate) int64 may have wrapped: the estimate decides.
  const over = mx.greaterEqual(approx, mx.array(Math.min(Number(hi) + 1, 2 ** 62), 'float32'));
  const under = mx.less(approx, mx.array(Math.max(Number(lo), -(2 ** 62)), 'float32'));
  const hiA = mx.array(hi as number, { dtype: 'int64' });
  const loA = mx.array(lo as number, { dtype: 'int64' });
  const clipped = dtype === 'int64' ? exact : mx.minimum(mx.maximum(exact, loA), hiA);
  return mx.astype(mx.where(over, hiA, mx.where(under, loA, clipped)), dtype);
}

/** An integer mean: the exact sum (int64; float32's estimate past int64's range) divided by the count, truncated toward zero. */
function intMean(x: mx.Array, axes: number[], keepdims: boolean): mx.Array {
  const n = axes.reduce((acc, a) => acc * x.shape[a], 1);
  const s = mx.sum(mx.astype(x, 'int64'), axes, { keepdims });
  const approx = mx.sum(mx.astype(x, 'float32'), axes, { keepdims });
  const nA = mx.array(n, { dtype: 'int64' });
  const q = mx.multiply(mx.floorDivide(mx.abs(s), nA), mx.sign(s));
  const huge = mx.greaterEqual(mx.abs(approx), mx.array(2 ** 62, 'float32'));
  return mx.astype(mx.where(huge, mx.astype(mx.divide(approx, mx.array(n, 'float32')), 'int64'), q), x.dtype);
}

function reduceArray(kind: Kind, x: mx.Array, axes: number[], keepdims: boolean, onnxType: number, emptyAxes = axes): mx.Array {
  const dtype = x.dtype;
  const opts = { keepdims };
  if (x.size === 0) {
    // onnxruntime shapes the result of an empty input by the axes as given (emptyAxes): a
    // negative axis reduces nothing there.
    const shape = x.shape.map((d, i) => (emptyAxes.includes(i) ? 1 : d)).filter((_, i) => keepdims || !emptyAxes.includes(i));
    // The identity as an array of the dtype itself: a JS number would pass through float32 (int32 max rounds up and wraps).
    return mx.full(shape, mx.array(identity(kind, dtype) as number, { dtype }), dtype);
  }
  const int = isIntType(onnxType) && isIntDtype(dtype);
  if (int && (kind === 'sum' || kind === 'sumsquare' || kind === 'l1' || kind === 'prod'))
    return saturatingIntReduce(kind, x, axes, keepdims);
  switch (kind) {
    case 'sum':
      return keep(mx.sum(x, axes, opts), dtype);
    case 'prod':
      return keep(mx.prod(x, axes, opts), dtype);
    case 'max':
      return mx.max(x, axes, opts);
    case 'min':
      return mx.min(x, axes, opts);
    case 'mean':
      // Integer means truncate toward zero, as integer division does in onnxruntime.
      if (int) return intMean(x, axes, keepdims);
      // Over the trailing axes (a squeeze-excite block's H, W): @mlx/sys's one pass per row (MLX's
      // CPU reduction sums these rows at about 1 GFLOP/s); MLX's mean elsewhere.
      if (trailingAxes(axes, x.ndim)) return keep(mx.ext.meanTrailing(x, axes.length, keepdims), dtype);
      return keep(mx.mean(x, axes, opts), dtype);
    case 'l1':
      return keep(mx.sum(mx.abs(x), axes, opts), dtype);
    case 'sumsquare':
      return keep(mx.sum(mx.square(x), axes, opts), dtype);
    case 'l2':
      return floatBack(mx.sqrt(mx.sum(mx.square(inFloat(x)), axes, opts)), dtype);
    case 'logsum':
      return floatBack(mx.log(mx.sum(inFloat(x), axes, opts)), dtype);
    case 'logsumexp':
      return floatBack(mx.logsumexp(inFloat(x), axes, opts), dtype);
  }
}

interface ReduceParams {
  keepdims: boolean;
  /** The axes attribute (the only form before the axes input; read as a fallback after). */
  axes?: number[];
  /** Input form: no axes means no reduction (else every axis). */
  noopWithEmptyAxes: boolean;
}

// onnxruntime reads keepdims and noop_with_empty_axes as `== 1`: a 2 or a -1 is false.
const parseReduce = (attrs: Attrs): ReduceParams => ({
  keepdims: attrs.int('keepdims', 1) === 1,
  axes: intsIfGiven(attrs, 'axes'),
  noopWithEmptyAxes: attrs.int('noop_with_empty_axes', 0) === 1,
});

/**
 * The normalised, de-duplicated axes to reduce, or null for "return the input unchanged". With
 * `asGiven`, the axes as onnxruntime shapes an empty input's result by them: the given ones that
 * are not negative (it matches them against dimension indices before normalising).
 */
function reductionAxes(ctx: OpContext<ReduceParams>, rank: number, axesIsInput: boolean, asGiven = false): number[] | null {
  const given = axesIsInput ? axesFrom(ctx, 1, ctx.params.axes) : ctx.params.axes;
  if (!given || given.length === 0) {
    if (axesIsInput && ctx.params.noopWithEmptyAxes) return null;
    return Array.from({ length: rank }, (_, i) => i);
  }
  const axes = [...new Set(given.map((a) => normAxis(a, rank, 'axes')))].sort((a, b) => a - b);
  return asGiven ? axes.filter((a) => given.includes(a)) : axes;
}

// Shape math sometimes reduces shapes on the host (ReduceProd of a Shape before a Reshape):
// keep those on the host so the Reshape target stays static.
const hostKinds = new Set<Kind>(['sum', 'prod', 'max', 'min']);
const hostTypes = new Set<number>([OnnxDataType.INT64, OnnxDataType.INT32]);

function hostReduce(kind: Kind, t: HostTensor, axes: number[], keepdims: boolean): HostTensor {
  const dims = t.dims;
  const outDims = dims.map((d, i) => (axes.includes(i) ? 1 : d));
  const out: bigint[] = new Array(sizeOf(outDims));
  const data = t.data as ArrayLike<number | bigint>;
  const idx = new Array<number>(dims.length).fill(0);
  for (let i = 0; i < data.length; i++) {
    let o = 0;
    for (let d = 0; d < dims.length; d++) o = o * outDims[d] + (axes.includes(d) ? 0 : idx[d]);
    const v = BigInt(data[i]);
    const prev = out[o];
    if (prev === undefined) out[o] = v;
    else if (kind === 'sum') out[o] = prev + v;
    else if (kind === 'prod') out[o] = prev * v;
    else if (kind === 'max') out[o] = v > prev ? v : prev;
    else out[o] = v < prev ? v : prev;
    for (let d = dims.length - 1; d >= 0; d--) {
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
  }
  // Sums and products saturate, as onnxruntime's (accumulated in double) do.
  const [lo, hi] = t.dtype === OnnxDataType.INT64 ? [-(2n ** 63n), 2n ** 63n - 1n] : [-(2n ** 31n), 2n ** 31n - 1n];
  for (let i = 0; i < out.length; i++) out[i] = out[i] > hi ? hi : out[i] < lo ? lo : out[i];
  return hostOf(t.dtype, out, keepdims ? outDims : dims.filter((_, i) => !axes.includes(i)));
}

function reduceEntry(opType: string, kind: Kind, since: number, until: number | undefined, axesIsInput: boolean): OpEntry<ReduceParams> {
  return onnxOp(opType, since, {
    until,
    parse: parseReduce,
    check: (ctx) => {
      const t = ctx.inputType(0);
      if (t !== undefined && !mxDtypeOf(t)) return `${opType} of element type ${t} is not supported on MLX`;
      return undefined;
    },
    host: hostKinds.has(kind)
      ? (ctx) => {
          const t = ctx.hostIfKnown(0);
          if (!t || !hostTypes.has(t.dtype) || (axesIsInput && ctx.has(1) && !ctx.hostIfKnown(1))) return undefined;
          const axes = reductionAxes(ctx, t.dims.length, axesIsInput);
          if (axes === null) return [t];
          // Empty inputs take the device path (onnxruntime's shapes for them, see reduceArray).
          if (sizeOf(t.dims) === 0) return undefined;
          return [hostReduce(kind, t, axes, ctx.params.keepdims)];
        }
      : undefined,
    run: (ctx) => {
      const x = ctx.input(0);
      const axes = reductionAxes(ctx, x.ndim, axesIsInput);
      if (axes === null) return [x];
      const emptyAxes = x.size === 0 ? (reductionAxes(ctx, x.ndim, axesIsInput, true) ?? axes) : axes;
      return [reduceArray(kind, x, axes, ctx.params.keepdims, ctx.elemType(0), emptyAxes)];
    },
  });
}

/** Attribute form up to `lastAttr`, input form after it. */
function reduceFamily(opType: string, kind: Kind, lastAttr: number): OpEntry[] {
  return [reduceEntry(opType, kind, 1, lastAttr, false), reduceEntry(opType, kind, lastAttr + 1, undefined, true)];
}

// ---------------------------------------------------------------------------------------------
// ArgMax / ArgMin

function argEntry(opType: 'ArgMax' | 'ArgMin'): OpEntry {
  const f = opType === 'ArgMax' ? mx.argmax : mx.argmin;
  return onnxOp(opType, 1, {
    parse: (attrs) => ({
      axis: attrs.int('axis', 0),
      keepdims: attrs.int('keepdims', 1) === 1,
      selectLast: attrs.int('select_last_index', 0) !== 0,
    }),
    run: (ctx) => {
      let x = ctx.input(0);
      const { keepdims, selectLast } = ctx.params;
      const axis = normAxis(ctx.params.axis, x.ndim);
      if (x.dtype === 'bool') x = mx.astype(x, 'uint8');
      // onnxruntime scans the axis keeping the best so far, and a NaN compares false: a NaN is
      // never picked, unless it comes first, which then stays (MLX's argmax picks a NaN).
      const float = x.dtype.startsWith('float') || x.dtype === 'bfloat16';
      const n = x.shape[axis];
      const firstIsNaN = float && n > 0 ? mx.isnan(mx.take(x, mx.array(0, 'int32'), axis)) : undefined;
      if (float) x = mx.where(mx.isnan(x), mx.array(opType === 'ArgMax' ? -Infinity : Infinity, x.dtype), x);
      let r: mx.Array;
      if (!selectLast) r = mx.astype(f(x, axis, { keepdims }), 'int64');
      else {
        // MLX picks the first extreme; the last one is the first of the reversed axis.
        const reversed = mx.take(x, mx.arange(n - 1, -1, -1, 'int32'), axis);
        const i = mx.astype(f(reversed, axis, { keepdims }), 'int64');
        r = mx.subtract(mx.array(n - 1, { dtype: 'int64' }), i);
      }
      if (!firstIsNaN) return [r];
      const first = keepdims ? mx.expandDims(firstIsNaN, axis) : firstIsNaN;
      return [mx.where(first, mx.zerosLike(r), r)];
    },
  });
}

export const reduceOps: OpEntry[] = [
  ...reduceFamily('ReduceSum', 'sum', 12),
  ...reduceFamily('ReduceMean', 'mean', 17),
  ...reduceFamily('ReduceMax', 'max', 17),
  ...reduceFamily('ReduceMin', 'min', 17),
  ...reduceFamily('ReduceProd', 'prod', 17),
  ...reduceFamily('ReduceL1', 'l1', 17),
  ...reduceFamily('ReduceL2', 'l2', 17),
  ...reduceFamily('ReduceLogSum', 'logsum', 17),
  ...reduceFamily('ReduceLogSumExp', 'logsumexp', 17),
  ...reduceFamily('ReduceSumSquare', 'sumsquare', 17),
  argEntry('ArgMax'),
  argEntry('ArgMin'),
];

/** Exposed for other families (normalisations, pooling) that reduce with the same rules. */
export { reduceArray };
