// Softmax cross-entropy with integer labels, an ignore index and optional class weights, with
// its closed-form pullback (softmax − one-hot, weighted) registered as its custom VJP; and the
// negative log-likelihood of given log-probabilities that it reduces to.
import {
  arange,
  astype,
  divide,
  equal,
  expandDims,
  moveaxis,
  multiply,
  negative,
  notEqual,
  ones,
  reshape,
  scalar,
  scope,
  squeeze,
  stopGradient,
  subtract,
  sum,
  take,
  takeAlongAxis,
  where,
  zerosLike,
  type Array,
} from '@mlx/core';
import { exp, logsumexp } from './accurate-math.js';
import { defineCustomVjp } from './custom-vjp.js';

export type LossReduction = 'none' | 'sum' | 'mean';

export interface NllLossOptions {
  /** Labels equal to it contribute nothing (no loss, no gradient, not counted by 'mean'). */
  ignoreIndex?: number | null;
  /** 'mean' (default) divides by the total weight of the labels that are not ignored. */
  reduction?: LossReduction;
  /** The axis that holds the classes (default −1; ONNX's losses use 1). */
  classAxis?: number;
  /** Per-class weights [C] (constants: no gradient). */
  weights?: Array | null;
  /**
   * What 'mean' gives when every label is ignored (or the counted weights sum to 0): 'zero'
   * (default; a batch of padding never poisons a training step) or 'nan' (0/0, as the ONNX
   * reference computes it).
   */
  emptyMean?: 'zero' | 'nan';
}

export type SoftmaxCrossEntropyOptions = NllLossOptions;

interface LossConfig {
  [key: string]: string | number | boolean | null;
  ignoreIndex: number | null;
  reduction: LossReduction;
  classAxis: number;
  hasWeights: boolean;
  emptyMean: 'zero' | 'nan';
}

/** Per-example weight: the class weight of its label (1 without weights), 0 where ignored. */
function exampleWeights(rawLabels: Array, dtype: Array['dtype'], c: LossConfig, weights?: Array): { safeLabels: Array; w: Array } {
  // Labels are indices: MLX cannot (and need not) differentiate with respect to them.
  const labels = stopGradient(rawLabels);
  const valid = c.ignoreIndex === null ? null : notEqual(labels, c.ignoreIndex);
  const safeLabels = valid ? where(valid, labels, scalar(0, labels.dtype)) : labels;
  // Class weights are differentiable (ONNX's losses take them as an input, which a caller may
  // train): the loss is linear in the weight gathered at each label, and 'mean' divides by their sum.
  let w = weights ? take(astype(weights, dtype), safeLabels, 0) : ones(labels.shape, dtype);
  if (valid) w = where(valid, w, scalar(0, dtype));
  return { safeLabels, w };
}

/**
 * The 'mean' divisor: the total weight of the labels that count, or (no weights, nothing
 * ignored) their number. When every label is ignored the total is 0 and so is the numerator; the
 * loss is then 0 with emptyMean 'zero' (the divisor becomes 1), else 0/0 = NaN.
 */
function meanDivisor(w: Array, c: LossConfig): Array | number {
  if (!c.hasWeights && c.ignoreIndex === null) return Math.max(w.size, 1);
  const total = sum(w);
  return c.emptyMean === 'nan' ? total : where(equal(total, 0), scalar(1, w.dtype), total);
}

/** The reduced negative log-likelihood of logp (classes last) at the labels. */
function nllOf(logp: Array, labels: Array, c: LossConfig, weights?: Array): Array {
  const { safeLabels, w } = exampleWeights(labels, logp.dtype, c, weights);
  const picked = squeeze(takeAlongAxis(logp, expandDims(astype(safeLabels, 'int32'), -1), -1), -1);
  const losses = multiply(negative(picked), w);
  if (c.reduction === 'none') return losses;
  const total = sum(losses);
  return c.reduction === 'sum' ? total : divide(total, meanDivisor(w, c));
}

const classesLast = (x: Array, c: LossConfig) => (c.classAxis === x.ndim - 1 ? x : moveaxis(x, c.classAxis, -1));

