// Pooling: MaxPool (with Indices), AveragePool, LpPool, their Global forms, MaxUnpool.
// A window reduction is computed as one strided slice of the padded input per kernel offset,
// combined with maximum/add: no strided-view tricks, fine for the small kernels pools use.
// AveragePool divides by a count pooled the same way from a mask, which gets count_include_pad,
// ceil_mode's overhang and auto_pad right without case analysis.
import * as mx from '@mlx/core';
import { checkedIndices, checkResultShape } from './helpers/bounds.js';
import type { Attrs } from '../registry/attrs.js';
import type { OpContext, OpEntry, OpResult } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { dtypeRange, hostNumbers, intsIfGiven } from './helpers/util.js';
import {
  kernelOffsets,
  ones,
  padSpatial,
  parseWindow,
  windowOf,
  windowSlice,
  zeros,
  type Window,
  type WindowAttrs,
} from './helpers/spatial.js';

/** The attributes of MaxPool, AveragePool and LpPool (each reads the ones it has). */
interface PoolParams extends WindowAttrs {
  kernel: number[];
  ceil: boolean;
  /** MaxPool's Indices: column-major over the spatial axes. */
  columnMajor: boolean;
  countIncludePad: boolean;
  /** LpPool's p: a float attribute in opset 1, an int from opset 2. */
  p: number;
}

function parsePool(attrs: Attrs): PoolParams {
  return {
    ...parseWindow(attrs),
    kernel: attrs.ints('kernel_shape'),
    ceil: attrs.int('ceil_mode', 0) === 1,
    columnMajor: attrs.zeroOrOne('storage_order', 0),
    countIncludePad: attrs.int('count_include_pad', 0) !== 0,
    p: parseP(attrs),
  };
}

const parseP = (attrs: Attrs): number => attrs.float('p', 2);

/** Kernel positions a pool folds at most (one slice of the input each). */
const MAX_KERNEL_POSITIONS = 1 << 16;

function poolWindow(p: PoolParams, x: mx.Array): Window {
  if (x.ndim < 3) throw new RangeError(`pooling needs an input of rank 3 or more ([N, C, spatial...]), got rank ${x.ndim}`);
  const spatial = x.shape.slice(2);
  if (p.kernel.length !== spatial.length)
    throw new RangeError(`kernel_shape [${p.kernel}] has ${p.kernel.length} entries for ${spatial.length} spatial axes`);
  const bad = p.kernel.find((k) => !Number.isInteger(k) || k < 1);
  if (bad !== undefined) throw new RangeError(`kernel_shape [${p.kernel}]: ${bad} is not a positive size`);
  const positions = p.kernel.reduce((a, b) => a * b, 1);
  if (positions > MAX_KERNEL_POSITIONS)
    throw new RangeError(
      `kernel_shape [${p.kernel}] has ${positions} positions, over the ${MAX_KERNEL_POSITIONS} this implementation folds`,
    );
  return windowOf(p, spatial, p.kernel, p.ceil);
}

/** Folds f over the window slices of `padded`. */
function foldWindows(padded: mx.Array, w: Window, f: (acc: mx.Array, v: mx.Array) => mx.Array): mx.Array {
  let acc: mx.Array | undefined;
  for (const off of kernelOffsets(w.kernel)) {
    const v = windowSlice(padded, w, off);
    acc = acc ? f(acc, v) : v;
  }
  return acc!;
}

// ---------------------------------------------------------------------------------------------
// MaxPool

/** Flat indices of every input element, row-major (storage_order 0) or column-major over the spatial axes. */
function flatIndices(shape: readonly number[], columnMajor: boolean): mx.Array {
  const [n, c, ...sp] = shape;
  const spatialSize = sp.reduce((a, b) => a * b, 1);
  let idx = mx.multiply(mx.reshape(mx.arange(0, n * c, 1, 'int64'), [n, c, ...sp.map(() => 1)]), spatialSize);
  let stride = 1;
  const order = sp.map((_, i) => i);
  if (!columnMajor) order.reverse();
  for (const i of order) {
    const axis = mx.reshape(mx.arange(0, sp[i], 1, 'int64'), [1, 1, ...sp.map((d, j) => (j === i ? d : 1))]);
    idx = mx.add(idx, mx.multiply(axis, stride));
    stride *= sp[i];
  }
  return idx;
}

