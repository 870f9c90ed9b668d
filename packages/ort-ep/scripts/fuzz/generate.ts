// Fuzz cases, each a model and its feeds, named by (seed, index): the same pair gives the same
// case. Three sources:
//  - 'op': one node of a registered op, built from its ONNX schema (or a small table for the
//    contrib ops that have none) with random attributes, input types, shapes and values, edge
//    values included (0, -1, INT_MIN, INT_MAX, 2^31, NaN, Inf, empty and impossible dims);
//  - 'onnx-test': a case of the ONNX node test suite, mutated (feeds and model);
//  - 'shared': one of the shared real models, mutated (token ids, shapes, dtypes, values,
//    attributes, initializers, opsets).
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { ModelProtoSchema, TensorProtoSchema, type AttributeProto, type ModelProto, type NodeProto, type TensorProto } from 'onnx-buf';
import { AttributeProto_AttributeType as A } from 'onnx-buf';
import { decodeTensor, readTestCase, schemaOf, type HostTensor, type OpSchema } from '../../src/onnx/index.js';
import { OnnxDataType as T } from '../../src/onnx/index.js';
import { schemaData } from '../../src/onnx/schema-data.js';
import { defaultRegistry } from '../../src/ops/index.js';
import * as P from '../../test/helpers/proto.js';
import { Rng } from './rng.js';
import { structuredCase } from './structured.js';
import type { Special } from './hostile.js';
import {
  EDGE_FLOATS,
  EDGE_INTS,
  EDGE_STRINGS,
  FEED_TYPES,
  convert,
  extreme,
  isFloat,
  put,
  rawBytes,
  tensorOf,
  value,
  type Mode,
} from './values.js';

/** The note on a CastLike case that carries `saturate` with a target type other than float8. */
export const SATURATE_NON_FLOAT8 = 'saturate with a non-float8 target';

export type Source = 'op' | 'onnx-test' | 'shared' | 'structured';

export interface FuzzCase {
  /** `${seed}:${index}` for generated cases; the file name for replayed ones. */
  id: string;
  source: Source;
  /** The op, ONNX test or shared model the case was made from. */
  label: string;
  /** What was done to it, in a few words. */
  mutation: string;
  model: Uint8Array;
  feeds: Record<string, HostTensor>;
  /** How many times to run the mlx session (3 reaches the replay of a traced signature). */
  runs: number;
  /** A procedure the child runs instead of the model (scripts/fuzz/hostile.ts). */
  special?: Special;
}

export interface Roots {
  /** Folder of the shared models (../shared/models). */
  models?: string;
  /** Folder of the ONNX node tests (../shared/onnx-node-tests/v1.22.0). */
  onnxTests?: string;
  /** A regular expression (case-insensitive): only ops, ONNX tests and structured families it matches. */
  focus?: string;
  /** The share of structured cases (scripts/fuzz/structured.ts); 0 unless given. */
  structured?: number;
}

// ---- the op source ----

const onnxTypeCodes: Record<string, number> = {
  float: T.FLOAT,
  uint8: T.UINT8,
  int8: T.INT8,
  uint16: T.UINT16,
  int16: T.INT16,
  int32: T.INT32,
  int64: T.INT64,
  string: T.STRING,
  bool: T.BOOL,
  float16: T.FLOAT16,
  double: T.DOUBLE,
  uint32: T.UINT32,
  uint64: T.UINT64,
};

/** Element types of a schema type string ('tensor(float)') or type parameter, feedable ones only. */
function typesOf(schema: OpSchema, formal: string): { kind: 'tensor' | 'seq' | 'other'; types: number[] } {
  const list = formal in schema.constraints ? schemaData.types[schema.constraints[formal]] : [formal];
  const tensors: number[] = [];
  const seqs: number[] = [];
  for (const s of list) {
    const t = /^tensor\((\w+)\)$/.exec(s);
    if (t && t[1] in onnxTypeCodes) tensors.push(onnxTypeCodes[t[1]]);
    const q = /^seq\(tensor\((\w+)\)\)$/.exec(s);
    if (q && q[1] in onnxTypeCodes) seqs.push(onnxTypeCodes[q[1]]);
  }
  if (tensors.length) return { kind: 'tensor', types: tensors };
  if (seqs.length) return { kind: 'seq', types: seqs };
  return { kind: 'other', types: [] };
}

/** A preferred type (float, int64) most of the time, so that onnxruntime has a kernel to compare with. */
function chooseType(rng: Rng, types: number[]): number {
  const preferred = types.filter((t) => t === T.FLOAT || t === T.INT64 || t === T.INT32);
  if (preferred.length && rng.chance(0.7)) return rng.pick(preferred);
  return rng.pick(types);
}

