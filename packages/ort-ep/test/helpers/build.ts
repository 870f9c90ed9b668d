// The test-side ONNX builder. Two levels, one module:
//  - compact descriptions (this file): value infos with element type names and symbolic dims,
//    nodes with inferred attribute types, initializers from logical values (raw_data or the typed
//    field onnx.proto assigns), external data entries, functions, opset imports; `patch` edits a
//    tensor at the last moment (corrupt files, odd fields). Used by op and API tests.
//  - exact protobuf messages (proto.ts, also as `proto` here): every field a file may set, for the
//    loader's own tests; the compact level is built on it. onnx-data.proto values are in data.ts.
// Values are encoded by encode.ts, independently of the loader under test.
import type { AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto } from 'onnx-buf';
import { AttributeProto_AttributeType as A } from 'onnx-buf';
import { elemCode as code, type ElemName } from './encode.js';
import * as P from './proto.js';

export { ELEM, encodeRaw, pack4, toBfloatBits, toHalfBits, type ElemName } from './encode.js';
export { serialize } from './proto.js';
export * as proto from './proto.js';
export * as data from './data.js';

/** A dimension: a size, a symbolic name (dim_param), or null (unknown, neither set). */
export type DimSpec = P.Dim;

export interface ValueSpec {
  name: string;
  type: ElemName | number;
  /** Omitted: rank unknown. */
  shape?: DimSpec[];
}

/** Shorthand: `v('x', 'float32', [2, 'N'])`. */
export const v = (name: string, type: ElemName | number, shape?: DimSpec[]): ValueSpec => ({ name, type, shape });

export interface TensorSpec {
  name: string;
  type: ElemName | number;
  dims: number[];
  /** Logical values (numbers or bigints; float16/bfloat16 as numbers, converted here; bool as 0/1). */
  values?: ArrayLike<number | bigint> | (number | bigint)[];
  /** 'raw' (default): raw_data; 'typed': the typed field the element type uses. */
  form?: 'raw' | 'typed';
  /** Explicit raw_data bytes (overrides values). */
  raw?: Uint8Array;
  /** Stored outside the model: data_location EXTERNAL with these entries. */
  external?: { location: string; offset?: number; length?: number };
  /** Last-moment edits of the proto (corrupt files, odd fields). */
  patch?: (t: TensorProto) => void;
}

/** Attribute values: plain values get an inferred type; tagged forms say it explicitly. */
export type AttrSpec =
  | number
  | string
  | number[]
  | string[]
  | { f: number }
  | { floats: number[] }
  | { i: number }
  | { ints: number[] }
  | { t: TensorSpec }
  | { g: GraphSpec }
  | { ref: string; type: 'float' | 'int' | 'string' | 'ints' | 'floats' | 'tensor' };

export interface NodeSpec {
  op: string;
  inputs: string[];
  outputs: string[];
  name?: string;
  domain?: string;
  attrs?: Record<string, AttrSpec>;
}

/** Shorthand: `node('Add', ['a', 'b'], ['c'], { name: 'add' })`. */
export function node(op: string, inputs: string[], outputs: string[], extra: Omit<NodeSpec, 'op' | 'inputs' | 'outputs'> = {}): NodeSpec {
  return { op, inputs, outputs, ...extra };
}

export interface GraphSpec {
  name?: string;
  inputs: ValueSpec[];
  outputs: ValueSpec[];
  nodes: NodeSpec[];
  initializers?: TensorSpec[];
  valueInfo?: ValueSpec[];
}

export interface FunctionSpec {
  name: string;
  domain: string;
  inputs: string[];
  outputs: string[];
  /** Attributes without a default. */
  attributes?: string[];
  /** Attributes with a default value. */
  attributeDefaults?: Record<string, AttrSpec>;
  nodes: NodeSpec[];
  opsets: Record<string, number>;
}

export interface ModelSpec extends GraphSpec {
  /** Domain -> version; '' is the default domain. Default { '': 17 }. */
  opsets?: Record<string, number>;
  functions?: FunctionSpec[];
  /** Default 9. */
  irVersion?: number;
}

