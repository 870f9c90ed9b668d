// decodeModel on models built in code: what the IR keeps of nodes, attributes, types, subgraphs
// and metadata, and the errors for files that are not models or were cut short.
import { AttributeProto_AttributeType as A } from 'onnx-buf';
import { describe, expect, it } from 'vitest';
import {
  attr,
  fn,
  graph,
  mapType,
  modelBytes,
  node,
  optionalType,
  sequenceType,
  serializeTensor,
  sparseTensor,
  sparseTensorType,
  tensor,
  tensorType,
  unknownType,
  valueInfo,
} from '../../test/helpers/proto.js';
import { OnnxLoadError } from '../errors.js';
import { OnnxDataType as T, type GraphIR } from './ir.js';
import { decodeModel } from './model.js';

function expectLoadError(f: () => unknown, pattern: RegExp): void {
  let err: unknown;
  try {
    f();
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(OnnxLoadError);
  expect((err as Error).message).toMatch(pattern);
}

const small = modelBytes({
  nodes: [node('Add', ['x', 'b'], ['y'], [], { name: 'add' })],
  inputs: [valueInfo('x', T.FLOAT, ['batch', 3])],
  outputs: [valueInfo('y', T.FLOAT, ['batch', 3])],
  initializers: [tensor('b', T.FLOAT, [3], { floatData: [1, 2, 3] })],
});

describe('files that are not models', () => {
  it('every strict prefix of a model is refused as truncated (the graph is its last field)', () => {
    for (let n = 1; n < small.length; n++) expectLoadError(() => decodeModel(small.subarray(0, n)), /^(truncated|not an ONNX model)/);
    expectLoadError(
      () => decodeModel(small.subarray(0, small.length - 7)),
      /^truncated ONNX model: the data ends inside a field after \d+ bytes/,
    );
  });

  it.each([
    ['empty', new Uint8Array(0), /^not an ONNX model: the file is empty/],
    [
      'text',
      new TextEncoder().encode('hello, this is not an ONNX file at all'),
      /^not an ONNX model: the bytes are not a valid protobuf ModelProto \(/,
    ],
    ['zeros', new Uint8Array(64), /^not an ONNX model: the bytes are not a valid protobuf ModelProto \(illegal tag/],
    ['0xff', new Uint8Array(64).fill(0xff), /^not an ONNX model: the bytes are not a valid protobuf ModelProto \(invalid varint/],
    ['PNG', Uint8Array.of(0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13), /^not an ONNX model/],
    ['pseudo-random', Uint8Array.from({ length: 4096 }, (_, i) => (i * 7919 + 13) & 0xff), /^not an ONNX model/],
    [
      'a TensorProto',
      serializeTensor(tensor('t', T.FLOAT, [2], { floatData: [1, 2] })),
      /^(not an ONNX model|truncated or invalid ONNX model)/,
    ],
  ])('%s', (_, bytes, pattern) => expectLoadError(() => decodeModel(bytes), pattern));

  it('a model without a graph, and a non-Uint8Array argument', () => {
    expectLoadError(() => decodeModel(Uint8Array.of(0x08, 0x08)), /^truncated or invalid ONNX model: it has no graph/); // ir_version 8, nothing else
    expectLoadError(() => decodeModel(Uint8Array.of(0x12, 0x01, 0x41)), /^not an ONNX model: it has neither ir_version nor a graph/); // producer_name 'A'
    expectLoadError(() => decodeModel('model.onnx' as unknown as Uint8Array), /expected the bytes of the file/);
  });

  it('names the model file when it has one', () => {
    expectLoadError(
      () => decodeModel(small.subarray(0, 20), { modelPath: '/models/resnet/model.onnx' }),
      /^model\.onnx: truncated ONNX model/,
    );
  });
});

describe('what the IR keeps', () => {
  const then = graph({ name: 'then', nodes: [node('Identity', ['x'], ['t'])], outputs: [valueInfo('t', T.FLOAT)] });
  const otherwise = graph({ name: 'else', nodes: [node('Neg', ['x'], ['e'])], outputs: [valueInfo('e', T.FLOAT)] });
  const sparse = sparseTensor([2, 2], tensor('sp', T.INT32, [2], { int32Data: [5, 6] }), tensor('', T.INT64, [2], { int64Data: [1n, 2n] }));
  // One node with every kind of attribute, a subgraph, typed inputs, metadata and a function.
  const model = decodeModel(
    modelBytes(
      {
        name: 'main',
        nodes: [
          node('Constant', [], ['c'], [attr.tensor('value', tensor('', T.INT64, [2], { int64Data: [3n, 4n] }))]),
          node('If', ['cond'], ['r'], [attr.graph('then_branch', then), attr.graph('else_branch', otherwise)], { name: 'branch' }),
          node(
            'Custom',
            ['x', '', 'c'],
            ['o1', ''],
            [
              attr.int('i', 7),
              attr.float('f', 0.5),
              attr.string('s', 'héllo'),
              attr.ints('is', [1, -2]),
              attr.floats('fs', [0.25]),
              attr.strings('ss', ['a', 'b']),
              attr.raw({ name: 'ts', type: A.TENSORS, tensors: [tensor('', T.BOOL, [1], { int32Data: [1] })] }),
              attr.raw({ name: 'gs', type: A.GRAPHS, graphs: [then] }),
              attr.raw({ name: 'sp', type: A.SPARSE_TENSOR, sparseTensor: sparse }),
              attr.raw({ name: 'tp', type: A.TYPE_PROTO, tp: tensorType(T.FLOAT16, [2, null]) }),
              attr.raw({ name: 'untyped', i: 3n }), // IR version 1 files leave `type` unset
              attr.raw({ name: 'untyped_list', floats: [1, 2] }),
            ],
            { domain: 'com.example' },
          ),
        ],
        inputs: [
          valueInfo('x', T.FLOAT, ['batch', 3, null]),
          valueInfo('cond', T.BOOL, []),
          valueInfo('rankless', tensorType(T.INT8)),
          valueInfo('w', T.FLOAT, [2, 2]),
          valueInfo('seq', sequenceType(tensorType(T.FLOAT, [null]))),
          valueInfo('opt', optionalType(sequenceType(tensorType(T.INT64)))),
          valueInfo('map', mapType(T.INT64, tensorType(T.FLOAT))),
          valueInfo('sparse', sparseTensorType(T.FLOAT, [4])),
          valueInfo('untyped', unknownType()),
        ],
        outputs: [valueInfo('r', T.FLOAT), valueInfo('o1', T.FLOAT)],
        initializers: [tensor('w', T.FLOAT, [2, 2], { floatData: [1, 2, 3, 4] })],
        valueInfo: [valueInfo('c', T.INT64, [2])],
      },
      {
        opsets: [
          ['', 18],
          ['com.example', 2],
          ['ai.onnx.ml', 3],
        ],
        irVersion: 8,
        metadata: { author: 'tests' },
        functions: [
          fn({ name: 'F', domain: 'com.example', inputs: ['a'], outputs: ['b'], nodes: [node('Relu', ['a'], ['b'])], overload: 'v2' }),
        ],
      },
    ),
  );
  const g = model.graph;
  const [constant, branch, custom] = g.nodes;

  it('model fields, opset imports with the default domain as ai.onnx, functions by key', () => {
    expect(model.irVersion).toBe(8);
    expect(model.producerName).toBe('ort-ep tests');
    expect(model.opsetImports).toEqual(
      new Map([
        ['ai.onnx', 18],
        ['com.example', 2],
        ['ai.onnx.ml', 3],
      ]),
    );
    expect(model.metadata).toEqual(new Map([['author', 'tests']]));
    expect([...model.functions.keys()]).toEqual(['com.example:F:v2']);
    expect(model.functions.get('com.example:F:v2')!.opsetImports).toEqual(new Map([['ai.onnx', 17]]));
  });

  it('nodes: domains, omitted inputs and outputs, made-up names for unnamed nodes', () => {
    expect(g.nodes.map((n) => [n.name, n.domain, n.opType])).toEqual([
      ['Constant#0', 'ai.onnx', 'Constant'],
      ['branch', 'ai.onnx', 'If'],
      ['Custom#2', 'com.example', 'Custom'],
    ]);
    expect(custom.inputs).toEqual(['x', '', 'c']);
    expect(custom.outputs).toEqual(['o1', '']);
    expect(constant.attributes.get('value')).toEqual({
      type: 'tensor',
      value: { dtype: T.INT64, dims: [2], data: BigInt64Array.of(3n, 4n) },
    });
  });

  it('every attribute type, including untyped ones from old files', () => {
    const a = Object.fromEntries(custom.attributes);
    expect(a.i).toEqual({ type: 'int', value: 7 });
    expect(a.f).toEqual({ type: 'float', value: 0.5 });
    expect(a.s).toEqual({ type: 'string', value: 'héllo' });
    expect(a.is).toEqual({ type: 'ints', value: [1, -2] });
    expect(a.fs).toEqual({ type: 'floats', value: [0.25] });
    expect(a.ss).toEqual({ type: 'strings', value: ['a', 'b'] });
    expect(a.ts).toEqual({ type: 'tensors', value: [{ dtype: T.BOOL, dims: [1], data: Uint8Array.of(1) }] });
    expect(a.gs.type).toBe('graphs');
    expect((a.gs.value as GraphIR[])[0].nodes[0].name).toBe('Custom#2/gs[0]/Identity#0');
    expect(a.sp).toEqual({
      type: 'sparse_tensor',
      value: {
        dims: [2, 2],
        values: { dtype: T.INT32, dims: [2], data: Int32Array.of(5, 6), name: 'sp' },
        indices: { dtype: T.INT64, dims: [2], data: BigInt64Array.of(1n, 2n) },
      },
    });
    expect(a.tp).toEqual({ type: 'type_proto', value: { kind: 'tensor', elemType: T.FLOAT16, shape: [2, null] } });
    expect(a.untyped).toEqual({ type: 'int', value: 3 });
    expect(a.untyped_list).toEqual({ type: 'floats', value: [1, 2] });
  });

  it('subgraphs are decoded on their nodes', () => {
    const t = branch.attributes.get('then_branch')!;
    expect(t.type).toBe('graph');
    const sg = t.value as GraphIR;
    expect(sg.name).toBe('then');
    expect(sg.nodes.map((n) => [n.name, n.opType, n.inputs])).toEqual([['branch/then_branch/Identity#0', 'Identity', ['x']]]);
    expect((branch.attributes.get('else_branch')!.value as GraphIR).outputs).toEqual([
      { name: 'e', type: { kind: 'tensor', elemType: T.FLOAT } },
    ]);
  });

  it('value types: shapes with symbolic and unknown dims, sequences, optionals, maps, sparse', () => {
    const types = Object.fromEntries(g.inputs.map((i) => [i.name, i.type]));
    expect(types.x).toEqual({ kind: 'tensor', elemType: T.FLOAT, shape: ['batch', 3, null] });
    expect(types.cond).toEqual({ kind: 'tensor', elemType: T.BOOL, shape: [] });
    expect(types.rankless).toEqual({ kind: 'tensor', elemType: T.INT8 });
    expect(types.seq).toEqual({ kind: 'sequence', elem: { kind: 'tensor', elemType: T.FLOAT, shape: [null] } });
    expect(types.opt).toEqual({ kind: 'optional', elem: { kind: 'sequence', elem: { kind: 'tensor', elemType: T.INT64 } } });
    expect(types.map).toEqual({ kind: 'map', keyType: T.INT64, value: { kind: 'tensor', elemType: T.FLOAT } });
    expect(types.sparse).toEqual({ kind: 'sparse_tensor', elemType: T.FLOAT, shape: [4] });
    expect(types.untyped).toEqual({ kind: 'unknown' });
    expect(g.valueInfo.get('c')).toEqual({ name: 'c', type: { kind: 'tensor', elemType: T.INT64, shape: [2] } });
  });

  it('inputs with an initializer are kept and marked as overridable defaults', () => {
    expect(g.inputs.map((i) => i.name)).toContain('w');
    expect(g.inputsWithDefaults).toEqual(new Set(['w']));
    expect(g.initializers.get('w')!.data).toEqual(Float32Array.of(1, 2, 3, 4));
  });

  it('sparse initializers are kept and made dense', () => {
    const m = decodeModel(
      modelBytes({
        initializers: [tensor('d', T.FLOAT, [1], { floatData: [1] })],
        sparseInitializers: [sparse],
        outputs: [valueInfo('sp', T.INT32)],
      }),
    );
    expect(m.graph.sparseInitializers.get('sp')!.dims).toEqual([2, 2]);
    expect(m.graph.initializers.get('sp')).toEqual({ dtype: T.INT32, dims: [2, 2], data: Int32Array.of(0, 5, 6, 0), name: 'sp' });
  });
});

describe('inconsistent models', () => {
  const io = { inputs: [valueInfo('x')], outputs: [valueInfo('y')] };
  it('an initializer or an attribute given twice', () => {
    expectLoadError(
      () =>
        decodeModel(
          modelBytes({
            ...io,
            initializers: [tensor('w', T.FLOAT, [1], { floatData: [1] }), tensor('w', T.FLOAT, [1], { floatData: [2] })],
          }),
        ),
      /initializer 'w' is defined twice/,
    );
    expectLoadError(
      () => decodeModel(modelBytes({ ...io, nodes: [node('Relu', ['x'], ['y'], [attr.int('a', 1), attr.int('a', 2)], { name: 'r' })] })),
      /node 'r' \(Relu\): attribute 'a' is given twice/,
    );
  });
  it('bad tensors are named by where they are', () => {
    expectLoadError(
      () => decodeModel(modelBytes({ ...io, initializers: [tensor('w', T.FLOAT, [4], { floatData: [1] })] })),
      /^initializer 'w': float32 \[4\] has 1 entries in float_data, 4 expected/,
    );
    const bad = node('Constant', [], ['y'], [attr.tensor('value', tensor('', T.INT64, [3], { int64Data: [1n] }))], { name: 'k' });
    expectLoadError(
      () => decodeModel(modelBytes({ ...io, nodes: [bad] }), { modelPath: 'm/net.onnx' }),
      /^net\.onnx: attribute 'value' of node 'k' \(Constant\): int64 \[3\] has 1 entries in int64_data/,
    );
    expectLoadError(
      () => decodeModel(modelBytes({ ...io, nodes: [node('If', ['x'], ['y'], [attr.raw({ name: 'then_branch', type: A.GRAPH })])] })),
      /attribute 'then_branch' of node 'If#0' \(If\): its type is GRAPH but the value is missing/,
    );
    expectLoadError(
      () => decodeModel(modelBytes({ ...io, nodes: [node('Relu', ['x'], ['y'], [attr.raw({ name: 'empty' })])] })),
      /attribute 'empty' of node 'Relu#0' \(Relu\): it has neither a type nor a value/,
    );
  });
  it('functions defined twice', () => {
    const f = fn({ name: 'F', domain: 'd', inputs: ['a'], outputs: ['b'], nodes: [node('Relu', ['a'], ['b'])] });
    expectLoadError(() => decodeModel(modelBytes(io, { functions: [f, f] })), /function 'd:F' is defined twice/);
  });
  it('opset imports: implied by IR versions 1 and 2, required after', () => {
    expect(decodeModel(modelBytes(io, { opsets: [], irVersion: 2 })).opsetImports).toEqual(new Map([['ai.onnx', 1]]));
    expectLoadError(
      () => decodeModel(modelBytes(io, { opsets: [], irVersion: 8 })),
      /^truncated or invalid ONNX model: it has no opset_import, which IR version 8 requires/,
    );
  });
});
