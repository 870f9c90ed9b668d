// The in-memory form of an ONNX model the planner works on: host tensors, nodes with decoded
// attributes, graphs (subgraphs kept on their nodes), value infos and functions.

/** TensorProto.DataType codes. */
export enum OnnxDataType {
  UNDEFINED = 0, FLOAT = 1, UINT8 = 2, INT8 = 3, UINT16 = 4, INT16 = 5, INT32 = 6, INT64 = 7, STRING = 8,
  BOOL = 9, FLOAT16 = 10, DOUBLE = 11, UINT32 = 12, UINT64 = 13, COMPLEX64 = 14, COMPLEX128 = 15,
  BFLOAT16 = 16, FLOAT8E4M3FN = 17, FLOAT8E4M3FNUZ = 18, FLOAT8E5M2 = 19, FLOAT8E5M2FNUZ = 20,
  UINT4 = 21, INT4 = 22, FLOAT4E2M1 = 23,
}

const names: Record<number, string> = {
  1: 'float32', 2: 'uint8', 3: 'int8', 4: 'uint16', 5: 'int16', 6: 'int32', 7: 'int64', 8: 'string', 9: 'bool',
  10: 'float16', 11: 'float64', 12: 'uint32', 13: 'uint64', 14: 'complex64', 15: 'complex128', 16: 'bfloat16',
  17: 'float8e4m3fn', 18: 'float8e4m3fnuz', 19: 'float8e5m2', 20: 'float8e5m2fnuz', 21: 'uint4', 22: 'int4', 23: 'float4e2m1',
};

/** The element type's name, as onnxruntime-common's Tensor spells it where it has one. */
export function dataTypeName(t: number): string {
  return names[t] ?? `type${t}`;
}

export type HostData =
  | Float32Array | Float64Array | Int8Array | Int16Array | Int32Array | BigInt64Array
  | Uint8Array | Uint16Array | Uint32Array | BigUint64Array | string[];

/**
 * A tensor in host memory. Layout per element type: float16/bfloat16 as Uint16Array bits, bool as
 * 0/1 bytes, int4/uint4 unpacked (one value per element), float8 as raw bytes, complex64 interleaved.
 */
export interface HostTensor {
  dtype: OnnxDataType | number;
  dims: number[];
  data: HostData;
  name?: string;
}

export type AttrValue =
  | { type: 'float'; value: number }
  | { type: 'int'; value: number }
  | { type: 'string'; value: string }
  | { type: 'tensor'; value: HostTensor }
  | { type: 'graph'; value: GraphIR }
  | { type: 'floats'; value: number[] }
  | { type: 'ints'; value: number[] }
  | { type: 'strings'; value: string[] }
  | { type: 'tensors'; value: HostTensor[] }
  | { type: 'graphs'; value: GraphIR[] }
  | { type: 'type_proto'; value: TypeIR }
  | { type: 'unsupported'; value: string };

export interface NodeIR {
  name: string;
  opType: string;
  /** 'ai.onnx' for the default domain. */
  domain: string;
  /** '' marks an omitted optional input or output. */
  inputs: string[];
  outputs: string[];
  attributes: Map<string, AttrValue>;
  /** Attributes of a function body that refer to the caller's attribute of that name. */
  refAttrs?: Map<string, string>;
  /** The ai.onnx opset of the function this node was expanded from, where it differs from the model's. */
  opsetOverride?: number;
}

export type Dim = number | string | null;
export type TypeIR =
  | { kind: 'tensor'; elemType: number; shape?: Dim[] }
  | { kind: 'sequence'; elem?: TypeIR }
  | { kind: 'optional'; elem?: TypeIR }
  | { kind: 'map'; keyType: number; value?: TypeIR }
  | { kind: 'sparse_tensor'; elemType: number }
  | { kind: 'unknown' };

export interface ValueInfoIR {
  name: string;
  type: TypeIR;
}

export interface GraphIR {
  name: string;
  nodes: NodeIR[];
  inputs: ValueInfoIR[];
  outputs: ValueInfoIR[];
  initializers: Map<string, HostTensor>;
  valueInfo: Map<string, ValueInfoIR>;
}

export interface FunctionIR {
  name: string;
  domain: string;
  overload: string;
  inputs: string[];
  outputs: string[];
  attributes: string[];
  attributeDefaults: Map<string, AttrValue>;
  nodes: NodeIR[];
  opsetImports: Map<string, number>;
}

export interface ModelIR {
  irVersion: number;
  producerName: string;
  opsetImports: Map<string, number>;
  graph: GraphIR;
  functions: Map<string, FunctionIR>;
  metadata: Map<string, string>;
}

/** A failure to read a model (malformed file, bad tensor, missing or unsafe external data). */
export class OnnxLoadError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'OnnxLoadError';
  }
}

/** onnxruntime-common's ExternalDataFileDescription: data as bytes or as a file path. */
export interface ExternalDataSpec {
  path: string;
  data: Uint8Array | ArrayBuffer | string;
}
