// Indexing ops: Slice, Gather, GatherElements, GatherND, Scatter, ScatterElements, ScatterND,
// OneHot, NonZero, Compress. Negative indices wrap (index + dim) as the spec says, done explicitly
// rather than trusting MLX's gather. Sorting-like ops are in sort.ts, Resize in resize.ts.
import * as mx from '@mlx/core';
import { OnnxDataType, type HostTensor } from '../onnx/index.js';
import type { Attrs } from '../registry/attrs.js';
import type { CheckContext, OpContext, OpEntry } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { hostGather, hostStrided, numAt } from './helpers/shape-host.js';
import { hostInt64, hostNumbers, intsIfGiven, normAxis, optionalNumbers, sizeOf } from './helpers/util.js';
import { checkedIndices, checkResultShape } from './helpers/bounds.js';

/** Indices with negative entries moved up by `dim` (a number, or an array broadcasting against them). */
export function wrapNegative(idx: mx.Array, dim: number | mx.Array): mx.Array {
  return mx.where(mx.less(idx, 0), mx.add(idx, dim), idx);
}

// ---------------------------------------------------------------------------------------------
// Slice. Per axis: negative starts/ends count from the end; then, for step > 0, both clamp to
// [0, dim]; for step < 0, start clamps to [0, dim - 1] and end to [-1, dim - 1]. INT64_MAX/MIN
// sentinels arrive as huge numbers and clamp the same way.

interface SlicePlan {
  starts: number[];
  steps: number[];
  counts: number[];
}

/** Slice-1's attributes (later opsets take them as inputs). */
interface SliceAttrs {
  starts: number[];
  ends: number[];
  axes?: number[];
}

const parseSlice = (attrs: Attrs, opset: number): SliceAttrs | undefined =>
  opset < 10 ? { starts: attrs.ints('starts'), ends: attrs.ints('ends'), axes: intsIfGiven(attrs, 'axes') } : undefined;

function slicePlan(ctx: OpContext<SliceAttrs | undefined>): SlicePlan {
  const dims = ctx.shape(0);
  const r = dims.length;
  let starts: number[], ends: number[], axes: number[] | undefined, steps: number[] | undefined;
  if (ctx.params) {
    ({ starts, ends, axes } = ctx.params);
  } else {
    // starts, ends, axes and steps are 1-D lists of one length (onnxruntime refuses others).
    const names = ['starts', 'ends', 'axes', 'steps'];
    for (let i = 1; i <= 4; i++) {
      if (i > 2 && !ctx.has(i)) continue;
      const d = ctx.host(i).dims;
      if (d.length !== 1) throw new RangeError(`Slice: ${names[i - 1]} must be a 1-D list, got shape [${d.join(', ')}]`);
    }
    starts = hostNumbers(ctx.host(1));
    ends = hostNumbers(ctx.host(2));
    axes = optionalNumbers(ctx, 3);
    steps = optionalNumbers(ctx, 4);
  }
  if (r === 0) throw new RangeError('Slice: cannot slice a scalar (rank 0)');
  axes ??= starts.map((_, i) => i);
  steps ??= starts.map(() => 1);
  for (const [what, list] of [
    ['ends', ends],
    ['axes', axes],
    ['steps', steps],
  ] as const)
    if (list.length !== starts.length) throw new RangeError(`Slice: ${what} has ${list.length} entries, starts ${starts.length}`);
  const seen = new Set(axes.map((ax) => normAxis(ax, r, 'Slice axis')));
  if (seen.size !== axes.length) throw new RangeError(`Slice: axes [${axes.join(', ')}] has duplicates`);
  const plan: SlicePlan = { starts: dims.map(() => 0), steps: dims.map(() => 1), counts: [...dims] };
  axes.forEach((ax, i) => {
    const a = normAxis(ax, r, 'Slice axis');
    const n = dims[a];
    const step = steps![i];
    if (!step) throw new RangeError('Slice: step 0');
    let s = starts[i] < 0 ? starts[i] + n : starts[i];
    let e = ends[i] < 0 ? ends[i] + n : ends[i];
    if (step > 0) {
      s = Math.min(Math.max(s, 0), n);
      e = Math.min(Math.max(e, 0), n);
    } else {
      s = Math.min(Math.max(s, 0), n - 1);
      e = Math.min(Math.max(e, -1), n - 1);
    }
    plan.starts[a] = s;
    plan.steps[a] = step;
    plan.counts[a] = Math.max(0, Math.ceil((e - s) / step));
  });
  return plan;
}

