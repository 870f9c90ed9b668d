// IR -> protobuf messages: the inverse of model.ts, for the sub-models that fallback partitions
// hand to onnxruntime (plan/partition.ts). Tensors are written as raw_data (strings as
// string_data); a large tensor whose values were never read goes out as the file's own bytes.
import {
  AttrType as A,
  emptyGraph,
  emptyTensor,
  encodeModelProto,
  encodeTensorProto,
  type AttributeProto,
  type FunctionProto,
  type GraphProto,
  type NodeProto,
  type SparseTensorProto,
  type TensorProto,
  type TensorShapeProto,
  type TypeProto,
  type ValueInfoProto,
} from './proto.js';
import {
  OnnxDataType,
  type AttrValue,
  type Dim,
  type GraphIR,
  type HostTensor,
  type NodeIR,
  type SparseTensorIR,
  type TypeIR,
  type ValueInfoIR,
} from './ir.js';
import { toRawBytes, undecodedBytes } from './layout.js';
import { DEFAULT_DOMAIN } from './model.js';

const utf8 = new TextEncoder();

const INT64_MAX = 2n ** 63n - 1n;
const INT64_MIN = -(2n ** 63n);
/**
 * A decoded int64 (a JS number) back to int64: numbers past 2^53 were rounded when decoded, and
 * INT64_MAX rounds up to 2^63, which int64 cannot hold; it goes back as INT64_MAX.
 */
export function int64(n: number): bigint {
  const b = BigInt(Math.trunc(n));
  return b > INT64_MAX ? INT64_MAX : b < INT64_MIN ? INT64_MIN : b;
}
/** The file's spelling of a domain: '' for the default one. */
export const fileDomain = (d: string): string => (d === DEFAULT_DOMAIN ? '' : d);

export function encodeTensor(t: HostTensor, name = t.name ?? ''): TensorProto {
  const base = { name, dataType: t.dtype, dims: t.dims.map(int64) };
  if (t.dtype === OnnxDataType.STRING) return { ...emptyTensor(), ...base, stringData: (t.data as string[]).map((s) => utf8.encode(s)) };
  const raw = undecodedBytes(t) ?? toRawBytes(t.dtype, t.data);
  return { ...emptyTensor(), ...base, rawData: raw };
}

/** The bytes of a serialized TensorProto (a test-data `.pb` file). */
export const encodeTensorBytes = (t: HostTensor, name = t.name ?? ''): Uint8Array => encodeTensorProto(encodeTensor(t, name));

function encodeSparse(s: SparseTensorIR): SparseTensorProto {
  return { dims: s.dims.map(int64), values: encodeTensor(s.values), indices: encodeTensor(s.indices) };
}

function shapeInit(shape: Dim[], denotations?: string[]): TensorShapeProto {
  return {
    dim: shape.map((d, i) => ({
      value:
        typeof d === 'number'
          ? { case: 'dimValue' as const, value: int64(d) }
          : typeof d === 'string'
            ? { case: 'dimParam' as const, value: d }
            : { case: undefined },
      denotation: denotations?.[i] ?? '',
    })),
  };
}

export function encodeType(t: TypeIR): TypeProto {
  let value: TypeProto['value'];
  switch (t.kind) {
    case 'tensor':
      value = { case: 'tensorType', value: { elemType: t.elemType, shape: t.shape && shapeInit(t.shape, t.denotations) } };
      break;
    case 'sparse_tensor':
      value = { case: 'sparseTensorType', value: { elemType: t.elemType, shape: t.shape && shapeInit(t.shape) } };
      break;
    case 'sequence':
      value = { case: 'sequenceType', value: { elemType: t.elem && encodeType(t.elem) } };
      break;
    case 'optional':
      value = { case: 'optionalType', value: { elemType: t.elem && encodeType(t.elem) } };
      break;
    case 'map':
      value = { case: 'mapType', value: { keyType: t.keyType, valueType: t.value && encodeType(t.value) } };
      break;
    default:
      return { value: { case: undefined }, denotation: '' };
  }
  return { value, denotation: '' };
}