/** Its value fields: external data entries, the explicit raw bytes, the typed field, or raw_data of its values. */
function tensorFields(s: TensorSpec, type: number): P.TensorFields {
  if (s.external) {
    const { location, offset, length } = s.external;
    return P.externalFields({
      location,
      ...(offset !== undefined && { offset: String(offset) }),
      ...(length !== undefined && { length: String(length) }),
    });
  }
  if (s.raw) return { rawData: s.raw as Uint8Array<ArrayBuffer> };
  return s.form === 'typed' ? P.typedFields(type, s.values ?? []) : P.rawFields(type, s.values ?? []);
}

export function tensor(s: TensorSpec): TensorProto {
  const type = code(s.type);
  const t = P.tensor(s.name, type, s.dims, tensorFields(s, type));
  s.patch?.(t);
  return t;
}

export const valueInfo = (s: ValueSpec): ValueInfoProto => P.valueInfo(s.name, code(s.type), s.shape);

const refTypes = { float: A.FLOAT, int: A.INT, string: A.STRING, ints: A.INTS, floats: A.FLOATS, tensor: A.TENSOR } as const;

/** Plain numbers are INT when integral, FLOAT otherwise; lists likewise (all integral: INTS). */
export function attribute(name: string, s: AttrSpec): AttributeProto {
  if (typeof s === 'number') return Number.isInteger(s) ? P.attr.int(name, s) : P.attr.float(name, s);
  if (typeof s === 'string') return P.attr.string(name, s);
  if (Array.isArray(s)) {
    if (s.every((x) => typeof x === 'string')) return P.attr.strings(name, s as string[]);
    return (s as number[]).every(Number.isInteger) ? P.attr.ints(name, s as number[]) : P.attr.floats(name, s as number[]);
  }
  if ('f' in s) return P.attr.float(name, s.f);
  if ('floats' in s) return P.attr.floats(name, s.floats);
  if ('i' in s) return P.attr.int(name, s.i);
  if ('ints' in s) return P.attr.ints(name, s.ints);
  if ('t' in s) return P.attr.tensor(name, tensor(s.t));
  if ('g' in s) return P.attr.graph(name, graph(s.g));
  return P.attr.ref(name, s.ref, refTypes[s.type]);
}

const attributes = (a: Record<string, AttrSpec> = {}) => Object.entries(a).map(([k, x]) => attribute(k, x));

export function nodeProto(s: NodeSpec): NodeProto {
  return P.node(s.op, s.inputs, s.outputs, attributes(s.attrs), { name: s.name ?? '', domain: s.domain ?? '' });
}

export function graph(s: GraphSpec): GraphProto {
  return P.graph({
    name: s.name ?? 'g',
    inputs: s.inputs.map(valueInfo),
    outputs: s.outputs.map(valueInfo),
    nodes: s.nodes.map(nodeProto),
    initializers: (s.initializers ?? []).map(tensor),
    valueInfo: (s.valueInfo ?? []).map(valueInfo),
  });
}

export function functionProto(s: FunctionSpec): FunctionProto {
  return P.fn({
    name: s.name,
    domain: s.domain,
    inputs: s.inputs,
    outputs: s.outputs,
    attributes: s.attributes ?? [],
    defaults: attributes(s.attributeDefaults),
    nodes: s.nodes.map(nodeProto),
    opsets: Object.entries(s.opsets),
  });
}

/** Defaults: ai.onnx opset 17, IR version 9 (proto.ts's MODEL_DEFAULTS). */
export function modelProto(s: ModelSpec): ModelProto {
  return P.modelProto(graph(s), {
    opsets: s.opsets && Object.entries(s.opsets),
    functions: (s.functions ?? []).map(functionProto),
    irVersion: s.irVersion,
  });
}

/** The serialized ModelProto of a compact description. */
export const model = (s: ModelSpec): Uint8Array => P.serialize(modelProto(s));
