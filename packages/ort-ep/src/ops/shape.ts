// Shape ops: Reshape, Transpose, Concat, Split, Squeeze, Unsqueeze, Flatten, Expand, Tile, Shape,
// Size, Identity. Each has a host() twin over small host tensors, so shape computations
// (Shape -> Gather -> Concat -> Reshape) are folded on the host and Reshape/Expand/Tile get static
// arguments; run() builds the MLX op. Creation and layout ops live in shape-make.ts / shape-layout.ts.
import * as mx from '@mlx/core';
import type { HostTensor } from '../onnx/index.js';
import type { OpContext, OpEntry } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { hostBroadcast, hostConcat, hostReshape, hostStrided, hostTile, hostTranspose } from './helpers/shape-host.js';
import { axesFrom, broadcastShape, hostInt64, hostNumbers, intsIfGiven, normAxes, normAxis, sizeOf } from './helpers/util.js';

// ---------------------------------------------------------------------------------------------
// Output shapes, shared by host() and run()

/** Reshape's target: 0 copies the input dim (unless allowzero), one -1 is inferred. */
export function reshapeDims(inDims: readonly number[], target: readonly number[], allowzero: boolean): number[] {
  const out = target.map((d, i) => (d === 0 && !allowzero ? inDims[i] : d));
  if (out.some((d) => d === undefined)) throw new RangeError(`Reshape: a 0 in shape [${target.join(', ')}] has no input dim to copy (input [${inDims.join(', ')}])`);
  const neg = out.indexOf(-1);
  const total = sizeOf(inDims);
  if (neg >= 0) {
    const known = sizeOf(out.filter((_, i) => i !== neg));
    out[neg] = known === 0 ? 0 : total / known;
  }
  if (!out.every((d) => Number.isInteger(d) && d >= 0) || sizeOf(out) !== total) {
    throw new RangeError(`Reshape: cannot reshape [${inDims.join(', ')}] to [${target.join(', ')}]`);
  }
  return out;
}

function reshapeTarget(ctx: OpContext): number[] {
  const target = ctx.opset < 5 ? ctx.attrs.ints('shape') : hostNumbers(ctx.host(1));
  return reshapeDims(ctx.shape(0), target, ctx.opset >= 14 && ctx.attrs.int('allowzero', 0) !== 0);
}

function squeezeDims(ctx: OpContext): number[] {
  const dims = ctx.shape(0);
  const axes = ctx.opset < 13 ? (ctx.attrs.has('axes') ? ctx.attrs.ints('axes') : undefined) : axesFrom(ctx, 1, intsIfGiven(ctx.attrs, 'axes'));
  // An empty axes list means none given, as onnxruntime reads it.
  if (!axes?.length) return dims.filter((d) => d !== 1);
  const drop = new Set(normAxes(axes, dims.length));
  for (const a of drop) if (dims[a] !== 1) throw new RangeError(`Squeeze: axis ${a} has size ${dims[a]}, not 1`);
  return dims.filter((_, i) => !drop.has(i));
}

function unsqueezeDims(ctx: OpContext): number[] {
  const dims = ctx.shape(0);
  const axes = ctx.opset < 13 ? ctx.attrs.ints('axes') : hostNumbers(ctx.host(1));
  const rank = dims.length + axes.length;
  const add = new Set(normAxes(axes, rank));
  if (add.size !== axes.length) throw new RangeError(`Unsqueeze: repeated axes [${axes.join(', ')}]`);
  const out: number[] = [];
  let j = 0;
  for (let i = 0; i < rank; i++) out.push(add.has(i) ? 1 : dims[j++]);
  return out;
}

function flattenDims(ctx: OpContext): number[] {
  const dims = ctx.shape(0);
  let axis = ctx.attrs.int('axis', 1);
  if (axis < 0) axis += dims.length;
  if (axis < 0 || axis > dims.length) throw new RangeError(`Flatten: axis ${ctx.attrs.int('axis', 1)} is out of range for rank ${dims.length}`);
  return [sizeOf(dims.slice(0, axis)), sizeOf(dims.slice(axis))];
}

