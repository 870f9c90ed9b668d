// ai.onnx.ml classifiers, regressors and preprocessing ops against onnxruntime-node's CPU kernels,
// one single-node model per case (string outputs compared exactly, numbers within tolerance).
import { describe, expect, it } from 'vitest';
import { model, node, v, type ElemName, type NodeSpec } from '../../../test/helpers/build.js';
import { f32, i64, ort, runOn, seeded, type Feeds, type OrtTensor, randomF32 as rand } from '../../../test/helpers/ort.js';

const ML = 'ai.onnx.ml';
const tol = { rtol: 1e-5, atol: 1e-6 };

function build(op: string, feeds: Feeds, outs: [string, ElemName][], attrs: NodeSpec['attrs']): Uint8Array {
  return model({
    opsets: { '': 17, [ML]: 3 },
    inputs: Object.entries(feeds).map(([name, t]) => v(name, t.type as ElemName, [...t.dims])),
    outputs: outs.map(([n, t]) => v(n, t)),
    nodes: [
      node(
        op,
        Object.keys(feeds),
        outs.map(([n]) => n),
        { domain: ML, attrs },
      ),
    ],
  });
}

const values = (t: OrtTensor): (number | string)[] =>
  Array.from(t.data as ArrayLike<number | bigint | string>, (x) => (typeof x === 'string' ? x : Number(x)));

async function same(op: string, feeds: Feeds, outs: [string, ElemName][], attrs: NodeSpec['attrs'], t = tol) {
  const bytes = build(op, feeds, outs, attrs);
  const [want, have] = [await runOn('cpu', bytes, feeds), await runOn('mlx', bytes, feeds)];
  for (const [name] of outs) {
    expect({ name, type: have[name].type, dims: [...have[name].dims] }).toEqual({
      name,
      type: want[name].type,
      dims: [...want[name].dims],
    });
    const [a, b] = [values(have[name]), values(want[name])];
    const bad = a.findIndex((x, i) => {
      const y = b[i];
      if (typeof x === 'string' || typeof y === 'string') return x !== y;
      if (Number.isNaN(x) && Number.isNaN(y)) return false;
      return !(Math.abs(x - y) <= t.atol + t.rtol * Math.abs(y));
    });
    expect(bad === -1 ? 'ok' : `${name}[${bad}]: mlx ${a[bad]} vs onnxruntime ${b[bad]}`).toBe('ok');
  }
}

const f64 = (t: OrtTensor) => new ort.Tensor('float64', Float64Array.from(t.data as Float32Array), [...t.dims]);
const asInt64 = (t: OrtTensor) =>
  i64(
    Array.from(t.data as Float32Array, (x) => Math.round(x * 3)),
    [...t.dims],
  );

describe('LinearClassifier', () => {
  const X = rand([5, 3], 1, 2);
  const coefficients = seeded(9, 2);
  const intercepts = seeded(3, 3);
  const labels: [string, ElemName][] = [
    ['label', 'int64'],
    ['scores', 'float32'],
  ];
  const strLabels: [string, ElemName][] = [
    ['label', 'string'],
    ['scores', 'float32'],
  ];
  for (const post of ['NONE', 'SOFTMAX', 'LOGISTIC', 'SOFTMAX_ZERO', 'PROBIT'])
    it(`three classes, int labels, ${post}`, () =>
      same('LinearClassifier', { X }, labels, { coefficients, intercepts, classlabels_ints: [4, 7, 9], post_transform: post }));
  it('string labels, SOFTMAX, double input', () =>
    same('LinearClassifier', { X: f64(X) }, strLabels, {
      coefficients,
      intercepts,
      classlabels_strings: ['a', 'b', 'c'],
      post_transform: 'SOFTMAX',
    }));
  it('int64 input, 1-D', () =>
    same('LinearClassifier', { X: i64([1, -2, 3], [3]) }, labels, { coefficients, intercepts, classlabels_ints: [0, 1, 2] }));
  it('binary: one score column expands to two, with and without LOGISTIC', async () => {
    const base = { coefficients: [0.5, -1, 0.25], intercepts: [0.1] };
    const attrs = { ...base, classlabels_ints: [3, 5] };
    await same('LinearClassifier', { X }, labels, attrs);
    await same('LinearClassifier', { X }, labels, { ...attrs, post_transform: 'LOGISTIC' });
    await same('LinearClassifier', { X }, labels, { ...attrs, post_transform: 'SOFTMAX' });
    await same('LinearClassifier', { X }, strLabels, { ...base, classlabels_strings: ['no', 'yes'] });
    await same('LinearClassifier', { X }, labels, base); // no labels: 0/1 and the one score column
  });
  // onnxruntime's own datasets/logreg_iris.onnx: 12 coefficients for 3 classes over a declared
  // input of 2 features. onnxruntime reads the first 3 x 2 of them (its GEMM takes the feature
  // count from X) and ignores the rest; refusing the model left it unrunnable.
  it('more coefficients than classes x features: the first ones, as onnxruntime reads them', () =>
    same('LinearClassifier', { X: rand([3, 2], 11, 4) }, labels, {
      coefficients: seeded(12, 12),
      intercepts,
      classlabels_ints: [0, 1, 2],
      post_transform: 'LOGISTIC',
    }));
});

