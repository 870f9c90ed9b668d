// A small ModelProto builder for tests: models are described compactly (value infos with element
// type names and symbolic dims, nodes with inferred attribute types, initializers as raw_data or
// as the typed field onnx.proto assigns, external data entries, functions, opset imports) and
// serialized with onnx-buf. Values are encoded here independently of the loader under test.
import { create, toBinary } from '@bufbuild/protobuf';
import {
  AttributeProto_AttributeType as A, AttributeProtoSchema, FunctionProtoSchema, GraphProtoSchema, ModelProtoSchema,
  NodeProtoSchema, OperatorSetIdProtoSchema, StringStringEntryProtoSchema, TensorProtoSchema, TensorShapeProto_DimensionSchema,
  TensorShapeProtoSchema, TypeProto_TensorSchema, TypeProtoSchema, ValueInfoProtoSchema,
  type AttributeProto, type FunctionProto, type GraphProto, type ModelProto, type NodeProto, type TensorProto, type ValueInfoProto,
} from 'onnx-buf';

/** ONNX element type codes by the names onnxruntime-common uses. */
export const ELEM = {
  float32: 1, uint8: 2, int8: 3, uint16: 4, int16: 5, int32: 6, int64: 7, string: 8, bool: 9, float16: 10,
  float64: 11, uint32: 12, uint64: 13, complex64: 14, complex128: 15, bfloat16: 16, uint4: 21, int4: 22,
} as const;
export type ElemName = keyof typeof ELEM;
const code = (t: ElemName | number): number => (typeof t === 'number' ? t : ELEM[t]);

/** A dimension: a size, a symbolic name (dim_param), or null (unknown, neither set). */
export type DimSpec = number | string | null;

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
  | number | string | number[] | string[]
  | { f: number } | { floats: number[] } | { i: number } | { ints: number[] }
  | { t: TensorSpec } | { g: GraphSpec }
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
  irVersion?: number;
}

// ---- element encodings (little-endian) ----

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** float32 -> IEEE half bits, round to nearest even. */
export function toHalfBits(x: number): number {
  f32[0] = x;
  const b = u32[0];
  const sign = (b >>> 16) & 0x8000;
  const exp = (b >>> 23) & 0xff;
  let mant = b & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let h = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    if (rem > half || (rem === half && h & 1)) h++;
    return sign | h;
  }
  let h = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && h & 1)) h++;
  return sign | h;
}

/** float32 -> bfloat16 bits, round to nearest even. */
export function toBfloatBits(x: number): number {
  f32[0] = x;
  const b = u32[0];
  return ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
}

function rawBytes(type: number, values: ArrayLike<number | bigint>): Uint8Array {
  const n = values.length;
  const num = (i: number) => Number(values[i]);
  const big = (i: number) => BigInt(values[i]);
  switch (type) {
    case ELEM.float32: return bytesOf(Float32Array.from({ length: n }, (_, i) => num(i)));
    case ELEM.float64: return bytesOf(Float64Array.from({ length: n }, (_, i) => num(i)));
    case ELEM.float16: return bytesOf(Uint16Array.from({ length: n }, (_, i) => toHalfBits(num(i))));
    case ELEM.bfloat16: return bytesOf(Uint16Array.from({ length: n }, (_, i) => toBfloatBits(num(i))));
    case ELEM.int8: return bytesOf(Int8Array.from({ length: n }, (_, i) => num(i)));
    case ELEM.uint8: case ELEM.bool: return Uint8Array.from({ length: n }, (_, i) => num(i));
    case ELEM.int16: return bytesOf(Int16Array.from({ length: n }, (_, i) => num(i)));
    case ELEM.uint16: return bytesOf(Uint16Array.from({ length: n }, (_, i) => num(i)));
    case ELEM.int32: return bytesOf(Int32Array.from({ length: n }, (_, i) => num(i)));
    case ELEM.uint32: return bytesOf(Uint32Array.from({ length: n }, (_, i) => num(i)));
    case ELEM.int64: return bytesOf(BigInt64Array.from({ length: n }, (_, i) => big(i)));
    case ELEM.uint64: return bytesOf(BigUint64Array.from({ length: n }, (_, i) => big(i)));
    case ELEM.int4: case ELEM.uint4: return pack4(Array.from({ length: n }, (_, i) => num(i)));
    default: throw new Error(`build: no raw encoding for element type ${type}`);
  }
}

function bytesOf(a: ArrayBufferView): Uint8Array {
  return new Uint8Array(a.buffer.slice(a.byteOffset, a.byteOffset + a.byteLength));
}

/** Two 4-bit values per byte, the first in the low nibble. */
export function pack4(values: number[]): Uint8Array {
  const out = new Uint8Array((values.length + 1) >> 1);
  values.forEach((x, i) => (out[i >> 1] |= (x & 0xf) << (i & 1 ? 4 : 0)));
  return out;
}

/** Fills the typed field onnx.proto assigns to the element type. */
function fillTyped(t: TensorProto, type: number, values: ArrayLike<number | bigint>): void {
  const list = Array.from(values as ArrayLike<number | bigint>);
  switch (type) {
    case ELEM.float32: t.floatData = list.map(Number); break;
    case ELEM.float64: t.doubleData = list.map(Number); break;
    case ELEM.int64: t.int64Data = list.map((x) => BigInt(x)); break;
    case ELEM.uint32: case ELEM.uint64: t.uint64Data = list.map((x) => BigInt(x)); break;
    case ELEM.float16: t.int32Data = list.map((x) => toHalfBits(Number(x))); break;
    case ELEM.bfloat16: t.int32Data = list.map((x) => toBfloatBits(Number(x))); break;
    case ELEM.int4: case ELEM.uint4: t.int32Data = [...pack4(list.map(Number))]; break;
    default: t.int32Data = list.map(Number); // int8..int32, uint8, uint16, bool
  }
}

