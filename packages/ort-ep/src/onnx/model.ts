// ModelProto -> ModelIR.
import { dirname } from 'node:path';
import { fromBinary } from '@bufbuild/protobuf';
import {
  ModelProtoSchema, type AttributeProto, type FunctionProto, type GraphProto, type ModelProto, type NodeProto,
  type TypeProto, type ValueInfoProto,
} from 'onnx-buf';
import { decodeTensor, type TensorContext } from './tensor.js';
import {
  OnnxLoadError, type AttrValue, type Dim, type ExternalDataSpec, type FunctionIR, type GraphIR, type ModelIR, type NodeIR,
  type TypeIR, type ValueInfoIR,
} from './ir.js';

export const DEFAULT_DOMAIN = 'ai.onnx';
const normDomain = (d: string) => (d === '' || d === 'ai.onnx' ? DEFAULT_DOMAIN : d);
const utf8 = new TextDecoder();

function decodeType(t: TypeProto | undefined): TypeIR {
  const v = t?.value;
  switch (v?.case) {
    case 'tensorType': {
      const shape: Dim[] | undefined = v.value.shape ? v.value.shape.dim.map((d) => (d.value.case === 'dimValue' ? Number(d.value.value) : d.value.case === 'dimParam' ? d.value.value : null)) : undefined;
      return { kind: 'tensor', elemType: v.value.elemType, shape };
    }
    case 'sequenceType': return { kind: 'sequence', elem: v.value.elemType ? decodeType(v.value.elemType) : undefined };
    case 'optionalType': return { kind: 'optional', elem: v.value.elemType ? decodeType(v.value.elemType) : undefined };
    case 'mapType': return { kind: 'map', keyType: v.value.keyType, value: v.value.valueType ? decodeType(v.value.valueType) : undefined };
    case 'sparseTensorType': return { kind: 'sparse_tensor', elemType: v.value.elemType };
    default: return { kind: 'unknown' };
  }
}

const valueInfo = (v: ValueInfoProto): ValueInfoIR => ({ name: v.name, type: decodeType(v.type) });

function decodeAttr(a: AttributeProto, ctx: TensorContext): AttrValue {
  switch (a.type) {
    case 1: return { type: 'float', value: a.f };
    case 2: return { type: 'int', value: Number(a.i) };
    case 3: return { type: 'string', value: utf8.decode(a.s) };
    case 4: return { type: 'tensor', value: decodeTensor(a.t!, ctx) };
    case 5: return { type: 'graph', value: decodeGraph(a.g!, ctx) };
    case 6: return { type: 'floats', value: [...a.floats] };
    case 7: return { type: 'ints', value: a.ints.map(Number) };
    case 8: return { type: 'strings', value: a.strings.map((s) => utf8.decode(s)) };
    case 9: return { type: 'tensors', value: a.tensors.map((t) => decodeTensor(t, ctx)) };
    case 10: return { type: 'graphs', value: a.graphs.map((g) => decodeGraph(g, ctx)) };
    case 13: return { type: 'type_proto', value: decodeType(a.tp) };
    case 11: case 12: return { type: 'unsupported', value: 'sparse tensor attributes are not supported' };
    default:
      // Old exporters leave `type` unset: infer it from the field that is set.
      if (a.t) return { type: 'tensor', value: decodeTensor(a.t, ctx) };
      if (a.g) return { type: 'graph', value: decodeGraph(a.g, ctx) };
      if (a.ints.length) return { type: 'ints', value: a.ints.map(Number) };
      if (a.floats.length) return { type: 'floats', value: [...a.floats] };
      if (a.s.length) return { type: 'string', value: utf8.decode(a.s) };
      if (a.f) return { type: 'float', value: a.f };
      return { type: 'int', value: Number(a.i) };
  }
}

function decodeNode(n: NodeProto, ctx: TensorContext): NodeIR {
  const attributes = new Map<string, AttrValue>();
  const refAttrs = new Map<string, string>();
  for (const a of n.attribute) {
    if (a.refAttrName) refAttrs.set(a.name, a.refAttrName);
    else attributes.set(a.name, decodeAttr(a, ctx));
  }
  return {
    name: n.name, opType: n.opType, domain: normDomain(n.domain), inputs: [...n.input], outputs: [...n.output], attributes,
    ...(refAttrs.size ? { refAttrs } : {}),
  };
}

export function decodeGraph(g: GraphProto, ctx: TensorContext): GraphIR {
  const initializers = new Map(g.initializer.map((t) => [t.name, decodeTensor(t, ctx)]));
  if (g.sparseInitializer.length) throw new OnnxLoadError(`graph '${g.name}': sparse initializers are not supported`);
  return {
    name: g.name,
    nodes: g.node.map((n) => decodeNode(n, ctx)),
    inputs: g.input.map(valueInfo),
    outputs: g.output.map(valueInfo),
    initializers,
    valueInfo: new Map(g.valueInfo.map((v) => [v.name, valueInfo(v)])),
  };
}

function decodeFunction(f: FunctionProto, ctx: TensorContext): FunctionIR {
  return {
    name: f.name, domain: normDomain(f.domain), overload: f.overload, inputs: [...f.input], outputs: [...f.output],
    attributes: [...f.attribute],
    attributeDefaults: new Map(f.attributeProto.map((a) => [a.name, decodeAttr(a, ctx)])),
    nodes: f.node.map((n) => decodeNode(n, ctx)),
    opsetImports: new Map(f.opsetImport.map((o) => [normDomain(o.domain), Number(o.version)])),
  };
}

export interface DecodeOptions {
  modelPath?: string;
  externalData?: ExternalDataSpec[];
}

export function decodeModel(bytes: Uint8Array, options: DecodeOptions = {}): ModelIR {
  if (!(bytes instanceof Uint8Array) || bytes.length === 0) throw new OnnxLoadError('not an ONNX model: the file is empty');
  let m: ModelProto;
  try {
    m = fromBinary(ModelProtoSchema, bytes);
  } catch (e) {
    const msg = (e as Error).message;
    throw new OnnxLoadError(/premature|EOF|range|out of/i.test(msg) ? `truncated or corrupt ONNX model: ${msg}` : `not an ONNX model: ${msg}`, { cause: e });
  }
  if (!m.graph) throw new OnnxLoadError('not an ONNX model: it has no graph');
  const ctx: TensorContext = { modelDir: options.modelPath ? dirname(options.modelPath) : undefined, externalData: options.externalData };
  const opsetImports = new Map<string, number>();
  for (const o of m.opsetImport) opsetImports.set(normDomain(o.domain), Number(o.version));
  if (!opsetImports.has(DEFAULT_DOMAIN) && m.opsetImport.length === 0) opsetImports.set(DEFAULT_DOMAIN, 1);
  let graph: GraphIR;
  try {
    graph = decodeGraph(m.graph, ctx);
  } catch (e) {
    if (e instanceof OnnxLoadError) throw e;
    throw new OnnxLoadError(`malformed ONNX model: ${(e as Error).message}`, { cause: e });
  }
  const functions = new Map<string, FunctionIR>();
  for (const f of m.functions) {
    const fi = decodeFunction(f, ctx);
    functions.set(`${fi.domain}:${fi.name}${fi.overload ? `:${fi.overload}` : ''}`, fi);
  }
  return {
    irVersion: Number(m.irVersion), producerName: m.producerName, opsetImports, graph, functions,
    metadata: new Map(m.metadataProps.map((p) => [p.key, p.value])),
  };
}
