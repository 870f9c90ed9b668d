// The package's own onnx.proto codec against protobuf-es with onnx.proto's generated schema (an
// independent implementation): every model of the ONNX node suite and the shared models read by
// both, and written back by ours, give equal messages; edge values of each scalar kind; and
// malformed bytes give the reader's errors, never a wrong message or a fault.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { create, equals, fromBinary, toBinary, toJson, type Message } from '@bufbuild/protobuf';
import {
  AttributeProtoSchema,
  GraphProtoSchema,
  ModelProtoSchema,
  NodeProtoSchema,
  TensorProtoSchema,
  TypeProtoSchema,
  ValueInfoProtoSchema,
  type ModelProto as PbModel,
} from 'onnx-buf';
import { describe, expect, it } from 'vitest';
import {
  AttrType,
  MAX_DEPTH,
  ProtoError,
  ProtoReader,
  decodeModelProto,
  decodeTensorProto,
  encodeModelProto,
  encodeTensorProto,
  emptyTensor,
  type TensorProto,
} from './proto.js';

const shared = join(__dirname, '..', '..', '..', '..', '..', 'shared');
const nodeSuite = join(shared, 'onnx-node-tests', 'v1.22.0');

/**
 * What the codec keeps of a message read by protobuf-es: fields it does not read (metadata of
 * nodes, graphs, tensors and value infos; quantization annotations; training info; device
 * configurations) are cleared.
 */
function keptOf(m: PbModel): PbModel {
  const out = create(ModelProtoSchema, m);
  const seen = new Set<unknown>();
  const walk = (x: unknown): void => {
    if (!x || typeof x !== 'object' || seen.has(x) || x instanceof Uint8Array) return;
    seen.add(x);
    const msg = x as Message & Record<string, unknown>;
    switch (msg.$typeName) {
      case 'onnx.NodeProto':
        msg.metadataProps = [];
        msg.deviceConfigurations = [];
        break;
      case 'onnx.GraphProto':
        msg.metadataProps = [];
        msg.quantizationAnnotation = [];
        break;
      case 'onnx.TensorProto':
      case 'onnx.ValueInfoProto':
      case 'onnx.FunctionProto':
        msg.metadataProps = [];
        break;
      case 'onnx.ModelProto':
        msg.trainingInfo = [];
        msg.configuration = [];
        break;
    }
    for (const v of Object.values(msg)) {
      if (Array.isArray(v)) v.forEach(walk);
      else walk(v);
    }
  };
  walk(out);
  return out;
}

/**
 * A message as JSON with the fields that hold their default value left out: proto2 keeps whether a
 * writer set a field to its default (an opset's domain ''), which ONNX gives no meaning and the
 * writer here does not reproduce. Presence where it matters (attributes) is tested on its own.
 */
function normal(x: unknown): unknown {
  if (Array.isArray(x)) return x.map(normal);
  if (x && typeof x === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(x)) {
      const n = normal(v);
      if (n === '' || n === 0 || n === '0' || n === false || (Array.isArray(n) && !n.length)) continue;
      if (n && typeof n === 'object' && !Array.isArray(n) && !Object.keys(n).length) continue;
      out[k] = n;
    }
    return out;
  }
  return x;
}

function roundTrip(bytes: Uint8Array): { ours: unknown; theirs: unknown } {
  const theirs = normal(toJson(ModelProtoSchema, keptOf(fromBinary(ModelProtoSchema, bytes))));
  const ours = normal(toJson(ModelProtoSchema, fromBinary(ModelProtoSchema, encodeModelProto(decodeModelProto(bytes)))));
  return { ours, theirs };
}

