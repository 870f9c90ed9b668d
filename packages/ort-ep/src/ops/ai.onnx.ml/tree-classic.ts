// ai.onnx.ml TreeEnsembleRegressor and TreeEnsembleClassifier (opsets 1-4, replaced by
// TreeEnsemble in 5; what scikit-learn, XGBoost and LightGBM exporters write), on the host as
// onnxruntime's CPU kernels compute them: nodes addressed by (tree id, node id), leaves carrying
// weights for one or more targets/classes, SUM/AVERAGE/MIN/MAX aggregation, base values, the
// post-transform, and the classifier's binary rules (one weighted class scores both columns).
import type { HostTensor } from '../../onnx/index.js';
import type { Attrs } from '../../registry/attrs.js';
import type { OpContext, OpEntry } from '../../registry/types.js';
import { mlOp } from '../../registry/op.js';
import { hostFloats } from '../helpers/shape-host.js';
import { checkHostElements } from '../helpers/bounds.js';
import {
  float32Tensor,
  labelCount,
  labelTensor,
  logistic,
  parseLabels,
  parsePost,
  Post,
  postScores,
  probit,
  type Labels,
} from '../helpers/ml-scores.js';

const MODES = ['BRANCH_LEQ', 'BRANCH_LT', 'BRANCH_GTE', 'BRANCH_GT', 'BRANCH_EQ', 'BRANCH_NEQ', 'LEAF'] as const;
type Mode = (typeof MODES)[number];

interface Node {
  mode: Mode;
  feature: number;
  value: number;
  missingTrue: boolean;
  t: number;
  f: number;
  weights: [target: number, weight: number][];
}

interface Forest {
  nodes: Node[];
  roots: number[];
  features: number;
}

/** Floats of attribute `name`, or of its `_as_tensor` form (opset 3). */
function floatsOf(attrs: Attrs, name: string, def?: number[]): number[] {
  const t = attrs.has(`${name}_as_tensor`) ? attrs.tensor(`${name}_as_tensor`) : undefined;
  return t ? hostFloats(t) : attrs.floats(name, def);
}

function forestOf(attrs: Attrs, op: string, prefix: 'target' | 'class'): Forest {
  const trees = attrs.ints('nodes_treeids');
  const ids = attrs.ints('nodes_nodeids');
  const features = attrs.ints('nodes_featureids');
  const modes = attrs.strings('nodes_modes');
  const values = floatsOf(attrs, 'nodes_values');
  const trues = attrs.ints('nodes_truenodeids');
  const falses = attrs.ints('nodes_falsenodeids');
  const missing = attrs.ints('nodes_missing_value_tracks_true', []);
  const n = trees.length;
  for (const [name, v] of Object.entries({ ids, features, modes, values, trues, falses }))
    if (v.length !== n) throw new RangeError(`${op}: nodes_${name} has ${v.length} entries, nodes_treeids ${n}`);
  if (missing.length && missing.length !== n)
    throw new RangeError(`${op}: nodes_missing_value_tracks_true has ${missing.length} entries for ${n} nodes`);
  const index = new Map<string, number>();
  const roots: number[] = [];
  const seen = new Set<number>();
  trees.forEach((t, i) => {
    const key = `${t}:${ids[i]}`;
    if (index.has(key)) throw new RangeError(`${op}: node ${ids[i]} of tree ${t} is defined twice`);
    index.set(key, i);
    if (!seen.has(t)) {
      seen.add(t);
      roots.push(i);
    }
  });
  const at = (tree: number, id: number, what: string) => {
    const i = index.get(`${tree}:${id}`);
    if (i === undefined) throw new RangeError(`${op}: ${what} refers to node ${id} of tree ${tree}, which does not exist`);
    return i;
  };
  const nodes: Node[] = trees.map((t, i) => {
    const mode = modes[i] as Mode;
    if (!MODES.includes(mode)) throw new RangeError(`${op}: node mode '${modes[i]}' is not one of ${MODES.join(', ')}`);
    const leaf = mode === 'LEAF';
    return {
      mode,
      feature: features[i],
      value: values[i],
      missingTrue: (missing[i] ?? 0) !== 0,
      t: leaf ? -1 : at(t, trues[i], 'a true branch'),
      f: leaf ? -1 : at(t, falses[i], 'a false branch'),
      weights: [],
    };
  });
  const wTrees = attrs.ints(`${prefix}_treeids`, []);
  const wNodes = attrs.ints(`${prefix}_nodeids`, []);
  const wIds = attrs.ints(`${prefix}_ids`, []);
  const weights = floatsOf(attrs, `${prefix}_weights`, []);
  if (wNodes.length !== wTrees.length || wIds.length !== wTrees.length || weights.length !== wTrees.length)
    throw new RangeError(`${op}: the ${prefix}_* attributes differ in length`);
  wTrees.forEach((t, k) => nodes[at(t, wNodes[k], `${prefix}_nodeids`)].weights.push([wIds[k], weights[k]]));
  return { nodes, roots, features: features.length ? Math.max(...features) + 1 : 0 };
}