describe('LinearRegressor', () => {
  const X = rand([4, 3], 4, 2);
  it('two targets with intercepts', () =>
    same('LinearRegressor', { X }, [['y', 'float32']], { coefficients: seeded(6, 5), intercepts: [0.5, -0.25], targets: 2 }));
  it('one target, no intercepts, 1-D input', () =>
    same('LinearRegressor', { X: rand([3], 6) }, [['y', 'float32']], { coefficients: seeded(3, 7) }));
  it('three targets with SOFTMAX', () =>
    same('LinearRegressor', { X }, [['y', 'float32']], { coefficients: seeded(9, 8), targets: 3, post_transform: 'SOFTMAX' }));
  it('extra coefficients, and intercepts of another length than the targets (ignored, as onnxruntime ignores them)', () =>
    same('LinearRegressor', { X }, [['y', 'float32']], { coefficients: seeded(10, 9), intercepts: { floats: [1, 2, 3] }, targets: 2 }));
});

describe('Scaler, Normalizer, Imputer', () => {
  const X = rand([4, 3], 9, 3);
  it('Scaler per column, single values, double and int64 inputs', async () => {
    const attrs = { offset: { floats: [0.5, -1, 2] }, scale: { floats: [2, 0.5, -3] } };
    await same('Scaler', { X }, [['y', 'float32']], attrs);
    await same('Scaler', { X }, [['y', 'float32']], { offset: { floats: [0.25] }, scale: { floats: [4] } });
    await same('Scaler', { X: f64(X) }, [['y', 'float32']], attrs);
    await same('Scaler', { X: asInt64(X) }, [['y', 'float32']], attrs);
  });
  it('Normalizer MAX, L1, L2, with a zero row', async () => {
    const Z = f32([...(X.data as Float32Array).slice(0, 9), 0, 0, 0], [4, 3]);
    for (const norm of ['MAX', 'L1', 'L2']) await same('Normalizer', { X: Z }, [['y', 'float32']], { norm });
    await same('Normalizer', { X: asInt64(X) }, [['y', 'float32']], { norm: 'L2' });
  });
  it('Imputer: NaN per column, a replaced value, a single imputed value, int64', async () => {
    const data = Array.from(X.data as Float32Array);
    data[1] = Number.NaN;
    data[5] = Number.NaN;
    data[6] = 7;
    const Xn = f32(data, [4, 3]);
    await same('Imputer', { X: Xn }, [['y', 'float32']], {
      imputed_value_floats: { floats: [1, 2, 3] },
      replaced_value_float: { f: Number.NaN },
    });
    await same('Imputer', { X: Xn }, [['y', 'float32']], { imputed_value_floats: { floats: [-1] }, replaced_value_float: { f: 7 } });
    await same('Imputer', { X: i64([1, 0, 3, 0, 5, 6], [2, 3]) }, [['y', 'int64']], {
      imputed_value_int64s: [9, 8, 7],
      replaced_value_int64: 0,
    });
  });
});