describe('onnx.proto codec against protobuf-es', () => {
  const cases = existsSync(nodeSuite) ? readdirSync(nodeSuite).filter((d) => existsSync(join(nodeSuite, d, 'model.onnx'))) : [];

  it('reads and writes back every model of the ONNX node suite as protobuf-es reads it', () => {
    expect(cases.length).toBeGreaterThan(1500);
    const differ: string[] = [];
    for (const c of cases) {
      const { ours, theirs } = roundTrip(readFileSync(join(nodeSuite, c, 'model.onnx')));
      try {
        expect(ours).toEqual(theirs);
      } catch {
        differ.push(c);
      }
    }
    expect(differ).toEqual([]);
  });

  it('reads the test-data tensors of the suite as protobuf-es does', () => {
    let n = 0;
    for (const c of cases.slice(0, 400)) {
      const dir = join(nodeSuite, c, 'test_data_set_0');
      if (!existsSync(dir)) continue;
      for (const f of readdirSync(dir)) {
        const bytes = readFileSync(join(dir, f));
        let theirs: ReturnType<typeof fromBinary<typeof TensorProtoSchema>>;
        try {
          theirs = fromBinary(TensorProtoSchema, bytes);
        } catch {
          continue; // a SequenceProto, MapProto or OptionalProto file
        }
        if (theirs.dataType === 0) continue;
        const back = fromBinary(TensorProtoSchema, encodeTensorProto(decodeTensorProto(bytes)));
        theirs.metadataProps = [];
        expect(equals(TensorProtoSchema, back, theirs), `${c}/${f}`).toBe(true);
        n++;
      }
    }
    expect(n).toBeGreaterThan(500);
  });

  it('reads the shared models (external data, large initializers, contrib domains)', () => {
    const dir = join(shared, 'models');
    const models = readdirSync(dir).filter((d) => existsSync(join(dir, d, 'model.onnx')));
    expect(models.length).toBeGreaterThanOrEqual(9);
    for (const m of models) {
      const { ours, theirs } = roundTrip(readFileSync(join(dir, m, 'model.onnx')));
      expect(ours, m).toEqual(theirs);
    }
  });

  it('keeps int64, int32, float and double edge values, packed and not', () => {
    const int64s = [0n, 1n, -1n, 127n, 128n, 2n ** 31n, -(2n ** 31n), 2n ** 53n + 1n, 2n ** 63n - 1n, -(2n ** 63n)];
    const int32s = [0, 1, -1, 2 ** 31 - 1, -(2 ** 31), 300];
    const floats = [0, -0, 1.5, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, Math.fround(3.4e38), Math.fround(1e-45)];
    const doubles = [0, -0, Math.PI, Number.MAX_VALUE, Number.MIN_VALUE, Number.NEGATIVE_INFINITY];
    const uint64s = [0n, 1n, 2n ** 64n - 1n, 2n ** 63n];
    const pb = create(TensorProtoSchema, {
      name: 'edge',
      dataType: 7,
      dims: int64s,
      int64Data: int64s,
      int32Data: int32s,
      floatData: floats,
      doubleData: doubles,
      uint64Data: uint64s,
      stringData: [new Uint8Array([0, 255]), new Uint8Array(0)],
      rawData: new Uint8Array(100).map((_, i) => i),
      externalData: [{ key: 'location', value: 'w.bin' }],
      dataLocation: 1,
    });
    const bytes = toBinary(TensorProtoSchema, pb);
    const ours = decodeTensorProto(bytes);
    expect(ours.dims).toEqual(int64s);
    expect(ours.int64Data).toEqual(int64s);
    expect(ours.int32Data).toEqual(int32s);
    expect(ours.floatData).toEqual(floats);
    expect(ours.doubleData).toEqual(doubles);
    expect(ours.uint64Data).toEqual(uint64s);
    expect(equals(TensorProtoSchema, fromBinary(TensorProtoSchema, encodeTensorProto(ours)), pb)).toBe(true);
    // Unpacked repeated fields (proto2's default encoding, which older writers use).
    const unpacked: number[] = [];
    for (const v of [5, 6, 7]) unpacked.push(0x28, v); // field 5 (int32_data), wire type 0
    expect(decodeTensorProto(Uint8Array.from(unpacked)).int32Data).toEqual([5, 6, 7]);
    const floatsUnpacked = [0x25, 0, 0, 0xc0, 0x3f]; // field 4 (float_data), wire type 5: 1.5
    expect(decodeTensorProto(Uint8Array.from(floatsUnpacked)).floatData).toEqual([1.5]);
  });

  it('tells an attribute set to its default from one not set (proto2 presence)', () => {
    const a = create(AttributeProtoSchema, { name: 'alpha', f: 0 });
    const n = create(NodeProtoSchema, {
      opType: 'Elu',
      input: ['x'],
      output: ['y'],
      attribute: [a, create(AttributeProtoSchema, { name: 'none' })],
    });
    const g = create(GraphProtoSchema, {
      node: [n],
      input: [create(ValueInfoProtoSchema, { name: 'x', type: create(TypeProtoSchema, {}) })],
    });
    const m = decodeModelProto(toBinary(ModelProtoSchema, create(ModelProtoSchema, { irVersion: 8n, graph: g })));
    const [alpha, none] = m.graph!.node[0].attribute;
    expect(alpha.f).toBe(0);
    expect(alpha.type).toBe(AttrType.UNDEFINED);
    expect(none.f).toBeUndefined();
    expect(none.i).toBeUndefined();
    expect(m.graph!.input[0].type!.value.case).toBeUndefined();
  });

  it('reads strings of every length and script as written', () => {
    const names = [
      '',
      'x',
      'a'.repeat(63),
      'b'.repeat(64),
      'c'.repeat(65),
      'd'.repeat(300),
      'é',
      `${'a'.repeat(62)}é`,
      `é${'a'.repeat(70)}`,
      '名前/ノード:0',
      'emoji 🙂 name',
      '\u0000\u007f',
    ];
    const n = create(NodeProtoSchema, { opType: 'Identity', input: names, output: names.map((x) => `${x}!`), name: names.join('|') });
    const bytes = toBinary(ModelProtoSchema, create(ModelProtoSchema, { irVersion: 8n, graph: create(GraphProtoSchema, { node: [n] }) }));
    const node = decodeModelProto(bytes).graph!.node[0];
    expect(node.input).toEqual(names);
    expect(node.output).toEqual(names.map((x) => `${x}!`));
    expect(node.name).toBe(names.join('|'));
    // Invalid UTF-8 reads as TextDecoder reads it (U+FFFD), short or long.
    for (const len of [3, 100]) {
      const bad = [0x12, len, ...Array(len - 1).fill(0x61), 0xff];
      expect(decodeModelProto(Uint8Array.from(bad)).producerName).toBe(`${'a'.repeat(len - 1)}\ufffd`);
    }
  });

  it('reads a Node Buffer through plain Uint8Array views of its memory', () => {
    const raw = new Uint8Array(64).map((_, i) => i);
    const encoded = encodeTensorProto({ ...emptyTensor(), dataType: 2, dims: [64n], rawData: raw, name: 'w' });
    const buf = Buffer.from(encoded);
    const back = decodeTensorProto(buf);
    expect(back.rawData.constructor).toBe(Uint8Array);
    expect(back.rawData.buffer).toBe(buf.buffer);
    expect(back.rawData).toEqual(raw);
    expect(back.name).toBe('w');
  });

  it('skips fields it does not read, groups included', () => {
    // producer_name 'p', then unknown field 99 as a varint, a fixed64, a group with a nested field, a fixed32.
    const bytes = Uint8Array.from([
      0x12, 0x01, 0x70, 0x98, 0x06, 0x05, 0x99, 0x06, 1, 2, 3, 4, 5, 6, 7, 8, 0x9b, 0x06, 0x08, 0x01, 0x9c, 0x06, 0x9d, 0x06, 1, 2, 3, 4,
    ]);
    expect(decodeModelProto(bytes).producerName).toBe('p');
  });
});