// Inputs whose data are shapes, sizes or indices: 1-D int tensors drawn from dims or index values.
const DIMS_INPUTS = new Set(['shape', 'repeats', 'sizes', 'pads', 'split', 'output_shape', 'block_shape', 'image_shape', 'output_size']);
const INDEX_INPUTS = new Set([
  'indices',
  'axes',
  'starts',
  'ends',
  'steps',
  'K',
  'k',
  'depth',
  'axis',
  'position',
  'limit',
  'start',
  'delta',
  'sequence_lens',
  'tensor_index',
  'write_indices',
  'position_ids',
  'batch_indices',
  'max_output_boxes_per_class',
  'input_ids',
  'segment_ids',
  'num_segments',
  'I',
  'B',
]);

const STRING_POOLS: Record<string, string[]> = {
  mode: [
    'constant',
    'reflect',
    'edge',
    'wrap',
    'nearest',
    'linear',
    'cubic',
    'bilinear',
    'DCR',
    'CRD',
    'zeros',
    'border',
    'reflection',
    'avg',
    'max',
    'bogus',
    '',
  ],
  auto_pad: ['NOTSET', 'SAME_UPPER', 'SAME_LOWER', 'VALID', 'bogus'],
  direction: ['forward', 'reverse', 'bidirectional', 'LEFT', 'RIGHT', 'up'],
  reduction: ['none', 'add', 'mul', 'max', 'min', 'mean', 'sum'],
  coordinate_transformation_mode: [
    'half_pixel',
    'asymmetric',
    'align_corners',
    'pytorch_half_pixel',
    'tf_crop_and_resize',
    'half_pixel_symmetric',
    'x',
  ],
  nearest_mode: ['round_prefer_floor', 'round_prefer_ceil', 'floor', 'ceil', 'x'],
  keep_aspect_ratio_policy: ['stretch', 'not_larger', 'not_smaller', 'x'],
  equation: [
    'ij,jk->ik',
    'ii->i',
    'ij->ji',
    '...ij,...jk->...ik',
    'i,i->',
    'ij',
    'a',
    '->',
    ',',
    '',
    'ij,jk',
    'iij->j',
    'i...->...',
    'abc,abd->acd',
    'Ab->bA',
    'i->ii',
    'ij->k',
    'i j -> j i',
    '...,...->...',
    'ij..->ji',
    'i->i->i',
    'ijklmnopqrstuvwxyzABCDEFGHIJ->',
    'ab,ab,ab->',
    '1i->i',
    'ii',
    'i,j->ij',
  ],
  activations: [
    'Relu',
    'Tanh',
    'Sigmoid',
    'Affine',
    'LeakyRelu',
    'HardSigmoid',
    'Elu',
    'Softsign',
    'Softplus',
    'ScaledTanh',
    'ThresholdedRelu',
    'Bogus',
  ],
  approximate: ['none', 'tanh', 'x'],
  case_change_action: ['LOWER', 'UPPER', 'NONE', 'X'],
  pattern: ['a.*', '(a', '[', '.*', '(a+)+$', '\\d+', '', '(?i)abc', 'a{1000000}', '\\', '(?<n>a)\\k<n>', '[[:alpha:]]+'],
  delimiter: ['', ' ', ',', 'ab', '\u0000'],
  separator: ['', ' ', ',', 'ab'],
  locale: ['en_US', '', 'xx', 'de_DE'],
  padding_mode: ['zeros', 'border', 'reflection', 'x'],
  output_datatype: ['int64', 'float', 'x'],
  sample_distribution: ['uniform', 'normal'],
  post_transform: ['NONE', 'SOFTMAX', 'LOGISTIC', 'SOFTMAX_ZERO', 'PROBIT', 'X'],
  kernel_type: ['LINEAR', 'POLY', 'RBF', 'SIGMOID'],
};

function attrValue(rng: Rng, name: string, type: string, rank: number): AttributeProto | undefined {
  const smallInt = () => (rng.chance(0.8) ? BigInt(rng.int(-2, 4)) : rng.pick(EDGE_INTS));
  const float = () => (rng.chance(0.7) ? Math.round((rng.float() * 4 - 1) * 100) / 100 : rng.pick(EDGE_FLOATS));
  const str = () => (STRING_POOLS[name] && rng.chance(0.85) ? rng.pick(STRING_POOLS[name]) : rng.pick(EDGE_STRINGS));
  const len = () => (rng.chance(0.7) ? rank : rng.chance(0.5) ? 2 * rank : rng.int(0, 5));
  switch (type) {
    case 'int':
      return P.attr.int(name, name === 'to' || name === 'dtype' ? BigInt(rng.pick([...FEED_TYPES, 16, 0, 99])) : smallInt());
    case 'float':
      return P.attr.float(name, float());
    case 'string':
      return P.attr.string(name, str());
    case 'ints':
      return P.attr.ints(name, Array.from({ length: len() }, smallInt));
    case 'floats':
      return P.attr.floats(name, Array.from({ length: len() }, float));
    case 'strings':
      return P.attr.strings(name, Array.from({ length: rng.int(0, 4) }, str));
    case 'tensor': {
      const t = rng.pick([T.FLOAT, T.INT64, T.INT32, T.FLOAT16, T.DOUBLE, T.BOOL, T.UINT8, T.STRING]);
      const dims = rng.pick([[], [1], [rng.int(0, 3)], [2, 2]]);
      return P.attr.tensor(name, initializer('', tensorOf(rng, t, dims, 'mixed')));
    }
    default:
      return undefined; // graphs, sparse tensors and type protos: not generated
  }
}