function sliceDevice(x: mx.Array, p: SlicePlan): mx.Array {
  const n = x.shape;
  if (p.counts.some((c) => c === 0)) return mx.zeros(p.counts, x.dtype);
  // MLX reads a negative stop as counting from the end, so "down through index 0" (stop -1)
  // is written as -(n + 1).
  const stop = p.starts.map((s, d) => {
    const last = s + (p.counts[d] - 1) * p.steps[d];
    const e = p.steps[d] > 0 ? last + 1 : last - 1;
    return e < 0 ? -(n[d] + 1) : e;
  });
  return mx.slice(x, p.starts, stop, p.steps);
}

const sliceEntry = onnxOp('Slice', 1, {
  parse: parseSlice,
  host: (ctx) => {
    const p = slicePlan(ctx);
    return [hostStrided(ctx.host(0), p.starts, p.steps, p.counts)];
  },
  run: (ctx) => [sliceDevice(ctx.input(0), slicePlan(ctx))],
});

// ---------------------------------------------------------------------------------------------
// Gather family

/** The axis attribute of Gather, GatherElements, Scatter(Elements), default 0. */
const parseAxis = (attrs: Attrs): number => attrs.int('axis', 0);

const gatherEntry = onnxOp('Gather', 1, {
  parse: parseAxis,
  host: (ctx) => {
    const t = ctx.host(0);
    const idx = ctx.host(1);
    const axis = normAxis(ctx.params, t.dims.length, 'Gather axis');
    const n = t.dims[axis];
    const raw = hostNumbers(idx);
    const badIndex = raw.find((i) => !(i >= -n && i < n));
    if (badIndex !== undefined)
      throw new RangeError(`Gather along axis ${axis} of size ${n}: index ${badIndex} is out of range [${-n}, ${n - 1}]`);
    const ids = raw.map((i) => (i < 0 ? i + n : i));
    return [hostGather(t, ids, idx.dims, axis)];
  },
  run: (ctx) => {
    const x = ctx.input(0);
    requireRank1(x, 'Gather');
    const axis = normAxis(ctx.params, x.ndim, 'Gather axis');
    const sliced = gatherAsSlice(x, ctx.hostIfKnown(1), axis);
    if (sliced) return [sliced];
    const idx = checkedIndices(ctx, ctx.input(1), x.shape[axis], `Gather along axis ${axis} of size ${x.shape[axis]}`);
    // Along the first axis (an embedding lookup) whole rows are copied (a CPU kernel; take elsewhere).
    return [axis === 0 ? mx.ext.takeRows(x, idx) : mx.take(x, idx, axis)];
  },
});

/**
 * Gather by host indices that pick one position or a run of consecutive ones (a recurrent state's
 * layer, a row of a table), in range: a slice of x, a view where the gather would copy (and check
 * its indices on every run). Undefined for other indices, which take the gather.
 */