function goesTrue(node: Node, x: number): boolean {
  if (Number.isNaN(x) && node.missingTrue) return true;
  switch (node.mode) {
    case 'BRANCH_LEQ':
      return x <= node.value;
    case 'BRANCH_LT':
      return x < node.value;
    case 'BRANCH_GTE':
      return x >= node.value;
    case 'BRANCH_GT':
      return x > node.value;
    case 'BRANCH_EQ':
      return x === node.value;
    default:
      return x !== node.value;
  }
}

function leafOf(f: Forest, root: number, row: number[], where: string): Node {
  let node = f.nodes[root];
  for (let steps = 0; node.mode !== 'LEAF'; steps++) {
    if (steps > f.nodes.length) throw new RangeError(`${where}: the tree at node ${root} has a cycle`);
    node = f.nodes[goesTrue(node, row[node.feature]) ? node.t : node.f];
  }
  return node;
}

/** The rows of X (float32 values) and, per row, the leaves every tree reaches. */
function walk(ctx: OpContext<{ forest: Forest }>): { rows: number; leaves: Node[][] } {
  const x = ctx.host(0);
  const [rows, cols] = x.dims.length === 1 ? [1, x.dims[0]] : [x.dims[0], x.dims.slice(1).reduce((a, b) => a * b, 1)];
  const f = ctx.params.forest;
  if (f.features > cols) throw new RangeError(`${ctx.where}: a node reads feature ${f.features - 1}, the input has ${cols}`);
  const xs = hostFloats(x).map(Math.fround);
  const leaves: Node[][] = [];
  for (let r = 0; r < rows; r++) {
    const row = xs.slice(r * cols, (r + 1) * cols);
    leaves.push(f.roots.map((root) => leafOf(f, root, row, ctx.where)));
  }
  return { rows, leaves };
}

// ---------------------------------------------------------------------------------------------
// TreeEnsembleRegressor

type Aggregate = 'SUM' | 'AVERAGE' | 'MIN' | 'MAX';

interface RegressorParams {
  forest: Forest;
  targets: number;
  aggregate: Aggregate;
  base: number[];
  post: Post;
}

function parseRegressor(attrs: Attrs): RegressorParams {
  const aggregate = attrs.string('aggregate_function', 'SUM') as Aggregate;
  if (!['SUM', 'AVERAGE', 'MIN', 'MAX'].includes(aggregate))
    throw new RangeError(`TreeEnsembleRegressor aggregate_function '${aggregate}' is not SUM, AVERAGE, MIN or MAX`);
  const p = {
    forest: forestOf(attrs, 'TreeEnsembleRegressor', 'target'),
    targets: attrs.int('n_targets', 1),
    aggregate,
    base: floatsOf(attrs, 'base_values', []),
    post: parsePost(attrs, 'TreeEnsembleRegressor'),
  };
  if (!Number.isSafeInteger(p.targets) || p.targets < 1)
    throw new RangeError(`TreeEnsembleRegressor n_targets ${p.targets} is not a positive count`);
  if (p.base.length && p.base.length !== p.targets)
    throw new RangeError(
      `TreeEnsembleRegressor base_values has ${p.base.length} values for n_targets ${p.targets} (one per target, or none)`,
    );
  for (const n of p.forest.nodes)
    for (const [t] of n.weights)
      if (t < 0 || t >= p.targets) throw new RangeError(`TreeEnsembleRegressor: target id ${t} is outside [0, ${p.targets})`);
  return p;
}

function regressor(ctx: OpContext<RegressorParams>): HostTensor[] {
  const p = ctx.params;
  const { rows, leaves } = walk(ctx);
  const T = p.targets;
  checkHostElements(rows * T, `${ctx.where}: the scores of ${rows} rows and n_targets ${T}`);
  const out = new Float64Array(rows * T);
  const useBase = p.base.length === T;
  const f = Math.fround;
  for (let r = 0; r < rows; r++) {
    const score = new Array<number>(T).fill(0);
    const has = new Array<boolean>(T).fill(false);
    for (const leaf of leaves[r])
      for (const [t, w] of leaf.weights) {
        if (p.aggregate === 'MIN') score[t] = !has[t] || w < score[t] ? w : score[t];
        else if (p.aggregate === 'MAX') score[t] = !has[t] || w > score[t] ? w : score[t];
        else score[t] = f(score[t] + w);
        has[t] = true;
      }
    for (let t = 0; t < T; t++) {
      let v = has[t] ? score[t] : 0;
      if (p.aggregate === 'AVERAGE') v = f(v / p.forest.roots.length);
      v = f(v + (useBase ? p.base[t] : 0));
      // With several targets, one that no tree scored writes 0 whatever its base value, as in
      // onnxruntime (its ScoreValue reads as 0 without has_score); a single target always takes
      // its base value (onnxruntime's one-output path adds it unconditionally).
      out[r * T + t] = T > 1 && !has[t] ? 0 : v;
    }
  }
  return [float32Tensor(postScores(out, rows, T, p.post), [rows, T])];
}