/** A TensorProto of a host tensor (raw_data, or string_data for strings). */
export function initializer(name: string, t: HostTensor): TensorProto {
  if (t.dtype === T.STRING) {
    const enc = new TextEncoder();
    return create(TensorProtoSchema, {
      name,
      dataType: T.STRING,
      dims: t.dims.map(BigInt),
      stringData: (t.data as string[]).map((s) => enc.encode(s)),
    });
  }
  return P.tensor(name, t.dtype, t.dims, { rawData: rawBytes(t) as Uint8Array<ArrayBuffer> });
}

// Contrib ops have no ONNX schema: their formals and attributes, as onnxruntime documents them.
type Formal = [name: string, types: number[], optional?: boolean];
interface Contrib {
  inputs: Formal[];
  outputs: number;
  attributes: Record<string, string>;
}
const F = [T.FLOAT];
const FH = [T.FLOAT, T.FLOAT16];
const CONTRIB: Record<string, Contrib> = {
  Gelu: { inputs: [['X', FH]], outputs: 1, attributes: {} },
  BiasGelu: {
    inputs: [
      ['A', FH],
      ['B', FH],
    ],
    outputs: 1,
    attributes: {},
  },
  FastGelu: {
    inputs: [
      ['X', FH],
      ['bias', FH, true],
    ],
    outputs: 1,
    attributes: {},
  },
  QuickGelu: { inputs: [['X', FH]], outputs: 1, attributes: { alpha: 'float' } },
  BiasAdd: {
    inputs: [
      ['X', FH],
      ['bias', FH],
      ['skip', FH],
    ],
    outputs: 1,
    attributes: {},
  },
  FusedMatMul: {
    inputs: [
      ['A', FH],
      ['B', FH],
    ],
    outputs: 1,
    attributes: { alpha: 'float', transA: 'int', transB: 'int', transBatchA: 'int', transBatchB: 'int' },
  },
  SkipLayerNormalization: {
    inputs: [
      ['input', FH],
      ['skip', FH],
      ['gamma', FH],
      ['beta', FH, true],
      ['bias', FH, true],
    ],
    outputs: 1,
    attributes: { epsilon: 'float' },
  },
  SkipSimplifiedLayerNormalization: {
    inputs: [
      ['input', FH],
      ['skip', FH],
      ['gamma', FH],
      ['bias', FH, true],
    ],
    outputs: 1,
    attributes: { epsilon: 'float' },
  },
  RotaryEmbedding: {
    inputs: [
      ['input', FH],
      ['position_ids', [T.INT64]],
      ['cos_cache', FH],
      ['sin_cache', FH],
    ],
    outputs: 1,
    attributes: { interleaved: 'int', num_heads: 'int', rotary_embedding_dim: 'int', scale: 'float', is_packed_batching: 'int' },
  },
  Attention: {
    inputs: [
      ['input', F],
      ['weights', F],
      ['bias', F, true],
      ['mask_index', [T.INT32], true],
    ],
    outputs: 1,
    attributes: { num_heads: 'int', unidirectional: 'int', scale: 'float', mask_filter_value: 'float' },
  },
  GroupQueryAttention: {
    inputs: [
      ['query', FH],
      ['key', FH, true],
      ['value', FH, true],
      ['past_key', FH, true],
      ['past_value', FH, true],
      ['seqlens_k', [T.INT32]],
      ['total_sequence_length', [T.INT32]],
    ],
    outputs: 3,
    attributes: { num_heads: 'int', kv_num_heads: 'int', scale: 'float', local_window_size: 'int', do_rotary: 'int', softcap: 'float' },
  },
  MatMulNBits: {
    inputs: [
      ['A', F],
      ['B', [T.UINT8]],
      ['scales', F],
      ['zero_points', [T.UINT8, T.FLOAT], true],
    ],
    outputs: 1,
    attributes: { K: 'int', N: 'int', bits: 'int', block_size: 'int', accuracy_level: 'int' },
  },
  EmbedLayerNormalization: {
    inputs: [
      ['input_ids', [T.INT32]],
      ['segment_ids', [T.INT32], true],
      ['word_embedding', F],
      ['position_embedding', F],
      ['segment_embedding', F, true],
      ['gamma', F],
      ['beta', F],
      ['mask', [T.INT32], true],
    ],
    outputs: 2,
    attributes: { epsilon: 'float', mask_index_type: 'int' },
  },
};
// onnxruntime registers these contrib ops in the default domain.
const DEFAULT_CONTRIB: Record<string, Contrib> = {
  SimplifiedLayerNormalization: {
    inputs: [
      ['X', FH],
      ['scale', FH],
    ],
    outputs: 1,
    attributes: { axis: 'int', epsilon: 'float', stash_type: 'int' },
  },
};

