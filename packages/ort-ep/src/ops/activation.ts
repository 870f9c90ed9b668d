// Activations (LeakyRelu ... Mish, Swish), Softmax/LogSoftmax/Hardmax and Dropout (inference).
// Each op is a closed form over MLX elementwise ops; attribute defaults are the spec's.
// The opset ranges are the versions where the semantics are the same: later versions only
// widened the type lists (bfloat16, ...), which MLX holds anyway.
import * as mx from '@mlx/core';
import { gelu, logSoftmax, silu, softmax, type GeluApproximation } from '@mlx/kernels';
import type { Attrs } from '../registry/attrs.js';
import type { CheckContext, OpContext, OpEntry, OpResult } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { hostNumbers, isFloatType, keepType, normAxis } from './helpers/util.js';

/** A unary op keeping its input's type, with the attributes `parse` reads. */
function unary<P = undefined>(
  opType: string,
  since: number,
  f: (x: mx.Array, ctx: OpContext<P>) => mx.Array,
  parse?: (attrs: Attrs) => P,
): OpEntry<P> {
  return onnxOp<P>(opType, since, { parse, run: (ctx) => [keepType(f(ctx.input(0), ctx), ctx.elemType(0))] });
}

const alphaOf =
  (def: number) =>
  (attrs: Attrs): number =>
    attrs.float('alpha', def);

const leakyRelu = (x: mx.Array, alpha: number) => mx.where(mx.less(x, 0), mx.multiply(x, alpha), x);
const softplus = (x: mx.Array) => mx.logaddexp(x, mx.zerosLike(x)); // log(1 + e^x) without overflow
// One native pass in float32 (composed, these are four or five passes that MLX's CPU compile barely fuses).
// The kernel has no VJP: under a gradient (MlxSession.valueAndGrad) the composed form runs.
const native = (x: mx.Array) => x.dtype === 'float32' && !mx.differentiating();
const hardSigmoid = (x: mx.Array, alpha: number, beta: number) =>
  native(x) ? mx.ext.hardSigmoid(x, alpha, beta, false) : mx.clip(mx.add(mx.multiply(x, alpha), beta), 0, 1);
const hardSwish = (x: mx.Array) =>
  native(x) ? mx.ext.hardSigmoid(x, 1 / 6, 0.5, true) : mx.multiply(x, mx.clip(mx.add(mx.multiply(x, 1 / 6), 0.5), 0, 1));

function elu(x: mx.Array, alpha: number): mx.Array {
  return mx.where(mx.less(x, 0), mx.multiply(mx.expm1(x), alpha), x);
}

const geluModes = ['none', 'tanh'];

/** Gelu's approximate attribute; @mlx/kernels' gelu computes it (the fused kernel for float32 on the CPU). */
function parseGelu(attrs: Attrs): GeluApproximation {
  const approximate = attrs.string('approximate', 'none');
  if (!geluModes.includes(approximate)) throw new RangeError(`Gelu approximate='${approximate}' is not one of 'none', 'tanh'`);
  return approximate as GeluApproximation;
}

interface ShrinkParams {
  lambd: number;
  bias: number;
}

/** Shrink takes every numeric type; integer inputs with fractional lambd/bias go through float32 and back. */
function shrink(x: mx.Array, ctx: OpContext<ShrinkParams>): mx.Array {
  const { lambd, bias } = ctx.params;
  const exact = isFloatType(ctx.elemType(0)) || (Number.isInteger(lambd) && Number.isInteger(bias));
  const xs = exact ? x : mx.astype(x, 'float32');
  const y = mx.where(mx.less(xs, -lambd), mx.add(xs, bias), mx.where(mx.greater(xs, lambd), mx.subtract(xs, bias), mx.zerosLike(xs)));
  return y;
}

// ---------------------------------------------------------------------------------------------
// Softmax family. Opset < 13 coerces the input to 2-D [prod(d[:axis]), prod(d[axis:])] and
// normalises over the flattened trailing dims (default axis 1); opset >= 13 works on one axis
// (default -1).

