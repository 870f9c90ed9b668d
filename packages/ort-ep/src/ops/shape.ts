// Shape ops: Reshape, Transpose, Concat, Split, Squeeze, Unsqueeze, Flatten, Expand, Tile, Shape,
// Size, Identity. Each has a host() twin over small host tensors, so shape computations
// (Shape -> Gather -> Concat -> Reshape) are folded on the host and Reshape/Expand/Tile get static
// arguments; run() builds the MLX op. Creation and layout ops live in constant.ts / layout.ts.
import * as mx from '@mlx/core';
import type { HostTensor } from '../onnx/index.js';
import type { Attrs } from '../registry/attrs.js';
import type { OpContext, OpEntry } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { checkResultShape } from './helpers/bounds.js';
import { hostBroadcast, hostConcat, hostReshape, hostStrided, hostTile, hostTranspose } from './helpers/shape-host.js';
import {
  axesFrom,
  broadcastShape,
  hostInt64,
  hostNumbers,
  intsIfGiven,
  normAxes,
  normAxis,
  optionalNumbers,
  sizeOf,
} from './helpers/util.js';

// ---------------------------------------------------------------------------------------------
// Output shapes, shared by host() and run()

/** Reshape's target: 0 copies the input dim (unless allowzero), one -1 is inferred. */
export function reshapeDims(inDims: readonly number[], target: readonly number[], allowzero: boolean): number[] {
  const out = target.map((d, i) => (d === 0 && !allowzero ? inDims[i] : d));
  if (out.some((d) => d === undefined))
    throw new RangeError(`Reshape: a 0 in shape [${target.join(', ')}] has no input dim to copy (input [${inDims.join(', ')}])`);
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

interface ReshapeParams {
  /** Reshape-1's shape attribute (later opsets take it as input 1). */
  shape?: number[];
  allowzero: boolean;
}

const parseReshape = (attrs: Attrs, opset: number): ReshapeParams => ({
  shape: opset < 5 ? attrs.ints('shape') : undefined,
  allowzero: opset >= 14 && attrs.int('allowzero', 0) !== 0,
});

function reshapeTarget(ctx: OpContext<ReshapeParams>): number[] {
  const target = ctx.params.shape ?? hostNumbers(ctx.host(1));
  return reshapeDims(ctx.shape(0), target, ctx.params.allowzero);
}

/** Squeeze's and Unsqueeze's axes attribute (before opset 13; the axes input after). */
const parseAxes = (attrs: Attrs): number[] | undefined => intsIfGiven(attrs, 'axes');

function squeezeDims(ctx: OpContext<number[] | undefined>): number[] {
  const dims = ctx.shape(0);
  const axes = ctx.opset < 13 ? ctx.params : axesFrom(ctx, 1, ctx.params);
  // An empty axes list means none given, as onnxruntime reads it.
  if (!axes?.length) return dims.filter((d) => d !== 1);
  const drop = new Set(normAxes(axes, dims.length));
  for (const a of drop) if (dims[a] !== 1) throw new RangeError(`Squeeze: axis ${a} has size ${dims[a]}, not 1`);
  return dims.filter((_, i) => !drop.has(i));
}

function parseUnsqueeze(attrs: Attrs, opset: number): number[] | undefined {
  return opset < 13 ? attrs.ints('axes') : undefined;
}

function unsqueezeDims(ctx: OpContext<number[] | undefined>): number[] {
  const dims = ctx.shape(0);
  const axes = ctx.params ?? hostNumbers(ctx.host(1));
  const rank = dims.length + axes.length;
  const add = new Set(normAxes(axes, rank));
  if (add.size !== axes.length) throw new RangeError(`Unsqueeze: repeated axes [${axes.join(', ')}]`);
  const out: number[] = [];
  let j = 0;
  for (let i = 0; i < rank; i++) out.push(add.has(i) ? 1 : dims[j++]);
  return out;
}

function flattenDims(ctx: OpContext<number>): number[] {
  const dims = ctx.shape(0);
  let axis = ctx.params;
  if (axis < 0) axis += dims.length;
  if (axis < 0 || axis > dims.length) throw new RangeError(`Flatten: axis ${ctx.params} is out of range for rank ${dims.length}`);
  return [sizeOf(dims.slice(0, axis)), sizeOf(dims.slice(axis))];
}

/** An entry whose output is its input with new dims (Reshape, Squeeze, Unsqueeze, Flatten). */
function reshaping<P>(
  opType: string,
  since: number,
  parse: (attrs: Attrs, opset: number) => P,
  dims: (ctx: OpContext<P>) => number[],
): OpEntry<P> {
  return onnxOp<P>(opType, since, {
    parse,
    host: (ctx) => [hostReshape(ctx.host(0), dims(ctx))],
    run: (ctx) => [mx.reshape(ctx.input(0), dims(ctx))],
  });
}

function transposePerm(ctx: OpContext<number[] | undefined>): number[] {
  const rank = ctx.shape(0).length;
  if (!ctx.params) return Array.from({ length: rank }, (_, i) => rank - 1 - i);
  const perm = normAxes(ctx.params, rank);
  if (perm.length !== rank || new Set(perm).size !== rank)
    throw new RangeError(`Transpose: perm [${perm.join(', ')}] is not a permutation of ${rank} axes`);
  return perm;
}

const transposeEntry = onnxOp('Transpose', 1, {
  parse: (attrs) => intsIfGiven(attrs, 'perm'),
  host: (ctx) => [hostTranspose(ctx.host(0), transposePerm(ctx))],
  run: (ctx) => [mx.transpose(ctx.input(0), transposePerm(ctx))],
});

const concatAxis = (ctx: OpContext<number>): number => normAxis(ctx.params, ctx.shape(0).length, 'Concat axis');

/**
 * The inputs Concat joins: as onnxruntime does, an input with no elements is left out (its other
 * dims need not match: transformers.js feeds an empty past of shape [0, heads, 0, dim] beside a
 * batch of 1), unless every input is empty. Ranks must still agree.
 */
function concatInputs(ctx: OpContext<number>): number[] {
  const shapes = Array.from({ length: ctx.inputCount }, (_, i) => ctx.shape(i));
  const rank = shapes[0].length;
  const other = shapes.findIndex((sh) => sh.length !== rank);
  if (other >= 0)
    throw new RangeError(`Concat: input ${other} has rank ${shapes[other].length}, input 0 rank ${rank} (all inputs need the same rank)`);
  const kept = shapes.flatMap((sh, i) => (sh.some((d) => d === 0) ? [] : [i]));
  return kept.length ? kept : shapes.map((_, i) => i);
}

const concatEntry = onnxOp('Concat', 1, {
  // axis is required from opset 4 on.
  parse: (attrs, opset) => attrs.int('axis', opset < 4 ? 1 : undefined),
  host: (ctx) => {
    const ts = concatInputs(ctx).map((i) => ctx.host(i));
    return [hostConcat(ts, concatAxis(ctx))];
  },
  run: (ctx) => {
    const xs = concatInputs(ctx).map((i) => ctx.input(i));
    return [xs.length === 1 ? xs[0] : mx.concatenate(xs, concatAxis(ctx))];
  },
});

// ---------------------------------------------------------------------------------------------
// Split: sizes from the attribute (<13), the input (>=13), num_outputs (>=18) or equal parts.

interface SplitParams {
  axis: number;
  /** The split attribute (before opset 13). */
  split?: number[];
  /** Opset 18+. */
  numOutputs?: number;
}

const parseSplit = (attrs: Attrs, opset: number): SplitParams => ({
  axis: attrs.int('axis', 0),
  split: opset < 13 ? intsIfGiven(attrs, 'split') : undefined,
  numOutputs: opset >= 18 && attrs.has('num_outputs') ? attrs.int('num_outputs') : undefined,
});

function splitSizes(ctx: OpContext<SplitParams>, dim: number): number[] {
  const n = ctx.node.outputs.length;
  let split: number[] | undefined;
  if (ctx.opset >= 13) split = optionalNumbers(ctx, 1);
  else if (ctx.params.split) split = ctx.params.split;
  else if (ctx.opset < 2) split = optionalNumbers(ctx, 1);
  // Exporters write an empty split input for "not given".
  if (split && !split.length) split = undefined;
  if (split) {
    const negative = split.find((s) => !(s >= 0));
    if (negative !== undefined) throw new RangeError(`Split: size ${negative} in [${split.join(', ')}] is negative`);
    if (split.length !== n || split.reduce((a, b) => a + b, 0) !== dim)
      throw new RangeError(`Split: sizes [${split.join(', ')}] do not split ${dim} into ${n} outputs`);
    return split;
  }
  if (ctx.params.numOutputs !== undefined) {
    // Chunks of ceil(dim / num_outputs); the last one takes what is left.
    const k = ctx.params.numOutputs;
    if (k !== n) throw new RangeError(`Split: num_outputs ${k} does not match the node's ${n} outputs`);
    const chunk = Math.ceil(dim / k);
    return Array.from({ length: k }, (_, i) => Math.max(0, Math.min(chunk, dim - i * chunk)));
  }
  if (dim % n !== 0) throw new RangeError(`Split: dim ${dim} does not split evenly into ${n} outputs`);
  return new Array<number>(n).fill(dim / n);
}

function splitPlan(ctx: OpContext<SplitParams>): { axis: number; starts: number[]; sizes: number[] } {
  const dims = ctx.shape(0);
  const axis = normAxis(ctx.params.axis, dims.length, 'Split axis');
  const sizes = splitSizes(ctx, dims[axis]);
  const starts: number[] = [];
  let at = 0;
  for (const s of sizes) {
    starts.push(at);
    at += s;
  }
  return { axis, starts, sizes };
}

const splitEntry = onnxOp('Split', 1, {
  parse: parseSplit,
  host: (ctx) => {
    const t = ctx.host(0);
    const { axis, starts, sizes } = splitPlan(ctx);
    return sizes.map((s, i) => {
      const begin = t.dims.map((_, d) => (d === axis ? starts[i] : 0));
      return hostStrided(
        t,
        begin,
        t.dims.map(() => 1),
        t.dims.map((d, j) => (j === axis ? s : d)),
      );
    });
  },
  run: (ctx) => {
    const x = ctx.input(0);
    const dims = x.shape;
    const { axis, starts, sizes } = splitPlan(ctx);
    return sizes.map((s, i) => {
      const start = dims.map((_, d) => (d === axis ? starts[i] : 0));
      const stop = dims.map((d, j) => (j === axis ? starts[i] + s : d));
      return mx.slice(
        x,
        start,
        stop,
        dims.map(() => 1),
      );
    });
  },
});

// ---------------------------------------------------------------------------------------------
// Expand and Tile

/** Expand's target: non-negative integer dims (onnxruntime refuses others), broadcast with x's shape. */
function expandDims(ctx: OpContext): number[] {
  const shape = hostNumbers(ctx.host(1));
  const bad = shape.find((d) => !Number.isSafeInteger(d) || d < 0);
  if (bad !== undefined)
    throw new RangeError(`Expand: the shape [${shape.join(', ')}] has a dim ${bad} that is not a non-negative integer`);
  return broadcastShape(ctx.shape(0), shape);
}

const expandEntry: OpEntry = onnxOp('Expand', 8, {
  hostSize: (ctx) => sizeOf(expandDims(ctx)),
  host: (ctx) => [hostBroadcast(ctx.host(0), expandDims(ctx))],
  run: (ctx) => {
    const dims = expandDims(ctx);
    checkResultShape(ctx, dims, ctx.input(0).itemsize, 'Expand');
    return [mx.broadcastTo(ctx.input(0), dims)];
  },
});

/** Tile's repeats: one non-negative integer per axis of x (onnxruntime refuses negative ones). */
function tileReps(ctx: OpContext): number[] {
  const reps = hostNumbers(ctx.host(1));
  const rank = ctx.shape(0).length;
  if (reps.length !== rank) throw new RangeError(`Tile: ${reps.length} repeats for an input of rank ${rank}`);
  const bad = reps.find((r) => !Number.isSafeInteger(r) || r < 0);
  if (bad !== undefined) throw new RangeError(`Tile: repeat ${bad} in [${reps.join(', ')}] is not a non-negative integer`);
  return reps;
}

const tileEntry: OpEntry = onnxOp('Tile', 6, {
  hostSize: (ctx) => sizeOf(ctx.shape(0)) * sizeOf(tileReps(ctx)),
  host: (ctx) => [hostTile(ctx.host(0), tileReps(ctx))],
  run: (ctx) => {
    const x = ctx.input(0);
    const reps = tileReps(ctx);
    checkResultShape(
      ctx,
      x.shape.map((d, i) => d * reps[i]),
      x.itemsize,
      'Tile',
    );
    return [mx.tile(x, reps)];
  },
});

// ---------------------------------------------------------------------------------------------
// Shape, Size, Identity: their results never need the input's data.

/** Shape's start and end (opset 15+); end's default is the rank. */
interface ShapeParams {
  start: number;
  end?: number;
}

function shapeOf(ctx: OpContext<ShapeParams>): HostTensor {
  const dims = ctx.shape(0);
  const r = dims.length;
  const clamp = (v: number) => Math.min(Math.max(v < 0 ? v + r : v, 0), r);
  const start = clamp(ctx.params.start);
  const end = clamp(ctx.params.end ?? r);
  return hostInt64(dims.slice(start, Math.max(start, end)));
}

const shapeEntry = onnxOp('Shape', 1, {
  parse: (attrs): ShapeParams => ({ start: attrs.int('start', 0), end: attrs.has('end') ? attrs.int('end') : undefined }),
  placement: 'host',
  host: (ctx) => [shapeOf(ctx)],
});

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
  reshaping('Reshape', 1, parseReshape, reshapeTarget),
  reshaping('Squeeze', 1, parseAxes, squeezeDims),
  reshaping('Unsqueeze', 1, parseUnsqueeze, unsqueezeDims),
  reshaping('Flatten', 1, (attrs) => attrs.int('axis', 1), flattenDims),
  transposeEntry,
  concatEntry,
  splitEntry,
  expandEntry,
  tileEntry,
  shapeEntry,
  sizeEntry,
  identityEntry,
];
