// Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (opset 12 and 13+), classes on
// axis 1 of (N, C, d1, ..., dk) inputs, with per-class weights, ignore_index and a reduction.
// Semantics follow the ONNX reference (onnx/reference/ops/op_negative_log_likelihood_loss.py):
// 'mean' divides by the total weight of the targets that count, so a batch in which every
// target is ignored gives 0/0 = NaN there too; we do not invent a different answer.
import * as mx from '@mlx/core';
import { logSoftmax, nllLoss as kernelNllLoss } from '@mlx/kernels';
import type { Attrs } from '../registry/attrs.js';
import type { CheckContext, OpContext, OpEntry } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { isFloatType } from './helpers/util.js';
import { checkedIndices } from './helpers/bounds.js';

type Reduction = 'none' | 'sum' | 'mean';
const reductions: readonly string[] = ['none', 'sum', 'mean'];

interface LossAttrs {
  reduction: Reduction;
  /** Targets equal to it contribute nothing; undefined when the attribute is absent. */
  ignoreIndex: number | undefined;
}

function parseLoss(attrs: Attrs): LossAttrs {
  const reduction = attrs.string('reduction', 'mean');
  if (!reductions.includes(reduction)) throw new RangeError(`reduction '${reduction}' is not one of none, sum, mean`);
  return {
    reduction: reduction as Reduction,
    ignoreIndex: attrs.has('ignore_index') ? attrs.int('ignore_index') : undefined,
  };
}

function checkLoss(ctx: CheckContext<LossAttrs>): string | undefined {
  const t = ctx.inputType(0);
  if (t !== undefined && !isFloatType(t)) return `the loss input must be a float tensor, got element type ${t}`;
  return undefined;
}

/**
 * Log-softmax over the classes (axis 1) in onnxruntime's order, (x - max) - log(sum(exp(x - max))):
 * a row holding +inf is NaN throughout (inf - inf), where x - logsumexp(x) gives -inf for its finite
 * entries. @mlx/kernels' composite, exact in float64 (MLX's CPU exp is float32-accurate there).
 */
const logSoftmaxAxis1 = (x: mx.Array): mx.Array => logSoftmax(x, 1, { implementation: 'composite' });

/**
 * The loss of log-probabilities `logp` (N, C, ...) against integer `target` (N, ...): @mlx/kernels'
 * nllLoss with 'mean' of nothing counted giving 0/0, as the reference does. Targets are checked
 * against [0, C) here (a NodeExecutionError naming the node); ignored ones may lie outside it
 * (e.g. -1 or 100), so only the others are checked, and the kernel gathers the checked ones.
 */
export function nllLoss(ctx: OpContext<unknown>, logp: mx.Array, target: mx.Array, weight: mx.Array | undefined, a: LossAttrs): mx.Array {
  const labels = mx.astype(target, 'int32');
  const valid = a.ignoreIndex === undefined ? undefined : mx.notEqual(labels, mx.scalar(a.ignoreIndex, 'int32'));
  const unchecked = valid ? mx.where(valid, labels, mx.scalar(0, 'int32')) : labels;
  const classes = logp.shape[1];
  const safe = checkedIndices(ctx, unchecked, classes, `target class (of ${classes})`, { negative: false });
  return kernelNllLoss(logp, valid ? mx.where(valid, safe, labels) : safe, {
    classAxis: 1,
    ignoreIndex: a.ignoreIndex ?? null,
    weights: weight ?? null,
    reduction: a.reduction,
    emptyMean: 'nan',
  });
}

function checkShapes(ctx: OpContext): void {
  const x = ctx.shape(0),
    t = ctx.shape(1);
  if (x.length < 2) throw new RangeError(`${ctx.where}: the input needs shape (N, C, ...), got [${x.join(', ')}]`);
  const want = [x[0], ...x.slice(2)];
  if (t.length !== want.length || t.some((d, i) => d !== want[i])) {
    throw new RangeError(
      `${ctx.where}: target shape [${t.join(', ')}] does not match input shape [${x.join(', ')}] without its class axis`,
    );
  }
}

/** NegativeLogLikelihoodLoss takes log-probabilities; SoftmaxCrossEntropyLoss takes scores and can also return their log-softmax. */
function lossEntry(opType: string, fromScores: boolean): OpEntry<LossAttrs> {
  return onnxOp(opType, 12, {
    parse: parseLoss,
    check: checkLoss,
    run: (ctx) => {
      checkShapes(ctx);
      const logp = fromScores ? logSoftmaxAxis1(ctx.input(0)) : ctx.input(0);
      const loss = nllLoss(ctx, logp, ctx.input(1), ctx.optional(2), ctx.params);
      // The second output (log_prob) is optional; computing it costs nothing extra.
      return fromScores && ctx.wants(1) ? [loss, logp] : [loss];
    },
  });
}

// Opset 13 widened the types (bfloat16, double for NLL) without changing the semantics.
export const lossOps: OpEntry[] = [lossEntry('NegativeLogLikelihoodLoss', false), lossEntry('SoftmaxCrossEntropyLoss', true)];
