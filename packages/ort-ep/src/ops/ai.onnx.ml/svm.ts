// ai.onnx.ml SVMClassifier and SVMRegressor (libsvm/liblinear models as scikit-learn exports
// them), on the host as onnxruntime's CPU kernels compute them in float32:
//  - kernels: LINEAR x·s, POLY (γ x·s + c0)^d, SIGMOID tanh(γ x·s + c0), RBF exp(-γ |x - s|²);
//  - SVC: one decision per class pair (i < j) from both classes' support vectors plus rho, a vote
//    for i when positive; with prob_a/prob_b, pairwise sigmoid probabilities coupled into class
//    probabilities (Wu, Lin and Weng's method, as libsvm does);
//  - linear mode (no support vectors): one score per class, X · coefficientsᵀ + rho[0].
import type { HostTensor } from '../../onnx/index.js';
import type { Attrs } from '../../registry/attrs.js';
import type { OpContext, OpEntry } from '../../registry/types.js';
import { mlOp } from '../../registry/op.js';
import { checkHostElements, MAX_HOST_ELEMENTS } from '../helpers/bounds.js';
import { hostFloats } from '../helpers/shape-host.js';
import {
  float32Tensor,
  labelCount,
  labelTensor,
  logistic,
  parseLabels,
  parsePost,
  Post,
  postScores,
  rowsOf,
  type Labels,
} from '../helpers/ml-scores.js';

const f = Math.fround;

type Kernel = 'LINEAR' | 'POLY' | 'RBF' | 'SIGMOID';

interface KernelParams {
  kernel: Kernel;
  gamma: number;
  coef0: number;
  degree: number;
}

function parseKernel(attrs: Attrs, op: string): KernelParams {
  const kernel = attrs.string('kernel_type', 'LINEAR');
  if (!['LINEAR', 'POLY', 'RBF', 'SIGMOID'].includes(kernel))
    throw new RangeError(`${op} kernel_type '${kernel}' is not LINEAR, POLY, RBF or SIGMOID`);
  const [gamma = 0, coef0 = 0, degree = 0] = attrs.floats('kernel_params', []);
  return { kernel: kernel as Kernel, gamma, coef0, degree };
}

/** k(x_r, v) for every row r of x [rows, features] and vector v of `vectors` [n, features]: [rows, n]. */
function kernelDot(
  where: string,
  k: KernelParams,
  x: number[],
  rows: number,
  vectors: number[],
  n: number,
  features: number,
  c: number,
): Float64Array {
  checkHostElements(rows * n, `${where}: the kernel values of ${rows} row(s) and ${n} vectors`);
  const out = new Float64Array(rows * n);
  for (let r = 0; r < rows; r++)
    for (let v = 0; v < n; v++) {
      let s = 0;
      if (k.kernel === 'RBF') {
        for (let i = 0; i < features; i++) s = f(s + f(f(x[r * features + i] - vectors[v * features + i]) ** 2));
        out[r * n + v] = f(Math.exp(f(-k.gamma * s)));
        continue;
      }
      for (let i = 0; i < features; i++) s += x[r * features + i] * vectors[v * features + i];
      if (k.kernel === 'LINEAR') out[r * n + v] = f(s + c);
      else {
        const t = f(f(k.gamma * s) + k.coef0);
        out[r * n + v] = k.kernel === 'POLY' ? f(t ** k.degree) : f(Math.tanh(t));
      }
    }
  return out;
}

/** Rows of X as float32 values, with the feature count they must have. */
function inputRows(ctx: OpContext<unknown>, features: number): [number[], number] {
  const x = ctx.host(0);
  const [rows, cols] = rowsOf(x, ctx.where);
  if (cols !== features) throw new RangeError(`${ctx.where}: the input has ${cols} features, the model ${features}`);
  return [hostFloats(x).map(f), rows];
}

// ---------------------------------------------------------------------------------------------
// SVMClassifier

interface ClassifierParams extends KernelParams {
  labels: Labels;
  vectorsPerClass: number[];
  supportVectors: number[];
  coefficients: number[];
  rho: number[];
  probA: number[];
  probB: number[];
  post: Post;
}

