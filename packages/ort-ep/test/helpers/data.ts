// onnx-data.proto values (SequenceProto, OptionalProto, MapProto) as the .pb files of ONNX test
// cases hold them. onnx-buf has no schemas for these messages, so they are written field by field
// with protobuf-es's BinaryWriter, from the field numbers of onnx-data.proto.
import { BinaryWriter, WireType } from '@bufbuild/protobuf/wire';

/** SequenceProto/OptionalProto.DataType: what the container holds. */
export const DATA_TYPE = { tensor: 1, sparseTensor: 2, sequence: 3, map: 4, optional: 5 } as const;
export type DataKind = keyof typeof DATA_TYPE;

const LD = WireType.LengthDelimited;
/** Both messages number their value fields 3 (tensor) .. 7 (optional), in DataType order. */
const valueField = (kind: DataKind) => DATA_TYPE[kind] + 2;
const STRING = 8;

/** A SequenceProto of serialized items of one kind (TensorProto bytes for 'tensor', ...). */
export function sequenceBytes(name: string, items: Uint8Array[], kind: DataKind = 'tensor'): Uint8Array {
  const w = new BinaryWriter();
  if (name) w.tag(1, LD).string(name);
  w.tag(2, WireType.Varint).int32(DATA_TYPE[kind]);
  for (const item of items) w.tag(valueField(kind), LD).bytes(item);
  return w.finish();
}

/** An OptionalProto: empty (elem_type UNDEFINED) or holding one serialized value. */
export function optionalBytes(name: string, value?: { kind: DataKind; bytes: Uint8Array }): Uint8Array {
  const w = new BinaryWriter()
    .tag(1, LD)
    .string(name)
    .tag(2, WireType.Varint)
    .int32(value ? DATA_TYPE[value.kind] : 0);
  if (value) w.tag(valueField(value.kind), LD).bytes(value.bytes);
  return w.finish();
}

/**
 * A MapProto: keys of an integer element type (int64 varints, packed or one field each) or, for
 * key type string, string keys; `values` is a serialized SequenceProto. Key and value counts are
 * not checked, so that a mismatch can be tested.
 */
export function mapBytes(
  name: string,
  keyType: number,
  keys: (number | bigint)[] | string[],
  values: Uint8Array,
  opts: { packed?: boolean } = {},
): Uint8Array {
  const w = new BinaryWriter();
  if (name) w.tag(1, LD).string(name);
  w.tag(2, WireType.Varint).int32(keyType);
  if (keyType === STRING) for (const k of keys) w.tag(4, LD).bytes(new TextEncoder().encode(String(k)));
  else if (opts.packed ?? true) {
    const packed = new BinaryWriter();
    for (const k of keys) packed.int64(k as number | bigint);
    w.tag(3, LD).bytes(packed.finish());
  } else for (const k of keys) w.tag(3, WireType.Varint).int64(k as number | bigint);
  w.tag(5, LD).bytes(values);
  return w.finish();
}