/** An entry whose output is its input with new dims (Reshape, Squeeze, Unsqueeze, Flatten). */
function reshaping(opType: string, since: number, dims: (ctx: OpContext) => number[]): OpEntry {
  return onnxOp(opType, since, {
    host: (ctx) => [hostReshape(ctx.host(0), dims(ctx))],
    run: (ctx) => [mx.reshape(ctx.input(0), dims(ctx))],
  });
}

function transposePerm(ctx: OpContext): number[] {
  const rank = ctx.shape(0).length;
  if (!ctx.attrs.has('perm')) return Array.from({ length: rank }, (_, i) => rank - 1 - i);
  const perm = normAxes(ctx.attrs.ints('perm'), rank);
  if (perm.length !== rank || new Set(perm).size !== rank) throw new RangeError(`Transpose: perm [${perm.join(', ')}] is not a permutation of ${rank} axes`);
  return perm;
}

const transposeEntry: OpEntry = onnxOp('Transpose', 1, {
  host: (ctx) => [hostTranspose(ctx.host(0), transposePerm(ctx))],
  run: (ctx) => [mx.transpose(ctx.input(0), transposePerm(ctx))],
});

const concatAxis = (ctx: OpContext): number => normAxis(ctx.attrs.int('axis', ctx.opset < 4 ? 1 : undefined), ctx.shape(0).length, 'Concat axis');

const concatEntry: OpEntry = onnxOp('Concat', 1, {
  host: (ctx) => {
    const ts = Array.from({ length: ctx.inputCount }, (_, i) => ctx.host(i));
    return [hostConcat(ts, concatAxis(ctx))];
  },
  run: (ctx) => {
    const xs = Array.from({ length: ctx.inputCount }, (_, i) => ctx.input(i));
    return [xs.length === 1 ? xs[0] : mx.concatenate(xs, concatAxis(ctx))];
  },
});

// ---------------------------------------------------------------------------------------------
// Split: sizes from the attribute (<13), the input (>=13), num_outputs (>=18) or equal parts.

function splitSizes(ctx: OpContext, dim: number): number[] {
  const n = ctx.node.outputs.length;
  let split: number[] | undefined;
  if (ctx.opset >= 13) split = ctx.has(1) ? hostNumbers(ctx.host(1)) : undefined;
  else if (ctx.attrs.has('split')) split = ctx.attrs.ints('split');
  else if (ctx.opset < 2 && ctx.has(1)) split = hostNumbers(ctx.host(1));
  // Exporters write an empty split input for "not given".
  if (split && !split.length) split = undefined;
  if (split) {
    if (split.length !== n || split.reduce((a, b) => a + b, 0) !== dim) throw new RangeError(`Split: sizes [${split.join(', ')}] do not split ${dim} into ${n} outputs`);
    return split;
  }
  if (ctx.opset >= 18 && ctx.attrs.has('num_outputs')) {
    // Chunks of ceil(dim / num_outputs); the last one takes what is left.
    const k = ctx.attrs.int('num_outputs');
    const chunk = Math.ceil(dim / k);
    return Array.from({ length: k }, (_, i) => Math.max(0, Math.min(chunk, dim - i * chunk)));
  }
  if (dim % n !== 0) throw new RangeError(`Split: dim ${dim} does not split evenly into ${n} outputs`);
  return new Array<number>(n).fill(dim / n);
}

function splitPlan(ctx: OpContext): { axis: number; starts: number[]; sizes: number[] } {
  const dims = ctx.shape(0);
  const axis = normAxis(ctx.attrs.int('axis', 0), dims.length, 'Split axis');
  const sizes = splitSizes(ctx, dims[axis]);
  const starts: number[] = [];
  sizes.reduce((acc, s) => (starts.push(acc), acc + s), 0);
  return { axis, starts, sizes };
}