/** A value info; `type` undefined writes none (onnxruntime infers it). */
export const encodeValueInfo = (name: string, type?: TypeIR): ValueInfoProto =>
  type ? { name, type: encodeType(type), docString: '' } : { name, docString: '' };

function encodeAttribute(name: string, a: AttrValue): AttributeProto {
  const init = (() => {
    switch (a.type) {
      case 'float':
        return { type: A.FLOAT, f: a.value };
      case 'int':
        return { type: A.INT, i: int64(a.value) };
      case 'string':
        return { type: A.STRING, s: utf8.encode(a.value) };
      case 'tensor':
        return { type: A.TENSOR, t: encodeTensor(a.value) };
      case 'graph':
        return { type: A.GRAPH, g: encodeGraph(a.value) };
      case 'sparse_tensor':
        return { type: A.SPARSE_TENSOR, sparseTensor: encodeSparse(a.value) };
      case 'type_proto':
        return { type: A.TYPE_PROTO, tp: encodeType(a.value) };
      case 'floats':
        return { type: A.FLOATS, floats: a.value };
      case 'ints':
        return { type: A.INTS, ints: a.value.map(int64) };
      case 'strings':
        return { type: A.STRINGS, strings: a.value.map((s) => utf8.encode(s)) };
      case 'tensors':
        return { type: A.TENSORS, tensors: a.value.map((t) => encodeTensor(t)) };
      case 'graphs':
        return { type: A.GRAPHS, graphs: a.value.map(encodeGraph) };
      case 'sparse_tensors':
        return { type: A.SPARSE_TENSORS, sparseTensors: a.value.map(encodeSparse) };
      case 'type_protos':
        return { type: A.TYPE_PROTOS, typeProtos: a.value.map(encodeType) };
    }
  })();
  return {
    name,
    refAttrName: '',
    docString: '',
    floats: [],
    ints: [],
    strings: [],
    tensors: [],
    graphs: [],
    sparseTensors: [],
    typeProtos: [],
    ...init,
  };
}

export function encodeNode(n: NodeIR, opType = n.opType, domain = fileDomain(n.domain)): NodeProto {
  return {
    name: n.name,
    opType,
    domain,
    input: [...n.inputs],
    output: [...n.outputs],
    attribute: [...n.attributes].map(([k, v]) => encodeAttribute(k, v)),
    overload: n.overload ?? '',
    docString: '',
  };
}

const infoOf = (v: ValueInfoIR): ValueInfoProto => encodeValueInfo(v.name, v.type.kind === 'unknown' ? undefined : v.type);

/** A whole graph (a subgraph attribute): its nodes, inputs, outputs, initializers and value infos. */
export function encodeGraph(g: GraphIR): GraphProto {
  return encodeGraphProto({
    name: g.name,
    node: g.nodes.map((n) => encodeNode(n)),
    input: g.inputs.map(infoOf),
    output: g.outputs.map(infoOf),
    initializer: [...g.initializers].map(([name, t]) => encodeTensor(t, name)),
    valueInfo: [...g.valueInfo.values()].map(infoOf),
  });
}

export interface ModelInit {
  irVersion: number;
  /** Domain ('ai.onnx' for the default one) -> version. */
  opsets: Map<string, number>;
  graph: GraphProto;
  functions?: FunctionProto[];
  producerName?: string;
}

export function encodeModel(m: ModelInit): Uint8Array {
  return encodeModelProto({
    irVersion: int64(m.irVersion),
    producerName: m.producerName ?? '@mlx/ort-ep',
    producerVersion: '',
    domain: '',
    modelVersion: 0n,
    docString: '',
    opsetImport: [...m.opsets].map(([domain, version]) => ({ domain: fileDomain(domain), version: int64(version) })),
    graph: m.graph,
    metadataProps: [],
    functions: m.functions ?? [],
  });
}

export const encodeFunction = (init: Partial<FunctionProto>): FunctionProto => ({
  name: '',
  input: [],
  output: [],
  attribute: [],
  attributeProto: [],
  node: [],
  docString: '',
  opsetImport: [],
  domain: '',
  overload: '',
  valueInfo: [],
  ...init,
});
export const encodeGraphProto = (init: Partial<GraphProto>): GraphProto => ({ ...emptyGraph(), ...init });