function maxPool(ctx: OpContext<PoolParams>): OpResult[] {
  const x = ctx.input(0);
  const w = poolWindow(ctx.params, x);
  // Padding with the dtype's lowest value never wins a max.
  const padded = padSpatial(x, w, dtypeRange(x.dtype)[0]);
  if (!ctx.wants(1)) return [foldWindows(padded, w, (a, v) => mx.maximum(a, v))];
  const idx = padSpatial(flatIndices(x.shape, ctx.params.columnMajor), w, -1);
  let best: mx.Array | undefined;
  let bestIdx: mx.Array | undefined;
  for (const off of kernelOffsets(w.kernel)) {
    const v = windowSlice(padded, w, off);
    const i = windowSlice(idx, w, off);
    if (!best || !bestIdx) {
      best = v;
      bestIdx = mx.broadcastTo(i, v.shape);
      continue;
    }
    // Strictly greater: the first maximum in scan order keeps its index, as onnxruntime does.
    const better = mx.greater(v, best);
    best = mx.where(better, v, best);
    bestIdx = mx.where(better, i, bestIdx);
  }
  return [best, bestIdx];
}

const maxPoolEntry = onnxOp('MaxPool', 1, {
  note: "auto_pad SAME pads for the dilated kernel, as the spec's formula says (onnxruntime pads for the undilated one)",
  parse: parsePool,
  run: maxPool,
});

// ---------------------------------------------------------------------------------------------
// AveragePool / LpPool

/** Window sums of x, divided by the number of elements each window counts. */
function averagePool(ctx: OpContext<PoolParams>): mx.Array {
  const x = ctx.input(0);
  const w = poolWindow(ctx.params, x);
  const sum = foldWindows(padSpatial(x, w, 0), w, (a, v) => mx.add(a, v));
  const spatial = x.shape.slice(2);
  // Explicit (or auto) pads count with count_include_pad; the overhang ceil_mode adds beyond them
  // does not, nor do pads without it.
  const explicit = windowOf(ctx.params, spatial, w.kernel, false);
  const overhang = w.padsEnd.some((p, i) => p !== explicit.padsEnd[i]);
  const padded = w.padsBegin.some((p) => p > 0) || w.padsEnd.some((p) => p > 0);
  if (ctx.params.countIncludePad ? !overhang : !padded) {
    // Every window counts all its positions: one divisor (no count map built per run).
    const positions = w.kernel.reduce((a, b) => a * b, 1);
    return mx.divide(sum, mx.array(positions, { dtype: sum.dtype }));
  }
  let mask = mx.ones([1, 1, ...spatial], x.dtype);
  if (ctx.params.countIncludePad) {
    mask = padSpatial(mask, { ...w, padsBegin: explicit.padsBegin, padsEnd: explicit.padsEnd }, 1);
    const extra = w.padsEnd.map((p, i) => p - explicit.padsEnd[i]);
    mask = padSpatial(mask, { ...w, padsBegin: w.padsBegin.map(() => 0), padsEnd: extra }, 0);
  } else {
    mask = padSpatial(mask, w, 0);
  }
  const count = foldWindows(mask, w, (a, v) => mx.add(a, v));
  return mx.divide(sum, count);
}

const averagePoolEntry = onnxOp('AveragePool', 1, {
  parse: parsePool,
  run: (ctx) => [averagePool(ctx)],
});

function lpPow(x: mx.Array, p: number): mx.Array {
  return p === 2 ? mx.square(x) : p === 1 ? mx.abs(x) : mx.power(mx.abs(x), p);
}
function lpRoot(s: mx.Array, p: number): mx.Array {
  return p === 2 ? mx.sqrt(s) : p === 1 ? s : mx.power(s, 1 / p);
}

function lpPool(ctx: OpContext<PoolParams>): mx.Array {
  const x = ctx.input(0);
  const p = ctx.params.p;
  const w = poolWindow(ctx.params, x);
  return lpRoot(
    foldWindows(padSpatial(lpPow(x, p), w, 0), w, (a, v) => mx.add(a, v)),
    p,
  );
}

const lpPoolEntry = onnxOp('LpPool', 1, {
  parse: parsePool,
  run: (ctx) => [lpPool(ctx)],
});

// ---------------------------------------------------------------------------------------------
// Global pools: reductions over every spatial axis, kept as size-1 axes.

/** The spatial axes of an [N, C, spatial...] input; onnxruntime refuses a rank below 3. */
const spatialAxes = (x: mx.Array) => {
  if (x.ndim < 3) throw new RangeError(`global pooling needs an input of rank 3 or more ([N, C, spatial...]), got rank ${x.ndim}`);
  return Array.from({ length: x.ndim - 2 }, (_, i) => i + 2);
};