// Ops named in the hostile-input issue get more cases.
const HOT = new Set([
  'OneHot',
  'TopK',
  'Slice',
  'Range',
  'Tile',
  'Expand',
  'Pad',
  'ConstantOfShape',
  'Reshape',
  'Unsqueeze',
  'Squeeze',
  'Einsum',
  'StringSplit',
  'StringConcat',
  'StringNormalizer',
  'RegexFullMatch',
  'SplitToSequence',
  'Gather',
  'GatherElements',
  'GatherND',
  'ScatterND',
  'ScatterElements',
  'Resize',
  'GridSample',
  'RoiAlign',
  'Div',
  'Mod',
  'Conv',
  'MaxPool',
  'AveragePool',
  'CumSum',
  'Compress',
  'NonZero',
  'Unique',
  'Split',
  'DepthToSpace',
  'Trilu',
  'ReverseSequence',
  'Col2Im',
  'MaxUnpool',
]);

interface OpTarget {
  domain: string;
  op: string;
  since: number;
  until: number;
}

let opTargets: OpTarget[] | undefined;
/** Every registered op (graph-attribute ops aside), hot ones repeated. */
export function targets(): OpTarget[] {
  if (opTargets) return opTargets;
  const out: OpTarget[] = [];
  for (const e of defaultRegistry.entries()) {
    if (['If', 'Loop', 'Scan', 'SequenceMap'].includes(e.opType)) continue;
    const t = { domain: e.domain, op: e.opType, since: e.since, until: e.until ?? 99 };
    out.push(t);
    if (HOT.has(e.opType)) out.push(t, t);
  }
  opTargets = out;
  return out;
}

function opsetFor(rng: Rng, t: OpTarget): number {
  const versions = schemaData.ops[t.domain]?.[t.op]?.map((s) => s.since) ?? [t.since];
  const floor = t.domain === 'ai.onnx' ? 7 : 1;
  const cap = t.domain === 'ai.onnx' ? Math.max(23, t.since) : 99;
  const ok = versions.filter((v) => v <= t.until && v <= cap).map((v) => Math.max(v, t.since, floor));
  const lo = rng.pick(ok.length ? ok : [Math.max(t.since, floor)]);
  return rng.chance(0.8) ? lo : Math.min(lo + rng.int(0, 2), Math.min(t.until, cap));
}

interface Formals {
  inputs: { name: string; kind: 'tensor' | 'seq' | 'other'; types: number[]; optional: boolean; variadic: boolean; param: string }[];
  outputs: { kind: 'tensor' | 'seq' | 'other'; variadic: boolean; optional: boolean }[];
  attributes: Record<string, [string, boolean]>;
}

function formalsOf(t: OpTarget, opset: number): Formals | undefined {
  if (t.domain === 'com.microsoft' || (t.domain === 'ai.onnx' && t.op in DEFAULT_CONTRIB)) {
    const c = t.domain === 'com.microsoft' ? CONTRIB[t.op] : DEFAULT_CONTRIB[t.op];
    if (!c) return undefined;
    return {
      inputs: c.inputs.map(([name, types, optional]) => ({
        name,
        kind: 'tensor',
        types,
        optional: !!optional,
        variadic: false,
        param: name,
      })),
      outputs: Array.from({ length: c.outputs }, (_, i) => ({ kind: 'tensor' as const, variadic: false, optional: i > 0 })),
      attributes: Object.fromEntries(Object.entries(c.attributes).map(([k, ty]) => [k, [ty, false]])),
    };
  }
  const s = schemaOf(t.domain === 'ai.onnx' ? 'ai.onnx' : t.domain, t.op, opset);
  if (!s) return undefined;
  return {
    inputs: s.inputs.map(([name, ty, form]) => ({ name, ...typesOf(s, ty), optional: form === 'o', variadic: form === 'v', param: ty })),
    outputs: s.outputs.map(([, ty, form]) => ({ kind: typesOf(s, ty).kind, variadic: form === 'v', optional: form === 'o' })),
    attributes: s.attributes,
  };
}

function randomShape(rng: Rng, rank: number): number[] {
  return Array.from({ length: rank }, () =>
    rng.weighted<number>([
      [1, 3],
      [2, 4],
      [3, 4],
      [4, 2],
      [0, 1],
      [5, 1],
    ]),
  );
}