function gatherAsSlice(x: mx.Array, idx: HostTensor | undefined, axis: number): mx.Array | undefined {
  if (!idx || idx.dims.length > 1 || idx.data.length === 0 || idx.data.length > 64) return undefined;
  const n = x.shape[axis];
  const ids: number[] = [];
  const data = idx.data as ArrayLike<number | bigint>;
  for (let k = 0; k < data.length; k++) {
    const i = Number(data[k]);
    if (!Number.isInteger(i) || i < -n || i >= n) return undefined;
    ids.push(i < 0 ? i + n : i);
  }
  if (ids.some((i, k) => i !== ids[0] + k)) return undefined;
  const start = x.shape.map((_, d) => (d === axis ? ids[0] : 0));
  const stop = x.shape.map((s, d) => (d === axis ? ids[0] + ids.length : s));
  const y = mx.slice(
    x,
    start,
    stop,
    x.shape.map(() => 1),
  );
  return idx.dims.length === 0 ? mx.squeeze(y, axis) : y;
}

/** Gather, GatherElements and the Scatters index an axis of their data: a scalar has none. */
function requireRank1(x: mx.Array, op: string): void {
  if (x.ndim === 0) throw new RangeError(`${op}: data must have rank 1 or more (it is indexed along an axis), got a scalar`);
}

function gatherElements(ctx: OpContext<number>): mx.Array {
  let x = ctx.input(0);
  requireRank1(x, 'GatherElements');
  const idx = ctx.input(1);
  const axis = normAxis(ctx.params, x.ndim, 'GatherElements axis');
  const n = x.shape[axis];
  // The output has the indices' shape; other axes of the data may be longer: cut them to match.
  if (idx.shape.some((d, i) => i !== axis && d !== x.shape[i])) {
    const stop = x.shape.map((d, i) => (i === axis ? d : idx.shape[i]));
    x = mx.slice(
      x,
      x.shape.map(() => 0),
      stop,
      x.shape.map(() => 1),
    );
  }
  return mx.takeAlongAxis(x, checkedIndices(ctx, idx, n, `GatherElements along axis ${axis} of size ${n}`), axis);
}

function gatherND(ctx: OpContext<number>): mx.Array {
  const x = ctx.input(0);
  const b = ctx.params;
  const dd = x.shape;
  const qd = ctx.shape(1);
  const k = qd[qd.length - 1];
  const inner = dd.slice(b, b + k);
  const rest = dd.slice(b + k);
  const batch = sizeOf(dd.slice(0, b));
  const innerSize = sizeOf(inner);
  // One linear index into the data's leading (batch and indexed) axes, flattened together.
  const idx = mx.astype(ctx.input(1), 'int64');
  const strides = inner.map((_, j) => sizeOf(inner.slice(j + 1)));
  const stridesArr = mx.array(BigInt64Array.from(strides, BigInt), 'int64');
  const safe = mx.astype(checkedIndices(ctx, idx, inner, `GatherND into data of shape [${dd.join(', ')}]`), 'int64');
  let linear = mx.sum(mx.multiply(safe, stridesArr), -1);
  if (b > 0) {
    const per = sizeOf(qd.slice(b, -1));
    const offsets = mx.multiply(mx.reshape(mx.arange(0, batch, 1, 'int64'), [batch, 1]), innerSize);
    linear = mx.add(mx.reshape(linear, [batch, per]), offsets);
  }
  const flat = mx.reshape(x, [batch * innerSize, ...rest]);
  const out = mx.take(flat, mx.reshape(linear, [-1]), 0);
  return mx.reshape(out, [...qd.slice(0, -1), ...rest]);
}

// ---------------------------------------------------------------------------------------------
// Scatter family: every form becomes MLX's scatter over all leading axes with slice size 1.

type Scatter = (a: mx.Array, indices: mx.Array[], updates: mx.Array, axes: number[]) => mx.Array;
const scatterBy: Record<string, Scatter> = {
  none: (a, i, u, ax) => mx.scatter(a, i, u, ax),
  add: (a, i, u, ax) => mx.scatterAdd(a, i, u, ax),
  mul: (a, i, u, ax) => mx.scatterProd(a, i, u, ax),
  max: (a, i, u, ax) => mx.scatterMax(a, i, u, ax),
  min: (a, i, u, ax) => mx.scatterMin(a, i, u, ax),
};