type AxisOp = (x: mx.Array, axis: number) => mx.Array;

function softmaxLike(opType: string, f: AxisOp): OpEntry[] {
  const legacy = onnxOp(opType, 1, {
    until: 12,
    parse: (attrs) => attrs.int('axis', 1),
    run: (ctx) => {
      const x = ctx.input(0);
      if (x.size === 0) return [x];
      const axis = normAxis(ctx.params, Math.max(x.ndim, 1));
      const outer = x.shape.slice(0, axis).reduce((a, b) => a * b, 1);
      const flat = mx.reshape(x, [outer, -1]);
      return [keepType(mx.reshape(f(flat, 1), x.shape), ctx.elemType(0))];
    },
  });
  const perAxis = onnxOp(opType, 13, {
    parse: (attrs) => attrs.int('axis', -1),
    run: (ctx) => {
      const x = ctx.input(0);
      if (x.size === 0) return [x];
      return [keepType(f(x, normAxis(ctx.params, x.ndim)), ctx.elemType(0))];
    },
  });
  return [legacy, perAxis];
}

// Softmax and LogSoftmax are @mlx/kernels': the fused CPU kernel on the last axis of float32
// input, MLX's precise softmax elsewhere; log-softmax in onnxruntime's order, (x - max) -
// log(sum(exp(x - max))), so that next to the type's limit the log term is not lost (two maxima of
// 3e38 give -log 2, not 0).
const softmaxAxis: AxisOp = (x, axis) => softmax(x, axis);
const logSoftmaxAxis: AxisOp = (x, axis) => logSoftmax(x, axis);

/** One-hot of the first maximum along `axis`. */
function hardmax(x: mx.Array, axis: number): mx.Array {
  const idx = mx.argmax(x, axis, { keepdims: true });
  const shape = x.shape.map((d, i) => (i === axis ? d : 1));
  const positions = mx.reshape(mx.arange(0, x.shape[axis], 1, idx.dtype), shape);
  return mx.astype(mx.equal(positions, idx), x.dtype);
}

// ---------------------------------------------------------------------------------------------
// Dropout: inference is the identity and the mask (where requested) is all true. Training mode is
// random: MLX's generator cannot reproduce onnxruntime's or numpy's masks, so it is refused.

function dropoutCheck(ctx: CheckContext<boolean>): string | undefined {
  if (ctx.opset < 7) {
    return ctx.params
      ? undefined
      : `Dropout-${ctx.opset < 6 ? 1 : 6} with is_test=0 is training-mode (random) dropout, which is not supported`;
  }
  if (ctx.opset < 12 || !ctx.node.inputs[2]) return undefined;
  const mode = ctx.constantInput(2);
  // A training_mode fed at run time is read then (dropoutDeterministic).
  if (!mode || !hostNumbers(mode)[0]) return undefined;
  const ratio = ctx.node.inputs[1] ? ctx.constantInput(1) : undefined;
  if (ratio === undefined && ctx.node.inputs[1]) return undefined;
  if (ratio && hostNumbers(ratio)[0] === 0) return undefined; // ratio 0 drops nothing: the identity again
  return DROPOUT_TRAINING;
}

const DROPOUT_TRAINING =
  'Dropout with training_mode=true is random and cannot reproduce the reference masks; only inference (training_mode false or absent, or ratio 0) is supported';

/** Training mode and ratio fed at run time (small scalars, read on the host): only the deterministic cases run. */
function dropoutDeterministic(ctx: OpContext): void {
  if (ctx.opset < 12 || !ctx.has(2)) return;
  if (!hostNumbers(ctx.host(2))[0]) return;
  const ratio = ctx.has(1) ? hostNumbers(ctx.host(1))[0] : 0.5;
  if (ratio !== 0) throw new RangeError(`${ctx.where}: ${DROPOUT_TRAINING} (ratio ${ratio})`);
}

