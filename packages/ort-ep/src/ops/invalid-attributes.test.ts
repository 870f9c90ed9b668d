// Attribute values the spec forbids (an unknown direction or mode, a list of the wrong length)
// are found by the entries' parse() at plan time: the node is refused as an invalid node, with
// a sentence naming the attribute, before anything runs. What the operator schemas themselves
// forbid (a missing required attribute, one the op does not define at that opset) is refused
// earlier, when the model loads (OnnxLoadError); those cases expect the loader's sentence.
import { describe, expect, it } from 'vitest';
import { checkModel } from '../check.js';
import { OnnxLoadError } from '../errors.js';
import { model, node, v, type AttrSpec, type ElemName } from '../../test/helpers/build.js';

interface Refusal {
  op: string;
  opset: number;
  attrs: Record<string, AttrSpec>;
  /** Number of inputs the node lists (all float32 graph inputs). */
  inputs: number;
  outputs?: number;
  domain?: string;
  /** Element types of the inputs (default float32 for each). */
  types?: ElemName[];
  why: RegExp;
}

/** The reasons the planner gives for the one node of a model. */
function reasons(r: Refusal): string[] {
  const ins = Array.from({ length: r.inputs }, (_, i) => `x${i}`);
  const outs = Array.from({ length: r.outputs ?? 1 }, (_, i) => `y${i}`);
  const bytes = model({
    opsets: r.domain ? { '': 21, [r.domain]: r.opset } : { '': r.opset },
    inputs: ins.map((n, i) => v(n, r.types?.[i] ?? 'float32')),
    outputs: outs.map((n) => v(n, 'float32')),
    nodes: [node(r.op, ins, outs, { attrs: r.attrs, domain: r.domain, name: 'n' })],
  });
  try {
    return checkModel(bytes).unclaimed.map((u) => u.reason);
  } catch (e) {
    if (!(e instanceof OnnxLoadError)) throw e;
    return [`load: ${e.message}`];
  }
}

