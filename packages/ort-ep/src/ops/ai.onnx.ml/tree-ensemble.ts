// ai.onnx.ml TreeEnsemble (opset 5): a forest of decision trees over the rows of X [N, F].
// Tree walks branch per sample on data values, which MLX's lazy array graph cannot express without
// evaluating every node of every tree for every row, so this runs on the host (one copy of X).
import { numberToFloat16Bits } from '@mlx/core';
import { OnnxDataType, type HostTensor } from '../../onnx/index.js';
import type { Attrs } from '../../registry/attrs.js';
import type { OpContext, OpEntry } from '../../registry/types.js';
import { mlOp } from '../../registry/op.js';
import { hostFloats } from '../helpers/shape-host.js';
import { checkHostElements } from '../helpers/bounds.js';

enum Mode {
  LEQ,
  LT,
  GTE,
  GT,
  EQ,
  NEQ,
  MEMBER,
}
enum Aggregate {
  AVERAGE,
  SUM,
  MIN,
  MAX,
}
enum Post {
  NONE,
  SOFTMAX,
  LOGISTIC,
  SOFTMAX_ZERO,
  PROBIT,
}
const FLOAT_TYPES = [OnnxDataType.FLOAT, OnnxDataType.DOUBLE, OnnxDataType.FLOAT16];

interface Forest {
  modes: number[];
  splits: number[];
  features: number[];
  trueIds: number[];
  falseIds: number[];
  trueLeaf: number[];
  falseLeaf: number[];
  missingTrue: number[];
  sets: (Set<number> | undefined)[];
  leafTargets: number[];
  leafWeights: number[];
  roots: number[];
  nTargets: number;
  aggregate: number;
  post: number;
}

/** Member sets, one per BRANCH_MEMBER node in node order, delimited by NaN in membership_values. */
function memberSets(modes: number[], values: number[] | undefined): (Set<number> | undefined)[] {
  const groups: Set<number>[] = [new Set()];
  for (const v of values ?? []) {
    if (Number.isNaN(v)) groups.push(new Set());
    else groups[groups.length - 1].add(v);
  }
  let g = 0;
  return modes.map((m) => (m === Mode.MEMBER ? groups[g++] : undefined));
}

function forestOf(a: Attrs): Forest {
  const tensor = (name: string) => {
    const t = a.tensor(name);
    if (!t) throw new TypeError(`TreeEnsemble needs the tensor attribute '${name}'`);
    return t;
  };
  const modes = Array.from(tensor('nodes_modes').data as ArrayLike<number>, Number);
  const membership = a.tensor('membership_values');
  return {
    modes,
    splits: hostFloats(tensor('nodes_splits')),
    features: a.ints('nodes_featureids'),
    trueIds: a.ints('nodes_truenodeids'),
    falseIds: a.ints('nodes_falsenodeids'),
    trueLeaf: a.ints('nodes_trueleafs'),
    falseLeaf: a.ints('nodes_falseleafs'),
    missingTrue: a.ints('nodes_missing_value_tracks_true', []),
    sets: memberSets(modes, membership && hostFloats(membership)),
    leafTargets: a.ints('leaf_targetids'),
    leafWeights: hostFloats(tensor('leaf_weights')),
    roots: a.ints('tree_roots'),
    nTargets: a.int('n_targets', 1),
    aggregate: a.int('aggregate_function', Aggregate.SUM),
    post: a.int('post_transform', Post.NONE),
  };
}

function validate(f: Forest): string | undefined {
  const n = f.modes.length;
  const perNode = {
    nodes_splits: f.splits,
    nodes_featureids: f.features,
    nodes_truenodeids: f.trueIds,
    nodes_falsenodeids: f.falseIds,
    nodes_trueleafs: f.trueLeaf,
    nodes_falseleafs: f.falseLeaf,
  };
  for (const [name, v] of Object.entries(perNode)) if (v.length !== n) return `${name} has ${v.length} entries, nodes_modes ${n}`;
  if (f.missingTrue.length && f.missingTrue.length !== n)
    return `nodes_missing_value_tracks_true has ${f.missingTrue.length} entries, nodes_modes ${n}`;
  if (f.leafTargets.length !== f.leafWeights.length) return 'leaf_targetids and leaf_weights differ in length';
  if (f.modes.some((m) => m < Mode.LEQ || m > Mode.MEMBER)) return 'nodes_modes holds a mode outside 0..6';
  if (f.modes.some((m, i) => m === Mode.MEMBER && !f.sets[i])) return 'membership_values has fewer sets than there are BRANCH_MEMBER nodes';
  if (!Number.isSafeInteger(f.nTargets) || f.nTargets < 1) return `n_targets ${f.nTargets} is not a positive count`;
  if (f.leafTargets.some((t) => t < 0 || t >= f.nTargets)) return `a leaf target id is outside [0, ${f.nTargets})`;
  const badRef = (ids: number[], leaf: number[]) => ids.some((id, i) => id < 0 || id >= (leaf[i] ? f.leafWeights.length : n));
  if (badRef(f.trueIds, f.trueLeaf) || badRef(f.falseIds, f.falseLeaf)) return 'a branch refers to a node or leaf that does not exist';
  if (f.roots.some((r) => r < 0 || r >= n)) return 'a tree root is not a node';
  if (f.aggregate < Aggregate.AVERAGE || f.aggregate > Aggregate.MAX) return `aggregate_function ${f.aggregate} is not one of 0..3`;
  if (f.post < Post.NONE || f.post > Post.PROBIT) return `post_transform ${f.post} is not one of 0..4`;
  return undefined;
}