export function tensor(s: TensorSpec): TensorProto {
  const type = code(s.type);
  const t = create(TensorProtoSchema, { name: s.name, dataType: type, dims: s.dims.map(BigInt) });
  const values = s.values ?? [];
  if (s.external) {
    t.dataLocation = 1;
    const kv: [string, string][] = [['location', s.external.location]];
    if (s.external.offset !== undefined) kv.push(['offset', String(s.external.offset)]);
    if (s.external.length !== undefined) kv.push(['length', String(s.external.length)]);
    t.externalData = kv.map(([key, value]) => create(StringStringEntryProtoSchema, { key, value }));
  } else if (s.raw) t.rawData = s.raw as Uint8Array<ArrayBuffer>;
  else if (s.form === 'typed') fillTyped(t, type, values);
  else t.rawData = rawBytes(type, values) as Uint8Array<ArrayBuffer>;
  s.patch?.(t);
  return t;
}

/** The raw little-endian bytes of values (for external data files). */
export function encodeRaw(type: ElemName | number, values: ArrayLike<number | bigint>): Uint8Array {
  return rawBytes(code(type), values);
}

export function valueInfo(s: ValueSpec): ValueInfoProto {
  const tt = create(TypeProto_TensorSchema, { elemType: code(s.type) });
  if (s.shape) {
    tt.shape = create(TensorShapeProtoSchema, {
      dim: s.shape.map((d) =>
        create(TensorShapeProto_DimensionSchema, {
          value: d === null ? { case: undefined } : typeof d === 'number' ? { case: 'dimValue', value: BigInt(d) } : { case: 'dimParam', value: d },
        }),
      ),
    });
  }
  return create(ValueInfoProtoSchema, { name: s.name, type: create(TypeProtoSchema, { value: { case: 'tensorType', value: tt } }) });
}

const utf8 = new TextEncoder();
const refTypes = { float: A.FLOAT, int: A.INT, string: A.STRING, ints: A.INTS, floats: A.FLOATS, tensor: A.TENSOR } as const;

export function attribute(name: string, s: AttrSpec): AttributeProto {
  const a = create(AttributeProtoSchema, { name });
  if (typeof s === 'number') Object.assign(a, Number.isInteger(s) ? { type: A.INT, i: BigInt(s) } : { type: A.FLOAT, f: s });
  else if (typeof s === 'string') Object.assign(a, { type: A.STRING, s: utf8.encode(s) });
  else if (Array.isArray(s)) {
    if (s.every((x) => typeof x === 'string')) Object.assign(a, { type: A.STRINGS, strings: (s as string[]).map((x) => utf8.encode(x)) });
    else if ((s as number[]).every(Number.isInteger)) Object.assign(a, { type: A.INTS, ints: (s as number[]).map(BigInt) });
    else Object.assign(a, { type: A.FLOATS, floats: s });
  } else if ('f' in s) Object.assign(a, { type: A.FLOAT, f: s.f });
  else if ('floats' in s) Object.assign(a, { type: A.FLOATS, floats: s.floats });
  else if ('i' in s) Object.assign(a, { type: A.INT, i: BigInt(s.i) });
  else if ('ints' in s) Object.assign(a, { type: A.INTS, ints: s.ints.map(BigInt) });
  else if ('t' in s) Object.assign(a, { type: A.TENSOR, t: tensor(s.t) });
  else if ('g' in s) Object.assign(a, { type: A.GRAPH, g: graph(s.g) });
  else Object.assign(a, { type: refTypes[s.type], refAttrName: s.ref });
  return a;
}

export function nodeProto(s: NodeSpec): NodeProto {
  return create(NodeProtoSchema, {
    name: s.name ?? '', opType: s.op, domain: s.domain ?? '', input: s.inputs, output: s.outputs,
    attribute: Object.entries(s.attrs ?? {}).map(([k, x]) => attribute(k, x)),
  });
}

export function graph(s: GraphSpec): GraphProto {
  return create(GraphProtoSchema, {
    name: s.name ?? 'g',
    input: s.inputs.map(valueInfo),
    output: s.outputs.map(valueInfo),
    node: s.nodes.map(nodeProto),
    initializer: (s.initializers ?? []).map(tensor),
    valueInfo: (s.valueInfo ?? []).map(valueInfo),
  });
}

const opsetList = (o: Record<string, number>) => Object.entries(o).map(([domain, version]) => create(OperatorSetIdProtoSchema, { domain, version: BigInt(version) }));

export function functionProto(s: FunctionSpec): FunctionProto {
  return create(FunctionProtoSchema, {
    name: s.name, domain: s.domain, input: s.inputs, output: s.outputs, attribute: s.attributes ?? [],
    attributeProto: Object.entries(s.attributeDefaults ?? {}).map(([k, x]) => attribute(k, x)),
    node: s.nodes.map(nodeProto), opsetImport: opsetList(s.opsets),
  });
}

export function modelProto(s: ModelSpec): ModelProto {
  return create(ModelProtoSchema, {
    irVersion: BigInt(s.irVersion ?? 9), producerName: 'ort-ep tests',
    opsetImport: opsetList(s.opsets ?? { '': 17 }),
    graph: graph(s), functions: (s.functions ?? []).map(functionProto),
  });
}

/** The serialized ModelProto of a compact description. */
export function model(s: ModelSpec): Uint8Array {
  return toBinary(ModelProtoSchema, modelProto(s));
}

export const serialize = (m: ModelProto): Uint8Array => toBinary(ModelProtoSchema, m);
