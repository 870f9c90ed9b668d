// The low level of the test-side ONNX builder: one function per protobuf message (onnx-buf's
// create), taking exactly the fields the message has, so that a test can write any file the
// format allows, odd and broken ones included (typed or raw tensor fields, external data entries
// as written, sparse tensors and initializers, every TypeProto kind, attribute references,
// untyped attributes of old files, function overloads and defaults, metadata, IR versions).
// The compact descriptions in build.ts are built on these; the loader's own tests use these.
// Values are encoded by encode.ts, never by the loader under test.
import { create, toBinary, type MessageInitShape } from '@bufbuild/protobuf';
import {
  AttributeProtoSchema,
  AttributeProto_AttributeType as A,
  FunctionProtoSchema,
  GraphProtoSchema,
  ModelProtoSchema,
  NodeProtoSchema,
  OperatorSetIdProtoSchema,
  SparseTensorProtoSchema,
  TensorProto_DataLocation,
  TensorProtoSchema,
  type TensorShapeProtoSchema,
  TypeProtoSchema,
  ValueInfoProtoSchema,
  type AttributeProto,
  type FunctionProto,
  type GraphProto,
  type ModelProto,
  type NodeProto,
  type OperatorSetIdProto,
  type SparseTensorProto,
  type TensorProto,
  type TypeProto,
  type ValueInfoProto,
} from 'onnx-buf';
import { ELEM, elemCode, encodeRaw, pack4, toBfloatBits, toHalfBits, type ElemName } from './encode.js';

export { ELEM, elemCode, encodeRaw, pack4, toBfloatBits, toHalfBits, type ElemName } from './encode.js';

/** Defaults of every model built here (the compact layer shares them). */
export const MODEL_DEFAULTS = { irVersion: 9, producerName: 'ort-ep tests', opsets: [['', 17]] as [string, number][] };

// ---- tensors ----

/** The value fields of a TensorProto (name, data_type and dims are tensor()'s arguments). */
export type TensorFields = Omit<
  Extract<MessageInitShape<typeof TensorProtoSchema>, { $typeName?: undefined }>,
  '$typeName' | 'name' | 'dataType' | 'dims'
>;

/** A TensorProto with exactly the given value fields (none: a tensor without data). */
export function tensor(name: string, dataType: number, dims: number[], fields: TensorFields = {}): TensorProto {
  return create(TensorProtoSchema, { ...fields, name, dataType, dims: dims.map(BigInt) });
}

/** raw_data holding the values (see encodeRaw). */
export const rawFields = (type: ElemName | number, values: ArrayLike<number | bigint>): TensorFields => ({
  rawData: encodeRaw(type, values),
});

/**
 * The typed field onnx.proto assigns to the element type, holding the values: float_data,
 * double_data, int64_data, uint64_data (uint32 and uint64), or int32_data (the rest; float16 and
 * bfloat16 as their bits, 4-bit types packed two per entry, bool as 0/1).
 */
export function typedFields(type: ElemName | number, values: ArrayLike<number | bigint>): TensorFields {
  const list = Array.from(values);
  switch (elemCode(type)) {
    case ELEM.float32:
    case ELEM.complex64:
      return { floatData: list.map(Number) };
    case ELEM.float64:
    case ELEM.complex128:
      return { doubleData: list.map(Number) };
    case ELEM.int64:
      return { int64Data: list.map((x) => BigInt(x)) };
    case ELEM.uint32:
    case ELEM.uint64:
      return { uint64Data: list.map((x) => BigInt(x)) };
    case ELEM.float16:
      return { int32Data: list.map((x) => toHalfBits(Number(x))) };
    case ELEM.bfloat16:
      return { int32Data: list.map((x) => toBfloatBits(Number(x))) };
    case ELEM.int4:
    case ELEM.uint4:
      return { int32Data: [...pack4(list.map(Number))] };
    default:
      return { int32Data: list.map(Number) }; // int8..int32, uint8, uint16, bool
  }
}

/**
 * data_location EXTERNAL with these external_data entries, as written (in this order; any keys and
 * values, so that malformed entries can be tested too).
 */