const splitEntry: OpEntry = onnxOp('Split', 1, {
  host: (ctx) => {
    const t = ctx.host(0);
    const { axis, starts, sizes } = splitPlan(ctx);
    return sizes.map((s, i) => {
      const begin = t.dims.map((_, d) => (d === axis ? starts[i] : 0));
      return hostStrided(t, begin, t.dims.map(() => 1), t.dims.map((d, j) => (j === axis ? s : d)));
    });
  },
  run: (ctx) => {
    const x = ctx.input(0);
    const dims = x.shape;
    const { axis, starts, sizes } = splitPlan(ctx);
    return sizes.map((s, i) => {
      const start = dims.map((_, d) => (d === axis ? starts[i] : 0));
      const stop = dims.map((d, j) => (j === axis ? starts[i] + s : d));
      return mx.slice(x, start, stop, dims.map(() => 1));
    });
  },
});

// ---------------------------------------------------------------------------------------------
// Expand and Tile

const expandDims = (ctx: OpContext): number[] => broadcastShape(ctx.shape(0), hostNumbers(ctx.host(1)));

const expandEntry: OpEntry = onnxOp('Expand', 8, {
  hostSize: (ctx) => sizeOf(expandDims(ctx)),
  host: (ctx) => [hostBroadcast(ctx.host(0), expandDims(ctx))],
  run: (ctx) => [mx.broadcastTo(ctx.input(0), expandDims(ctx))],
});

function tileReps(ctx: OpContext): number[] {
  const reps = hostNumbers(ctx.host(1));
  const rank = ctx.shape(0).length;
  if (reps.length !== rank) throw new RangeError(`Tile: ${reps.length} repeats for an input of rank ${rank}`);
  return reps;
}

const tileEntry: OpEntry = onnxOp('Tile', 6, {
  hostSize: (ctx) => sizeOf(ctx.shape(0)) * sizeOf(tileReps(ctx)),
  host: (ctx) => [hostTile(ctx.host(0), tileReps(ctx))],
  run: (ctx) => [mx.tile(ctx.input(0), tileReps(ctx))],
});

// ---------------------------------------------------------------------------------------------
// Shape, Size, Identity: their results never need the input's data.

function shapeOf(ctx: OpContext): HostTensor {
  const dims = ctx.shape(0);
  const r = dims.length;
  const clamp = (v: number) => Math.min(Math.max(v < 0 ? v + r : v, 0), r);
  const start = clamp(ctx.attrs.int('start', 0));
  const end = clamp(ctx.attrs.int('end', r));
  return hostInt64(dims.slice(start, Math.max(start, end)));
}

const shapeEntry: OpEntry = onnxOp('Shape', 1, { placement: 'host', host: (ctx) => [shapeOf(ctx)] });

const sizeOfInput = (ctx: OpContext): HostTensor => hostInt64([sizeOf(ctx.shape(0))], []);
const sizeEntry: OpEntry = onnxOp('Size', 1, { placement: 'host', host: (ctx) => [sizeOfInput(ctx)] });

// Identity passes any value through unchanged: tensors (host or device), sequences, optionals.
const identityEntry: OpEntry = onnxOp('Identity', 1, {
  host: (ctx) => {
    const t = ctx.hostIfKnown(0);
    return t ? [t] : undefined;
  },
  run: (ctx) => [ctx.value(0)],
});

export const shapeOps: OpEntry[] = [
  ...[
    reshaping('Reshape', 1, reshapeTarget),
    reshaping('Squeeze', 1, squeezeDims),
    reshaping('Unsqueeze', 1, unsqueezeDims),
    reshaping('Flatten', 1, flattenDims),
    transposeEntry,
    concatEntry,
    splitEntry,
    expandEntry,
    tileEntry,
    shapeEntry,
    sizeEntry,
    identityEntry,
  ],
];
