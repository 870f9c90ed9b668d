// Order-based ops: TopK, CumSum, ReverseSequence, Unique.
import * as mx from '@mlx/core';
import { OnnxDataType, type HostTensor } from '../onnx/index.js';
import type { Attrs } from '../registry/attrs.js';
import type { OpContext, OpEntry } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { hostGather, hostTranspose } from './helpers/shape-host.js';
import { hostInt64, normAxis, oneNumber, sizeOf } from './helpers/util.js';
import { onnxruntimeUnsortedTopK } from './helpers/topk-order.js';

// ---------------------------------------------------------------------------------------------
// TopK. MLX's argsort is stable, so sorting ascending on an order-reversing key gives the largest
// values first with ties in index order, which is what the spec asks for.

function descendingKey(x: mx.Array): mx.Array {
  if (x.dtype === 'bool') return mx.logicalNot(x);
  // For integers ~x = -x - 1 reverses the order without overflowing (unsigned too: max - x).
  if (x.dtype.startsWith('int') || x.dtype.startsWith('uint')) return mx.bitwiseInvert(x);
  return mx.negative(x);
}

interface TopKParams {
  axis: number;
  /** TopK-1's k attribute (an input from opset 10). */
  k?: number;
  /** opset 11+: false picks the smallest. */
  largest: boolean;
  /** opset 11+: false returns them in the order onnxruntime's CPU kernel leaves them (helpers/topk-order.ts). */
  sorted: boolean;
}

const parseTopK = (attrs: Attrs, opset: number): TopKParams => ({
  axis: attrs.int('axis', -1),
  k: opset < 10 ? attrs.int('k') : undefined,
  largest: opset < 11 || attrs.int('largest', 1) === 1,
  sorted: opset < 11 || attrs.int('sorted', 1) !== 0,
});

function topK(ctx: OpContext<TopKParams>): mx.Array[] {
  const x = ctx.input(0);
  const axis = normAxis(ctx.params.axis, x.ndim, 'TopK axis');
  const k = ctx.params.k ?? oneNumber(ctx, 1, 'TopK: K', [1]);
  const n = x.shape[axis];
  if (k < 0 || k > n) throw new RangeError(`TopK: k = ${k} is out of range for an axis of size ${n}`);
  const largest = ctx.params.largest;
  // sorted = 0 leaves the order to the implementation: onnxruntime's, worked out on the host.
  if (!ctx.params.sorted && k > 1) return unsortedTopK(ctx, x, axis, k, largest);
  const order = mx.argsort(largest ? descendingKey(x) : x, axis);
  const stop = x.shape.map((d, i) => (i === axis ? k : d));
  const idx = mx.slice(
    order,
    x.shape.map(() => 0),
    stop,
    x.shape.map(() => 1),
  );
  return [mx.takeAlongAxis(x, idx, axis), mx.astype(idx, 'int64')];
}

/** TopK with sorted = 0: each row's k positions in onnxruntime's order, then a gather. */
function unsortedTopK(ctx: OpContext<TopKParams>, x: mx.Array, axis: number, k: number, largest: boolean): mx.Array[] {
  // Read on the host once evaluated (ctx.host asks the driver for it); half types compare as float32.
  const wide = x.dtype === 'float16' || x.dtype === 'bfloat16' ? mx.astype(x, 'float32') : x.dtype === 'bool' ? mx.astype(x, 'uint8') : x;
  ctx.host(0);
  const data = wide.toTypedArray() as ArrayLike<number | bigint>;
  const n = x.shape[axis];
  const inner = x.shape.slice(axis + 1).reduce((a, b) => a * b, 1);
  const outer = x.shape.slice(0, axis).reduce((a, b) => a * b, 1);
  const idx = new BigInt64Array(outer * k * inner);
  const row: (number | bigint)[] = new Array(n);
  for (let o = 0; o < outer; o++)
    for (let j = 0; j < inner; j++) {
      for (let l = 0; l < n; l++) row[l] = data[(o * n + l) * inner + j];
      onnxruntimeUnsortedTopK(row, k, largest).forEach((p, l) => {
        idx[(o * k + l) * inner + j] = BigInt(p);
      });
    }
  const indices = mx.Array.fromTypedArray(
    idx,
    x.shape.map((d, i) => (i === axis ? k : d)),
    'int64',
  );
  return [mx.takeAlongAxis(x, indices, axis), indices];
}

// ---------------------------------------------------------------------------------------------
// CumSum and CumProd (axis as an input, exclusive and reverse attributes).

interface CumulativeParams {
  reverse: boolean;
  inclusive: boolean;
}

const parseCumulative = (attrs: Attrs): CumulativeParams => ({
  reverse: attrs.zeroOrOne('reverse', 0),
  inclusive: !attrs.zeroOrOne('exclusive', 0),
});

function cumulative(ctx: OpContext<CumulativeParams>, f: typeof mx.cumsum): mx.Array {
  const x = ctx.input(0);
  const axis = normAxis(oneNumber(ctx, 1, `${ctx.node.opType}: axis`), x.ndim, `${ctx.node.opType} axis`);
  const r = f(x, axis, ctx.params);
  return r.dtype === x.dtype ? r : mx.astype(r, x.dtype);
}

// ---------------------------------------------------------------------------------------------
// ReverseSequence: along time_axis, batch entry b has its first sequence_lens[b] steps reversed.

interface ReverseSequenceParams {
  timeAxis: number;
  batchAxis: number;
}

