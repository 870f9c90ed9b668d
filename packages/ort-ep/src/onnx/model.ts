// ModelProto -> ModelIR. Protobuf errors become OnnxLoadErrors that say whether the file is not
// an ONNX model at all or was cut short; everything after parsing (tensors, attributes) names
// the graph element it failed on.
import { basename, dirname } from 'node:path';
import { OnnxLoadError, messageOf } from '../errors.js';
import { ExternalDataSource, type HostBytes } from './external.js';
import type {
  AttrValue,
  Dim,
  ExternalDataSpec,
  FunctionIR,
  GraphIR,
  HostTensor,
  ModelIR,
  NodeIR,
  SparseTensorIR,
  TypeIR,
  ValueInfoIR,
} from './ir.js';
import {
  AttrType as A,
  attrTypeName,
  decodeModelProto,
  type AttributeProto,
  type FunctionProto,
  type GraphProto,
  type ModelProto,
  type NodeProto,
  type TensorShapeProto,
  type TypeProto,
  type ValueInfoProto,
} from './proto.js';
import { decodeSparseTensor, decodeTensor, sparseToDense } from './tensor.js';

export const DEFAULT_DOMAIN = 'ai.onnx';

/** The domain as the registry keys it: '' (the file's spelling of the default domain) -> 'ai.onnx'. */
export const normalizeDomain = (d: string): string => (d === '' ? DEFAULT_DOMAIN : d);

const utf8 = new TextDecoder();

export interface DecodeOptions {
  /** The model file's path: external data is read from its folder, and messages name it. */
  modelPath?: string;
  /** External data for a model given as bytes (onnxruntime-common's `externalData`). */
  externalData?: readonly (ExternalDataSpec | string)[];
  /** Allocates the buffers external data is read into (see HostBytes). */
  hostBytes?: HostBytes;
}

interface Ctx {
  external: ExternalDataSource;
}

function decodeShape(s: TensorShapeProto | undefined): Dim[] | undefined {
  if (!s) return undefined;
  return s.dim.map((d) => {
    if (d.value.case === 'dimValue') return Number(d.value.value);
    if (d.value.case === 'dimParam' && d.value.value !== '') return d.value.value;
    return null;
  });
}

export function decodeType(t: TypeProto | undefined): TypeIR {
  const v = t?.value;
  switch (v?.case) {
    case 'tensorType': {
      const shape = decodeShape(v.value.shape);
      if (!shape) return { kind: 'tensor', elemType: v.value.elemType };
      const dims = v.value.shape!.dim;
      return dims.some((d) => d.denotation)
        ? { kind: 'tensor', elemType: v.value.elemType, shape, denotations: dims.map((d) => d.denotation) }
        : { kind: 'tensor', elemType: v.value.elemType, shape };
    }
    case 'sparseTensorType': {
      const shape = decodeShape(v.value.shape);
      return shape ? { kind: 'sparse_tensor', elemType: v.value.elemType, shape } : { kind: 'sparse_tensor', elemType: v.value.elemType };
    }
    case 'sequenceType':
      return v.value.elemType ? { kind: 'sequence', elem: decodeType(v.value.elemType) } : { kind: 'sequence' };
    case 'optionalType':
      return v.value.elemType ? { kind: 'optional', elem: decodeType(v.value.elemType) } : { kind: 'optional' };
    case 'mapType':
      return v.value.valueType
        ? { kind: 'map', keyType: v.value.keyType, value: decodeType(v.value.valueType) }
        : { kind: 'map', keyType: v.value.keyType };
    default:
      return { kind: 'unknown' };
  }
}

const valueInfo = (v: ValueInfoProto): ValueInfoIR => ({ name: v.name, type: decodeType(v.type) });

/** Old exporters leave AttributeProto.type unset; the field that is present says what it is. */
function inferAttrType(a: AttributeProto): number {
  if (a.t !== undefined) return A.TENSOR;
  if (a.g !== undefined) return A.GRAPH;
  if (a.sparseTensor !== undefined) return A.SPARSE_TENSOR;
  if (a.tp !== undefined) return A.TYPE_PROTO;
  if (a.s !== undefined) return A.STRING;
  if (a.f !== undefined) return A.FLOAT;
  if (a.i !== undefined) return A.INT;
  if (a.floats.length) return A.FLOATS;
  if (a.ints.length) return A.INTS;
  if (a.strings.length) return A.STRINGS;
  if (a.tensors.length) return A.TENSORS;
  if (a.graphs.length) return A.GRAPHS;
  if (a.sparseTensors.length) return A.SPARSE_TENSORS;
  if (a.typeProtos.length) return A.TYPE_PROTOS;
  return A.UNDEFINED;
}

