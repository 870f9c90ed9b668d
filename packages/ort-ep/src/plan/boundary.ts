// Values that are not tensors at a fallback boundary. onnxruntime's JavaScript API takes and
// returns tensors only ("Non tensor type is temporarily not supported"), so:
//  - partitioning keeps sequence, optional and map values inside one partition where it can: the
//    MLX node at the other end of such an edge joins the fallback partition (`nonTensorValues`);
//  - what must still cross (a graph input fed as a sequence or an optional, a graph output of such
//    a type that onnxruntime makes) crosses in tensor form, the sub-model turning it back:
//    a sequence goes in as one input per element (SequenceConstruct, or SequenceEmpty when it has
//    none) and comes out as three tensors (the elements' data flattened and concatenated, their
//    shapes concatenated, their ranks), an optional goes in as its tensor (Optional, or an empty
//    Optional of its declared type) and comes out as a presence flag and a tensor; an optional
//    sequence goes in as its elements (SequenceConstruct, then Optional) and comes out as a presence
//    flag and the sequence's three tensors.
import {
  DEFAULT_DOMAIN,
  OnnxDataType,
  dataTypeName,
  subgraphsOf,
  type GraphIR,
  type HostTensor,
  type NodeIR,
  type TypeIR,
} from '../onnx/index.js';

export type NonTensorKind = 'sequence' | 'optional' | 'map';

// Ops whose output 0 is a sequence, an optional or a map (ONNX's and ai.onnx.ml's schemas).
const MAKES: Record<string, NonTensorKind> = {
  SequenceConstruct: 'sequence',
  SequenceEmpty: 'sequence',
  SequenceInsert: 'sequence',
  SequenceErase: 'sequence',
  SplitToSequence: 'sequence',
  SequenceMap: 'sequence',
  ZipMap: 'sequence',
  Optional: 'optional',
};
// Ops whose input 0 is a sequence, an optional or a map.
const READS: Record<string, NonTensorKind> = {
  SequenceAt: 'sequence',
  SequenceLength: 'sequence',
  SequenceInsert: 'sequence',
  SequenceErase: 'sequence',
  ConcatFromSequence: 'sequence',
  SequenceMap: 'sequence',
  OptionalHasElement: 'optional',
  OptionalGetElement: 'optional',
  DictVectorizer: 'map',
  CastMap: 'map',
};

const kindOf = (t: TypeIR | undefined): NonTensorKind | undefined =>
  t?.kind === 'sequence' || t?.kind === 'optional' || t?.kind === 'map' ? t.kind : undefined;

/**
 * The values of a plan's graph known not to be tensors: declared so (graph inputs, outputs, value
 * infos, If branches' and Loop bodies' outputs), made or read as such by the ops above.
 */
export function nonTensorValues(plan: { graph: GraphIR; nodes: readonly { node: NodeIR }[] }): Map<string, NonTensorKind> {
  const g = plan.graph;
  const out = new Map<string, NonTensorKind>();
  const mark = (name: string, k: NonTensorKind | undefined) => {
    if (name && k && !out.has(name)) out.set(name, k);
  };
  for (const v of [...g.inputs, ...g.outputs, ...g.valueInfo.values()]) mark(v.name, kindOf(v.type));
  for (const pn of plan.nodes) {
    const n = pn.node;
    const std = n.domain === DEFAULT_DOMAIN || n.domain === 'ai.onnx.ml';
    if (std && MAKES[n.opType]) mark(n.outputs[0], MAKES[n.opType]);
    if (std && READS[n.opType]) mark(n.inputs[0], READS[n.opType]);
    const attr = (name: string) => {
      const a = n.attributes.get(name);
      return a?.type === 'graph' ? a.value : undefined;
    };
    if (n.opType === 'If' && n.domain === DEFAULT_DOMAIN) {
      for (const b of [attr('then_branch'), attr('else_branch')]) b?.outputs.forEach((o, i) => mark(n.outputs[i], kindOf(o.type)));
    }
    if (n.opType === 'Loop' && n.domain === DEFAULT_DOMAIN) {
      // Body outputs: cond, then the carried values (the Loop's first outputs), then scan outputs (tensors).
      const body = attr('body');
      body?.outputs.slice(1).forEach((o, i) => {
        if (i < n.inputs.length - 2) mark(n.outputs[i], kindOf(o.type));
      });
      n.inputs.slice(2).forEach((name, i) => mark(name, kindOf(body?.inputs[i + 2]?.type)));
    }
  }
  return out;
}