function reverseSequence(ctx: OpContext<ReverseSequenceParams>): mx.Array {
  const x = ctx.input(0);
  const timeAxis = normAxis(ctx.params.timeAxis, x.ndim, 'time_axis');
  const batchAxis = normAxis(ctx.params.batchAxis, x.ndim, 'batch_axis');
  const along = (n: number, axis: number) => x.shape.map((_, i) => (i === axis ? n : 1));
  const steps = x.shape[timeAxis];
  const t = mx.reshape(mx.arange(0, steps, 1, 'int64'), along(steps, timeAxis));
  const lens = mx.astype(ctx.input(1), 'int64');
  // A length past the time axis would read outside it.
  ctx.guard(
    mx.any(mx.logicalOr(mx.less(lens, 0), mx.greater(lens, steps))),
    ([lo, hi]) => `sequence_lens must lie in [0, ${steps}] (the time axis), got ${lo < 0 ? lo : hi}`,
    mx.stack([mx.min(lens), mx.max(lens)]),
  );
  const len = mx.reshape(mx.clip(lens, 0, steps), along(x.shape[batchAxis], batchAxis));
  const src = mx.where(mx.less(t, len), mx.subtract(mx.subtract(len, 1), t), t);
  return mx.takeAlongAxis(x, mx.broadcastTo(src, x.shape), timeAxis);
}

// ---------------------------------------------------------------------------------------------
// Unique, on the host (its output sizes depend on the data). Without an axis the elements are
// compared; with one, the slices along it, in lexicographic order when sorted.

type Elem = number | bigint | string;

function elementsOf(t: HostTensor): (i: number) => Elem {
  const d = t.data as ArrayLike<Elem>;
  if (t.dtype === OnnxDataType.FLOAT16) return (i) => mx.float16BitsToNumber(d[i] as number);
  if (t.dtype === OnnxDataType.BFLOAT16) return (i) => mx.bfloat16BitsToNumber(d[i] as number);
  return (i) => d[i];
}

function compareSlices(a: Elem[], b: Elem[]): number {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i] < b[i] ? -1 : 1;
  return 0;
}

interface UniqueParams {
  /** Without an axis the elements are compared, flattened. */
  axis?: number;
  sorted: boolean;
}

function unique(ctx: OpContext<UniqueParams>): HostTensor[] {
  let t = ctx.host(0);
  const hasAxis = ctx.params.axis !== undefined;
  const axis = hasAxis ? normAxis(ctx.params.axis!, t.dims.length, 'Unique axis') : 0;
  if (!hasAxis) t = { ...t, dims: [sizeOf(t.dims)] };
  // Bring the axis to the front, so slice i is the contiguous block i.
  const perm = [axis, ...t.dims.map((_, i) => i).filter((i) => i !== axis)];
  const front = hostTranspose(t, perm);
  const count = t.dims[axis];
  const width = count ? sizeOf(front.dims) / count : 0;
  const at = elementsOf(front);
  const slices = Array.from({ length: count }, (_, i) => Array.from({ length: width }, (_, j) => at(i * width + j)));
  const firstOf = new Map<string, number>();
  const keyOf = (s: Elem[]) => s.map((v) => (Object.is(v, -0) ? '0' : String(v))).join('\u0000');
  const firsts: number[] = [];
  const group = slices.map((s, i) => {
    const key = keyOf(s);
    let g = firstOf.get(key);
    if (g === undefined) {
      firstOf.set(key, (g = firsts.length));
      firsts.push(i);
    }
    return g;
  });
  let order = firsts.map((_, g) => g);
  if (ctx.params.sorted) order = order.sort((a, b) => compareSlices(slices[firsts[a]], slices[firsts[b]]));
  const rank = new Array<number>(order.length);
  order.forEach((g, r) => (rank[g] = r));
  const counts = new Array<number>(order.length).fill(0);
  for (const g of group) counts[g]++;
  const firstIdx = order.map((g) => firsts[g]);
  return [
    hostGather(t, firstIdx, [firstIdx.length], axis),
    hostInt64(firstIdx),
    hostInt64(group.map((g) => rank[g])),
    hostInt64(order.map((g) => counts[g])),
  ];
}

export const sortOps: OpEntry[] = [
  onnxOp('TopK', 1, {
    note: "ties keep index order (stable argsort); sorted=0 returns onnxruntime's CPU order (host)",
    parse: parseTopK,
    check: (ctx) => (ctx.inputType(0) === OnnxDataType.STRING ? 'TopK on strings is not supported on MLX' : undefined),
    run: topK,
  }),
  onnxOp('CumSum', 11, { parse: parseCumulative, run: (ctx) => [cumulative(ctx, mx.cumsum)] }),
  onnxOp('CumProd', 26, { parse: parseCumulative, run: (ctx) => [cumulative(ctx, mx.cumprod)] }),
  onnxOp('ReverseSequence', 10, {
    parse: (attrs): ReverseSequenceParams => ({ timeAxis: attrs.int('time_axis', 0), batchAxis: attrs.int('batch_axis', 1) }),
    run: (ctx) => [reverseSequence(ctx)],
  }),
  onnxOp('Unique', 11, {
    parse: (attrs): UniqueParams => ({ axis: attrs.has('axis') ? attrs.int('axis') : undefined, sorted: attrs.int('sorted', 1) === 1 }),
    placement: 'host',
    host: unique,
    note: 'computed on the host (its output size depends on the data): a sync point',
  }),
];
