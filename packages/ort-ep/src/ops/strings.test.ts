// String and ai.onnx.ml ops against onnxruntime-node's CPU provider (whose RegexFullMatch is RE2
// itself, so the RE2-to-RegExp translation is checked against the real dialect), on the edges
// the node suite leaves out; and the patterns the translation must refuse.
import { describe, expect, it } from 'vitest';
import { model, node, v, type AttrSpec, type ElemName } from '../../test/helpers/build.js';
import { expectSameAsOrt, ort, type Feeds, type OrtTensor } from '../../test/helpers/ort.js';
import { translateRe2 } from './helpers/regex.js';
import { stringEqual } from './strings.js';

const str = (data: string[], dims = [data.length]): OrtTensor => new ort.Tensor('string', data, dims);
const f32 = (data: number[], dims = [data.length]): OrtTensor => new ort.Tensor('float32', Float32Array.from(data), dims);
const i64 = (data: number[], dims = [data.length]): OrtTensor => new ort.Tensor('int64', BigInt64Array.from(data.map(BigInt)), dims);

interface One {
  op: string;
  domain?: string;
  opset?: number;
  feeds: Feeds;
  outs: [string, ElemName][];
  attrs?: Record<string, AttrSpec>;
}

function stringModel(op: string, inputs: string[], outs: [string, ElemName][], attrs: Record<string, AttrSpec>, opset = 20): Uint8Array {
  return model({
    opsets: { '': opset },
    inputs: inputs.map((n) => v(n, 'string')),
    outputs: outs.map(([n, t]) => v(n, t)),
    nodes: [
      node(
        op,
        inputs,
        outs.map(([n]) => n),
        { attrs },
      ),
    ],
  });
}

async function mlxOnly(bytes: Uint8Array, feeds: Feeds): Promise<Record<string, OrtTensor>> {
  const s = await ort.InferenceSession.create(bytes, { executionProviders: ['mlx'] });
  try {
    return await s.run(feeds);
  } finally {
    await s.release();
  }
}

/** Compares the raw outputs too: expectSameAsOrt reads values as numbers, which strings are not. */
async function same(c: One): Promise<void> {
  const names = Object.keys(c.feeds);
  const bytes = model({
    opsets: { '': c.opset ?? 20, ...(c.domain ? { [c.domain]: c.domain === 'ai.onnx.ml' ? 5 : 1 } : {}) },
    inputs: names.map((n) => v(n, c.feeds[n].type as ElemName, [...c.feeds[n].dims])),
    outputs: c.outs.map(([n, t]) => v(n, t)),
    nodes: [
      node(
        c.op,
        names,
        c.outs.map(([n]) => n),
        { attrs: c.attrs, domain: c.domain },
      ),
    ],
  });
  const have = await expectSameAsOrtStrings(bytes, c.feeds);
  expect(Object.keys(have).length).toBe(c.outs.length);
}

async function expectSameAsOrtStrings(bytes: Uint8Array, feeds: Feeds): Promise<Record<string, OrtTensor>> {
  const run = async (mlx: boolean) => {
    const s = await ort.InferenceSession.create(bytes, mlx ? { executionProviders: ['mlx'] } : {});
    try {
      return await s.run(feeds);
    } finally {
      await s.release();
    }
  };
  const [want, have] = [await run(false), await run(true)];
  const numeric = Object.values(want).every((t) => t.type !== 'string');
  if (numeric) return expectSameAsOrt(bytes, feeds);
  for (const k of Object.keys(want)) {
    expect({ k, type: have[k].type, dims: [...have[k].dims], data: [...(have[k].data as string[])] }).toEqual({
      k,
      type: want[k].type,
      dims: [...want[k].dims],
      data: [...(want[k].data as string[])],
    });
  }
  return have;
}

