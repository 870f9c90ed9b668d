// Values of onnx-data.proto (SequenceProto, MapProto, OptionalProto): the test-data files of
// sequence, map and optional inputs and outputs. ./proto.ts reads onnx.proto's messages; these three
// small messages are read with the same wire reader as onnx.proto's; their tensors go through TensorProto.
import { OnnxLoadError, messageOf } from '../errors.js';
import { OnnxDataType, type HostTensor, type SparseTensorIR, type TypeIR } from './ir.js';
import { ProtoReader, Wire as WireType, decodeSparseTensorProto, decodeTensorProto } from './proto.js';
import { decodeSparseTensor, decodeTensor, decodeTensorBytes } from './tensor.js';

export interface SequenceValue {
  kind: 'sequence';
  name?: string;
  /** The element type of the tensors it holds, where known (0 otherwise). */
  elemType: OnnxDataType;
  items: DataValue[];
}
export interface OptionalValue {
  kind: 'optional';
  name?: string;
  /** null: the optional is empty. */
  value: DataValue | null;
}
export interface MapValue {
  kind: 'map';
  name?: string;
  keyType: OnnxDataType;
  keys: BigInt64Array | string[];
  values: SequenceValue;
}
export interface SparseValue {
  kind: 'sparse_tensor';
  name?: string;
  value: SparseTensorIR;
}

/** A test-data value: a tensor (HostTensor has no `kind`), or a tagged sequence, optional, map or sparse tensor. */
export type DataValue = HostTensor | SequenceValue | OptionalValue | MapValue | SparseValue;

export const isHostTensor = (v: DataValue): v is HostTensor => !('kind' in v);

const utf8 = new TextDecoder();
// SequenceProto.DataType / OptionalProto.DataType.
const ELEM = { UNDEFINED: 0, TENSOR: 1, SPARSE_TENSOR: 2, SEQUENCE: 3, MAP: 4, OPTIONAL: 5 } as const;

/** Calls `field` for each field of the message in `bytes`. */
function readFields(bytes: Uint8Array, field: (no: number, wt: number, r: ProtoReader) => boolean): void {
  const r = new ProtoReader(bytes);
  r.fields((no, wt) => field(no, wt, r));
}

function expectWire(got: number, want: number, what: string, no: number): void {
  if (got !== want) throw new Error(`${what} field ${no} has wire type ${got}, expected ${want}`);
}

const tensorOf = (b: Uint8Array): HostTensor => decodeTensor(decodeTensorProto(b));
const sparseOf = (b: Uint8Array): SparseValue => {
  const value = decodeSparseTensor(decodeSparseTensorProto(b));
  return { kind: 'sparse_tensor', value, ...(value.values.name ? { name: value.values.name } : {}) };
};

function readSequence(bytes: Uint8Array): SequenceValue {
  let name = '';
  let declared = 0;
  const items: DataValue[] = [];
  readFields(bytes, (no, wt, r) => {
    if (no === 1) {
      expectWire(wt, WireType.LengthDelimited, 'SequenceProto', no);
      name = r.string();
    } else if (no === 2) {
      expectWire(wt, WireType.Varint, 'SequenceProto', no);
      declared = r.int32();
    } else if (no >= 3 && no <= 7) {
      expectWire(wt, WireType.LengthDelimited, 'SequenceProto', no);
      const b = r.bytes();
      items.push(no === 3 ? tensorOf(b) : no === 4 ? sparseOf(b) : no === 5 ? readSequence(b) : no === 6 ? readMap(b) : readOptional(b));
    } else return false;
    return true;
  });
  if (declared !== ELEM.UNDEFINED && declared !== ELEM.TENSOR && items.some(isHostTensor))
    throw new Error(`SequenceProto '${name}' declares elem_type ${declared} but holds tensors`);
  const first = items.find(isHostTensor);
  return { kind: 'sequence', ...(name ? { name } : {}), elemType: first?.dtype ?? OnnxDataType.UNDEFINED, items };
}