describe('onnx.proto codec: malformed bytes', () => {
  const err = (bytes: number[]): string => {
    try {
      decodeModelProto(Uint8Array.from(bytes));
    } catch (e) {
      expect(e).toBeInstanceOf(ProtoError);
      return (e as Error).message;
    }
    throw new Error('decoded');
  };

  it('names what is wrong', () => {
    expect(err([0x12, 0x05, 0x41])).toMatch(/premature EOF/); // a string longer than what is left
    expect(err([0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01])).toMatch(/invalid varint/);
    expect(err([0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02])).toMatch(/invalid varint/); // past 64 bits
    expect(err([0x08])).toMatch(/premature EOF/);
    expect(err([0x00, 0x00])).toMatch(/illegal tag/);
    expect(err([0x0e])).toMatch(/illegal tag/); // wire type 6
    expect(err([0x0a, 0x00])).toMatch(/ModelProto.ir_version has wire type 2/);
    expect(err([0x9b, 0x06, 0x08, 0x01])).toMatch(/premature EOF/); // a group never closed
    expect(err([0x9c, 0x06])).toMatch(/end group/);
    // A length that claims more than 2^32 bytes.
    expect(err([0x3a, 0xff, 0xff, 0xff, 0xff, 0x7f])).toMatch(/premature EOF/);
  });

  it(`stops at ${MAX_DEPTH} nested messages`, () => {
    // TypeProto.sequence_type.elem_type... nested 200 deep, inside a value info of a graph.
    let type = Uint8Array.from([0x0a, 0x02, 0x08, 0x01]); // tensor_type { elem_type: 1 }
    for (let i = 0; i < 200; i++) {
      const seq = Uint8Array.from([0x0a, ...varint(type.length), ...type]); // Sequence { elem_type }
      type = Uint8Array.from([0x22, ...varint(seq.length), ...seq]); // TypeProto { sequence_type }
    }
    const vi = Uint8Array.from([0x0a, 0x01, 0x78, 0x12, ...varint(type.length), ...type]);
    const g = Uint8Array.from([0x5a, ...varint(vi.length), ...vi]);
    const m = Uint8Array.from([0x08, 0x08, 0x3a, ...varint(g.length), ...g]);
    expect(() => decodeModelProto(m)).toThrow(/maximum recursion depth/);
  });

  it('never reads past a sub-message: a field that runs over its end is an error', () => {
    // graph { name: 'abc' } where the graph says 2 bytes but the name says 3.
    expect(err([0x3a, 0x02, 0x12, 0x03, 0x61, 0x62, 0x63])).toMatch(/premature EOF/);
  });

  it('reads views of the input for bytes fields, and writes large ones without copying them first', () => {
    const raw = new Uint8Array(4096).map((_, i) => i & 0xff);
    const t: TensorProto = { ...emptyTensor(), dataType: 2, dims: [4096n], rawData: raw };
    const bytes = encodeTensorProto(t);
    const back = decodeTensorProto(bytes);
    expect(back.rawData.buffer).toBe(bytes.buffer);
    expect(back.rawData).toEqual(raw);
    const r = new ProtoReader(bytes);
    r.fields(() => false);
    expect(r.pos).toBe(bytes.length);
  });
});

function varint(n: number): number[] {
  const out: number[] = [];
  while (n >= 0x80) {
    out.push((n & 0x7f) | 0x80);
    n >>>= 7;
  }
  out.push(n);
  return out;
}