interface ScatterParams {
  axis: number;
  /** How updates combine with the data: a key of scatterBy. */
  reduction: string;
}

/** ScatterElements' and ScatterND's reduction, from the values the node's opset defines (none only before 16). */
function parseReduction(opType: string, attrs: Attrs, opset: number): string {
  const r = attrs.string('reduction', 'none');
  const allowed = opset >= 18 ? ['none', 'add', 'mul', 'max', 'min'] : opset >= 16 ? ['none', 'add', 'mul'] : ['none'];
  if (!allowed.includes(r)) throw new RangeError(`${opType} reduction '${r}' is not defined at opset ${opset}`);
  return r;
}

const parseScatter =
  (opType: string) =>
  (attrs: Attrs, opset: number): ScatterParams => ({
    axis: parseAxis(attrs),
    reduction: opType === 'Scatter' ? 'none' : parseReduction(opType, attrs, opset),
  });

function scatterElements(ctx: OpContext<ScatterParams>): mx.Array {
  const x = ctx.input(0);
  requireRank1(x, ctx.node.opType);
  const r = x.ndim;
  const axis = normAxis(ctx.params.axis, r, `${ctx.node.opType} axis`);
  const idx = ctx.input(1);
  const s = idx.shape;
  // Element (i0, .., i_axis, ..) of the updates goes to (i0, .., indices[..], ..).
  const indices = s.map((n, d) => {
    if (d === axis) return checkedIndices(ctx, idx, x.shape[axis], `${ctx.node.opType} along axis ${axis} of size ${x.shape[axis]}`);
    const shape = s.map((_, j) => (j === d ? n : 1));
    return mx.broadcastTo(mx.reshape(mx.arange(0, n, 1, 'int32'), shape), s);
  });
  const upd = mx.reshape(ctx.input(2), [...s, ...new Array<number>(r).fill(1)]);
  return scatterBy[ctx.params.reduction](
    x,
    indices,
    upd,
    s.map((_, i) => i),
  );
}

function scatterND(ctx: OpContext<ScatterParams>): mx.Array {
  const x = ctx.input(0);
  const q = ctx.shape(1);
  const where = `ScatterND into data of shape [${x.shape.join(', ')}]`;
  if (q.length === 0) throw new RangeError(`${where}: indices must have rank >= 1, got a scalar`);
  const k = q[q.length - 1];
  const lead = q.slice(0, -1);
  if (k > x.ndim) throw new RangeError(`${where}: index tuples of length ${k} exceed the data's rank ${x.ndim}`);
  const want = [...lead, ...x.shape.slice(k)];
  const got = ctx.shape(2);
  if (got.length !== want.length || got.some((d, i) => d !== want[i]))
    throw new RangeError(`${where}: updates must have shape [${want.join(', ')}] (indices [${q.join(', ')}]), got [${got.join(', ')}]`);
  // No index tuples: nothing is written.
  if (lead.some((d) => d === 0)) return x;
  // Tuples of length 0 each address the whole data; the update slices combine in order.
  if (k === 0) return scatterWhole(x, mx.reshape(ctx.input(2), [sizeOf(lead), ...x.shape]), ctx.params.reduction);
  const idx = checkedIndices(ctx, ctx.input(1), x.shape.slice(0, k), where);
  const indices = Array.from({ length: k }, (_, j) =>
    mx.reshape(
      mx.slice(
        idx,
        [...lead.map(() => 0), j],
        [...lead, j + 1],
        q.map(() => 1),
      ),
      lead,
    ),
  );
  const upd = mx.reshape(ctx.input(2), [...lead, ...new Array<number>(k).fill(1), ...x.shape.slice(k)]);
  return scatterBy[ctx.params.reduction](
    x,
    indices,
    upd,
    indices.map((_, i) => i),
  );
}