describe('OneHotEncoder, FeatureVectorizer, CategoryMapper', () => {
  const s = (data: string[], dims: number[]) => new ort.Tensor('string', data, dims);
  it('OneHotEncoder on strings with an unknown value, and on numbers', async () => {
    await same('OneHotEncoder', { X: s(['b', 'z', 'a', 'c'], [2, 2]) }, [['y', 'float32']], { cats_strings: ['a', 'b', 'c'] });
    await same('OneHotEncoder', { X: i64([3, 1, 2, 9], [4]) }, [['y', 'float32']], { cats_int64s: [1, 2, 3] });
    await same('OneHotEncoder', { X: f32([3.7, 1, 2], [1, 3]) }, [['y', 'float32']], { cats_int64s: [1, 2, 3] });
  });
  it('OneHotEncoder with zeros=0 rejects an unknown category', async () => {
    const X = s(['a', 'q'], [2]);
    await expect(runOn('mlx', build('OneHotEncoder', { X }, [['y', 'float32']], { cats_strings: ['a'], zeros: 0 }), { X })).rejects.toThrow(
      /"q" is not a category/,
    );
  });
  it('FeatureVectorizer pads and cuts each input to its width', async () => {
    await same('FeatureVectorizer', { A: i64([1, 2, 3, 4], [2, 2]), B: i64([5, 6, 7, 8, 9, 10], [2, 3]) }, [['y', 'float32']], {
      inputdimensions: [3, 2],
    });
    await same('FeatureVectorizer', { A: rand([2, 2], 10), B: rand([2, 3], 11) }, [['y', 'float32']], { inputdimensions: [3, 2] });
  });
  it('CategoryMapper both ways, with defaults', async () => {
    const attrs = { cats_strings: ['x', 'y', 'z'], cats_int64s: [10, 20, 30], default_string: 'none', default_int64: -7 };
    await same('CategoryMapper', { X: s(['z', 'q', 'x'], [3]) }, [['y', 'int64']], attrs);
    await same('CategoryMapper', { X: i64([20, 5, 30, 10], [2, 2]) }, [['y', 'string']], attrs);
  });
});

describe('SVMClassifier', () => {
  const F = 3;
  const X = rand([6, F], 20, 1.5);
  const outs: [string, ElemName][] = [
    ['label', 'int64'],
    ['scores', 'float32'],
  ];
  const strOuts: [string, ElemName][] = [
    ['label', 'string'],
    ['scores', 'float32'],
  ];
  // Three classes with 2, 1 and 2 support vectors: coefficients [classes - 1, vectors].
  const svc3 = {
    vectors_per_class: [2, 1, 2],
    support_vectors: seeded(5 * F, 21),
    coefficients: seeded(2 * 5, 22),
    rho: seeded(3, 23),
    classlabels_ints: [1, 2, 3],
  };
  it('RBF, three classes, votes and pairwise scores', () =>
    same('SVMClassifier', { X }, outs, { ...svc3, kernel_type: 'RBF', kernel_params: [0.5, 0, 0] }));
  it('SIGMOID and POLY kernels, three classes', async () => {
    await same('SVMClassifier', { X }, outs, { ...svc3, kernel_type: 'SIGMOID', kernel_params: [0.3, 0.1, 0] });
    await same('SVMClassifier', { X }, outs, { ...svc3, kernel_type: 'POLY', kernel_params: [0.3, 0.5, 3] });
  });
  it('RBF with prob_a/prob_b: coupled class probabilities, string labels', () =>
    same('SVMClassifier', { X }, strOuts, {
      vectors_per_class: svc3.vectors_per_class,
      support_vectors: svc3.support_vectors,
      coefficients: svc3.coefficients,
      rho: svc3.rho,
      classlabels_strings: ['x', 'y', 'z'],
      kernel_type: 'RBF',
      kernel_params: [0.5, 0, 0],
      prob_a: [-2, -1.5, -3],
      prob_b: [0.1, -0.2, 0.05],
    }));
  const svc2 = {
    vectors_per_class: [2, 2],
    support_vectors: seeded(4 * F, 24),
    coefficients: seeded(4, 25),
    rho: { floats: [0.2] },
    classlabels_ints: [0, 1],
    kernel_params: { floats: [0, 0, 0] },
  };
  it('binary SVC, linear kernel, NONE and LOGISTIC', async () => {
    await same('SVMClassifier', { X }, outs, { ...svc2, kernel_type: 'LINEAR' });
    await same('SVMClassifier', { X }, outs, { ...svc2, kernel_type: 'LINEAR', post_transform: 'LOGISTIC' });
  });
  it('linear mode (no support vectors), three and two classes', async () => {
    await same('SVMClassifier', { X }, outs, {
      coefficients: seeded(3 * F, 26),
      rho: [0.3],
      classlabels_ints: [5, 6, 7],
      kernel_params: { floats: [0, 0, 0] },
    });
    await same('SVMClassifier', { X }, outs, {
      coefficients: seeded(2 * F, 27),
      rho: [-0.1],
      classlabels_ints: [5, 6],
      kernel_params: { floats: [0, 0, 0] },
      post_transform: 'SOFTMAX',
    });
  });
});