function parseClassifier(attrs: Attrs): ClassifierParams {
  const labels = parseLabels(attrs);
  if (!labels) throw new RangeError('SVMClassifier needs classlabels_ints or classlabels_strings');
  const p: ClassifierParams = {
    ...parseKernel(attrs, 'SVMClassifier'),
    labels,
    vectorsPerClass: attrs.ints('vectors_per_class', []),
    supportVectors: attrs.floats('support_vectors', []),
    coefficients: attrs.floats('coefficients'),
    rho: attrs.floats('rho'),
    probA: attrs.floats('prob_a', []),
    probB: attrs.floats('prob_b', []),
    post: parsePost(attrs, 'SVMClassifier'),
  };
  const classes = labelCount(labels);
  const vectors = p.vectorsPerClass.reduce((a, b) => a + b, 0);
  const pairs = (classes * (classes - 1)) / 2;
  const badCount = p.vectorsPerClass.find((n) => !Number.isSafeInteger(n) || n < 0);
  if (badCount !== undefined) throw new RangeError(`SVMClassifier vectors_per_class has ${badCount}, not a non-negative count`);
  if (!Number.isSafeInteger(vectors) || vectors > MAX_HOST_ELEMENTS)
    throw new RangeError(
      `SVMClassifier vectors_per_class adds up to ${vectors} vectors, over the ${MAX_HOST_ELEMENTS} computed on the host`,
    );
  if (p.probA.length !== p.probB.length) throw new RangeError('SVMClassifier prob_a and prob_b differ in length');
  if (vectors > 0) {
    if (p.vectorsPerClass.length !== classes)
      throw new RangeError(`SVMClassifier has ${classes} labels but ${p.vectorsPerClass.length} vectors_per_class`);
    if (p.supportVectors.length % vectors !== 0)
      throw new RangeError(`SVMClassifier: ${p.supportVectors.length} support_vectors values for ${vectors} vectors`);
    if (p.coefficients.length < (classes - 1) * vectors)
      throw new RangeError(`SVMClassifier needs ${(classes - 1) * vectors} coefficients`);
    if (p.rho.length < pairs) throw new RangeError(`SVMClassifier needs ${pairs} rho values`);
    if (p.probA.length > 0 && p.probA.length < pairs) throw new RangeError(`SVMClassifier needs ${pairs} prob_a values`);
  } else if (p.rho.length < 1 || p.coefficients.length % classes !== 0)
    throw new RangeError(`SVMClassifier (linear): ${p.coefficients.length} coefficients for ${classes} classes`);
  return p;
}

/** Pairwise probabilities r [k, k] coupled into class probabilities (onnxruntime's iteration, float32). */
function coupledProbabilities(k: number, r: Float32Array): Float32Array {
  const Q = new Float32Array(k * k);
  const Qp = new Float32Array(k);
  const p = new Float32Array(k);
  const eps = f(0.005 / k);
  for (let i = 0; i < k; i++) {
    p[i] = f(1 / k);
    for (let j = 0; j < i; j++) {
      Q[i * k + i] += r[j * k + i] * r[j * k + i];
      Q[i * k + j] = Q[j * k + i];
    }
    for (let j = i + 1; j < k; j++) {
      Q[i * k + i] += r[j * k + i] * r[j * k + i];
      Q[i * k + j] = -r[j * k + i] * r[i * k + j];
    }
  }
  for (let loop = 0; loop < 100; loop++) {
    let pQp = 0;
    for (let i = 0; i < k; i++) {
      let s = 0;
      for (let j = 0; j < k; j++) s = f(s + f(Q[i * k + j] * p[j]));
      Qp[i] = s;
      pQp = f(pQp + f(p[i] * Qp[i]));
    }
    let maxError = 0;
    for (let i = 0; i < k; i++) maxError = Math.max(maxError, Math.abs(Qp[i] - pQp));
    if (maxError < eps) break;
    for (let i = 0; i < k; i++) {
      const diff = f(f(-Qp[i] + pQp) / Q[i * k + i]);
      p[i] = f(p[i] + diff);
      pQp = f(f(f(pQp + f(diff * f(f(diff * Q[i * k + i]) + f(2 * Qp[i])))) / f(1 + diff)) / f(1 + diff));
      for (let j = 0; j < k; j++) {
        Qp[j] = f(f(Qp[j] + f(diff * Q[i * k + j])) / f(1 + diff));
        p[j] = f(p[j] / f(1 + diff));
      }
    }
  }
  return p;
}