/** ScatterND with index tuples of length 0: each of the `n` slices of `u` [n, ...data] updates all of `x`. */
function scatterWhole(x: mx.Array, u: mx.Array, reduction: string): mx.Array {
  const n = u.shape[0];
  const u0 = mx.astype(u, x.dtype);
  switch (reduction) {
    case 'add':
      return mx.add(x, mx.sumAxis(u0, 0, false));
    case 'mul':
      return mx.multiply(x, mx.prodAxis(u0, 0, false));
    case 'max':
      return mx.maximum(x, mx.maxAxis(u0, 0, false));
    case 'min':
      return mx.minimum(x, mx.minAxis(u0, 0, false));
    default:
      // Duplicate indices are undefined for 'none'; the last slice wins, as in onnxruntime.
      return mx.reshape(
        mx.slice(
          u0,
          [n - 1, ...x.shape.map(() => 0)],
          [n, ...x.shape],
          u0.shape.map(() => 1),
        ),
        x.shape,
      );
  }
}

/**
 * TensorScatter (a KV-cache write): batch entry b of `update` goes to positions
 * write_indices[b] + j along `axis` of the cache (modulo its length in circular mode).
 */
interface TensorScatterParams {
  axis: number;
  circular: boolean;
}

function parseTensorScatter(attrs: Attrs): TensorScatterParams {
  const mode = attrs.string('mode', 'linear');
  if (mode !== 'linear' && mode !== 'circular') throw new RangeError(`TensorScatter mode '${mode}' is not defined`);
  return { axis: attrs.int('axis', -2), circular: mode === 'circular' };
}

function tensorScatter(ctx: OpContext<TensorScatterParams>): mx.Array {
  const cache = ctx.input(0);
  const upd = ctx.input(1);
  const axis = normAxis(ctx.params.axis, cache.ndim, 'TensorScatter axis');
  if (axis === 0) throw new RangeError('TensorScatter: axis 0 is the batch axis');
  const along = (n: number, a: number) => cache.shape.map((_, i) => (i === a ? n : 1));
  const steps = upd.shape[axis];
  const batch = cache.shape[0];
  const writeIndices = ctx.optional(2);
  const start = writeIndices ? mx.reshape(mx.astype(writeIndices, 'int64'), along(batch, 0)) : mx.zeros(along(batch, 0), 'int64');
  let pos = mx.add(start, mx.reshape(mx.arange(0, steps, 1, 'int64'), along(steps, axis)));
  if (ctx.params.circular) pos = mx.remainder(pos, cache.shape[axis]);
  // Linear mode writes past the cache's end for a write index too close to it: an error, not a stray write.
  const safe = checkedIndices(ctx, pos, cache.shape[axis], `TensorScatter along axis ${axis} of size ${cache.shape[axis]}`);
  return mx.putAlongAxis(cache, mx.broadcastTo(safe, upd.shape), upd, axis);
}

// ---------------------------------------------------------------------------------------------
// OneHot, NonZero, Compress

function oneHot(ctx: OpContext<number>): mx.Array {
  const idx = ctx.input(0);
  const given = numAt(ctx.host(1), 0);
  const depth = Math.trunc(given);
  // onnxruntime refuses a depth below 1; a NaN or infinite one has no size at all.
  if (!Number.isSafeInteger(depth) || depth < 1) throw new RangeError(`OneHot: depth ${given} is not a positive integer`);
  const values = ctx.input(2);
  const rank = idx.ndim + 1;
  const axis = normAxis(ctx.params, rank, 'OneHot axis');
  const outDims = [...idx.shape];
  outDims.splice(axis, 0, depth);
  checkResultShape(ctx, outDims, values.itemsize, 'OneHot');
  // Indices are compared as they are: a non-integer float index matches no position (as in the
  // reference and onnxruntime), so it gives all off_value.
  const at = mx.expandDims(wrapNegative(idx, depth), axis);
  const positions = mx.reshape(
    mx.arange(0, depth, 1, at.dtype),
    Array.from({ length: rank }, (_, i) => (i === axis ? depth : 1)),
  );
  const off = mx.reshape(mx.slice(values, [0], [1], [1]), []);
  const on = mx.reshape(mx.slice(values, [1], [2], [1]), []);
  return mx.where(mx.equal(at, positions), on, off);
}