const globalOps: OpEntry[] = [
  // The spatial axes are the trailing ones: @mlx/sys's mean over them (one pass per row; MLX's CPU
  // reduction is slow at these rows), MLX's mean off the CPU and for other dtypes.
  onnxOp('GlobalAveragePool', 1, { run: (ctx) => [mx.ext.meanTrailing(ctx.input(0), spatialAxes(ctx.input(0)).length, true)] }),
  onnxOp('GlobalMaxPool', 1, { run: (ctx) => [mx.max(ctx.input(0), spatialAxes(ctx.input(0)), { keepdims: true })] }),
  onnxOp('GlobalLpPool', 1, {
    parse: parseP,
    run: (ctx) => {
      const x = ctx.input(0);
      return [lpRoot(mx.sum(lpPow(x, ctx.params), spatialAxes(x), { keepdims: true }), ctx.params)];
    },
  }),
];

// ---------------------------------------------------------------------------------------------
// MaxUnpool: scatter the pooled values back to the flat positions MaxPool's Indices name.

interface UnpoolParams {
  kernel: number[];
  strides?: number[];
  pads?: number[];
}

function parseUnpool(attrs: Attrs): UnpoolParams {
  return { kernel: attrs.ints('kernel_shape'), strides: intsIfGiven(attrs, 'strides'), pads: intsIfGiven(attrs, 'pads') };
}

function maxUnpool(ctx: OpContext<UnpoolParams>): mx.Array {
  const x = ctx.input(0);
  const indices = ctx.input(1);
  const kernel = ctx.params.kernel;
  const n = kernel.length;
  if (x.ndim < 3 || n !== x.ndim - 2)
    throw new RangeError(`MaxUnpool: kernel_shape [${kernel}] has ${n} entries for an input of rank ${x.ndim} ([N, C, spatial...])`);
  const strides = ctx.params.strides ?? ones(n);
  const pads = ctx.params.pads ?? zeros(2 * n);
  if (strides.length !== n) throw new RangeError(`MaxUnpool: strides [${strides}] has ${strides.length} entries for ${n} spatial axes`);
  if (pads.length !== 2 * n) throw new RangeError(`MaxUnpool: pads [${pads}] has ${pads.length} entries, expected ${2 * n}`);
  if (indices.shape.join() !== x.shape.join())
    throw new RangeError(`MaxUnpool: indices [${indices.shape}] must have X's shape [${x.shape}]`);
  const sp = x.shape.slice(2).map((d, i) => (d - 1) * strides[i] + kernel[i] - pads[i] - pads[n + i]);
  let shape = [x.shape[0], x.shape[1], ...sp];
  if (ctx.has(2)) {
    // The indices are flat positions in the requested shape: MaxPool's Indices address its input,
    // which output_shape describes. onnxruntime does this; the ONNX node test
    // test_maxunpool_export_with_output_shape expects the inferred shape, zero-padded, instead.
    const want = hostNumbers(ctx.host(2));
    if (want.length !== x.ndim || want[0] !== x.shape[0] || want[1] !== x.shape[1])
      throw new RangeError(
        `MaxUnpool: output_shape [${want}] must be [${x.shape[0]}, ${x.shape[1]}, ...${n} spatial dims] for X [${x.shape}]`,
      );
    const small = want.findIndex((w, i) => !Number.isInteger(w) || w < shape[i]);
    if (small >= 0)
      throw new RangeError(`MaxUnpool: output_shape [${want}] is smaller than the inferred shape [${shape}] on axis ${small}`);
    shape = want;
  }
  checkResultShape(ctx, shape, x.itemsize, 'MaxUnpool');
  const total = shape.reduce((a, b) => a * b, 1);
  const at = checkedIndices(ctx, mx.reshape(indices, [-1]), total, `MaxUnpool into an output of ${total} elements`, { negative: false });
  const flat = mx.putAlongAxis(mx.zeros([total], x.dtype), at, mx.reshape(x, [-1]), 0);
  return mx.reshape(flat, shape);
}

const maxUnpoolEntry = onnxOp('MaxUnpool', 9, { parse: parseUnpool, run: (ctx) => [maxUnpool(ctx)] });

export const poolOps: OpEntry[] = [maxPoolEntry, averagePoolEntry, lpPoolEntry, ...globalOps, maxUnpoolEntry];