// Ops MLX implements that onnxruntime's CPU provider does not have (onnxruntime-node 1.30 refuses
// them as "not a registered function/op"): such a node stays on MLX, and the values it exchanges
// with fallback nodes cross in tensor form.
const ONNXRUNTIME_LACKS: ReadonlySet<string> = new Set([
  'com.microsoft::Sigmoid',
  'com.microsoft::SimplifiedLayerNormalization',
  'ai.onnx.preview::FlexAttention',
  'ai.onnx.preview.training::Adagrad',
  'ai.onnx.preview.training::Adam',
  'ai.onnx.preview.training::Momentum',
]);

/**
 * Whether onnxruntime can be handed this node as written: no op of the provider's private domains
 * (graph rewrites) nor one onnxruntime lacks, bodies included.
 */
export function onnxruntimeKnows(n: NodeIR): boolean {
  if (n.domain.startsWith('mlx.') || ONNXRUNTIME_LACKS.has(`${n.domain}::${n.opType}`)) return false;
  return subgraphsOf(n).every(({ graph }) => graph.nodes.every(onnxruntimeKnows));
}

// ---- the tensor form of what crosses ----

/** How one input of a sub-model is fed on a run. */
export type InputForm =
  | { kind: 'tensor' }
  /** A sequence of `count` elements of `elemType`: inputs `<name>/mlx_item_<j>`. */
  | { kind: 'sequence'; count: number; elemType: number }
  /** An optional (declared type `type`): present, as input `<name>/mlx_value`, or empty. */
  | { kind: 'optional'; present: boolean; type: TypeIR & { kind: 'optional' } }
  /** An optional sequence (declared type `type`): present, as `count` inputs `<name>/mlx_value/mlx_item_<j>`, or empty. */
  | { kind: 'optional-sequence'; present: boolean; count: number; elemType: number; type: TypeIR & { kind: 'optional' } };

/** How one output of a sub-model comes back. */
export type OutputForm =
  | { kind: 'tensor' }
  | { kind: 'sequence'; elemType: number }
  | { kind: 'optional'; elemType: number }
  | { kind: 'optional-sequence'; elemType: number };

export const itemInput = (name: string, j: number) => `${name}/mlx_item_${j}`;
export const optionalInput = (name: string) => `${name}/mlx_value`;
/** The sub-model outputs that carry output `name` in `form`, in order. */
export function outputParts(name: string, form: OutputForm): string[] {
  if (form.kind === 'sequence') return [`${name}/mlx_data`, `${name}/mlx_shapes`, `${name}/mlx_ranks`];
  if (form.kind === 'optional') return [`${name}/mlx_present`, `${name}/mlx_value`];
  if (form.kind === 'optional-sequence')
    return [`${name}/mlx_present`, ...outputParts(optionalInput(name), { kind: 'sequence', elemType: form.elemType })];
  return [name];
}

/** The pieces a sub-model gains for its non-tensor inputs and outputs. */
export interface BoundaryGraph {
  inputs: { name: string; type: TypeIR }[];
  outputs: string[];
  /** Nodes that come before the partition's own (inputs) and after them (outputs). */
  before: NodeIR[];
  after: NodeIR[];
}