function opCase(rng: Rng, focus?: RegExp): Omit<FuzzCase, 'id' | 'runs'> | undefined {
  const all = targets();
  const focused = focus ? all.filter((x) => focus.test(x.op)) : all;
  const t = rng.pick(focused.length ? focused : all);
  const opset = opsetFor(rng, t);
  const f = formalsOf(t, opset);
  if (!f) return undefined;
  const rank = rng.weighted<number>([
    [0, 1],
    [1, 3],
    [2, 4],
    [3, 3],
    [4, 3],
    [5, 1],
  ]);
  const base = randomShape(rng, rank);
  const extent = Math.max(1, ...base);
  const paramType = new Map<string, number>();
  const graphInputs: { name: string; type: number; dims: number[] }[] = [];
  const inits: TensorProto[] = [];
  const feeds: Record<string, HostTensor> = {};
  const nodes: NodeProto[] = [];
  const inputNames: string[] = [];
  const notes: string[] = [];
  const inputTypes = new Map<string, number>();
  let hasExtreme = false;

  const makeTensor = (name: string, formalName: string, type: number): HostTensor => {
    let dims: number[];
    let mode: Mode = 'mixed';
    if (DIMS_INPUTS.has(formalName) || (t.op === 'ConstantOfShape' && formalName === 'input')) {
      dims = [rng.chance(0.8) ? (formalName === 'pads' ? 2 * rank : rank) : rng.int(0, 5)];
      mode = 'dims';
    } else if (INDEX_INPUTS.has(formalName)) {
      dims = rng.chance(0.5) ? [rng.int(0, Math.max(1, rank))] : rng.chance(0.5) ? [] : base;
      mode = 'index';
    } else {
      const r = rng.float();
      dims = r < 0.6 ? base : r < 0.75 ? base.slice(rng.int(0, rank)) : r < 0.85 ? [] : randomShape(rng, rng.int(0, 4));
      if (rng.chance(0.05)) dims = [...dims.slice(0, -1), 0];
    }
    const tensor = tensorOf(rng, type, dims, mode, extent);
    if (extreme(tensor)) hasExtreme = true;
    const asInit = rng.chance(0.3);
    if (asInit) inits.push(initializer(name, tensor));
    else {
      feeds[name] = tensor;
      graphInputs.push({ name, type, dims });
    }
    return tensor;
  };

  for (const [k, formal] of f.inputs.entries()) {
    const count = formal.variadic ? rng.int(1, 3) : 1;
    if (formal.optional && rng.chance(0.5)) {
      inputNames.push('');
      continue;
    }
    for (let c = 0; c < count; c++) {
      const name = `x${k}_${c}`;
      if (formal.kind === 'other' || formal.types.length === 0) return undefined;
      const type = paramType.get(formal.param) ?? chooseType(rng, formal.types);
      // A type-parameter mismatch now and then (the loader must refuse it).
      paramType.set(formal.param, type);
      const actual = rng.chance(0.03) ? rng.pick(FEED_TYPES) : type;
      if (formal.kind === 'seq') {
        const items = Array.from({ length: rng.int(0, 3) }, (_, j) => {
          makeTensor(`${name}_item${j}`, formal.name, actual);
          return `${name}_item${j}`;
        });
        nodes.push(P.node('SequenceConstruct', items, [name], []));
        if (items.length === 0) nodes[nodes.length - 1] = P.node('SequenceEmpty', [], [name], [P.attr.int('dtype', BigInt(actual))]);
      } else makeTensor(name, formal.name, actual);
      inputTypes.set(name, actual);
      inputNames.push(name);
    }
  }
  while (inputNames.length && inputNames[inputNames.length - 1] === '') inputNames.pop();

  const attrs: AttributeProto[] = [];
  for (const [name, [type, required]] of Object.entries(f.attributes)) {
    if (!required && !rng.chance(0.4)) continue;
    if (name === 'consumed_inputs') continue;
    const a = attrValue(rng, name, type, rank);
    if (a) attrs.push(a);
    else if (required) return undefined;
  }
  if (rng.chance(0.02)) attrs.push(P.attr.int('fuzz_unknown', 1n));

  const outNames: string[] = [];
  const graphOutputs: string[] = [];
  for (const [k, o] of f.outputs.entries()) {
    const count = o.variadic ? rng.int(1, 4) : 1;
    if (o.optional && k > 0 && rng.chance(0.3)) break;
    for (let c = 0; c < count; c++) {
      const name = `y${k}_${c}`;
      outNames.push(name);
      if (o.kind === 'seq') {
        nodes.push(P.node('SequenceLength', [name], [`${name}_len`], []));
        nodes.push(P.node('ConcatFromSequence', [name], [`${name}_cat`], [P.attr.int('axis', 0n), P.attr.int('new_axis', 1n)]));
        graphOutputs.push(`${name}_len`, `${name}_cat`);
      } else graphOutputs.push(name);
    }
  }
  const domain = t.domain === 'ai.onnx' ? '' : t.domain;
  nodes.push(P.node(t.op, inputNames, outNames, attrs, { name: 'n', domain }));
  const opsets: [string, number][] = [['', t.domain === 'ai.onnx' ? opset : 17]];
  if (domain) opsets.push([domain, opset]);
  const m = P.modelProto(
    P.graph({
      name: 'fuzz',
      inputs: graphInputs.map((i) => P.valueInfo(i.name, i.type, i.dims)),
      outputs: graphOutputs.map((n) => untypedOutput(n)),
      nodes,
      initializers: inits,
      valueInfo: [],
    }),
    { opsets, irVersion: opset <= 21 || domain ? 10 : 11 },
  );
  notes.push(`opset ${opset}`);
  // Marks the one CastLike form whose onnxruntime results are wrong (see ALLOWED in test/fuzz).
  const float8 = [T.FLOAT8E4M3FN, T.FLOAT8E4M3FNUZ, T.FLOAT8E5M2, T.FLOAT8E5M2FNUZ] as number[];
  const target = inputTypes.get(inputNames[1] ?? '');
  if (t.op === 'CastLike' && attrs.some((a) => a.name === 'saturate') && target !== undefined && !float8.includes(target))
    notes.push(SATURATE_NON_FLOAT8);
  if (hasExtreme) notes.push('extreme values');
  return { source: 'op', label: `${domain || 'ai.onnx'}::${t.op}`, mutation: notes.join(', '), model: P.serialize(m), feeds };
}