export const externalFields = (entries: Record<string, string>): TensorFields => ({
  dataLocation: TensorProto_DataLocation.EXTERNAL,
  externalData: Object.entries(entries).map(([key, value]) => ({ key, value })),
});

/** A SparseTensorProto: `values` [NNZ] at `indices` ([NNZ] linear or [NNZ, rank] coordinates). */
export function sparseTensor(dims: number[], values: TensorProto, indices: TensorProto): SparseTensorProto {
  return create(SparseTensorProtoSchema, { dims: dims.map(BigInt), values, indices });
}

/** The serialized bytes of a TensorProto (a standalone .pb file). */
export const serializeTensor = (t: TensorProto): Uint8Array => toBinary(TensorProtoSchema, t);

// ---- types and value infos ----

/** A dimension: a size, a symbolic name (dim_param), or null (unknown, neither set). */
export type Dim = number | string | null;

function shapeOf(shape: Dim[]): MessageInitShape<typeof TensorShapeProtoSchema> {
  return {
    dim: shape.map((d) =>
      typeof d === 'number'
        ? { value: { case: 'dimValue' as const, value: BigInt(d) } }
        : typeof d === 'string'
          ? { value: { case: 'dimParam' as const, value: d } }
          : {},
    ),
  };
}

/** A tensor type; without a shape its rank is unknown. */
export function tensorType(elemType: number, shape?: Dim[]): TypeProto {
  return create(TypeProtoSchema, { value: { case: 'tensorType', value: { elemType, shape: shape && shapeOf(shape) } } });
}
export function sparseTensorType(elemType: number, shape?: Dim[]): TypeProto {
  return create(TypeProtoSchema, { value: { case: 'sparseTensorType', value: { elemType, shape: shape && shapeOf(shape) } } });
}
export const sequenceType = (elemType: TypeProto): TypeProto =>
  create(TypeProtoSchema, { value: { case: 'sequenceType', value: { elemType } } });
export const optionalType = (elemType: TypeProto): TypeProto =>
  create(TypeProtoSchema, { value: { case: 'optionalType', value: { elemType } } });
export const mapType = (keyType: number, valueType: TypeProto): TypeProto =>
  create(TypeProtoSchema, { value: { case: 'mapType', value: { keyType, valueType } } });
/** A TypeProto with no value set (a value info that says nothing about its type). */
export const unknownType = (): TypeProto => create(TypeProtoSchema, {});

/** A value info of a TypeProto, or of a tensor of this element type (default float) and shape. */
export function valueInfo(name: string, type: TypeProto | number = ELEM.float32, shape?: Dim[]): ValueInfoProto {
  return create(ValueInfoProtoSchema, { name, type: typeof type === 'number' ? tensorType(type, shape) : type });
}

// ---- attributes and nodes ----

type AttrInit = MessageInitShape<typeof AttributeProtoSchema>;
const utf8 = (s: string) => new TextEncoder().encode(s);

export const attr = {
  int: (name: string, v: number | bigint): AttributeProto => create(AttributeProtoSchema, { name, type: A.INT, i: BigInt(v) }),
  float: (name: string, v: number): AttributeProto => create(AttributeProtoSchema, { name, type: A.FLOAT, f: v }),
  string: (name: string, v: string): AttributeProto => create(AttributeProtoSchema, { name, type: A.STRING, s: utf8(v) }),
  ints: (name: string, v: (number | bigint)[]): AttributeProto => create(AttributeProtoSchema, { name, type: A.INTS, ints: v.map(BigInt) }),
  floats: (name: string, v: number[]): AttributeProto => create(AttributeProtoSchema, { name, type: A.FLOATS, floats: v }),
  strings: (name: string, v: string[]): AttributeProto => create(AttributeProtoSchema, { name, type: A.STRINGS, strings: v.map(utf8) }),
  tensor: (name: string, t: TensorProto): AttributeProto => create(AttributeProtoSchema, { name, type: A.TENSOR, t }),
  graph: (name: string, g: GraphProto): AttributeProto => create(AttributeProtoSchema, { name, type: A.GRAPH, g }),
  /** Inside a function body: the value of the calling node's attribute `ref`. */
  ref: (name: string, ref: string, type: A): AttributeProto => create(AttributeProtoSchema, { name, refAttrName: ref, type }),
  /** Any fields as given: list types, sparse tensors, type protos, and untyped or broken attributes. */
  raw: (init: AttrInit): AttributeProto => create(AttributeProtoSchema, init),
};