function lossForward(logits: Array, labels: Array, c: LossConfig, weights?: Array): Array {
  return scope(() => {
    const z = classesLast(logits, c);
    return nllOf(subtract(z, logsumexp(z, -1, { keepdims: true })), labels, c, weights);
  });
}

/**
 * The negative log-likelihood of log-probabilities (classes on classAxis) at integer labels
 * (logProbs' shape without the class axis), with ignoreIndex, class weights and a reduction.
 * Labels must lie in [0, C) unless ignored: they index the classes unchecked. Differentiated by
 * MLX's autodiff, in the log-probabilities (−weight·upstream at each label) and the class weights.
 */
export function nllLoss(logProbs: Array, labels: Array, options: NllLossOptions = {}): Array {
  const c = lossConfig(logProbs, options);
  return scope(() => nllOf(classesLast(logProbs, c), labels, c, options.weights ?? undefined));
}

/** The pullback with respect to the logits: (softmax − onehot(label))·weight·(upstream). */
export function softmaxCrossEntropyVjp(logits: Array, labels: Array, gradOut: Array, options: SoftmaxCrossEntropyOptions = {}): Array {
  const c = lossConfig(logits, options);
  return scope(() => {
    const moved = !(c.classAxis === logits.ndim - 1);
    const z = classesLast(logits, c);
    const classes = z.shape[z.ndim - 1];
    const p = exp(subtract(z, logsumexp(z, -1, { keepdims: true })));
    const { safeLabels, w } = exampleWeights(labels, z.dtype, c, options.weights ?? undefined);
    const onehot = astype(equal(arange(0, classes, 1, 'int32'), expandDims(astype(safeLabels, 'int32'), -1)), z.dtype);
    const upstream =
      c.reduction === 'none' ? gradOut : c.reduction === 'sum' ? reshape(gradOut, []) : divide(reshape(gradOut, []), meanDivisor(w, c));
    const scaleRows = expandDims(multiply(w, upstream), -1);
    const dz = multiply(subtract(p, onehot), scaleRows);
    return moved ? moveaxis(dz, -1, c.classAxis) : dz;
  });
}

function lossConfig(logits: Array, options: NllLossOptions): LossConfig {
  const axis = options.classAxis ?? -1;
  const a = axis < 0 ? axis + logits.ndim : axis;
  if (a < 0 || a >= logits.ndim) throw new RangeError(`classAxis ${axis} is out of range for logits of rank ${logits.ndim}`);
  return {
    ignoreIndex: options.ignoreIndex ?? null,
    reduction: options.reduction ?? 'mean',
    classAxis: a,
    hasWeights: !!options.weights,
    emptyMean: options.emptyMean ?? 'zero',
  };
}

const lossOp = defineCustomVjp<LossConfig>(
  ([logits, labels, weights], c) => [lossForward(logits, labels, c, c.hasWeights ? weights : undefined)],
  ([logits, labels, weights], [dy], _o, c) => {
    const dlogits = softmaxCrossEntropyVjp(logits, labels, dy, { ...c, weights: c.hasWeights ? weights : null });
    return [dlogits, zerosLike(labels), ...(c.hasWeights ? [zerosLike(weights)] : [])];
  },
);

/**
 * Softmax cross-entropy of logits (classes on classAxis) against integer labels (logits' shape
 * without the class axis), with ignoreIndex, class weights and a reduction. Differentiable in
 * the logits (pullback: softmaxCrossEntropyVjp).
 */
export function softmaxCrossEntropy(logits: Array, labels: Array, options: SoftmaxCrossEntropyOptions = {}): Array {
  const c = lossConfig(logits, options);
  const inputs = options.weights ? [logits, labels, options.weights] : [logits, labels];
  return lossOp(inputs, c)[0];
}

/** softmaxCrossEntropy from plain ops (the autodiff reference). */
export function softmaxCrossEntropyComposite(logits: Array, labels: Array, options: SoftmaxCrossEntropyOptions = {}): Array {
  return lossForward(logits, labels, lossConfig(logits, options), options.weights ?? undefined);
}