function untypedOutput(name: string) {
  const vi = P.valueInfo(name);
  vi.type = undefined;
  return vi;
}

// ---- mutations of real models and ONNX tests ----

type Mutator = (rng: Rng, m: ModelProto, feeds: Record<string, HostTensor>) => string | undefined;

function pickFeed(rng: Rng, feeds: Record<string, HostTensor>): [string, HostTensor] | undefined {
  const names = Object.keys(feeds);
  if (!names.length) return undefined;
  const name = rng.pick(names);
  return [name, feeds[name]];
}

const numeric = (t: HostTensor) => t.dtype !== T.STRING;

const feedValues: Mutator = (rng, _m, feeds) => {
  const names = Object.keys(feeds);
  if (!names.length) return undefined;
  const name = rng.pick(names);
  const t = feeds[name];
  const n = t.data.length;
  if (!n) return undefined;
  const copy: HostTensor = { ...t, data: t.data.slice() as HostTensor['data'] };
  const k = rng.chance(0.5) ? 1 : rng.int(1, n);
  const outOfRange = rng.chance(0.5);
  for (let j = 0; j < k; j++) {
    const i = rng.int(0, n - 1);
    const v =
      isFloat(t.dtype) || t.dtype === T.STRING ? value(rng, t.dtype, 'edge') : outOfRange ? oddIndex(rng) : value(rng, t.dtype, 'edge');
    put(copy, i, v);
  }
  feeds[name] = copy;
  return `feed ${name}: ${k} edge value(s)`;
};

/** Out-of-vocabulary ids and indices: the sizes of the shared models' tables and beyond. */
const oddIndex = (rng: Rng): bigint =>
  rng.pick([512n, 513n, -513n, 200n, -201n, 1000n, 100000n, 2n ** 31n, -(2n ** 31n), 2n ** 40n, -(2n ** 63n), 2n ** 63n - 1n, -1n]);

const feedShape: Mutator = (rng, _m, feeds) => {
  const f = pickFeed(rng, feeds);
  if (!f) return undefined;
  const [name, t] = f;
  let dims = [...t.dims];
  const r = rng.float();
  if (r < 0.3 && dims.length) dims[rng.int(0, dims.length - 1)] = 0;
  else if (r < 0.6 && dims.length) dims[rng.int(0, dims.length - 1)] = rng.pick([1, 2, 3, 7, 33]);
  else if (r < 0.8) dims = dims.slice(0, rng.int(0, dims.length));
  else dims = [...dims, rng.int(1, 3)];
  if (dims.reduce((a, b) => a * b, 1) > 1 << 18) return undefined;
  const src = t.data as ArrayLike<unknown>;
  const fresh = tensorOf(rng, t.dtype, dims, 'normal', 4);
  // Keep the original values where they fit (token ids stay in range).
  const n = Math.min(src.length, fresh.data.length);
  for (let i = 0; i < n; i++) (fresh.data as unknown as unknown[])[i] = src[i];
  feeds[name] = fresh;
  return `feed ${name}: dims ${JSON.stringify(t.dims)} -> ${JSON.stringify(dims)}`;
};

const feedType: Mutator = (rng, _m, feeds) => {
  const f = pickFeed(rng, feeds);
  if (!f) return undefined;
  const [name, t] = f;
  const to = rng.pick(FEED_TYPES.filter((x) => x !== t.dtype));
  feeds[name] = convert(t, to);
  return `feed ${name}: type ${t.dtype} -> ${to}`;
};

const feedDrop: Mutator = (rng, _m, feeds) => {
  const f = pickFeed(rng, feeds);
  if (!f) return undefined;
  if (rng.chance(0.5)) {
    delete feeds[f[0]];
    return `feed ${f[0]} dropped`;
  }
  feeds.fuzz_extra = tensorOf(rng, T.FLOAT, [2], 'normal');
  return 'an extra feed';
};

function pickNode(rng: Rng, m: ModelProto): NodeProto | undefined {
  const nodes = m.graph?.node ?? [];
  return nodes.length ? rng.pick(nodes) : undefined;
}