const cases: Refusal[] = [
  {
    op: 'RNN',
    opset: 14,
    attrs: { direction: 'sideways' },
    inputs: 3,
    why: /RNN direction 'sideways' is not forward, reverse or bidirectional/,
  },
  { op: 'GRU', opset: 14, attrs: { activations: ['Sigmoid', 'Wobble'] }, inputs: 3, why: /GRU activation 'Wobble' is not one of/ },
  // An empty name (once a TypeError reading its spec) and a name of Object's prototype.
  { op: 'LSTM', opset: 14, attrs: { activations: ['', 'Tanh', 'Tanh'] }, inputs: 3, why: /LSTM activation '' is not one of/ },
  { op: 'RNN', opset: 14, attrs: { activations: ['constructor'] }, inputs: 3, why: /RNN activation 'constructor' is not one of/ },
  {
    op: 'LSTM',
    opset: 14,
    attrs: { direction: 'bidirectional', activations: ['Sigmoid', 'Tanh', 'Tanh', 'Tanh'] },
    inputs: 3,
    why: /LSTM needs 6 activations for direction 'bidirectional', got 4/,
  },
  { op: 'RNN', opset: 14, attrs: { layout: 2 }, inputs: 3, why: /RNN layout 2 is not 0 or 1/ },
  // onnxruntime refuses clip <= 0 for LSTM and GRU; its RNN clipped to the empty interval.
  { op: 'RNN', opset: 14, attrs: { clip: -1 }, inputs: 3, why: /RNN clip -1 is not positive/ },
  { op: 'LSTM', opset: 14, attrs: { clip: 0 }, inputs: 3, why: /LSTM clip 0 is not positive/ },
  { op: 'GRU', opset: 14, attrs: { clip: Number.NaN }, inputs: 3, why: /GRU clip NaN is not positive/ },
  {
    op: 'Conv',
    opset: 11,
    attrs: { auto_pad: 'SAME' },
    inputs: 2,
    why: /auto_pad 'SAME' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID/,
  },
  { op: 'AveragePool', opset: 19, attrs: { kernel_shape: [2, 2], auto_pad: 'same_upper' }, inputs: 1, why: /auto_pad 'same_upper'/ },
  { op: 'MaxPool', opset: 12, attrs: {}, inputs: 1, why: /missing required attribute 'kernel_shape'/ },
  { op: 'MaxUnpool', opset: 11, attrs: {}, inputs: 2, types: ['float32', 'int64'], why: /missing required attribute 'kernel_shape'/ },
  { op: 'LpNormalization', opset: 1, attrs: { p: 3 }, inputs: 1, why: /LpNormalization p 3 is not 1 or 2/ },
  { op: 'GroupNormalization', opset: 21, attrs: {}, inputs: 3, why: /missing required attribute 'num_groups'/ },
  { op: 'LRN', opset: 13, attrs: {}, inputs: 1, why: /missing required attribute 'size'/ },
  { op: 'Gelu', opset: 20, attrs: { approximate: 'fast' }, inputs: 1, why: /Gelu approximate='fast' is not one of 'none', 'tanh'/ },
  { op: 'Softmax', opset: 13, attrs: { axis: 1.5 }, inputs: 1, why: /attribute 'axis' of Softmax node 'n' is a float, expected int/ },
  {
    op: 'BitShift',
    opset: 11,
    attrs: { direction: 'UP' },
    inputs: 2,
    types: ['uint8', 'uint8'],
    why: /BitShift direction 'UP' is not LEFT or RIGHT/,
  },
  { op: 'Cast', opset: 19, attrs: {}, inputs: 1, why: /node 'n' \(Cast\): missing required attribute 'to'/ },
  { op: 'Concat', opset: 13, attrs: {}, inputs: 2, why: /node 'n' \(Concat\): missing required attribute 'axis'/ },
  { op: 'Unsqueeze', opset: 11, attrs: {}, inputs: 1, why: /node 'n' \(Unsqueeze\): missing required attribute 'axes'/ },
  {
    op: 'ScatterElements',
    opset: 16,
    attrs: { reduction: 'max' },
    inputs: 3,
    types: ['float32', 'int64', 'float32'],
    why: /ScatterElements reduction 'max' is not defined at opset 16/,
  },
  {
    op: 'ScatterND',
    opset: 13,
    attrs: { reduction: 'add' },
    inputs: 3,
    types: ['float32', 'int64', 'float32'],
    why: /node 'n' \(ScatterND\): unknown attribute 'reduction'/,
  },
  {
    op: 'TensorScatter',
    opset: 24,
    attrs: { mode: 'ring' },
    inputs: 3,
    types: ['float32', 'float32', 'int64'],
    why: /TensorScatter mode 'ring' is not defined/,
  },
  { op: 'Slice', opset: 1, attrs: { ends: [1] }, inputs: 1, why: /node 'n' \(Slice\): missing required attribute 'starts'/ },
  {
    op: 'Pad',
    opset: 18,
    attrs: { mode: 'wrap' },
    inputs: 2,
    types: ['float32', 'int64'],
    why: /Pad mode 'wrap' is not defined at opset 18/,
  },
  { op: 'DepthToSpace', opset: 13, attrs: { blocksize: 2, mode: 'RCD' }, inputs: 1, why: /DepthToSpace mode 'RCD' is not DCR or CRD/ },
  { op: 'TopK', opset: 1, attrs: {}, inputs: 1, outputs: 2, why: /node 'n' \(TopK\): missing required attribute 'k'/ },
  { op: 'Resize', opset: 13, attrs: { mode: 'area' }, inputs: 3, why: /Resize mode 'area' is not supported/ },
  {
    op: 'Resize',
    opset: 18,
    attrs: { coordinate_transformation_mode: 'half_pixel_symmetric' },
    inputs: 3,
    why: /coordinate_transformation_mode 'half_pixel_symmetric' is not defined at opset 18/,
  },
  {
    op: 'Resize',
    opset: 19,
    attrs: { keep_aspect_ratio_policy: 'fit' },
    inputs: 3,
    why: /keep_aspect_ratio_policy 'fit' is not one of stretch, not_larger, not_smaller/,
  },
  { op: 'Upsample', opset: 7, attrs: {}, inputs: 1, why: /node 'n' \(Upsample\): missing required attribute 'scales'/ },
  { op: 'Einsum', opset: 12, attrs: {}, inputs: 2, why: /node 'n' \(Einsum\): missing required attribute 'equation'/ },
  // Attention's qk_matmul_output_mode outside 0-3 is refused when the node runs instead (onnxruntime,
  // the fallback, crashes on it): test/api/fuzz-found.test.ts.
  { op: 'Attention', domain: 'com.microsoft', opset: 1, attrs: {}, inputs: 3, why: /Attention node 'n' needs attribute 'num_heads'/ },
  {
    op: 'RotaryEmbedding',
    domain: 'com.microsoft',
    opset: 1,
    attrs: { rotary_embedding_dim: 8 },
    inputs: 4,
    why: /RotaryEmbedding needs num_heads when rotary_embedding_dim is set/,
  },
  {
    op: 'MatMulNBits',
    domain: 'com.microsoft',
    opset: 1,
    attrs: { K: 32, N: 4 },
    inputs: 3,
    why: /MatMulNBits node 'n' needs attribute 'block_size'/,
  },
  {
    op: 'StringNormalizer',
    opset: 10,
    attrs: { case_change_action: 'TITLE' },
    inputs: 1,
    types: ['string'],
    why: /case_change_action 'TITLE' is not one of NONE, LOWER, UPPER/,
  },
  {
    op: 'TfIdfVectorizer',
    opset: 9,
    attrs: {
      mode: 'BM25',
      min_gram_length: 1,
      max_gram_length: 1,
      max_skip_count: 0,
      ngram_counts: [0],
      ngram_indexes: [0],
      pool_int64s: [1],
    },
    inputs: 1,
    types: ['int64'],
    why: /mode 'BM25' is not one of TF, IDF, TFIDF/,
  },
  {
    op: 'LabelEncoder',
    domain: 'ai.onnx.ml',
    opset: 2,
    attrs: { keys_strings: ['a'] },
    inputs: 1,
    why: /LabelEncoder needs one values_\* attribute/,
  },
  { op: 'BitCast', opset: 26, attrs: {}, inputs: 1, why: /node 'n' \(BitCast\): missing required attribute 'to'/ },
  { op: 'GridSample', opset: 20, attrs: { mode: 'bicubic' }, inputs: 2, why: /GridSample mode 'bicubic' is not defined at opset 20/ },
  {
    op: 'GridSample',
    opset: 16,
    attrs: { padding_mode: 'mirror' },
    inputs: 2,
    why: /GridSample padding_mode 'mirror' is not one of zeros, border, reflection/,
  },
  {
    op: 'RoiAlign',
    opset: 16,
    attrs: { mode: 'min' },
    inputs: 3,
    types: ['float32', 'float32', 'int64'],
    why: /RoiAlign mode 'min' is not avg or max/,
  },
  {
    op: 'RoiAlign',
    opset: 16,
    attrs: { coordinate_transformation_mode: 'asymmetric' },
    inputs: 3,
    types: ['float32', 'float32', 'int64'],
    why: /RoiAlign coordinate_transformation_mode 'asymmetric' is not half_pixel or output_half_pixel/,
  },
  { op: 'MaxRoiPool', opset: 1, attrs: {}, inputs: 2, why: /node 'n' \(MaxRoiPool\): missing required attribute 'pooled_shape'/ },
  {
    op: 'SoftmaxCrossEntropyLoss',
    opset: 13,
    attrs: { reduction: 'max' },
    inputs: 2,
    types: ['float32', 'int64'],
    why: /reduction 'max' is not one of none, sum, mean/,
  },
  { op: 'Multinomial', opset: 7, attrs: { dtype: 1 }, inputs: 1, why: /dtype 1 is not int32 or int64/ },
  { op: 'RandomNormal', opset: 1, attrs: {}, inputs: 0, why: /node 'n' \(RandomNormal\): missing required attribute 'shape'/ },
  {
    op: 'Momentum',
    domain: 'ai.onnx.preview.training',
    opset: 1,
    attrs: { alpha: 0.9, beta: 0.1, norm_coefficient: 0, mode: 'heavy' },
    inputs: 5,
    outputs: 2,
    types: ['float32', 'int64', 'float32', 'float32', 'float32'],
    why: /mode 'heavy' is not one of standard, nesterov/,
  },
  {
    op: 'ReduceSum',
    opset: 11,
    attrs: { keepdims: 'yes' },
    inputs: 1,
    why: /attribute 'keepdims' of ReduceSum node 'n' is a string, expected int/,
  },
];

describe('attributes the spec forbids refuse the node at plan time', () => {
  for (const c of cases) {
    it(`${c.op}-${c.opset} ${JSON.stringify(c.attrs)}`, () => {
      const got = reasons(c);
      expect(got).toHaveLength(1);
      expect(got[0]).toMatch(/^(invalid node|load): /);
      expect(got[0]).toMatch(c.why);
    });
  }
});
