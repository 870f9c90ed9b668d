// Score post-transforms of the ai.onnx.ml classifiers and regressors (LinearClassifier,
// LinearRegressor, SVM*, TreeEnsemble{Classifier,Regressor}) as onnxruntime's CPU kernels apply
// them, in float32 like they do: NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO and PROBIT (onnxruntime's
// probit is its own erfinv approximation, reproduced here), and the binary forms that expand one
// score per row into two columns.
import { OnnxDataType, type HostTensor } from '../../onnx/index.js';
import type { Attrs } from '../../registry/attrs.js';
import { stringTensor } from './strings.js';

export enum Post {
  NONE,
  LOGISTIC,
  SOFTMAX,
  SOFTMAX_ZERO,
  PROBIT,
}

const POSTS: Record<string, Post> = {
  NONE: Post.NONE,
  LOGISTIC: Post.LOGISTIC,
  SOFTMAX: Post.SOFTMAX,
  SOFTMAX_ZERO: Post.SOFTMAX_ZERO,
  PROBIT: Post.PROBIT,
};

/** The post_transform attribute (a string in these ops). */
export function parsePost(attrs: Attrs, op: string): Post {
  const name = attrs.string('post_transform', 'NONE');
  const p = POSTS[name];
  if (p === undefined) throw new RangeError(`${op} post_transform '${name}' is not NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO or PROBIT`);
  return p;
}

const f = Math.fround;

/** onnxruntime's erfinv (Winitzki's approximation, a = 0.147), step by step in float32. */
function erfInv(x: number): number {
  const sgn = x < 0 ? -1 : 1;
  const y = f((1 - x) * (1 + x));
  const log = f(Math.log(y));
  // biome-ignore lint/suspicious/noApproximativeNumericConstant: onnxruntime's rounded pi, reproduced
  const v = f(f(2 / f(f(3.14159) * f(0.147))) + f(0.5 * log));
  const v2 = f(f(1 / f(0.147)) * log);
  const v3 = f(-v + f(Math.sqrt(f(f(v * v) - v2))));
  return f(sgn * f(Math.sqrt(v3)));
}

// biome-ignore lint/suspicious/noApproximativeNumericConstant: onnxruntime's rounded sqrt(2), reproduced
export const probit = (v: number): number => f(f(1.41421356) * erfInv(f(2 * v - 1)));

export function logistic(v: number): number {
  const a = f(1 / (1 + Math.exp(-Math.abs(v))));
  return v < 0 ? f(1 - a) : a;
}

function softmax(row: Float64Array, zero: boolean): void {
  let max = -Number.MAX_VALUE;
  for (const v of row) if (v > max) max = v;
  let sum = 0;
  const expNegMax = Math.exp(-max);
  for (let i = 0; i < row.length; i++) {
    if (!zero || row[i] > 1e-7 || row[i] < -1e-7) {
      row[i] = Math.exp(row[i] - max);
      sum += row[i];
    } else row[i] *= expNegMax;
  }
  for (let i = 0; i < row.length; i++) row[i] /= sum;
}

/**
 * Scores [rows, width] after the post-transform. With width 1 (binary), PROBIT applies alone;
 * otherwise `secondClass` >= 0 expands each score s into two columns: [1 - p, p] for 0 and 1,
 * p = s (or logistic(s) under LOGISTIC), [-s, s] (or [logistic(-s), logistic(s)]) for 2 and 3;
 * < 0 leaves one column.
 */
export function postScores(scores: Float64Array, rows: number, width: number, post: Post, secondClass = -1): Float32Array {
  if (width > 1) {
    const out = new Float32Array(scores.length);
    for (let r = 0; r < rows; r++) {
      const row = scores.slice(r * width, (r + 1) * width);
      if (post === Post.SOFTMAX || post === Post.SOFTMAX_ZERO) softmax(row, post === Post.SOFTMAX_ZERO);
      else if (post === Post.LOGISTIC) row.forEach((v, i) => (row[i] = 1 / (1 + Math.exp(-v))));
      else if (post === Post.PROBIT) row.forEach((v, i) => (row[i] = probit(f(v))));
      out.set(row, r * width);
    }
    return out;
  }
  if (post === Post.PROBIT) return Float32Array.from(scores, (v) => probit(f(v)));
  if (secondClass < 0) return Float32Array.from(scores);
  const out = new Float32Array(2 * rows);
  for (let r = 0; r < rows; r++) {
    const s = f(scores[r]);
    if (secondClass <= 1) {
      // onnxruntime 1.30 applies LOGISTIC to the score before expanding it.
      const p = post === Post.LOGISTIC ? logistic(s) : s;
      [out[2 * r], out[2 * r + 1]] = [1 - p, p];
    } else if (post === Post.LOGISTIC) [out[2 * r], out[2 * r + 1]] = [logistic(-s), logistic(s)];
    else [out[2 * r], out[2 * r + 1]] = [-s, s];
  }
  return out;
}

/** Class labels: classlabels_ints or classlabels_strings (one of them). */
export type Labels = { ints: number[] } | { strings: string[] };

export function parseLabels(attrs: Attrs, prefix = 'classlabels'): Labels | undefined {
  if (attrs.has(`${prefix}_strings`)) return { strings: attrs.strings(`${prefix}_strings`) };
  if (attrs.has(`${prefix}_ints`)) return { ints: attrs.ints(`${prefix}_ints`) };
  return undefined;
}

export const labelCount = (l: Labels): number => ('ints' in l ? l.ints.length : l.strings.length);

/** A [rows] label tensor of `picked` (indices into the labels, or literal labels where given as such). */
export function labelTensor(labels: Labels, values: (number | string)[]): HostTensor {
  if ('strings' in labels) return stringTensor(values.map(String), [values.length]);
  return { dtype: OnnxDataType.INT64, dims: [values.length], data: BigInt64Array.from(values, (v) => BigInt(v)) };
}

/** Rows and features of a classifier input: [F] is one row, [N, F] N rows. */
export function rowsOf(x: HostTensor, where: string): [number, number] {
  if (x.dims.length === 0) throw new RangeError(`${where}: the input needs at least one dimension`);
  if (x.dims.length === 1) return [1, x.dims[0]];
  if (x.dims.length > 2) throw new RangeError(`${where}: the input must be [N, F] or [F], not ${x.dims.length}-D`);
  return [x.dims[0], x.dims[1]];
}

export const float32Tensor = (data: Float32Array, dims: number[]): HostTensor => ({ dtype: OnnxDataType.FLOAT, dims, data });