const attrMutation: Mutator = (rng, m) => {
  const n = pickNode(rng, m);
  if (!n) return undefined;
  const r = rng.float();
  if (r < 0.7 && n.attribute.length) {
    const a = rng.pick(n.attribute);
    const rank = 4;
    switch (a.type) {
      case A.INT:
        a.i = rng.chance(0.6) ? BigInt(rng.int(-3, 5)) : rng.pick(EDGE_INTS);
        break;
      case A.FLOAT:
        a.f = rng.pick(EDGE_FLOATS);
        break;
      case A.INTS:
        if (a.ints.length && rng.chance(0.7))
          a.ints[rng.int(0, a.ints.length - 1)] = rng.chance(0.5) ? BigInt(rng.int(-3, 5)) : rng.pick(EDGE_INTS);
        else a.ints = Array.from({ length: rng.int(0, 6) }, () => BigInt(rng.int(-2, 4)));
        break;
      case A.FLOATS:
        if (a.floats.length) a.floats[rng.int(0, a.floats.length - 1)] = rng.pick(EDGE_FLOATS);
        else a.floats = [rng.pick(EDGE_FLOATS)];
        break;
      case A.STRING: {
        const next = attrValue(rng, a.name, 'string', rank);
        if (next) a.s = next.s;
        break;
      }
      case A.TENSOR:
        if (a.t) mutateTensor(rng, a.t);
        break;
      default:
        return undefined;
    }
    return `node ${n.name || n.opType}: attribute ${a.name}`;
  }
  if (r < 0.85 && n.attribute.length) {
    const i = rng.int(0, n.attribute.length - 1);
    const name = n.attribute[i].name;
    n.attribute.splice(i, 1);
    return `node ${n.name || n.opType}: attribute ${name} removed`;
  }
  const s = schemaOf(n.domain || 'ai.onnx', n.opType, 17);
  const names = s ? Object.keys(s.attributes).filter((k) => !n.attribute.some((a) => a.name === k)) : [];
  if (!s || !names.length) return undefined;
  const name = rng.pick(names);
  const a = attrValue(rng, name, s.attributes[name][0], 4);
  if (!a) return undefined;
  n.attribute.push(a);
  return `node ${n.name || n.opType}: attribute ${name} added`;
};

function mutateTensor(rng: Rng, p: TensorProto): boolean {
  let t: HostTensor;
  try {
    t = decodeTensor(p);
  } catch {
    return false;
  }
  if (!numeric(t) || !FEED_TYPES.includes(t.dtype) || t.data.length === 0) return false;
  const copy: HostTensor = { ...t, data: t.data.slice() as HostTensor['data'] };
  const k = rng.chance(0.6) ? 1 : rng.int(1, Math.min(t.data.length, 64));
  for (let j = 0; j < k; j++)
    put(
      copy,
      rng.int(0, t.data.length - 1),
      isFloat(t.dtype) ? rng.pick(EDGE_FLOATS) : rng.chance(0.5) ? oddIndex(rng) : rng.pick(EDGE_INTS),
    );
  const fresh = initializer(p.name, copy);
  p.rawData = fresh.rawData;
  p.floatData = [];
  p.int32Data = [];
  p.int64Data = [];
  p.doubleData = [];
  p.uint64Data = [];
  return true;
}

/** Initializers of the graph and Constant nodes' value tensors. */
function constantTensors(m: ModelProto): TensorProto[] {
  const g = m.graph;
  if (!g) return [];
  const out = [...g.initializer];
  for (const n of g.node) for (const a of n.attribute) if (a.t && a.name === 'value') out.push(a.t);
  return out;
}

const initValues: Mutator = (rng, m) => {
  const ts = constantTensors(m);
  if (!ts.length) return undefined;
  // Small tensors hold shapes, axes and indices: mutate those more often.
  const small = ts.filter((t) => t.dims.reduce((a, b) => a * Number(b), 1) <= 8);
  const t = small.length && rng.chance(0.7) ? rng.pick(small) : rng.pick(ts);
  return mutateTensor(rng, t) ? `tensor ${t.name || '<constant>'}: edge values` : undefined;
};

const initShape: Mutator = (rng, m) => {
  const ts = m.graph?.initializer ?? [];
  if (!ts.length) return undefined;
  const t = rng.pick(ts);
  const before = t.dims.map(Number);
  if (rng.chance(0.5) && t.dims.length >= 2) t.dims.reverse();
  else if (t.dims.length && rng.chance(0.5)) t.dims[rng.int(0, t.dims.length - 1)] = rng.pick([0n, 1n, 2n ** 31n, 2n ** 40n, -1n]);
  else t.dims.push(1n);
  return `initializer ${t.name}: dims ${JSON.stringify(before)} -> ${JSON.stringify(t.dims.map(Number))}`;
};