function branchTrue(f: Forest, node: number, v: number): boolean {
  if (Number.isNaN(v) && f.missingTrue[node]) return true;
  const s = f.splits[node];
  switch (f.modes[node]) {
    case Mode.LEQ:
      return v <= s;
    case Mode.LT:
      return v < s;
    case Mode.GTE:
      return v >= s;
    case Mode.GT:
      return v > s;
    case Mode.EQ:
      return v === s;
    case Mode.NEQ:
      return v !== s;
    default:
      return f.sets[node]!.has(v);
  }
}

/** The leaf that row `x` reaches from `root`; a cycle in a malformed forest is an error, not a hang. */
function leafOf(f: Forest, root: number, x: ArrayLike<number>, where: string): number {
  let node = root;
  for (let steps = 0; steps <= f.modes.length; steps++) {
    const t = branchTrue(f, node, x[f.features[node]]);
    const next = t ? f.trueIds[node] : f.falseIds[node];
    if (t ? f.trueLeaf[node] : f.falseLeaf[node]) return next;
    node = next;
  }
  throw new RangeError(`${where}: the tree at root ${root} has a cycle`);
}

// PROBIT is sqrt(2)·erfinv(2p − 1). JavaScript has no erfinv; Giles' single-precision polynomial
// (relative error below 4e-7) is accurate enough for the float outputs it feeds.
function erfinv(x: number): number {
  let w = -Math.log((1 - x) * (1 + x));
  let p: number;
  if (w < 5) {
    w -= 2.5;
    p = 2.81022636e-8;
    for (const c of [3.43273939e-7, -3.5233877e-6, -4.39150654e-6, 0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941])
      p = c + p * w;
  } else {
    w = Math.sqrt(w) - 3;
    p = -0.000200214257;
    for (const c of [0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047, 1.00167406, 2.83297682])
      p = c + p * w;
  }
  return p * x;
}

function postTransform(row: Float64Array, post: number): void {
  if (post === Post.LOGISTIC) row.forEach((v, i) => (row[i] = 1 / (1 + Math.exp(-v))));
  else if (post === Post.PROBIT) row.forEach((v, i) => (row[i] = Math.SQRT2 * erfinv(2 * v - 1)));
  else if (post === Post.SOFTMAX || post === Post.SOFTMAX_ZERO) {
    // SOFTMAX_ZERO leaves zero scores at zero and normalises the others among themselves.
    const use = (v: number) => post === Post.SOFTMAX || v !== 0;
    const max = row.reduce((m, v) => (use(v) ? Math.max(m, v) : m), -Infinity);
    let sum = 0;
    row.forEach((v, i) => {
      row[i] = use(v) ? Math.exp(v - max) : 0;
      sum += row[i];
    });
    if (sum > 0) row.forEach((v, i) => (row[i] = v / sum));
  }
}

/** The forest of the node's attributes, refused (thrown) where they do not describe one. */
function parseForest(a: Attrs): Forest {
  const f = forestOf(a);
  const invalid = validate(f);
  if (invalid) throw new RangeError(`TreeEnsemble: ${invalid}`);
  return f;
}

function predict(ctx: OpContext<Forest>): HostTensor[] {
  const f = ctx.params;
  const x = ctx.host(0);
  const xs = hostFloats(x);
  const [n, nf] = x.dims.length === 1 ? [1, x.dims[0]] : x.dims;
  if (f.features.some((i) => i < 0 || i >= nf)) throw new RangeError(`${ctx.where}: a node reads a feature outside [0, ${nf})`);
  // MIN/MAX start from ±Infinity; a target that no tree reaches scores 0, as in onnxruntime (the
  // Python reference leaves the type's largest value there, an artifact of its initial value).
  const init = f.aggregate === Aggregate.MIN ? Infinity : f.aggregate === Aggregate.MAX ? -Infinity : 0;
  checkHostElements(n * f.nTargets, `${ctx.where}: the scores of ${n} rows and n_targets ${f.nTargets}`);
  const out = new Float64Array(n * f.nTargets);
  for (let r = 0; r < n; r++) {
    const row = out.subarray(r * f.nTargets, (r + 1) * f.nTargets).fill(init);
    const xr = xs.slice(r * nf, (r + 1) * nf);
    const reached = new Uint8Array(f.nTargets);
    for (const root of f.roots) {
      const leaf = leafOf(f, root, xr, ctx.where);
      const t = f.leafTargets[leaf],
        w = f.leafWeights[leaf];
      reached[t] = 1;
      if (f.aggregate === Aggregate.MIN) row[t] = Math.min(row[t], w);
      else if (f.aggregate === Aggregate.MAX) row[t] = Math.max(row[t], w);
      else row[t] += w;
    }
    if (f.aggregate === Aggregate.AVERAGE && f.roots.length) row.forEach((v, i) => (row[i] = v / f.roots.length));
    if (f.aggregate === Aggregate.MIN || f.aggregate === Aggregate.MAX) row.forEach((v, i) => (row[i] = reached[i] ? v : 0));
    postTransform(row, f.post);
  }
  const data =
    x.dtype === OnnxDataType.FLOAT16
      ? Uint16Array.from(out, numberToFloat16Bits)
      : x.dtype === OnnxDataType.DOUBLE
        ? out
        : Float32Array.from(out);
  return [{ dtype: x.dtype, dims: [n, f.nTargets], data }];
}

export const treeEnsembleOps: OpEntry[] = [
  mlOp('TreeEnsemble', 5, {
    note: 'host; post_transform numbered as the spec has it (onnxruntime swaps SOFTMAX and LOGISTIC)',
    parse: parseForest,
    check: (ctx) => {
      const t = ctx.inputType(0);
      return t !== undefined && !FLOAT_TYPES.includes(t) ? `X must be float, double or float16, got element type ${t}` : undefined;
    },
    placement: 'host',
    host: predict,
  }),
];