describe('StringSplit', () => {
  // Without a delimiter the spec splits on runs of whitespace, as Python's str.split() (the
  // reference) does: tabs and newlines too, and a maxsplit remainder keeps its trailing spaces.
  // onnxruntime splits on ' ' only and trims the remainder, so these compare with Python's answers.
  it('whitespace, maxsplit 1, Python semantics', async () => {
    const r = await mlxOnly(
      stringModel(
        'StringSplit',
        ['x'],
        [
          ['y', 'string'],
          ['n', 'int64'],
        ],
        { maxsplit: 1 },
      ),
      { x: str(['  a  b c  ', '', 'x\ty\nz', ' ']) },
    );
    expect([...(r.y.data as string[])]).toEqual(['a', 'b c  ', '', '', 'x', 'y\nz', '', '']);
    expect([...r.y.dims]).toEqual([4, 2]);
    expect(Array.from(r.n.data as BigInt64Array, Number)).toEqual([2, 0, 2, 0]);
  });
  it('a multi-character delimiter, empty pieces kept', () =>
    same({
      op: 'StringSplit',
      feeds: { x: str(['a::b::::c', '::', 'abc']) },
      outs: [
        ['y', 'string'],
        ['n', 'int64'],
      ],
      attrs: { delimiter: '::' },
    }));
});

// onnxruntime's StringNormalizer needs the en_US.UTF-8 locale installed, which CI machines may
// lack; these compare with the spec's answers instead.
describe('StringNormalizer', () => {
  const x = str(['The', 'QUICK', 'the', 'Fox'], [1, 4]);
  const run = (attrs: Record<string, AttrSpec>, feed = x) =>
    mlxOnly(stringModel('StringNormalizer', ['x'], [['y', 'string']], attrs, 10), { x: feed });
  it('case-insensitive stopwords, LOWER, [1, C]', async () => {
    const r = await run({ case_change_action: 'LOWER', stopwords: ['the'] });
    expect({ dims: [...r.y.dims], data: [...(r.y.data as string[])] }).toEqual({ dims: [1, 2], data: ['quick', 'fox'] });
  });
  it('case-sensitive stopwords, UPPER, [C]', async () => {
    const r = await run({ case_change_action: 'UPPER', is_case_sensitive: 1, stopwords: ['the'] }, str(['The', 'QUICK', 'the', 'Fox']));
    expect([...(r.y.data as string[])]).toEqual(['THE', 'QUICK', 'FOX']);
  });
  it('everything dropped: [1, 1] holding an empty string', async () => {
    const r = await run({ stopwords: ['the', 'quick', 'fox'] });
    expect({ dims: [...r.y.dims], data: [...(r.y.data as string[])] }).toEqual({ dims: [1, 1], data: [''] });
  });
});

describe('RegexFullMatch (RE2 via RegExp)', () => {
  const x = str(['a.b', 'a\rb', 'a\nb', 'ABC', 'abc', '{x}', '123', '12a', 'héllo', 'a@b', '']);
  for (const pattern of [
    'a.b',
    '\\Qa.b\\E',
    '(?i)abc',
    '\\{x\\}',
    '{x}',
    '[[:digit:]]+',
    '\\pL+',
    '(?P<w>\\w)+',
    '\\@|a\\@b',
    '[^\\s]*',
    '\\Aabc\\z',
    'x*',
  ]) {
    it(pattern, () => same({ op: 'RegexFullMatch', feeds: { x }, outs: [['y', 'bool']], attrs: { pattern } }));
  }
  it('refuses what RE2 or JavaScript cannot take', () => {
    for (const p of ['(?=a)b', '(a)\\1', '(?U)a*', 'a(?i)b', '[[:^alpha:]]', '\\C', '\\Z'])
      expect('error' in translateRe2(p), p).toBe(true);
  });
});

describe('StringConcat and Equal on strings', () => {
  it('StringConcat broadcasts [2, 1] with [3]', () =>
    same({ op: 'StringConcat', feeds: { a: str(['x', 'y'], [2, 1]), b: str(['1', '2', 'é'], [3]) }, outs: [['c', 'string']] }));
  it('stringEqual broadcasts', () => {
    const r = stringEqual({ dtype: 8, dims: [2, 1], data: ['a', 'b'] }, { dtype: 8, dims: [3], data: ['a', 'b', 'a'] });
    expect({ dims: r.dims, data: [...(r.data as Uint8Array)] }).toEqual({ dims: [2, 3], data: [1, 0, 1, 0, 1, 0] });
  });
});

