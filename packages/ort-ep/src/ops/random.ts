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
import type { Attrs } from '../registry/attrs.js';
import type { OpContext, OpEntry } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { isFloatType, mxType } from './helpers/util.js';

const runs = new WeakMap<object, number>();

/** The attributes every generator has. */
interface RandomParams {
  /** The seed's float32 bits (so 0.5 and 0.7 are different seeds), or undefined: MLX's global generator. */
  seedBits?: number;
  /** The dtype attribute, where given. */
  dtype?: number;
}

function parseRandom(attrs: Attrs): RandomParams {
  return {
    seedBits: attrs.has('seed') ? new Uint32Array(Float32Array.of(attrs.float('seed')).buffer)[0] : undefined,
    dtype: attrs.has('dtype') ? attrs.int('dtype') : undefined,
  };
}

/** The key for this run of a seeded node, or undefined for MLX's global generator. */
function keyFor(ctx: OpContext<RandomParams>): mx.Array | undefined {
  const bits = ctx.params.seedBits;
  if (bits === undefined) return undefined;
  const n = runs.get(ctx.node) ?? 0;
  runs.set(ctx.node, n + 1);
  return mx.randomKey((BigInt(bits) << 32n) | BigInt(n & 0xffffffff));
}

function checkFloatOut(t: number | undefined): string | undefined {
  return t !== undefined && !isFloatType(t) ? `the output element type ${t} is not a float type` : undefined;
}

/** A distribution: its attributes, and a float32 sample of a shape. */
interface Distribution<D> {
  parse(attrs: Attrs): D;
  sample(shape: number[], key: mx.Array | undefined, d: D): mx.Array;
}

const uniform: Distribution<{ low: number; high: number }> = {
  parse: (attrs) => ({ low: attrs.float('low', 0), high: attrs.float('high', 1) }),
  sample: (shape, key, d) => mx.randomUniform(d.low, d.high, shape, 'float32', key),
};

const normal: Distribution<{ mean: number; scale: number }> = {
  parse: (attrs) => ({ mean: attrs.float('mean', 0), scale: attrs.float('scale', 1) }),
  sample: (shape, key, d) => mx.randomNormal(shape, 'float32', d.mean, d.scale, key),
};

const NOTE = "MLX's generator: same distribution, not the same values as other runtimes; seeded nodes repeat per session";

function generator<D>(opType: string, dist: Distribution<D>): OpEntry {
  return onnxOp(opType, 1, {
    note: NOTE,
    parse: (attrs) => ({ ...parseRandom(attrs), shape: attrs.ints('shape'), dist: dist.parse(attrs) }),
    check: (ctx) => checkFloatOut(ctx.params.dtype ?? OnnxDataType.FLOAT),
    run: (ctx) => [
      mx.astype(dist.sample(ctx.params.shape, keyFor(ctx), ctx.params.dist), mxType(ctx.params.dtype ?? OnnxDataType.FLOAT, ctx.where)),
    ],
  });
}

/** The *Like generators: the input's shape, and its type unless dtype says otherwise. */
function like<D>(opType: string, dist: Distribution<D>): OpEntry {
  return onnxOp(opType, 1, {
    note: NOTE,
    parse: (attrs) => ({ ...parseRandom(attrs), dist: dist.parse(attrs) }),
    check: (ctx) => checkFloatOut(ctx.params.dtype ?? ctx.inputType(0)),
    run: (ctx) => {
      const t = ctx.params.dtype ?? ctx.elemType(0);
      if (!isFloatType(t)) throw new TypeError(`${ctx.where}: the output element type ${t} is not a float type (set dtype)`);
      return [mx.astype(dist.sample(ctx.shape(0), keyFor(ctx), ctx.params.dist), mxType(t, ctx.where))];
    },
  });
}

const bernoulli = onnxOp('Bernoulli', 15, {
  note: NOTE,
  parse: parseRandom,
  run: (ctx) => {
    const p = ctx.input(0);
    const draw = mx.randomBernoulli(mx.astype(p, 'float32'), p.shape, keyFor(ctx));
    return [mx.astype(draw, mxType(ctx.params.dtype ?? ctx.elemType(0), ctx.where))];
  },
});

function parseMultinomial(attrs: Attrs): RandomParams & { dtype: number; sampleSize: number } {
  const dtype = attrs.int('dtype', OnnxDataType.INT32);
  if (dtype !== OnnxDataType.INT32 && dtype !== OnnxDataType.INT64) throw new RangeError(`dtype ${dtype} is not int32 or int64`);
  return { ...parseRandom(attrs), dtype, sampleSize: attrs.int('sample_size', 1) };
}

const multinomial = onnxOp('Multinomial', 7, {
  note: NOTE,
  parse: parseMultinomial,
  run: (ctx) => {
    // The input holds unnormalized log-probabilities [batch, classes], which is what MLX's
    // categorical sampler takes.
    const logits = mx.astype(ctx.input(0), 'float32');
    const draws = mx.randomCategoricalNumSamples(logits, -1, ctx.params.sampleSize, keyFor(ctx));
    return [mx.astype(draws, mxType(ctx.params.dtype, ctx.where))];
  },
});

export const randomOps: OpEntry[] = [
  generator('RandomUniform', uniform),
  generator('RandomNormal', normal),
  like('RandomUniformLike', uniform),
  like('RandomNormalLike', normal),
  bernoulli,
  multinomial,
];
