// The in-memory form of an ONNX model that planning works on: host tensors with one canonical
// layout per element type, nodes with decoded attributes (subgraphs kept on their nodes), value
// infos, and model-local functions. Nothing here refers to MLX.

/** TensorProto.DataType codes (onnx.proto). */
export enum OnnxDataType {
  UNDEFINED = 0,
  FLOAT = 1,
  UINT8 = 2,
  INT8 = 3,
  UINT16 = 4,
  INT16 = 5,
  INT32 = 6,
  INT64 = 7,
  STRING = 8,
  BOOL = 9,
  FLOAT16 = 10,
  DOUBLE = 11,
  UINT32 = 12,
  UINT64 = 13,
  COMPLEX64 = 14,
  COMPLEX128 = 15,
  BFLOAT16 = 16,
  FLOAT8E4M3FN = 17,
  FLOAT8E4M3FNUZ = 18,
  FLOAT8E5M2 = 19,
  FLOAT8E5M2FNUZ = 20,
  UINT4 = 21,
  INT4 = 22,
  FLOAT4E2M1 = 23,
  FLOAT8E8M0 = 24,
  UINT2 = 25,
  INT2 = 26,
}

// onnxruntime-common's Tensor type strings where it has one; the rest follow ONNX's names.
const typeNames: readonly string[] = [
  'undefined',
  'float32',
  'uint8',
  'int8',
  'uint16',
  'int16',
  'int32',
  'int64',
  'string',
  'bool',
  'float16',
  'float64',
  'uint32',
  'uint64',
  'complex64',
  'complex128',
  'bfloat16',
  'float8e4m3fn',
  'float8e4m3fnuz',
  'float8e5m2',
  'float8e5m2fnuz',
  'uint4',
  'int4',
  'float4e2m1',
  'float8e8m0',
  'uint2',
  'int2',
];

/** The element type's name: 'float32', 'int64', 'bfloat16', 'float8e4m3fn', ... */
export function dataTypeName(t: number): string {
  return typeNames[t] ?? `unknown(${t})`;
}

/** The inverse of dataTypeName; undefined for names it does not produce. */
export function dataTypeFromName(name: string): OnnxDataType | undefined {
  const i = typeNames.indexOf(name);
  return i > 0 ? (i as OnnxDataType) : undefined;
}

/** Whether `t` is a code this loader knows. */
export function isKnownDataType(t: number): t is OnnxDataType {
  return Number.isInteger(t) && t > 0 && t < typeNames.length;
}

export type TypedArray =
  | Float32Array
  | Float64Array
  | Int8Array
  | Int16Array
  | Int32Array
  | BigInt64Array
  | Uint8Array
  | Uint16Array
  | Uint32Array
  | BigUint64Array;

export type HostData = TypedArray | string[];

/**
 * A tensor in host memory, in the canonical layout of its element type:
 * float32 Float32Array, float64 Float64Array, float16 and bfloat16 Uint16Array (bits),
 * int8/uint8/int16/uint16/int32/uint32 their own arrays, int64 BigInt64Array, uint64 BigUint64Array,
 * bool Uint8Array of 0/1, int4/int2 Int8Array and uint4/uint2 Uint8Array with one element per value
 * (unpacked, signed ones sign-extended), float8/float4 types Uint8Array of raw bits (float4 one per
 * value), string string[], complex64 Float32Array and complex128 Float64Array (re, im interleaved).
 */
export interface HostTensor {
  dtype: OnnxDataType;
  dims: number[];
  data: HostData;
  /** The TensorProto's name, where it had one. */
  name?: string;
}

/** A SparseTensorProto: `values` at `indices` ([NNZ] linear or [NNZ, rank] coordinates) of `dims`. */
export interface SparseTensorIR {
  dims: number[];
  values: HostTensor;
  indices: HostTensor;
}

export type AttrValue =
  | { type: 'float'; value: number }
  | { type: 'int'; value: number }
  | { type: 'string'; value: string }
  | { type: 'tensor'; value: HostTensor }
  | { type: 'graph'; value: GraphIR }
  | { type: 'sparse_tensor'; value: SparseTensorIR }
  | { type: 'type_proto'; value: TypeIR }
  | { type: 'floats'; value: number[] }
  | { type: 'ints'; value: number[] }
  | { type: 'strings'; value: string[] }
  | { type: 'tensors'; value: HostTensor[] }
  | { type: 'graphs'; value: GraphIR[] }
  | { type: 'sparse_tensors'; value: SparseTensorIR[] }
  | { type: 'type_protos'; value: TypeIR[] };