describe('ai.onnx.ml', () => {
  const ml = 'ai.onnx.ml';
  it('LabelEncoder float keys, NaN matches NaN', () =>
    same({
      op: 'LabelEncoder',
      domain: ml,
      feeds: { x: f32([1.5, NaN, 2, 7]) },
      outs: [['y', 'string']],
      attrs: { keys_floats: { floats: [1.5, NaN, 2] }, values_strings: ['a', 'nan', 'b'], default_string: '?' },
    }));
  it('LabelEncoder int64 -> float with the default default', () =>
    same({
      op: 'LabelEncoder',
      domain: ml,
      feeds: { x: i64([3, 1, 9]) },
      outs: [['y', 'float32']],
      attrs: { keys_int64s: [1, 3], values_floats: { floats: [0.5, 1.5] } },
    }));
  it('ArrayFeatureExtractor of a 1-D string tensor gives [1, K]', () =>
    same({ op: 'ArrayFeatureExtractor', domain: ml, feeds: { x: str(['a', 'b', 'c']), i: i64([2, 0, 2]) }, outs: [['y', 'string']] }));
  // onnxruntime reads post_transform 1 as LOGISTIC and 2 as SOFTMAX, the reverse of the spec's
  // 'SOFTMAX' (1), 'LOGISTIC' (2); 0 and 3 (SOFTMAX_ZERO) mean the same in both.
  const fl = (values: number[]) => ({ t: { name: 't', type: 'float32' as const, dims: [values.length], values } });
  const forest = (aggregate: number, post: number): Record<string, AttrSpec> => ({
    n_targets: 2,
    aggregate_function: aggregate,
    post_transform: post,
    tree_roots: [0, 2],
    nodes_modes: { t: { name: 'm', type: 'uint8', dims: [3], values: [0, 3, 1] } },
    nodes_featureids: [0, 1, 1],
    nodes_splits: fl([1, 2.5, 0]),
    nodes_truenodeids: [0, 1, 3],
    nodes_trueleafs: [1, 1, 1],
    nodes_falsenodeids: [1, 2, 4],
    nodes_falseleafs: [0, 1, 1],
    nodes_missing_value_tracks_true: [1, 0, 1],
    leaf_targetids: [0, 1, 0, 1, 0],
    leaf_weights: fl([1, 2, 3, -1, 0.5]),
  });
  const trees = { x: f32([0.5, 2, NaN, 1, 3, -1, 2, NaN], [4, 2]) };
  for (const [aggregate, post] of [
    [0, 0],
    [1, 3],
    [2, 0],
    [3, 0],
  ]) {
    it(`TreeEnsemble aggregate ${aggregate}, post_transform ${post}, NaN tracking`, () =>
      same({ op: 'TreeEnsemble', domain: ml, feeds: trees, outs: [['y', 'float32']], attrs: forest(aggregate, post) }));
  }
  it('TreeEnsemble SOFTMAX (1) and LOGISTIC (2) as the spec numbers them', async () => {
    const ys = [];
    for (const post of [1, 2]) {
      const bytes = model({
        opsets: { '': 20, [ml]: 5 },
        inputs: [v('x', 'float32', [4, 2])],
        outputs: [v('y', 'float32')],
        nodes: [node('TreeEnsemble', ['x'], ['y'], { domain: ml, attrs: forest(0, post) })],
      });
      ys.push(Array.from((await mlxOnly(bytes, trees)).y.data as Float32Array).slice(0, 2));
    }
    // Row 0 scores [0.75, 0]: softmax [0.6792, 0.3208]; logistic [0.6792, 0.5].
    expect(ys.map((r) => r.map((z) => z.toFixed(4)))).toEqual([
      ['0.6792', '0.3208'],
      ['0.6792', '0.5000'],
    ]);
  });
  it('TfIdfVectorizer over strings, TFIDF with weights, skips', () =>
    same({
      op: 'TfIdfVectorizer',
      opset: 9,
      feeds: { x: str(['a', 'b', 'a', 'c', 'b', 'a', 'b', 'c'], [2, 4]) },
      outs: [['y', 'float32']],
      attrs: {
        mode: 'TFIDF',
        min_gram_length: 1,
        max_gram_length: 2,
        max_skip_count: 1,
        ngram_counts: [0, 2],
        ngram_indexes: [2, 0, 1, 3],
        pool_strings: ['a', 'b', 'a', 'b', 'b', 'a'],
        weights: { floats: [0.5, 2, 1, 3] },
      },
    }));
});
