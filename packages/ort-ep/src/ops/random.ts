// Random generators: RandomUniform, RandomNormal, RandomUniformLike, RandomNormalLike, Bernoulli,
// Multinomial (opsets 1/7/15 and their opset-22 type updates), on MLX's random ops.
//
// Their values can never equal another runtime's: numpy (the ONNX reference) and onnxruntime use
// their own generators. What we promise is the distribution, the shape and the element type,
// and, for a node with a `seed`, a reproducible sequence: the n-th run of a seeded node in a
// session draws from key(seed, n), so two sessions of one model produce the same values, while
// successive runs still differ (onnxruntime's seeded kernels behave the same way).
// Samples are drawn in float32 and cast: MLX cannot draw float64 on every device.
import * as mx from '@mlx/core';
import { OnnxDataType } from '../onnx/index.js';
import type { CheckContext, OpContext, OpEntry } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { isFloatType, mxType } from './helpers/util.js';

const runs = new WeakMap<object, number>();

/** The key for this run of a seeded node, or undefined for MLX's global generator. */
function keyFor(ctx: OpContext): mx.Array | undefined {
  if (!ctx.attrs.has('seed')) return undefined;
  const n = runs.get(ctx.node) ?? 0;
  runs.set(ctx.node, n + 1);
  // The seed is a float attribute: its float32 bits, so 0.5 and 0.7 are different seeds.
  const bits = new Uint32Array(Float32Array.of(ctx.attrs.float('seed')).buffer)[0];
  return mx.randomKey((BigInt(bits) << 32n) | BigInt(n & 0xffffffff));
}

/** The output element type: the dtype attribute, else `fallback` (the input's type for the *Like ops). */
const outType = (ctx: CheckContext | OpContext, fallback: number | undefined): number | undefined =>
  ctx.attrs.has('dtype') ? ctx.attrs.int('dtype') : fallback;

function checkFloatOut(ctx: CheckContext, fallback: number | undefined): string | undefined {
  const t = outType(ctx, fallback);
  return t !== undefined && !isFloatType(t) ? `the output element type ${t} is not a float type` : undefined;
}

type Sampler = (shape: number[], key: mx.Array | undefined, ctx: OpContext) => mx.Array;

const uniform: Sampler = (shape, key, ctx) =>
  mx.randomUniform(ctx.attrs.float('low', 0), ctx.attrs.float('high', 1), shape, 'float32', key);

const normal: Sampler = (shape, key, ctx) =>
  mx.randomNormal(shape, 'float32', ctx.attrs.float('mean', 0), ctx.attrs.float('scale', 1), key);

const NOTE = "MLX's generator: same distribution, not the same values as other runtimes; seeded nodes repeat per session";

function generator(opType: string, since: number, until: number | undefined, sample: Sampler): OpEntry {
  return onnxOp(opType, since, {
    until, note: NOTE,
    check: (ctx) => checkFloatOut(ctx, OnnxDataType.FLOAT),
    run: (ctx) => {
      const shape = ctx.attrs.ints('shape');
      return [mx.astype(sample(shape, keyFor(ctx), ctx), mxType(outType(ctx, OnnxDataType.FLOAT)!, ctx.where))];
    },
  });
}

function like(opType: string, since: number, until: number | undefined, sample: Sampler): OpEntry {
  return onnxOp(opType, since, {
    until, note: NOTE,
    check: (ctx) => checkFloatOut(ctx, ctx.inputType(0)),
    run: (ctx) => {
      const t = outType(ctx, ctx.elemType(0))!;
      if (!isFloatType(t)) throw new TypeError(`${ctx.where}: the output element type ${t} is not a float type (set dtype)`);
      return [mx.astype(sample(ctx.shape(0), keyFor(ctx), ctx), mxType(t, ctx.where))];
    },
  });
}

function bernoulli(since: number, until?: number): OpEntry {
  return onnxOp('Bernoulli', since, {
    until, note: NOTE,
    run: (ctx) => {
      const p = ctx.input(0);
      const draw = mx.randomBernoulli(mx.astype(p, 'float32'), p.shape, keyFor(ctx));
      return [mx.astype(draw, mxType(outType(ctx, ctx.elemType(0))!, ctx.where))];
    },
  });
}

function multinomial(since: number, until?: number): OpEntry {
  return onnxOp('Multinomial', since, {
    until, note: NOTE,
    check: (ctx) => {
      const t = ctx.attrs.int('dtype', OnnxDataType.INT32);
      return t === OnnxDataType.INT32 || t === OnnxDataType.INT64 ? undefined : `dtype ${t} is not int32 or int64`;
    },
    run: (ctx) => {
      // The input holds unnormalized log-probabilities [batch, classes], which is what MLX's
      // categorical sampler takes.
      const logits = mx.astype(ctx.input(0), 'float32');
      const draws = mx.randomCategoricalNumSamples(logits, -1, ctx.attrs.int('sample_size', 1), keyFor(ctx));
      return [mx.astype(draws, mxType(ctx.attrs.int('dtype', OnnxDataType.INT32), ctx.where))];
    },
  });
}

export const randomOps: OpEntry[] = [
  generator('RandomUniform', 1, undefined, uniform),
  generator('RandomNormal', 1, undefined, normal),
  like('RandomUniformLike', 1, undefined, uniform),
  like('RandomNormalLike', 1, undefined, normal),
  bernoulli(15),
  multinomial(7),
];
