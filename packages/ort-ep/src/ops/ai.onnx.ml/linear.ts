// ai.onnx.ml LinearClassifier and LinearRegressor: scores = X · coefficientsᵀ + intercepts over
// the rows of X ([N, F] or [F]), then the post-transform; the classifier also picks each row's
// label. Host ops: exported scikit-learn models are small, and their outputs include label
// strings MLX cannot hold. Scores are float32, as onnxruntime computes them.
import type { HostTensor } from '../../onnx/index.js';
import type { Attrs } from '../../registry/attrs.js';
import type { OpContext, OpEntry } from '../../registry/types.js';
import { mlOp } from '../../registry/op.js';
import { checkHostElements } from '../helpers/bounds.js';
import { hostFloats } from '../helpers/shape-host.js';
import {
  float32Tensor,
  labelCount,
  labelTensor,
  parseLabels,
  parsePost,
  postScores,
  rowsOf,
  Post,
  type Labels,
} from '../helpers/ml-scores.js';

const f = Math.fround;

/** X · Wᵀ + b in float32 inputs and weights (accumulated in float64): [rows, targets]. */
export function linearScores(
  where: string,
  x: number[],
  rows: number,
  features: number,
  w: number[],
  b: number[] | undefined,
  targets: number,
): Float64Array {
  checkHostElements(rows * targets, `${where}: the scores of ${rows} row(s) and ${targets} targets`);
  const out = new Float64Array(rows * targets);
  for (let r = 0; r < rows; r++)
    for (let t = 0; t < targets; t++) {
      let s = b ? b[t] : 0;
      for (let k = 0; k < features; k++) s += f(x[r * features + k]) * w[t * features + k];
      out[r * targets + t] = f(s);
    }
  return out;
}

/**
 * onnxruntime reads the coefficients as [targets, features] from the start of the list, with the
 * feature count taken from X: a longer list has its tail ignored (some published models carry the
 * weights of more features than their declared input has), a shorter one would be read past its
 * end, so it is refused.
 */
function checkedWeights(where: string, w: number[], targets: number, features: number): void {
  if (w.length < targets * features)
    throw new RangeError(`${where}: ${w.length} coefficients are fewer than ${targets} targets of ${features} features`);
}

// ---------------------------------------------------------------------------------------------
// LinearClassifier

interface ClassifierParams {
  coefficients: number[];
  intercepts: number[];
  post: Post;
  labels?: Labels;
}

function parseClassifier(attrs: Attrs): ClassifierParams {
  const intercepts = attrs.floats('intercepts', []);
  if (intercepts.length === 0) throw new RangeError('LinearClassifier needs intercepts (one per class)');
  return { coefficients: attrs.floats('coefficients'), intercepts, post: parsePost(attrs, 'LinearClassifier'), labels: parseLabels(attrs) };
}

function linearClassifier(ctx: OpContext<ClassifierParams>): HostTensor[] {
  const p = ctx.params;
  const x = ctx.host(0);
  const [rows, features] = rowsOf(x, ctx.where);
  const classes = p.intercepts.length;
  checkedWeights(ctx.where, p.coefficients, classes, features);
  const scores = linearScores(ctx.where, hostFloats(x), rows, features, p.coefficients, p.intercepts, classes);
  const labels = p.labels ?? { ints: [] };
  const picked: (number | string)[] = [];
  // One score per row: positive picks the second label (or 1), else the first (or 0).
  const binaryLabels = labelCount(labels) === 2;
  if (classes === 1) {
    const pos = binaryLabels ? ('ints' in labels ? labels.ints[1] : labels.strings[1]) : 'ints' in labels ? 1 : '1';
    const neg = binaryLabels ? ('ints' in labels ? labels.ints[0] : labels.strings[0]) : 'ints' in labels ? 0 : '0';
    for (let r = 0; r < rows; r++) picked.push(scores[r] > 0 ? pos : neg);
  } else {
    if (labelCount(labels) < classes) throw new RangeError(`${ctx.where}: ${classes} classes but ${labelCount(labels)} class labels`);
    for (let r = 0; r < rows; r++) {
      let best = 0;
      for (let c = 1; c < classes; c++) if (scores[r * classes + c] > scores[r * classes + best]) best = c;
      picked.push('ints' in labels ? labels.ints[best] : labels.strings[best]);
    }
  }
  const expand = classes === 1 && binaryLabels;
  const z = postScores(scores, rows, classes, p.post, expand ? 1 : -1);
  return [labelTensor(labels, picked), float32Tensor(z, [rows, expand ? 2 : classes])];
}

// ---------------------------------------------------------------------------------------------
// LinearRegressor

interface RegressorParams {
  coefficients: number[];
  intercepts?: number[];
  targets: number;
  post: Post;
}

const parseRegressor = (attrs: Attrs): RegressorParams => ({
  coefficients: attrs.floats('coefficients'),
  intercepts: attrs.has('intercepts') ? attrs.floats('intercepts') : undefined,
  targets: attrs.int('targets', 1),
  post: parsePost(attrs, 'LinearRegressor'),
});

function linearRegressor(ctx: OpContext<RegressorParams>): HostTensor[] {
  const p = ctx.params;
  const x = ctx.host(0);
  const [rows, features] = x.dims.length <= 1 ? [1, x.dims[0] ?? 1] : rowsOf(x, ctx.where);
  checkedWeights(ctx.where, p.coefficients, p.targets, features);
  // Intercepts of another length than the targets are ignored, as onnxruntime ignores them.
  const intercepts = p.intercepts?.length === p.targets ? p.intercepts : undefined;
  const scores = linearScores(ctx.where, hostFloats(x), rows, features, p.coefficients, intercepts, p.targets);
  return [float32Tensor(postScores(scores, rows, p.targets, p.post), [rows, p.targets])];
}

export const linearOps: OpEntry[] = [
  mlOp('LinearClassifier', 1, {
    parse: parseClassifier,
    check: (ctx) => {
      const { intercepts, labels, post } = ctx.params;
      return intercepts.length === 1 && labels && labelCount(labels) === 2 && post === Post.PROBIT
        ? 'LinearClassifier with one score column, two labels and PROBIT is not supported'
        : undefined;
    },
    placement: 'host',
    host: linearClassifier,
  }),
  mlOp('LinearRegressor', 1, { parse: parseRegressor, placement: 'host', host: linearRegressor }),
];