function svmClassifier(ctx: OpContext<ClassifierParams>): HostTensor[] {
  const p = ctx.params;
  const classes = labelCount(p.labels);
  const vectors = p.vectorsPerClass.reduce((a, b) => a + b, 0);
  const svc = vectors > 0;
  const features = svc ? p.supportVectors.length / vectors : p.coefficients.length / classes;
  const [x, rows] = inputRows(ctx, features);
  const pairs = (classes * (classes - 1)) / 2;
  const haveProba = p.probA.length > 0;
  const width = svc && !haveProba ? (classes > 2 ? pairs : 2) : classes;
  const perRow = svc && !haveProba ? pairs : classes;
  const secondClass = svc && !haveProba && classes <= 2 ? (p.post === Post.NONE ? 2 : 0) : -1;
  const allPositive = p.coefficients.every((c) => c >= 0);
  const starts: number[] = [];
  if (svc) for (let c = 0, at = 0; c < classes; at += p.vectorsPerClass[c++]) starts.push(at);

  checkHostElements(rows * width, `${ctx.where}: the scores of ${rows} row(s) and ${width} columns`);
  const z = new Float32Array(rows * width);
  const picked: (number | string)[] = [];
  const label = (i: number) => ('ints' in p.labels ? p.labels.ints[i] : p.labels.strings[i]);
  const linear = svc ? undefined : kernelDot(ctx.where, { ...p, kernel: 'LINEAR' }, x, rows, p.coefficients, classes, features, p.rho[0]);
  const kernels = svc ? kernelDot(ctx.where, p, x, rows, p.supportVectors, vectors, features, 0) : undefined;
  for (let n = 0; n < rows; n++) {
    let scores: Float64Array;
    let maxClass = 0;
    let maxWeight = 0;
    if (kernels) {
      const k = kernels.subarray(n * vectors, (n + 1) * vectors);
      const decisions = new Float32Array(pairs);
      const votes = new Array<number>(classes).fill(0);
      let idx = 0;
      for (let i = 0; i < classes - 1; i++)
        for (let j = i + 1; j < classes; j++) {
          let sum = 0;
          for (let m = 0; m < p.vectorsPerClass[i]; m++) sum += p.coefficients[(j - 1) * vectors + starts[i] + m] * k[starts[i] + m];
          for (let m = 0; m < p.vectorsPerClass[j]; m++) sum += p.coefficients[i * vectors + starts[j] + m] * k[starts[j] + m];
          sum += p.rho[idx];
          decisions[idx++] = f(sum);
          votes[sum > 0 ? i : j]++;
        }
      for (let c = 1; c < classes; c++) if (votes[c] > votes[maxClass]) maxClass = c;
      if (haveProba) {
        const r = new Float32Array(classes * classes);
        let index = 0;
        for (let i = 0; i < classes - 1; i++)
          for (let j = i + 1; j < classes; j++, index++) {
            const v = Math.min(Math.max(f(1 - logistic(f(f(decisions[index] * p.probA[index]) + p.probB[index]))), 1e-7), f(1 - 1e-7));
            r[i * classes + j] = v;
            r[j * classes + i] = f(1 - v);
          }
        scores = Float64Array.from(coupledProbabilities(classes, r));
      } else scores = Float64Array.from(decisions);
    } else {
      scores = linear!.slice(n * classes, (n + 1) * classes);
      for (let c = 1; c < classes; c++) if (scores[c] > scores[maxClass]) maxClass = c;
      maxWeight = scores[maxClass];
    }
    if (classes === 2 && !haveProba) {
      if ((allPositive && maxWeight >= 0.5) || (maxWeight > 0 && !allPositive)) picked.push(label(1));
      else picked.push(label(maxClass));
    } else picked.push(label(maxClass));
    z.set(postScores(scores, 1, perRow, p.post, secondClass), n * width);
  }
  return [labelTensor(p.labels, picked), float32Tensor(z, [rows, width])];
}

// ---------------------------------------------------------------------------------------------
// SVMRegressor: Σ coefficients · k(x, support vector) + rho[0] (or x · coefficients + rho[0]
// without support vectors); one_class turns the score into ±1.

interface RegressorParams extends KernelParams {
  supports: number;
  supportVectors: number[];
  coefficients: number[];
  rho: number[];
  oneClass: boolean;
}

function parseRegressor(attrs: Attrs): RegressorParams {
  const p: RegressorParams = {
    ...parseKernel(attrs, 'SVMRegressor'),
    supports: attrs.int('n_supports', 0),
    supportVectors: attrs.floats('support_vectors', []),
    coefficients: attrs.floats('coefficients'),
    rho: attrs.floats('rho'),
    oneClass: attrs.int('one_class', 0) !== 0,
  };
  if (p.rho.length < 1) throw new RangeError('SVMRegressor needs rho');
  if (p.supports > 0 && (p.supportVectors.length % p.supports !== 0 || p.coefficients.length < p.supports))
    throw new RangeError(`SVMRegressor: support_vectors or coefficients do not fit n_supports ${p.supports}`);
  return p;
}

function svmRegressor(ctx: OpContext<RegressorParams>): HostTensor[] {
  const p = ctx.params;
  const svc = p.supports > 0;
  const features = svc ? p.supportVectors.length / p.supports : p.coefficients.length;
  const [x, rows] = inputRows(ctx, features);
  checkHostElements(rows, `${ctx.where}: the scores of ${rows} row(s)`);
  const y = new Float32Array(rows);
  if (svc) {
    const k = kernelDot(ctx.where, p, x, rows, p.supportVectors, p.supports, features, 0);
    for (let r = 0; r < rows; r++) {
      let s = p.rho[0];
      for (let v = 0; v < p.supports; v++) s += k[r * p.supports + v] * p.coefficients[v];
      y[r] = s;
    }
  } else y.set(kernelDot(ctx.where, { ...p, kernel: 'LINEAR' }, x, rows, p.coefficients, 1, features, p.rho[0]));
  if (p.oneClass) y.forEach((v, i) => (y[i] = v > 0 ? 1 : -1));
  return [float32Tensor(y, [rows, 1])];
}

export const svmOps: OpEntry[] = [
  mlOp('SVMClassifier', 1, { parse: parseClassifier, placement: 'host', host: svmClassifier }),
  mlOp('SVMRegressor', 1, { parse: parseRegressor, placement: 'host', host: svmRegressor }),
];