describe('SVMRegressor', () => {
  const F = 3;
  const X = rand([5, F], 30, 1.5);
  const svr = { n_supports: 4, support_vectors: seeded(4 * F, 31), coefficients: seeded(4, 32), rho: [0.25] };
  it('RBF and POLY kernels', async () => {
    await same('SVMRegressor', { X }, [['y', 'float32']], { ...svr, kernel_type: 'RBF', kernel_params: [0.7, 0, 0] });
    await same('SVMRegressor', { X }, [['y', 'float32']], { ...svr, kernel_type: 'POLY', kernel_params: [0.5, 1, 2] });
  });
  it('one_class', () =>
    same('SVMRegressor', { X }, [['y', 'float32']], { ...svr, kernel_type: 'RBF', kernel_params: [0.7, 0, 0], one_class: 1 }));
  it('linear mode', () =>
    same('SVMRegressor', { X }, [['y', 'float32']], { coefficients: seeded(F, 33), rho: [0.5], kernel_params: { floats: [0, 0, 0] } }));
});

// Two trees over three features: tree 0 splits on x0 then x1 (4 leaves), tree 1 on x2 (2 leaves).
// Leaf weights go to targets/classes as each case says.
const forest = {
  nodes_treeids: [0, 0, 0, 0, 0, 0, 0, 1, 1, 1],
  nodes_nodeids: [0, 1, 2, 3, 4, 5, 6, 0, 1, 2],
  nodes_featureids: [0, 1, 1, 0, 0, 0, 0, 2, 0, 0],
  nodes_modes: ['BRANCH_LEQ', 'BRANCH_LT', 'BRANCH_GTE', 'LEAF', 'LEAF', 'LEAF', 'LEAF', 'BRANCH_GT', 'LEAF', 'LEAF'],
  nodes_values: { floats: [0.1, -0.3, 0.2, 0, 0, 0, 0, 0.05, 0, 0] },
  nodes_truenodeids: [1, 3, 5, 0, 0, 0, 0, 1, 0, 0],
  nodes_falsenodeids: [2, 4, 6, 0, 0, 0, 0, 2, 0, 0],
  nodes_missing_value_tracks_true: [1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
};
const leaves: [number, number][] = [
  [0, 3],
  [0, 4],
  [0, 5],
  [0, 6],
  [1, 1],
  [1, 2],
];
/** Weights for `prefix` (target/class): each leaf gives weight w(leaf, id) to every id of `ids`. */
function weighted(prefix: string, ids: number[], w: (leaf: number, id: number) => number) {
  const rows = leaves.flatMap(([t, n], li) => ids.map((id) => [t, n, id, w(li, id)]));
  return {
    [`${prefix}_treeids`]: rows.map((r) => r[0]),
    [`${prefix}_nodeids`]: rows.map((r) => r[1]),
    [`${prefix}_ids`]: rows.map((r) => r[2]),
    [`${prefix}_weights`]: { floats: rows.map((r) => r[3]) },
  };
}

describe('TreeEnsembleRegressor and TreeEnsembleClassifier (opsets 1-4)', () => {
  const data = seeded(8 * 3, 40);
  data[3] = Number.NaN; // row 1, x0: missing, tracked to the true branch
  const X = f32(data, [8, 3]);
  const y: [string, ElemName][] = [['y', 'float32']];
  const wr = (leaf: number, id: number) => Math.fround(0.3 * leaf - 0.7 + 0.2 * id);
  it('regressor: SUM, AVERAGE, MIN, MAX over two targets with base values', async () => {
    for (const aggregate_function of ['SUM', 'AVERAGE', 'MIN', 'MAX'])
      await same('TreeEnsembleRegressor', { X }, y, {
        ...forest,
        ...weighted('target', [0, 1], wr),
        n_targets: 2,
        aggregate_function,
        base_values: { floats: [0.5, -0.25] },
      });
  });
  it('regressor: one target, one base value, PROBIT on scores in (0, 1); double input', async () => {
    const attrs = { ...forest, ...weighted('target', [0], (l) => 0.05 + 0.05 * l), n_targets: 1, base_values: { floats: [0.1] } };
    await same('TreeEnsembleRegressor', { X }, y, { ...attrs, post_transform: 'PROBIT' });
    await same('TreeEnsembleRegressor', { X: f64(X) }, y, attrs);
  });
  const outs: [string, ElemName][] = [
    ['label', 'int64'],
    ['scores', 'float32'],
  ];
  it('classifier: three classes, with base values, NONE and SOFTMAX', async () => {
    const attrs = { ...forest, ...weighted('class', [0, 1, 2], wr), classlabels_int64s: [10, 20, 30] };
    await same('TreeEnsembleClassifier', { X }, outs, attrs);
    await same('TreeEnsembleClassifier', { X }, outs, { ...attrs, base_values: { floats: [0.1, 0, -0.1] }, post_transform: 'SOFTMAX' });
  });
  it('classifier: binary with both classes weighted (probabilities), string labels', () =>
    same(
      'TreeEnsembleClassifier',
      { X },
      [
        ['label', 'string'],
        ['scores', 'float32'],
      ],
      { ...forest, ...weighted('class', [0, 1], (l, id) => (id ? 0.1 * l : 1 - 0.1 * l) / 2), classlabels_strings: ['no', 'yes'] },
    ));
  it('classifier: binary with one weighted class, positive weights, and with mixed signs under LOGISTIC', async () => {
    await same('TreeEnsembleClassifier', { X }, outs, {
      ...forest,
      ...weighted('class', [1], (l) => 0.08 * l + 0.1),
      classlabels_int64s: [0, 1],
    });
    await same('TreeEnsembleClassifier', { X }, outs, {
      ...forest,
      ...weighted('class', [1], wr),
      classlabels_int64s: [0, 1],
      post_transform: 'LOGISTIC',
    });
    await same('TreeEnsembleClassifier', { X }, outs, {
      ...forest,
      ...weighted('class', [0], wr),
      classlabels_int64s: [4, 5],
      base_values: { floats: [0.2, 0.2] },
    });
    // Class 0 alone, no base values: [-s, s]; class 1 with one base value (unscored class 0 writes 0).
    await same('TreeEnsembleClassifier', { X }, outs, { ...forest, ...weighted('class', [0], wr), classlabels_int64s: [4, 5] });
    await same('TreeEnsembleClassifier', { X }, outs, {
      ...forest,
      ...weighted('class', [1], (l) => 0.08 * l + 0.1),
      classlabels_int64s: [0, 1],
      base_values: { floats: [0.3] },
    });
  });
});