let counter = 0;
function makeNode(opType: string, inputs: string[], outputs: string[], attributes: NodeIR['attributes'] = new Map()): NodeIR {
  return { name: `mlx_boundary_${opType}_${counter++}`, opType, domain: DEFAULT_DOMAIN, inputs, outputs, attributes };
}
const emptyTensor = (dtype: number): HostTensor => ({
  dtype,
  dims: [0],
  data:
    dtype === OnnxDataType.STRING
      ? []
      : dtype === OnnxDataType.INT64 || dtype === OnnxDataType.UINT64
        ? new BigInt64Array(0)
        : new Uint8Array(0),
});
const constant = (out: string, value: HostTensor) => makeNode('Constant', [], [out], new Map([['value', { type: 'tensor', value }]]));
const tensorType = (elemType: number, shape?: number[]): TypeIR => ({ kind: 'tensor', elemType, shape });

/** The sub-model's boundary for inputs and outputs in these forms. */
export function boundaryGraph(
  inputs: readonly string[],
  inputForms: readonly InputForm[],
  outputs: readonly string[],
  outputForms: readonly OutputForm[],
  inputTypes: readonly TypeIR[],
): BoundaryGraph {
  const b: BoundaryGraph = { inputs: [], outputs: [], before: [], after: [] };
  inputs.forEach((name, k) => {
    const form = inputForms[k];
    if (form.kind === 'tensor') b.inputs.push({ name, type: inputTypes[k] });
    else if (form.kind === 'sequence') {
      const items = Array.from({ length: form.count }, (_, j) => itemInput(name, j));
      for (const item of items) b.inputs.push({ name: item, type: tensorType(form.elemType) });
      b.before.push(
        items.length
          ? makeNode('SequenceConstruct', items, [name])
          : makeNode('SequenceEmpty', [], [name], new Map([['dtype', { type: 'int', value: form.elemType }]])),
      );
    } else if (form.kind === 'optional-sequence') {
      const seq = optionalInput(name);
      if (form.present) {
        const items = Array.from({ length: form.count }, (_, j) => itemInput(seq, j));
        for (const item of items) b.inputs.push({ name: item, type: tensorType(form.elemType) });
        b.before.push(
          items.length
            ? makeNode('SequenceConstruct', items, [seq])
            : makeNode('SequenceEmpty', [], [seq], new Map([['dtype', { type: 'int', value: form.elemType }]])),
          makeNode('Optional', [seq], [name]),
        );
      } else b.before.push(makeNode('Optional', [], [name], new Map([['type', { type: 'type_proto', value: form.type.elem! }]])));
    } else if (form.present) {
      b.inputs.push({ name: optionalInput(name), type: form.type.elem ?? { kind: 'unknown' } });
      b.before.push(makeNode('Optional', [optionalInput(name)], [name]));
    } else {
      b.before.push(makeNode('Optional', [], [name], new Map([['type', { type: 'type_proto', value: form.type.elem! }]])));
    }
  });
  outputs.forEach((name, k) => {
    const form = outputForms[k];
    const parts = outputParts(name, form);
    b.outputs.push(...parts);
    if (form.kind === 'sequence') b.after.push(...flattenSequence(name, form.elemType, parts));
    else if (form.kind === 'optional') b.after.push(...unwrapOptional(name, form.elemType, parts));
    else if (form.kind === 'optional-sequence') b.after.push(...unwrapOptionalSequence(name, form.elemType, parts));
  });
  return b;
}