function decodeAttr(a: AttributeProto, ctx: Ctx, where: string, path: string): AttrValue {
  const at = `attribute '${a.name}' of ${where}`;
  const need = <T>(v: T | undefined): T => {
    if (v === undefined) throw new OnnxLoadError(`${at}: its type is ${attrTypeName(a.type)} but the value is missing`);
    return v;
  };
  const tensor = (t: Parameters<typeof decodeTensor>[0], i?: number): HostTensor =>
    decodeTensor(t, { external: ctx.external, where: `${at}${i === undefined ? '' : ` [${i}]`}` });
  const sparse = (s: Parameters<typeof decodeSparseTensor>[0], i?: number): SparseTensorIR =>
    decodeSparseTensor(s, { external: ctx.external, where: `${at}${i === undefined ? '' : ` [${i}]`}` });
  const graph = (g: GraphProto, i?: number): GraphIR => decodeGraphIn(g, ctx, `${path}/${a.name}${i === undefined ? '' : `[${i}]`}`);
  const type = a.type === A.UNDEFINED ? inferAttrType(a) : a.type;
  switch (type) {
    case A.FLOAT:
      return { type: 'float', value: a.f ?? 0 };
    case A.INT:
      return { type: 'int', value: Number(a.i ?? 0n) };
    case A.STRING:
      return { type: 'string', value: a.s ? utf8.decode(a.s) : '' };
    case A.TENSOR:
      return { type: 'tensor', value: tensor(need(a.t)) };
    case A.GRAPH:
      return { type: 'graph', value: graph(need(a.g)) };
    case A.SPARSE_TENSOR:
      return { type: 'sparse_tensor', value: sparse(need(a.sparseTensor)) };
    case A.TYPE_PROTO:
      return { type: 'type_proto', value: decodeType(need(a.tp)) };
    case A.FLOATS:
      return { type: 'floats', value: [...a.floats] };
    case A.INTS:
      return { type: 'ints', value: a.ints.map(Number) };
    case A.STRINGS:
      return { type: 'strings', value: a.strings.map((s) => utf8.decode(s)) };
    case A.TENSORS:
      return { type: 'tensors', value: a.tensors.map(tensor) };
    case A.GRAPHS:
      return { type: 'graphs', value: a.graphs.map(graph) };
    case A.SPARSE_TENSORS:
      return { type: 'sparse_tensors', value: a.sparseTensors.map(sparse) };
    case A.TYPE_PROTOS:
      return { type: 'type_protos', value: a.typeProtos.map(decodeType) };
    case A.UNDEFINED:
      throw new OnnxLoadError(`${at}: it has neither a type nor a value`);
    default:
      throw new OnnxLoadError(`${at}: unknown attribute type ${type}`);
  }
}

function decodeNode(n: NodeProto, ctx: Ctx, index: number, path: string): NodeIR {
  // Most files leave nodes unnamed; messages and function expansion need a name, so one is made
  // up from the op and position, with the subgraph's path so that it is unique in the model.
  const name = n.name || `${path}${n.opType}#${index}`;
  const where = `node '${name}' (${n.opType})`;
  const attributes = new Map<string, AttrValue>();
  let refAttrs: Map<string, string> | undefined;
  for (const a of n.attribute) {
    if (attributes.has(a.name) || refAttrs?.has(a.name)) throw new OnnxLoadError(`${where}: attribute '${a.name}' is given twice`);
    if (a.refAttrName) (refAttrs ??= new Map()).set(a.name, a.refAttrName);
    else attributes.set(a.name, decodeAttr(a, ctx, where, name));
  }
  const node: NodeIR = {
    name,
    opType: n.opType,
    domain: normalizeDomain(n.domain),
    inputs: [...n.input],
    outputs: [...n.output],
    attributes,
  };
  if (n.overload) node.overload = n.overload;
  if (refAttrs) node.refAttrs = refAttrs;
  return node;
}

function decodeGraphIn(g: GraphProto, ctx: Ctx, path: string): GraphIR {
  const prefix = path ? `${path}/` : '';
  const initializers = new Map<string, HostTensor>();
  for (const t of g.initializer) {
    if (initializers.has(t.name)) throw new OnnxLoadError(`graph '${g.name}': initializer '${t.name}' is defined twice`);
    initializers.set(t.name, decodeTensor(t, { external: ctx.external, where: `initializer '${t.name}'` }));
  }
  const sparseInitializers = new Map<string, SparseTensorIR>();
  for (const s of g.sparseInitializer) {
    const name = s.values?.name ?? '';
    const where = `sparse initializer '${name}'`;
    if (initializers.has(name)) throw new OnnxLoadError(`graph '${g.name}': initializer '${name}' is defined twice (dense and sparse)`);
    const sp = decodeSparseTensor(s, { external: ctx.external, where });
    sparseInitializers.set(name, sp);
    initializers.set(name, sparseToDense(sp, where));
  }
  const inputs = g.input.map(valueInfo);
  return {
    name: g.name,
    nodes: g.node.map((n, i) => decodeNode(n, ctx, i, prefix)),
    inputs,
    outputs: g.output.map(valueInfo),
    initializers,
    inputsWithDefaults: new Set(inputs.filter((i) => initializers.has(i.name)).map((i) => i.name)),
    valueInfo: new Map(g.valueInfo.map((v) => [v.name, valueInfo(v)])),
    sparseInitializers,
  };
}