const rewire: Mutator = (rng, m) => {
  const g = m.graph;
  const n = pickNode(rng, m);
  if (!g || !n?.input.length) return undefined;
  const names = [...g.input.map((i) => i.name), ...g.initializer.map((i) => i.name), ...g.node.flatMap((x) => x.output)];
  const i = rng.int(0, n.input.length - 1);
  n.input[i] = rng.chance(0.1) ? '' : rng.pick(names);
  return `node ${n.name || n.opType}: input ${i} rewired`;
};

const opsetChange: Mutator = (rng, m) => {
  if (!m.opsetImport.length) return undefined;
  const o = rng.pick(m.opsetImport);
  const before = o.version;
  o.version = rng.pick([1n, 6n, 7n, 11n, 13n, 18n, 21n, 23n, 27n, 999n]);
  return `opset ${o.domain || 'ai.onnx'} ${before} -> ${o.version}`;
};

const MUTATORS: [Mutator, number][] = [
  [feedValues, 5],
  [feedShape, 3],
  [feedType, 1],
  [feedDrop, 0.5],
  [attrMutation, 4],
  [initValues, 4],
  [initShape, 1],
  [rewire, 0.7],
  [opsetChange, 0.5],
];

function mutate(rng: Rng, model: Uint8Array, feeds: Record<string, HostTensor>): { model: Uint8Array; mutation: string } {
  const m = fromBinary(ModelProtoSchema, model);
  const notes: string[] = [];
  const count = rng.weighted<number>([
    [0, 0.5],
    [1, 6],
    [2, 2],
    [3, 1],
  ]);
  for (let tries = 0; notes.length < count && tries < 10; tries++) {
    const note = rng.weighted(MUTATORS)(rng, m, feeds);
    if (note) notes.push(note);
  }
  return { model: toBinary(ModelProtoSchema, m), mutation: notes.join('; ') || 'none' };
}

let onnxTestDirs: string[] | undefined;
function listOnnxTests(root: string): string[] {
  onnxTestDirs ??= readdirSync(root)
    .filter((d) => existsSync(join(root, d, 'model.onnx')))
    .sort();
  return onnxTestDirs;
}

let sharedDirs: string[] | undefined;
function listShared(root: string): string[] {
  sharedDirs ??= readdirSync(root)
    .filter((d) => existsSync(join(root, d, 'model.onnx')))
    .sort();
  return sharedDirs;
}

/** A test case's first data set as feeds, or undefined where an input is not a feedable tensor. */
function feedsOf(dir: string, rng: Rng): { model: Uint8Array; feeds: Record<string, HostTensor> } | undefined {
  const tc = readTestCase(dir);
  if (!tc.datasets.length) return undefined;
  const ds = rng.pick(tc.datasets);
  const g = tc.model.graph;
  const names = g.inputs.filter((i) => !g.initializers.has(i.name)).map((i) => i.name);
  const feeds: Record<string, HostTensor> = {};
  for (const [k, v] of ds.inputs.entries()) {
    const t = v as HostTensor;
    if (!t || !('dims' in t) || !FEED_TYPES.includes(t.dtype)) return undefined;
    feeds[names[k] ?? t.name ?? `input_${k}`] = { dtype: t.dtype, dims: [...t.dims], data: t.data };
  }
  return { model: tc.modelBytes, feeds };
}

// ---- the case of (seed, index) ----

export interface Mix {
  op: number;
  onnxTest: number;
  shared: number;
}
export const DEFAULT_MIX: Mix = { op: 0.6, onnxTest: 0.32, shared: 0.08 };

export function generateCase(seed: number, index: number, roots: Roots, mix: Mix = DEFAULT_MIX): FuzzCase {
  const rng = new Rng(seed, index);
  const focus = roots.focus ? new RegExp(roots.focus, 'i') : undefined;
  for (let attempt = 0; ; attempt++) {
    const source = rng.weighted<Source>([
      ['op', mix.op],
      ['onnx-test', roots.onnxTests ? mix.onnxTest : 0],
      // A focus names ops: the shared models are left out.
      ['shared', roots.models && !focus ? mix.shared : 0],
      ['structured', roots.structured ?? 0],
    ]);
    let c: Omit<FuzzCase, 'id' | 'runs'> | undefined;
    if (source === 'op') c = opCase(rng, focus);
    else if (source === 'structured') c = { source, ...structuredCase(rng, focus)! };
    else {
      const root = source === 'shared' ? roots.models! : roots.onnxTests!;
      const all = source === 'shared' ? listShared(root) : listOnnxTests(root);
      const focused = focus ? all.filter((d) => focus.test(d)) : all;
      const dirs = focused.length ? focused : all;
      const label = rng.pick(dirs);
      const base = feedsOf(join(root, label), rng);
      if (base) {
        const { model, mutation } = mutate(rng, base.model, base.feeds);
        c = { source, label, mutation, model, feeds: base.feeds };
      }
    }
    if (c) return { ...c, id: `${seed}:${index}`, runs: rng.chance(0.25) ? 3 : 1 };
    if (attempt > 50) throw new Error(`fuzz: no case for ${seed}:${index}`);
  }
}