// Loop over the sequence's elements, carrying the flattened data, the shapes and the ranks so far
// (carried values may change shape from one iteration to the next; scan outputs may not).
function flattenSequence(seq: string, elemType: number, [data, shapes, ranks]: string[]): NodeIR[] {
  const p = (s: string) => `${seq}/mlx_${s}`;
  const i64 = (values: number[]): HostTensor => ({
    dtype: OnnxDataType.INT64,
    dims: [values.length],
    data: BigInt64Array.from(values.map(BigInt)),
  });
  const body: GraphIR = {
    name: `${seq}_flatten`,
    inputs: [
      { name: p('i'), type: tensorType(OnnxDataType.INT64, []) },
      { name: p('cond'), type: tensorType(OnnxDataType.BOOL, []) },
      { name: p('data_in'), type: tensorType(elemType) },
      { name: p('shapes_in'), type: tensorType(OnnxDataType.INT64) },
      { name: p('ranks_in'), type: tensorType(OnnxDataType.INT64) },
    ],
    outputs: [
      { name: p('cond_out'), type: tensorType(OnnxDataType.BOOL, []) },
      { name: p('data_out'), type: tensorType(elemType) },
      { name: p('shapes_out'), type: tensorType(OnnxDataType.INT64) },
      { name: p('ranks_out'), type: tensorType(OnnxDataType.INT64) },
    ],
    nodes: [
      makeNode('Identity', [p('cond')], [p('cond_out')]),
      makeNode('SequenceAt', [seq, p('i')], [p('item')]),
      makeNode('Reshape', [p('item'), p('minus_one')], [p('flat')]),
      makeNode('Concat', [p('data_in'), p('flat')], [p('data_out')], new Map([['axis', { type: 'int', value: 0 }]])),
      makeNode('Shape', [p('item')], [p('shape')]),
      makeNode('Concat', [p('shapes_in'), p('shape')], [p('shapes_out')], new Map([['axis', { type: 'int', value: 0 }]])),
      makeNode('Size', [p('shape')], [p('rank')]),
      makeNode('Reshape', [p('rank'), p('one')], [p('rank1')]),
      makeNode('Concat', [p('ranks_in'), p('rank1')], [p('ranks_out')], new Map([['axis', { type: 'int', value: 0 }]])),
    ],
    initializers: new Map(),
    inputsWithDefaults: new Set(),
    valueInfo: new Map(),
    sparseInitializers: new Map(),
  };
  return [
    constant(p('empty'), emptyTensor(elemType)),
    constant(p('empty_i64'), emptyTensor(OnnxDataType.INT64)),
    constant(p('minus_one'), i64([-1])),
    constant(p('one'), i64([1])),
    makeNode('SequenceLength', [seq], [p('count')]),
    makeNode(
      'Loop',
      [p('count'), '', p('empty'), p('empty_i64'), p('empty_i64')],
      [data, shapes, ranks],
      new Map([['body', { type: 'graph', value: body }]]),
    ),
  ];
}

function unwrapOptional(opt: string, elemType: number, [present, value]: string[]): NodeIR[] {
  const p = (s: string) => `${opt}/mlx_${s}`;
  const branch = (name: string, nodes: NodeIR[], out: string): GraphIR => ({
    name,
    inputs: [],
    outputs: [{ name: out, type: tensorType(elemType) }],
    nodes,
    initializers: new Map(),
    inputsWithDefaults: new Set(),
    valueInfo: new Map(),
    sparseInitializers: new Map(),
  });
  const then = branch(`${opt}_get`, [makeNode('OptionalGetElement', [opt], [p('got')])], p('got'));
  const otherwise = branch(`${opt}_empty`, [constant(p('none'), emptyTensor(elemType))], p('none'));
  return [
    makeNode('OptionalHasElement', [opt], [present]),
    makeNode(
      'If',
      [present],
      [value],
      new Map([
        ['then_branch', { type: 'graph', value: then }],
        ['else_branch', { type: 'graph', value: otherwise }],
      ]),
    ),
  ];
}

