// readTestCase and the onnx-data.proto values (SequenceProto, OptionalProto, MapProto) on case
// folders written here, so that every layout detail is pinned down: numeric ordering, names from
// the files or from the graph, containers, empty optionals, and errors that name the file.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create, toBinary } from '@bufbuild/protobuf';
import { BinaryWriter, WireType } from '@bufbuild/protobuf/wire';
import { TensorProtoSchema, TypeProtoSchema } from 'onnx-buf';
import { afterAll, describe, expect, it } from 'vitest';
import { decodeMapBytes, decodeOptionalBytes, decodeSequenceBytes, decodeValueBytes } from './data.js';
import { OnnxDataType as T } from './ir.js';
import { readTestCase } from './testcase.js';
import { modelBytes, node, tensor, tensorType, valueInfo } from './testing/builders.js';

const root = mkdtempSync(join(tmpdir(), 'onnx-testcase-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const tensorBytes = (name: string, values: number[]) => toBinary(TensorProtoSchema, tensor(name, T.FLOAT, [values.length], { floatData: values }));
const LD = WireType.LengthDelimited;

function sequenceBytes(name: string, items: Uint8Array[], elemType = 1): Uint8Array {
  const w = new BinaryWriter();
  if (name) w.tag(1, LD).string(name);
  w.tag(2, WireType.Varint).int32(elemType);
  for (const t of items) w.tag(3, LD).bytes(t);
  return w.finish();
}
function optionalBytes(name: string, value?: { field: 3 | 5; bytes: Uint8Array }): Uint8Array {
  const w = new BinaryWriter().tag(1, LD).string(name).tag(2, WireType.Varint).int32(value ? (value.field === 3 ? 1 : 3) : 0);
  if (value) w.tag(value.field, LD).bytes(value.bytes);
  return w.finish();
}

const seqType = create(TypeProtoSchema, { value: { case: 'sequenceType', value: { elemType: tensorType(T.FLOAT, [null]) } } });
const optType = create(TypeProtoSchema, { value: { case: 'optionalType', value: { elemType: tensorType(T.FLOAT, [null]) } } });

describe('onnx-data.proto values', () => {
  it('sequences of tensors, nested sequences and empty sequences', () => {
    const s = decodeSequenceBytes(sequenceBytes('s', [tensorBytes('', [1, 2]), tensorBytes('', [3])]));
    expect(s).toEqual({ kind: 'sequence', name: 's', elemType: T.FLOAT, items: [{ dtype: T.FLOAT, dims: [2], data: Float32Array.of(1, 2) }, { dtype: T.FLOAT, dims: [1], data: Float32Array.of(3) }] });
    const nested = new BinaryWriter().tag(2, WireType.Varint).int32(3).tag(5, LD).bytes(sequenceBytes('', [tensorBytes('', [4])])).finish();
    expect(decodeSequenceBytes(nested).items[0]).toMatchObject({ kind: 'sequence', items: [{ data: Float32Array.of(4) }] });
    // An empty sequence takes its element type from the declaration.
    expect(decodeValueBytes(sequenceBytes('e', []), { kind: 'sequence', elem: { kind: 'tensor', elemType: T.INT64 } })).toEqual({ kind: 'sequence', name: 'e', elemType: T.INT64, items: [] });
  });

  it('optionals: empty, holding a tensor, holding a sequence', () => {
    expect(decodeOptionalBytes(optionalBytes('o'))).toEqual({ kind: 'optional', name: 'o', value: null });
    expect(decodeOptionalBytes(optionalBytes('o', { field: 3, bytes: tensorBytes('', [5]) })).value).toEqual({ dtype: T.FLOAT, dims: [1], data: Float32Array.of(5) });
    expect(decodeOptionalBytes(optionalBytes('o', { field: 5, bytes: sequenceBytes('', [tensorBytes('', [6])]) })).value).toMatchObject({ kind: 'sequence', items: [{ data: Float32Array.of(6) }] });
  });

  it('maps with int64 keys (packed or not) and string keys', () => {
    const values = sequenceBytes('', [tensorBytes('', [1]), tensorBytes('', [2])]);
    const packed = new BinaryWriter().tag(1, LD).string('m').tag(2, WireType.Varint).int32(T.INT64).tag(3, LD).bytes(new BinaryWriter().int64(-1).int64(7).finish()).tag(5, LD).bytes(values).finish();
    const unpacked = new BinaryWriter().tag(2, WireType.Varint).int32(T.INT64).tag(3, WireType.Varint).int64(-1).tag(3, WireType.Varint).int64(7).tag(5, LD).bytes(values).finish();
    expect(decodeMapBytes(packed)).toMatchObject({ kind: 'map', name: 'm', keyType: T.INT64, keys: BigInt64Array.of(-1n, 7n), values: { items: [{ data: Float32Array.of(1) }, { data: Float32Array.of(2) }] } });
    expect(decodeMapBytes(unpacked).keys).toEqual(BigInt64Array.of(-1n, 7n));
    const strings = new BinaryWriter().tag(2, WireType.Varint).int32(T.STRING).tag(4, LD).bytes(new TextEncoder().encode('a')).tag(4, LD).bytes(new TextEncoder().encode('b')).tag(5, LD).bytes(values).finish();
    expect(decodeMapBytes(strings).keys).toEqual(['a', 'b']);
    const mismatch = new BinaryWriter().tag(2, WireType.Varint).int32(T.STRING).tag(4, LD).bytes(new TextEncoder().encode('a')).tag(5, LD).bytes(values).finish();
    expect(() => decodeMapBytes(mismatch)).toThrow('not a serialized MapProto: MapProto \'\' has 1 keys but 2 values');
  });

  it('truncated and malformed containers', () => {
    const s = sequenceBytes('s', [tensorBytes('', [1, 2, 3])]);
    expect(() => decodeSequenceBytes(s.subarray(0, s.length - 3))).toThrow(/^truncated SequenceProto/);
    expect(() => decodeOptionalBytes(Uint8Array.of(0x0a, 0x05, 0x08))).toThrow(/^truncated OptionalProto/);
    expect(() => decodeSequenceBytes(Uint8Array.of(0x08, 0x01))).toThrow('not a serialized SequenceProto: SequenceProto field 1 has wire type 0, expected 2');
  });
});

describe('readTestCase', () => {
  const dir = join(root, 'case');
  mkdirSync(dir);
  // Inputs: w has an initializer (a default), so files bind to x, s, o in that order.
  writeFileSync(join(dir, 'model.onnx'), modelBytes({
    inputs: [valueInfo('x', T.FLOAT, [null]), valueInfo('w', T.FLOAT, [1]), valueInfo('s', seqType), valueInfo('o', optType)],
    outputs: [valueInfo('y', T.FLOAT, [null]), valueInfo('z', seqType)],
    initializers: [tensor('w', T.FLOAT, [1], { floatData: [0] })],
    nodes: [node('Add', ['x', 'w'], ['y']), node('Identity', ['s'], ['z'])],
  }));
  const set = (k: number, files: Record<string, Uint8Array>) => {
    mkdirSync(join(dir, `test_data_set_${k}`));
    for (const [f, b] of Object.entries(files)) writeFileSync(join(dir, `test_data_set_${k}`, f), b);
  };
  for (const k of [0, 2, 10]) {
    set(k, {
      'input_0.pb': tensorBytes(k === 0 ? 'x' : '', [k]),
      'input_1.pb': sequenceBytes('', [tensorBytes('', [k, k])]),
      'input_2.pb': optionalBytes('o', k === 2 ? { field: 3, bytes: tensorBytes('', [1]) } : undefined),
      'output_0.pb': tensorBytes('y', [k]),
      'output_1.pb': sequenceBytes('z', [tensorBytes('', [k, k])]),
    });
  }
  writeFileSync(join(dir, 'test_data_set_3'), 'a file, not a data set');

  it('reads data sets in numeric order, with names from the files or the graph', () => {
    const tc = readTestCase(dir);
    expect(tc.name).toBe('case');
    expect(tc.model.graph.inputsWithDefaults).toEqual(new Set(['w']));
    expect(tc.datasets.map((d) => d.name)).toEqual(['test_data_set_0', 'test_data_set_2', 'test_data_set_10']);
    const [d0, d2, d10] = tc.datasets;
    expect(d0.inputs.map((v) => v.name)).toEqual(['x', 's', 'o']);
    expect(d10.inputs[0]).toEqual({ dtype: T.FLOAT, dims: [1], data: Float32Array.of(10), name: 'x' });
    expect(d10.inputs[1]).toMatchObject({ kind: 'sequence', name: 's', elemType: T.FLOAT, items: [{ data: Float32Array.of(10, 10) }] });
    expect(d0.inputs[2]).toEqual({ kind: 'optional', name: 'o', value: null });
    expect(d2.inputs[2]).toMatchObject({ kind: 'optional', value: { data: Float32Array.of(1) } });
    expect(d2.outputs.map((v) => v.name)).toEqual(['y', 'z']);
  });

  it('orders input_10 after input_9 and names the file of a decoding error', () => {
    const many = join(root, 'many');
    mkdirSync(join(many, 'test_data_set_0'), { recursive: true });
    const inputs = Array.from({ length: 11 }, (_, i) => valueInfo(`in${i}`, T.FLOAT, [1]));
    writeFileSync(join(many, 'model.onnx'), modelBytes({ inputs, outputs: [valueInfo('in0')] }));
    for (let i = 0; i < 11; i++) writeFileSync(join(many, 'test_data_set_0', `input_${i}.pb`), tensorBytes('', [i]));
    const tc = readTestCase(many);
    expect(tc.datasets[0].inputs.map((v) => v.name)).toEqual(inputs.map((i) => i.name));
    expect(tc.datasets[0].inputs.map((v) => ('data' in v ? v.data[0] : -1))).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    writeFileSync(join(many, 'test_data_set_0', 'output_0.pb'), tensorBytes('', [1, 2]).subarray(0, 5));
    expect(() => readTestCase(many)).toThrow(/^test_data_set_0\/output_0\.pb: truncated serialized TensorProto/);
    expect(() => readTestCase(join(root, 'nowhere'))).toThrow('no model.onnx in this folder');
  });

  it('tags map test data as unsupported, keeping the decoded value', () => {
    const mapCase = join(root, 'map');
    mkdirSync(join(mapCase, 'test_data_set_0'), { recursive: true });
    const mapType = create(TypeProtoSchema, { value: { case: 'mapType', value: { keyType: T.INT64, valueType: tensorType(T.FLOAT) } } });
    writeFileSync(join(mapCase, 'model.onnx'), modelBytes({ inputs: [valueInfo('m', mapType)], outputs: [valueInfo('m', mapType)] }));
    const map = new BinaryWriter().tag(2, WireType.Varint).int32(T.INT64).tag(3, WireType.Varint).int64(1).tag(5, LD).bytes(sequenceBytes('', [tensorBytes('', [1])])).finish();
    writeFileSync(join(mapCase, 'test_data_set_0', 'input_0.pb'), map);
    const [v] = readTestCase(mapCase).datasets[0].inputs;
    expect(v).toMatchObject({ kind: 'unsupported', name: 'm', why: 'map test data (MapProto): execution has no map values', value: { kind: 'map', keys: BigInt64Array.of(1n) } });
  });
});