export type AttrType = AttrValue['type'];

export interface NodeIR {
  /** The node's name; nodes the file leaves unnamed get `<OpType>#<index>` (with their subgraph's path). */
  name: string;
  opType: string;
  /** 'ai.onnx' for the default domain ('' in the file); other domains as written ('com.microsoft'). */
  domain: string;
  /** Selects one of several same-named model-local functions. */
  overload?: string;
  /** '' marks an omitted optional input or output. */
  inputs: string[];
  outputs: string[];
  attributes: Map<string, AttrValue>;
  /**
   * In function bodies: attribute name -> the calling node's attribute it takes its value from
   * (AttributeProto.ref_attr_name). Bound, and removed, by expandFunctions.
   */
  refAttrs?: Map<string, string>;
  /** The opset of this node's domain where it differs from the model's (nodes expanded from a function that imports another version). */
  opsetOverride?: number;
}

/**
 * A dimension: its size, its symbolic name (dim_param), or null where unknown. A tensor type's
 * `denotations` (when any dimension has one: 'DATA_BATCH', ...) gives each dimension's, '' for none.
 */
export type Dim = number | string | null;

export type TypeIR =
  /** `shape` undefined: rank unknown. */
  | {
      kind: 'tensor';
      elemType: OnnxDataType;
      shape?: Dim[];
      denotations?: string[];
      /** The shape as the file declares it, where freeDimensionOverrides fixed some of its dimensions. */
      declared?: Dim[];
    }
  | { kind: 'sparse_tensor'; elemType: OnnxDataType; shape?: Dim[] }
  | { kind: 'sequence'; elem?: TypeIR }
  | { kind: 'optional'; elem?: TypeIR }
  | { kind: 'map'; keyType: OnnxDataType; value?: TypeIR }
  | { kind: 'unknown' };

export interface ValueInfoIR {
  name: string;
  type: TypeIR;
}

export interface GraphIR {
  name: string;
  /** In topological order once validateGraph has run. */
  nodes: NodeIR[];
  /** Every input the graph declares, including those with an initializer (see inputsWithDefaults). */
  inputs: ValueInfoIR[];
  outputs: ValueInfoIR[];
  /** Dense initializers, including sparse initializers made dense. */
  initializers: Map<string, HostTensor>;
  /** Graph inputs that also have an initializer: defaults a caller may override, not required inputs. */
  inputsWithDefaults: Set<string>;
  valueInfo: Map<string, ValueInfoIR>;
  /** Sparse initializers as written (their dense form is in `initializers`). */
  sparseInitializers: Map<string, SparseTensorIR>;
}

export interface FunctionIR {
  name: string;
  domain: string;
  overload: string;
  inputs: string[];
  outputs: string[];
  /** Attribute names the function declares without a default. */
  attributes: string[];
  /** Attributes with a default value (FunctionProto.attribute_proto). */
  attributeDefaults: Map<string, AttrValue>;
  nodes: NodeIR[];
  opsetImports: Map<string, number>;
  valueInfo: Map<string, ValueInfoIR>;
}

export interface ModelIR {
  irVersion: number;
  /** Domain -> opset version; the default domain is 'ai.onnx'. */
  opsetImports: Map<string, number>;
  producerName: string;
  producerVersion: string;
  domain: string;
  modelVersion: number;
  docString: string;
  graph: GraphIR;
  /** Keyed `${domain}:${name}`, or `${domain}:${name}:${overload}` for an overload. */
  functions: Map<string, FunctionIR>;
  /** metadata_props. */
  metadata: Map<string, string>;
}

/**
 * onnxruntime-common's ExternalDataFileDescription. `data` is the file's content, or a path to
 * read it from (relative paths against the working folder). A Blob must be read first
 * (materializeExternalData), because decoding is synchronous.
 */
export interface ExternalDataSpec {
  path: string;
  data: Uint8Array | ArrayBufferLike | Blob | string;
}

/** Product of dims (1 for a scalar). */
export function elementCount(dims: readonly number[]): number {
  let n = 1;
  for (const d of dims) n *= d;
  return n;
}
