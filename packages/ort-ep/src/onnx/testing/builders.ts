// Small ONNX messages built in code for the loader's tests (onnx-buf's create + toBinary), so
// that every encoding a file may use can be exercised without fixture files.
import { create, toBinary, type MessageInitShape } from '@bufbuild/protobuf';
import {
  AttributeProtoSchema, AttributeProto_AttributeType as A, FunctionProtoSchema, GraphProtoSchema, ModelProtoSchema,
  NodeProtoSchema, OperatorSetIdProtoSchema, TensorProtoSchema, TypeProtoSchema, ValueInfoProtoSchema,
  type AttributeProto, type FunctionProto, type GraphProto, type NodeProto, type SparseTensorProto, type TensorProto, type TypeProto, type ValueInfoProto,
} from 'onnx-buf';

/** The value fields of a TensorProto (name, data_type and dims are tensor()'s arguments). */
export type TensorFields = Omit<Extract<MessageInitShape<typeof TensorProtoSchema>, { $typeName?: undefined }>, '$typeName' | 'name' | 'dataType' | 'dims'>;

export function tensor(name: string, dataType: number, dims: number[], fields: TensorFields = {}): TensorProto {
  return create(TensorProtoSchema, { ...fields, name, dataType, dims: dims.map(BigInt) });
}

export function tensorType(elemType: number, shape?: (number | string | null)[]): TypeProto {
  return create(TypeProtoSchema, {
    value: {
      case: 'tensorType',
      value: {
        elemType,
        shape: shape && {
          dim: shape.map((d) => (typeof d === 'number' ? { value: { case: 'dimValue' as const, value: BigInt(d) } } : typeof d === 'string' ? { value: { case: 'dimParam' as const, value: d } } : {})),
        },
      },
    },
  });
}

export function valueInfo(name: string, type: TypeProto | number = 1, shape?: (number | string | null)[]): ValueInfoProto {
  return create(ValueInfoProtoSchema, { name, type: typeof type === 'number' ? tensorType(type, shape) : type });
}

type AttrInit = MessageInitShape<typeof AttributeProtoSchema>;
export const attr = {
  int: (name: string, v: number): AttributeProto => create(AttributeProtoSchema, { name, type: A.INT, i: BigInt(v) }),
  float: (name: string, v: number): AttributeProto => create(AttributeProtoSchema, { name, type: A.FLOAT, f: v }),
  string: (name: string, v: string): AttributeProto => create(AttributeProtoSchema, { name, type: A.STRING, s: new TextEncoder().encode(v) }),
  ints: (name: string, v: number[]): AttributeProto => create(AttributeProtoSchema, { name, type: A.INTS, ints: v.map(BigInt) }),
  floats: (name: string, v: number[]): AttributeProto => create(AttributeProtoSchema, { name, type: A.FLOATS, floats: v }),
  strings: (name: string, v: string[]): AttributeProto => create(AttributeProtoSchema, { name, type: A.STRINGS, strings: v.map((s) => new TextEncoder().encode(s)) }),
  tensor: (name: string, t: TensorProto): AttributeProto => create(AttributeProtoSchema, { name, type: A.TENSOR, t }),
  graph: (name: string, g: GraphProto): AttributeProto => create(AttributeProtoSchema, { name, type: A.GRAPH, g }),
  ref: (name: string, ref: string, type: A): AttributeProto => create(AttributeProtoSchema, { name, refAttrName: ref, type }),
  raw: (init: AttrInit): AttributeProto => create(AttributeProtoSchema, init),
};

export function node(opType: string, inputs: string[], outputs: string[], attributes: AttributeProto[] = [], extra: { name?: string; domain?: string; overload?: string } = {}): NodeProto {
  return create(NodeProtoSchema, { opType, input: inputs, output: outputs, attribute: attributes, ...extra });
}

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
    name: g.name ?? 'g', node: g.nodes ?? [], input: g.inputs ?? [], output: g.outputs ?? [], initializer: g.initializers ?? [], valueInfo: g.valueInfo ?? [],
    sparseInitializer: g.sparseInitializers ?? [],
  });
}

export const opset = (domain: string, version: number) => create(OperatorSetIdProtoSchema, { domain, version: BigInt(version) });

export function fn(init: {
  name: string; domain: string; inputs: string[]; outputs: string[]; nodes: NodeProto[]; attributes?: string[]; defaults?: AttributeProto[];
  opsets?: [string, number][]; overload?: string;
}): FunctionProto {
  return create(FunctionProtoSchema, {
    name: init.name, domain: init.domain, input: init.inputs, output: init.outputs, node: init.nodes, attribute: init.attributes ?? [],
    attributeProto: init.defaults ?? [], opsetImport: (init.opsets ?? [['', 17]]).map(([d, v]) => opset(d, v)), overload: init.overload ?? '',
  });
}

/** The serialized ModelProto of a graph (default: ai.onnx opset 17, IR version 8). */
export function modelBytes(g: GraphProto | GraphInit, extra: { opsets?: [string, number][]; functions?: FunctionProto[]; irVersion?: number; metadata?: Record<string, string> } = {}): Uint8Array {
  return toBinary(ModelProtoSchema, create(ModelProtoSchema, {
    irVersion: BigInt(extra.irVersion ?? 8),
    producerName: 'onnx-loader-tests',
    opsetImport: (extra.opsets ?? [['', 17]]).map(([d, v]) => opset(d, v)),
    graph: '$typeName' in g ? g : graph(g),
    functions: extra.functions ?? [],
    metadataProps: Object.entries(extra.metadata ?? {}).map(([key, value]) => ({ key, value })),
  }));
}

/** A one-node model `out = Identity(value)` whose value is an initializer: onnxruntime returns it as decoded. */
export function identityOfInitializer(t: TensorProto): Uint8Array {
  return modelBytes({ nodes: [node('Identity', [t.name], ['out'])], initializers: [t], outputs: [valueInfo('out', t.dataType)] }, { opsets: [['', 21]], irVersion: 10 });
}