/** Whether host element i is non-zero (float16/bfloat16 are bits: both zeros count as zero). */
function truthy(t: HostTensor): (i: number) => boolean {
  const d = t.data as ArrayLike<number | bigint>;
  if (t.dtype === OnnxDataType.FLOAT16 || t.dtype === OnnxDataType.BFLOAT16) return (i) => (Number(d[i]) & 0x7fff) !== 0;
  return (i) => d[i] !== 0 && d[i] !== 0n;
}

function nonZero(t: HostTensor): HostTensor {
  const dims = t.dims.length ? t.dims : [1];
  const nz = truthy(t);
  const hits: number[] = [];
  for (let i = 0; i < sizeOf(dims); i++) if (nz(i)) hits.push(i);
  const out = new Array<number>(dims.length * hits.length);
  hits.forEach((flat, j) => {
    for (let d = dims.length - 1; d >= 0; d--) {
      out[d * hits.length + j] = flat % dims[d];
      flat = Math.floor(flat / dims[d]);
    }
  });
  return hostInt64(out, [dims.length, hits.length]);
}

/** Compress's axis; without one the input is flattened. */
function compress(ctx: OpContext<number | undefined>): mx.Array {
  const x = ctx.input(0);
  const cond = ctx.host(1);
  const nz = truthy(cond);
  const hasAxis = ctx.params !== undefined;
  const axis = hasAxis ? normAxis(ctx.params!, x.ndim, 'Compress axis') : 0;
  const src = hasAxis ? x : mx.reshape(x, [-1]);
  const n = Math.min(sizeOf(cond.dims), src.shape[axis]);
  const keep: number[] = [];
  for (let i = 0; i < n; i++) if (nz(i)) keep.push(i);
  return mx.take(src, mx.array(Int32Array.from(keep), 'int32'), axis);
}

const unsupportedIndexTypes = <P>(ctx: CheckContext<P>): string | undefined =>
  ctx.inputType(0) === OnnxDataType.STRING ? `${ctx.node.opType} on string tensors is not supported on MLX` : undefined;

export const indexingOps: OpEntry[] = [
  sliceEntry,
  gatherEntry,
  onnxOp('GatherElements', 11, { parse: parseAxis, run: (ctx) => [gatherElements(ctx)] }),
  onnxOp('GatherND', 11, { parse: (attrs) => attrs.int('batch_dims', 0), run: (ctx) => [gatherND(ctx)] }),
  onnxOp('Scatter', 9, { until: 10, parse: parseScatter('Scatter'), check: unsupportedIndexTypes, run: (ctx) => [scatterElements(ctx)] }),
  onnxOp('ScatterElements', 11, { parse: parseScatter('ScatterElements'), run: (ctx) => [scatterElements(ctx)] }),
  onnxOp('ScatterND', 11, { parse: parseScatter('ScatterND'), run: (ctx) => [scatterND(ctx)] }),
  onnxOp('TensorScatter', 24, { parse: parseTensorScatter, run: (ctx) => [tensorScatter(ctx)] }),
  onnxOp('OneHot', 9, {
    parse: (attrs) => attrs.int('axis', -1),
    run: (ctx) => [oneHot(ctx)],
    note: 'a non-integer float index matches no position (all off_value)',
  }),
  onnxOp('NonZero', 9, {
    note: 'computed on the host (data-dependent output size): a sync point',
    placement: 'host',
    host: (ctx) => [nonZero(ctx.host(0))],
  }),
  onnxOp('Compress', 9, {
    parse: (attrs) => (attrs.has('axis') ? attrs.int('axis') : undefined),
    run: (ctx) => [compress(ctx)],
    note: 'reads the condition on the host (data-dependent output size)',
  }),
];