function dropout(ctx: OpContext): OpResult[] {
  dropoutDeterministic(ctx);
  const x = ctx.input(0);
  if (!ctx.wants(1)) return [x];
  // Dropout-1..9 typed the mask like the input; from 10 it is bool. (onnxruntime fills the
  // mask of 7..11 with zeros; the spec and its reference say nothing is dropped: all true.)
  const mask = ctx.opset >= 10 ? mx.onesLike(mx.astype(x, 'bool')) : mx.onesLike(x);
  return [x, mask];
}

const dropoutEntry = onnxOp('Dropout', 1, {
  // is_test (opsets 1-6): inference mode.
  parse: (attrs) => attrs.int('is_test', 0) !== 0,
  check: dropoutCheck,
  run: dropout,
  note: 'inference only: training_mode must be absent or false, or the ratio 0 (a fed training_mode is checked at run time)',
});

// ---------------------------------------------------------------------------------------------

// PRelu before opset 7 has no numpy broadcasting: a slope of one value is shared, and a 1-D slope
// of C values is one per channel (axis 1), as PyTorch's exporter emitted nn.PReLU(C).
const prelu: OpEntry<boolean> = onnxOp('PRelu', 1, {
  parse: (_attrs, opset) => opset < 7,
  run: (ctx) => {
    const x = ctx.input(0);
    let slope = ctx.input(1);
    if (ctx.params && slope.ndim === 1 && slope.size > 1 && x.ndim >= 2) {
      if (slope.shape[0] !== x.shape[1])
        throw new RangeError(`${ctx.where}: a slope of ${slope.shape[0]} values for ${x.shape[1]} channels`);
      slope = mx.reshape(slope, [slope.shape[0], ...Array(x.ndim - 2).fill(1)]);
    }
    return [keepType(mx.where(mx.less(x, 0), mx.multiply(x, slope), x), ctx.elemType(0))];
  },
});

export const activationOps: OpEntry[] = [
  unary('LeakyRelu', 1, (x, c) => leakyRelu(x, c.params), alphaOf(0.01)),
  prelu,
  unary('Elu', 1, (x, c) => elu(x, c.params), alphaOf(1)),
  unary(
    'Selu',
    1,
    (x, c) => {
      const { alpha, gamma } = c.params;
      return mx.multiply(mx.where(mx.lessEqual(x, 0), mx.multiply(mx.expm1(x), alpha), x), gamma);
    },
    (attrs) => ({ alpha: attrs.float('alpha', 1.6732631921768188), gamma: attrs.float('gamma', 1.0507010221481323) }),
  ),
  unary(
    'Celu',
    12,
    (x, c) => {
      const alpha = c.params;
      return mx.add(mx.maximum(x, 0), mx.minimum(mx.multiply(mx.expm1(mx.divide(x, alpha)), alpha), 0));
    },
    alphaOf(1),
  ),
  unary('ThresholdedRelu', 10, (x, c) => mx.where(mx.greater(x, c.params), x, mx.zerosLike(x)), alphaOf(1)),
  unary(
    'HardSigmoid',
    1,
    (x, c) => hardSigmoid(x, c.params.alpha, c.params.beta),
    (attrs) => ({ alpha: attrs.float('alpha', 0.2), beta: attrs.float('beta', 0.5) }),
  ),
  unary('HardSwish', 14, hardSwish),
  unary('Softplus', 1, softplus),
  unary('Softsign', 1, (x) => mx.divide(x, mx.add(mx.abs(x), 1))),
  unary('Gelu', 20, (x, c) => gelu(x, { approximate: c.params }), parseGelu),
  unary('Mish', 18, (x) => mx.multiply(x, mx.tanh(softplus(x)))),
  unary('Shrink', 9, shrink, (attrs) => ({ lambd: attrs.float('lambd', 0.5), bias: attrs.float('bias', 0) })),
  unary('Swish', 24, (x, c) => silu(x, { beta: c.params }), alphaOf(1)),
  ...softmaxLike('Softmax', softmaxAxis),
  ...softmaxLike('LogSoftmax', logSoftmaxAxis),
  ...softmaxLike('Hardmax', hardmax),
  dropoutEntry,
];

/** Shared with the recurrent ops, whose activation lists name the same functions. */
export { elu, leakyRelu, softplus };
