// readTestCase and the onnx-data.proto values (SequenceProto, OptionalProto, MapProto) on case
// folders written here, so that every layout detail is pinned down: numeric ordering, names from
// the files or from the graph, containers, empty optionals, and errors that name the file.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { mapBytes, optionalBytes, sequenceBytes } from '../../test/helpers/data.js';
import {
  mapType,
  modelBytes,
  node,
  optionalType,
  sequenceType,
  serializeTensor,
  tensor,
  tensorType,
  valueInfo,
} from '../../test/helpers/proto.js';
import { decodeMapBytes, decodeOptionalBytes, decodeSequenceBytes, decodeValueBytes } from './data.js';
import { OnnxDataType as T } from './ir.js';
import { readTestCase } from './testcase.js';

const root = mkdtempSync(join(tmpdir(), 'onnx-testcase-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const tensorBytes = (name: string, values: number[]) => serializeTensor(tensor(name, T.FLOAT, [values.length], { floatData: values }));

const seqType = sequenceType(tensorType(T.FLOAT, [null]));
const optType = optionalType(tensorType(T.FLOAT, [null]));

describe('onnx-data.proto values', () => {
  it('sequences of tensors, nested sequences and empty sequences', () => {
    const s = decodeSequenceBytes(sequenceBytes('s', [tensorBytes('', [1, 2]), tensorBytes('', [3])]));
    expect(s).toEqual({
      kind: 'sequence',
      name: 's',
      elemType: T.FLOAT,
      items: [
        { dtype: T.FLOAT, dims: [2], data: Float32Array.of(1, 2) },
        { dtype: T.FLOAT, dims: [1], data: Float32Array.of(3) },
      ],
    });
    const nested = sequenceBytes('', [sequenceBytes('', [tensorBytes('', [4])])], 'sequence');
    expect(decodeSequenceBytes(nested).items[0]).toMatchObject({ kind: 'sequence', items: [{ data: Float32Array.of(4) }] });
    // An empty sequence takes its element type from the declaration.
    expect(decodeValueBytes(sequenceBytes('e', []), { kind: 'sequence', elem: { kind: 'tensor', elemType: T.INT64 } })).toEqual({
      kind: 'sequence',
      name: 'e',
      elemType: T.INT64,
      items: [],
    });
  });

  it('optionals: empty, holding a tensor, holding a sequence', () => {
    expect(decodeOptionalBytes(optionalBytes('o'))).toEqual({ kind: 'optional', name: 'o', value: null });
    expect(decodeOptionalBytes(optionalBytes('o', { kind: 'tensor', bytes: tensorBytes('', [5]) })).value).toEqual({
      dtype: T.FLOAT,
      dims: [1],
      data: Float32Array.of(5),
    });
    expect(
      decodeOptionalBytes(optionalBytes('o', { kind: 'sequence', bytes: sequenceBytes('', [tensorBytes('', [6])]) })).value,
    ).toMatchObject({ kind: 'sequence', items: [{ data: Float32Array.of(6) }] });
  });

  it('maps with int64 keys (packed or not) and string keys', () => {
    const values = sequenceBytes('', [tensorBytes('', [1]), tensorBytes('', [2])]);
    const packed = mapBytes('m', T.INT64, [-1n, 7n], values);
    const unpacked = mapBytes('', T.INT64, [-1n, 7n], values, { packed: false });
    expect(decodeMapBytes(packed)).toMatchObject({
      kind: 'map',
      name: 'm',
      keyType: T.INT64,
      keys: BigInt64Array.of(-1n, 7n),
      values: { items: [{ data: Float32Array.of(1) }, { data: Float32Array.of(2) }] },
    });
    expect(decodeMapBytes(unpacked).keys).toEqual(BigInt64Array.of(-1n, 7n));
    const strings = mapBytes('', T.STRING, ['a', 'b'], values);
    expect(decodeMapBytes(strings).keys).toEqual(['a', 'b']);
    const mismatch = mapBytes('', T.STRING, ['a'], values);
    expect(() => decodeMapBytes(mismatch)).toThrow("not a serialized MapProto: MapProto '' has 1 keys but 2 values");
  });

  it('truncated and malformed containers', () => {
    const s = sequenceBytes('s', [tensorBytes('', [1, 2, 3])]);
    expect(() => decodeSequenceBytes(s.subarray(0, s.length - 3))).toThrow(/^truncated SequenceProto/);
    expect(() => decodeOptionalBytes(Uint8Array.of(0x0a, 0x05, 0x08))).toThrow(/^truncated OptionalProto/);
    expect(() => decodeSequenceBytes(Uint8Array.of(0x08, 0x01))).toThrow(
      'not a serialized SequenceProto: SequenceProto field 1 has wire type 0, expected 2',
    );
  });
});

describe('readTestCase', () => {
  const dir = join(root, 'case');
  mkdirSync(dir);
  // Inputs: w has an initializer (a default), so files bind to x, s, o in that order.
  writeFileSync(
    join(dir, 'model.onnx'),
    modelBytes({
      inputs: [valueInfo('x', T.FLOAT, [null]), valueInfo('w', T.FLOAT, [1]), valueInfo('s', seqType), valueInfo('o', optType)],
      outputs: [valueInfo('y', T.FLOAT, [null]), valueInfo('z', seqType)],
      initializers: [tensor('w', T.FLOAT, [1], { floatData: [0] })],
      nodes: [node('Add', ['x', 'w'], ['y']), node('Identity', ['s'], ['z'])],
    }),
  );
  const set = (k: number, files: Record<string, Uint8Array>) => {
    mkdirSync(join(dir, `test_data_set_${k}`));
    for (const [f, b] of Object.entries(files)) writeFileSync(join(dir, `test_data_set_${k}`, f), b);
  };
  for (const k of [0, 2, 10]) {
    set(k, {
      'input_0.pb': tensorBytes(k === 0 ? 'x' : '', [k]),
      'input_1.pb': sequenceBytes('', [tensorBytes('', [k, k])]),
      'input_2.pb': optionalBytes('o', k === 2 ? { kind: 'tensor', bytes: tensorBytes('', [1]) } : undefined),
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
    const mapOf = mapType(T.INT64, tensorType(T.FLOAT));
    writeFileSync(join(mapCase, 'model.onnx'), modelBytes({ inputs: [valueInfo('m', mapOf)], outputs: [valueInfo('m', mapOf)] }));
    const map = mapBytes('', T.INT64, [1n], sequenceBytes('', [tensorBytes('', [1])]), { packed: false });
    writeFileSync(join(mapCase, 'test_data_set_0', 'input_0.pb'), map);
    const [v] = readTestCase(mapCase).datasets[0].inputs;
    expect(v).toMatchObject({
      kind: 'unsupported',
      name: 'm',
      why: 'map test data (MapProto): execution has no map values',
      value: { kind: 'map', keys: BigInt64Array.of(1n) },
    });
  });
});