export function node(
  opType: string,
  inputs: string[],
  outputs: string[],
  attributes: AttributeProto[] = [],
  extra: { name?: string; domain?: string; overload?: string } = {},
): NodeProto {
  return create(NodeProtoSchema, { opType, input: inputs, output: outputs, attribute: attributes, ...extra });
}

// ---- graphs, functions, models ----

export interface GraphInit {
  name?: string;
  nodes?: NodeProto[];
  inputs?: ValueInfoProto[];
  outputs?: ValueInfoProto[];
  initializers?: TensorProto[];
  sparseInitializers?: SparseTensorProto[];
  valueInfo?: ValueInfoProto[];
}

export function graph(g: GraphInit): GraphProto {
  return create(GraphProtoSchema, {
    name: g.name ?? 'g',
    node: g.nodes ?? [],
    input: g.inputs ?? [],
    output: g.outputs ?? [],
    initializer: g.initializers ?? [],
    valueInfo: g.valueInfo ?? [],
    sparseInitializer: g.sparseInitializers ?? [],
  });
}

/** Opset imports in the given order; '' is the default domain (ai.onnx). */
export type Opsets = [domain: string, version: number][];

export const opset = (domain: string, version: number): OperatorSetIdProto =>
  create(OperatorSetIdProtoSchema, { domain, version: BigInt(version) });

export interface FunctionInit {
  name: string;
  domain: string;
  inputs: string[];
  outputs: string[];
  nodes: NodeProto[];
  /** Attributes the function takes without a default (FunctionProto.attribute). */
  attributes?: string[];
  /** Attributes with a default value (FunctionProto.attribute_proto). */
  defaults?: AttributeProto[];
  /** Default ai.onnx 17. */
  opsets?: Opsets;
  overload?: string;
}

export function fn(init: FunctionInit): FunctionProto {
  return create(FunctionProtoSchema, {
    name: init.name,
    domain: init.domain,
    input: init.inputs,
    output: init.outputs,
    node: init.nodes,
    attribute: init.attributes ?? [],
    attributeProto: init.defaults ?? [],
    opsetImport: (init.opsets ?? MODEL_DEFAULTS.opsets).map(([d, v]) => opset(d, v)),
    ...(init.overload !== undefined && { overload: init.overload }),
  });
}

export interface ModelExtra {
  /** Default ai.onnx 17; [] writes none. */
  opsets?: Opsets;
  functions?: FunctionProto[];
  irVersion?: number;
  /** metadata_props, in this order. */
  metadata?: Record<string, string>;
}

/**
 * A ModelProto of a graph (defaults in MODEL_DEFAULTS). The message is returned unserialized so
 * that a test can still break it; serialize() or modelBytes() write it. The graph is its last field
 * unless metadata or functions are given (truncation tests rely on that).
 */
export function modelProto(g: GraphProto | GraphInit, extra: ModelExtra = {}): ModelProto {
  return create(ModelProtoSchema, {
    irVersion: BigInt(extra.irVersion ?? MODEL_DEFAULTS.irVersion),
    producerName: MODEL_DEFAULTS.producerName,
    opsetImport: (extra.opsets ?? MODEL_DEFAULTS.opsets).map(([d, v]) => opset(d, v)),
    graph: '$typeName' in g ? g : graph(g),
    functions: extra.functions ?? [],
    metadataProps: Object.entries(extra.metadata ?? {}).map(([key, value]) => ({ key, value })),
  });
}

export const serialize = (m: ModelProto): Uint8Array => toBinary(ModelProtoSchema, m);

/** The serialized ModelProto of a graph. */
export const modelBytes = (g: GraphProto | GraphInit, extra: ModelExtra = {}): Uint8Array => serialize(modelProto(g, extra));