function readOptional(bytes: Uint8Array): OptionalValue {
  let name = '';
  let value: DataValue | null = null;
  readFields(bytes, (no, wt, r) => {
    if (no === 1) {
      expectWire(wt, WireType.LengthDelimited, 'OptionalProto', no);
      name = r.string();
    } else if (no === 2) {
      expectWire(wt, WireType.Varint, 'OptionalProto', no);
      r.int32();
    } else if (no >= 3 && no <= 7) {
      expectWire(wt, WireType.LengthDelimited, 'OptionalProto', no);
      const b = r.bytes();
      value = no === 3 ? tensorOf(b) : no === 4 ? sparseOf(b) : no === 5 ? readSequence(b) : no === 6 ? readMap(b) : readOptional(b);
    } else return false;
    return true;
  });
  return { kind: 'optional', ...(name ? { name } : {}), value };
}

function readMap(bytes: Uint8Array): MapValue {
  let name = '';
  let keyType = 0;
  const intKeys: bigint[] = [];
  const strKeys: string[] = [];
  let values: SequenceValue = { kind: 'sequence', elemType: OnnxDataType.UNDEFINED, items: [] };
  readFields(bytes, (no, wt, r) => {
    if (no === 1) {
      expectWire(wt, WireType.LengthDelimited, 'MapProto', no);
      name = r.string();
    } else if (no === 2) {
      expectWire(wt, WireType.Varint, 'MapProto', no);
      keyType = r.int32();
    } else if (no === 3) {
      // Repeated int64: packed or not, depending on the writer.
      if (wt === WireType.LengthDelimited) {
        const p = new ProtoReader(r.bytes());
        while (p.pos < p.end) intKeys.push(p.int64());
      } else {
        expectWire(wt, WireType.Varint, 'MapProto', no);
        intKeys.push(r.int64());
      }
    } else if (no === 4) {
      expectWire(wt, WireType.LengthDelimited, 'MapProto', no);
      strKeys.push(utf8.decode(r.bytes()));
    } else if (no === 5) {
      expectWire(wt, WireType.LengthDelimited, 'MapProto', no);
      values = readSequence(r.bytes());
    } else return false;
    return true;
  });
  const keys = keyType === OnnxDataType.STRING ? strKeys : BigInt64Array.from(intKeys);
  if (keys.length !== values.items.length) throw new Error(`MapProto '${name}' has ${keys.length} keys but ${values.items.length} values`);
  return { kind: 'map', ...(name ? { name } : {}), keyType, keys, values };
}

function wrap<T>(what: string, bytes: Uint8Array, f: () => T): T {
  try {
    return f();
  } catch (e) {
    if (e instanceof OnnxLoadError) throw e;
    const msg = messageOf(e);
    if (/premature EOF/i.test(msg))
      throw new OnnxLoadError(`truncated ${what}: the data ends inside a field (${bytes.length} bytes)`, { cause: e });
    throw new OnnxLoadError(`not a serialized ${what}: ${msg}`, { cause: e });
  }
}

export const decodeSequenceBytes = (bytes: Uint8Array): SequenceValue => wrap('SequenceProto', bytes, () => readSequence(bytes));
export const decodeOptionalBytes = (bytes: Uint8Array): OptionalValue => wrap('OptionalProto', bytes, () => readOptional(bytes));
export const decodeMapBytes = (bytes: Uint8Array): MapValue => wrap('MapProto', bytes, () => readMap(bytes));

/**
 * Decodes a test-data file as the message its declared type calls for: SequenceProto for a
 * sequence, OptionalProto for an optional, MapProto for a map, SparseTensorProto for a sparse
 * tensor, TensorProto otherwise (and when the type is not known).
 */
export function decodeValueBytes(bytes: Uint8Array, type?: TypeIR): DataValue {
  switch (type?.kind) {
    case 'sequence': {
      const s = decodeSequenceBytes(bytes);
      // An empty sequence says nothing about its element type; the declaration does.
      if (!s.elemType && type.elem?.kind === 'tensor') s.elemType = type.elem.elemType;
      return s;
    }
    case 'optional':
      return decodeOptionalBytes(bytes);
    case 'map':
      return decodeMapBytes(bytes);
    case 'sparse_tensor':
      return wrap('SparseTensorProto', bytes, () => sparseOf(bytes));
    default:
      return decodeTensorBytes(bytes);
  }
}