/** Decodes a GraphProto (external data, if any, is read relative to `modelDir`). */
export function decodeGraph(g: GraphProto, options: { modelDir?: string; externalData?: DecodeOptions['externalData'] } = {}): GraphIR {
  const external = new ExternalDataSource(options.modelDir, options.externalData);
  try {
    return decodeGraphIn(g, { external }, '');
  } finally {
    external.close();
  }
}

const opsetMap = (imports: { domain: string; version: bigint }[]): Map<string, number> =>
  new Map(imports.map((o) => [normalizeDomain(o.domain), Number(o.version)]));

export function functionKey(domain: string, name: string, overload?: string): string {
  return `${normalizeDomain(domain)}:${name}${overload ? `:${overload}` : ''}`;
}

function decodeFunction(f: FunctionProto, ctx: Ctx): FunctionIR {
  const where = `function '${f.domain}:${f.name}'`;
  // Body nodes only ever run inlined, where the calling node's name is put in front of theirs.
  const path = '';
  const attributeDefaults = new Map(f.attributeProto.map((a) => [a.name, decodeAttr(a, ctx, where, `${f.name}.default`)]));
  return {
    name: f.name,
    domain: normalizeDomain(f.domain),
    overload: f.overload,
    inputs: [...f.input],
    outputs: [...f.output],
    attributes: [...f.attribute],
    attributeDefaults,
    nodes: f.node.map((n, i) => decodeNode(n, ctx, i, path)),
    opsetImports: opsetMap(f.opsetImport),
    valueInfo: new Map(f.valueInfo.map((v) => [v.name, valueInfo(v)])),
  };
}

function parseModel(bytes: Uint8Array): ModelProto {
  if (bytes.length === 0) throw new OnnxLoadError('not an ONNX model: the file is empty');
  let m: ModelProto;
  try {
    m = decodeModelProto(bytes);
  } catch (e) {
    const msg = messageOf(e);
    if (/premature EOF/i.test(msg)) {
      throw new OnnxLoadError(
        `truncated ONNX model: the data ends inside a field after ${bytes.length} bytes (an incomplete download or copy?)`,
        { cause: e },
      );
    }
    if ((e instanceof RangeError && /call stack/i.test(msg)) || /maximum recursion depth/i.test(msg)) {
      // The protobuf reader's limit, as in onnxruntime's: 100 nested messages, about 33 levels of
      // If/Loop/Scan bodies (graph -> node -> attribute -> graph).
      throw new OnnxLoadError(
        'the model nests messages deeper than 100 levels (subgraphs in subgraphs, about 33 levels of If/Loop/Scan bodies), the limit of the protobuf reader',
        { cause: e },
      );
    }
    throw new OnnxLoadError(`not an ONNX model: the bytes are not a valid protobuf ModelProto (${msg})`, { cause: e });
  }
  if (!m.graph) {
    // A cut exactly between fields parses; a model without its graph is one such cut, or not a model.
    throw new OnnxLoadError(
      m.irVersion === 0n ? 'not an ONNX model: it has neither ir_version nor a graph' : 'truncated or invalid ONNX model: it has no graph',
    );
  }
  return m;
}

/** Decodes a serialized ModelProto into a ModelIR (functions are kept; see expandFunctions). */
export function decodeModel(bytes: Uint8Array, options: DecodeOptions = {}): ModelIR {
  const model = options.modelPath ? basename(options.modelPath) : undefined;
  const external = new ExternalDataSource(
    options.modelPath ? dirname(options.modelPath) : undefined,
    options.externalData,
    options.hostBytes,
  );
  try {
    if (!(bytes instanceof Uint8Array)) throw new OnnxLoadError('not an ONNX model: expected the bytes of the file (a Uint8Array)');
    const m = parseModel(bytes);
    const ctx: Ctx = { external };
    const opsetImports = opsetMap(m.opsetImport);
    // IR versions before 3 had no opset_import: the default domain at opset 1. Later ones must
    // have one; serializers write it after the graph, so a file cut there lacks it.
    if (!m.opsetImport.length) {
      if (m.irVersion >= 3n)
        throw new OnnxLoadError(`truncated or invalid ONNX model: it has no opset_import, which IR version ${m.irVersion} requires`);
      opsetImports.set(DEFAULT_DOMAIN, 1);
    }
    const graph = decodeGraphIn(m.graph!, ctx, '');
    const functions = new Map<string, FunctionIR>();
    for (const f of m.functions) {
      const key = functionKey(f.domain, f.name, f.overload);
      if (functions.has(key)) throw new OnnxLoadError(`function '${key}' is defined twice`);
      functions.set(key, decodeFunction(f, ctx));
    }
    return {
      irVersion: Number(m.irVersion),
      opsetImports,
      producerName: m.producerName,
      producerVersion: m.producerVersion,
      domain: m.domain,
      modelVersion: Number(m.modelVersion),
      docString: m.docString,
      graph,
      functions,
      metadata: new Map(m.metadataProps.map((p) => [p.key, p.value])),
    };
  } catch (e) {
    if (e instanceof OnnxLoadError) throw e.model || !model ? e : new OnnxLoadError(e.message, { cause: e.cause, model });
    throw new OnnxLoadError(`malformed ONNX model: ${messageOf(e)}`, { cause: e, model });
  } finally {
    external.close();
  }
}