// ---------------------------------------------------------------------------------------------
// TreeEnsembleClassifier

interface ClassifierParams {
  forest: Forest;
  labels: Labels;
  base: number[];
  post: Post;
  /** Two labels and weights for one class only: that class's score decides both columns. */
  binaryCase: boolean;
  allPositive: boolean;
}

function parseClassifier(attrs: Attrs): ClassifierParams {
  const labels: Labels | undefined = attrs.has('classlabels_int64s') ? { ints: attrs.ints('classlabels_int64s') } : parseLabels(attrs);
  if (!labels) throw new RangeError('TreeEnsembleClassifier needs classlabels_int64s or classlabels_strings');
  const forest = forestOf(attrs, 'TreeEnsembleClassifier', 'class');
  const classes = labelCount(labels);
  const used = new Set<number>();
  let allPositive = true;
  for (const n of forest.nodes)
    for (const [c, w] of n.weights) {
      if (c < 0 || c >= classes) throw new RangeError(`TreeEnsembleClassifier: class id ${c} is outside [0, ${classes})`);
      used.add(c);
      if (w < 0) allPositive = false;
    }
  return {
    forest,
    labels,
    base: floatsOf(attrs, 'base_values', []),
    post: parsePost(attrs, 'TreeEnsembleClassifier'),
    binaryCase: classes === 2 && used.size === 1,
    allPositive,
  };
}

/** onnxruntime's write_scores: the post-transform, and the binary expansions of one score. */
function writeScores(scores: number[], post: Post, extra: number): number[] {
  if (scores.length >= 2) return Array.from(postScores(Float64Array.from(scores), 1, scores.length, post));
  const s = Math.fround(scores[0]);
  if (post === Post.PROBIT) return [probit(s), 0];
  if (extra === 0 || extra === 1) return [1 - s, s];
  if (extra === 2 || extra === 3) return post === Post.LOGISTIC ? [logistic(-s), logistic(s)] : [-s, s];
  return [s, 0];
}

function classifier(ctx: OpContext<ClassifierParams>): HostTensor[] {
  const p = ctx.params;
  const { rows, leaves } = walk(ctx);
  const K = labelCount(p.labels);
  const f = Math.fround;
  const z = new Float32Array(rows * K);
  const picked: (number | string)[] = [];
  const label = (i: number) => ('ints' in p.labels ? p.labels.ints[i] : p.labels.strings[i]);
  for (let r = 0; r < rows; r++) {
    const score = new Array<number>(K).fill(0);
    const has = new Array<boolean>(K).fill(false);
    for (const leaf of leaves[r])
      for (const [c, w] of leaf.weights) {
        score[c] = f(score[c] + w);
        has[c] = true;
      }
    let extra = -1;
    let scores: number[];
    if (K > 2) {
      p.base.forEach((b, k) => {
        score[k] = has[k] ? f(score[k] + b) : b;
        has[k] = true;
      });
      let best = -1;
      for (let k = 0; k < K; k++) if (has[k] && (best < 0 || score[k] > score[best])) best = k;
      picked.push(label(Math.max(best, 0)));
      scores = score;
    } else {
      scores = [...score];
      if (p.base.length === 2) {
        if (has[1]) {
          scores[1] = f(p.base[1] + score[0]);
          scores[0] = -scores[1];
        } else {
          scores[1] = f(score[1] + p.base[1]);
          scores[0] = f(score[0] + p.base[0]);
        }
      } else if (p.base.length === 1) {
        scores[0] = f(score[0] + p.base[0]);
        if (!has[1]) scores.pop();
      } else if (p.base.length === 0) {
        extra = 3;
        if (!has[1]) scores.pop();
      }
      const two = scores.length === 2 && has[1];
      const pos = two ? scores[1] : has[0] ? scores[0] : 0;
      let choice: number;
      if (p.binaryCase) {
        if (p.allPositive) [extra, choice] = pos > 0.5 ? [0, 1] : [1, 0];
        else [extra, choice] = pos > 0 ? [2, 1] : [3, 0];
      } else choice = pos > 0 ? 1 : 0;
      picked.push(label(choice));
    }
    // A class no tree scored writes 0, whatever base value its score took (onnxruntime's
    // ScoreValue reads as 0 without has_score).
    if (scores.length >= 2) scores = scores.map((v, k) => (has[k] ? v : 0));
    z.set(writeScores(scores, p.post, extra).slice(0, K), r * K);
  }
  return [labelTensor(p.labels, picked), float32Tensor(z, [rows, K])];
}

export const treeClassicOps: OpEntry[] = [
  mlOp('TreeEnsembleRegressor', 1, { until: 4, parse: parseRegressor, placement: 'host', host: regressor, note: 'host' }),
  mlOp('TreeEnsembleClassifier', 1, { until: 4, parse: parseClassifier, placement: 'host', host: classifier, note: 'host' }),
];