// Present: the flag, then the sequence flattened (inside the If's then branch); empty: the flag and
// three empty tensors.
function unwrapOptionalSequence(opt: string, elemType: number, [present, data, shapes, ranks]: string[]): NodeIR[] {
  const p = (s: string) => `${opt}/mlx_${s}`;
  const seq = p('seq');
  const got = [p('got_data'), p('got_shapes'), p('got_ranks')];
  const none = [p('none_data'), p('none_shapes'), p('none_ranks')];
  const outs = (names: string[]) => names.map((name, k) => ({ name, type: tensorType(k ? OnnxDataType.INT64 : elemType) }));
  const branch = (name: string, nodes: NodeIR[], names: string[]): GraphIR => ({
    name,
    inputs: [],
    outputs: outs(names),
    nodes,
    initializers: new Map(),
    inputsWithDefaults: new Set(),
    valueInfo: new Map(),
    sparseInitializers: new Map(),
  });
  const then = branch(`${opt}_get`, [makeNode('OptionalGetElement', [opt], [seq]), ...flattenSequence(seq, elemType, got)], got);
  const otherwise = branch(
    `${opt}_empty`,
    [
      constant(none[0], emptyTensor(elemType)),
      constant(none[1], emptyTensor(OnnxDataType.INT64)),
      constant(none[2], emptyTensor(OnnxDataType.INT64)),
    ],
    none,
  );
  return [
    makeNode('OptionalHasElement', [opt], [present]),
    makeNode(
      'If',
      [present],
      [data, shapes, ranks],
      new Map([
        ['then_branch', { type: 'graph', value: then }],
        ['else_branch', { type: 'graph', value: otherwise }],
      ]),
    ),
  ];
}

/** The output form of a value of this declared type; throws saying why it cannot come back. */
export function outputFormOf(name: string, type: TypeIR | undefined, kind: NonTensorKind | undefined): OutputForm {
  const k = kindOf(type) ?? kind;
  if (!k) return { kind: 'tensor' };
  const elem = type && (type.kind === 'sequence' || type.kind === 'optional') ? type.elem : undefined;
  if (k === 'map' || elem?.kind === 'map')
    throw new Error(`'${name}' is a map (or a sequence of maps), which cannot come back from onnxruntime through its JavaScript API`);
  if (k === 'optional' && elem?.kind === 'sequence') {
    const inner = elem.elem;
    if (inner?.kind !== 'tensor' || !inner.elemType)
      throw new Error(
        `'${name}' is an optional sequence whose element type is not declared (or is not a tensor type), so it cannot come back from onnxruntime: declare its type in a value info`,
      );
    return { kind: 'optional-sequence', elemType: inner.elemType };
  }
  if (elem?.kind !== 'tensor' || !elem.elemType)
    throw new Error(
      `'${name}' is ${k === 'sequence' ? 'a sequence' : 'an optional'} whose element type is not declared (or is not a tensor type), so it cannot come back from onnxruntime: declare its type in a value info`,
    );
  return { kind: k as 'sequence' | 'optional', elemType: elem.elemType };
}

/** Rebuilds the elements of a sequence from its three tensors (views of `data`, no copies). */
export function sequenceItems(name: string, data: HostTensor, shapes: HostTensor, ranks: HostTensor): HostTensor[] {
  const r = Array.from(ranks.data as BigInt64Array, Number);
  const s = Array.from(shapes.data as BigInt64Array, Number);
  const items: HostTensor[] = [];
  let si = 0;
  let off = 0;
  for (const rank of r) {
    const dims = s.slice(si, si + rank);
    si += rank;
    const n = dims.reduce((a, b) => a * b, 1);
    const d = data.data as unknown as {
      subarray?: (a: number, b: number) => HostTensor['data'];
      slice: (a: number, b: number) => HostTensor['data'];
    };
    items.push({ dtype: data.dtype, dims, data: d.subarray ? d.subarray(off, off + n) : d.slice(off, off + n) });
    off += n;
  }
  if (si !== s.length || off !== (data.data as ArrayLike<unknown>).length)
    throw new Error(`internal error: the tensor form of sequence '${name}' (${dataTypeName(data.dtype)}) does not add up`);
  return items;
}
