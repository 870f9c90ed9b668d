// onnx.proto's messages on the wire: a reader and a writer for the fields this package uses, the
// others skipped on reading. The objects have the field names (camelCase) and value types
// protobuf-es gives them (int64 as bigint, oneofs as { case, value }), so a message built with
// protobuf-es and onnx.proto's generated schema (the tests do) can be handed to the same code.
//
// Why not a generated codec: the package reads one schema, and a reflective codec must first
// build that schema from its descriptor. Loading protobuf-es and onnx.proto's descriptor was a
// third of the time `import '@mlx/ort-ep'` took (66 modules, and ~25 ms compiling the readers).
//
// Everything read is checked against the end of its message: a length past it, a varint longer
// than 10 bytes, a field number 0 or a group never closed is an error that says so (the wording
// of protobuf readers: "premature EOF", "invalid varint", "illegal tag"). Messages nest at most
// 100 deep, as in onnxruntime's reader.

/** The wire types of protobuf's encoding. */
export const Wire = { Varint: 0, Bit64: 1, LengthDelimited: 2, StartGroup: 3, EndGroup: 4, Bit32: 5 } as const;
export type Wire = (typeof Wire)[keyof typeof Wire];

/** How deep messages may nest (graph -> node -> attribute -> graph is three). */
export const MAX_DEPTH = 100;

const utf8d = new TextDecoder();
const utf8e = new TextEncoder();

export class ProtoError extends Error {}

/** A cursor over one message's bytes, [pos, end). */
export class ProtoReader {
  pos: number;
  readonly end: number;
  readonly buf: Uint8Array;
  private view: DataView | undefined;
  constructor(
    buf: Uint8Array,
    pos = 0,
    end = buf.length,
    readonly depth = 0,
  ) {
    // A Node Buffer (readFileSync's) is read through a plain Uint8Array over the same memory: the
    // views taken of it (every string, bytes field and tensor's raw data) are then plain views, where
    // Buffer's subarray makes a Buffer at several times the cost: a tenth of decoding a model.
    this.buf = buf.constructor === Uint8Array ? buf : new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
    this.pos = pos;
    this.end = end;
  }

  private dv(): DataView {
    return (this.view ??= new DataView(this.buf.buffer, this.buf.byteOffset, this.buf.byteLength));
  }

  /** A varint as a number; exact below 2^53 (enums, lengths, int32 fields: see int32()). */
  varint(): number {
    const b = this.buf;
    let pos = this.pos;
    let x = 0;
    let mul = 1;
    for (let i = 0; i < 10; i++) {
      if (pos >= this.end) throw new ProtoError('premature EOF');
      const c = b[pos++];
      x += (c & 0x7f) * mul;
      if (c < 0x80) {
        if (i === 9 && c > 1) throw new ProtoError('invalid varint');
        this.pos = pos;
        return x;
      }
      mul *= 128;
    }
    throw new ProtoError('invalid varint');
  }

  /** A varint as int64 (two's complement, as protobuf writes negative numbers). */
  int64(): bigint {
    const b = this.buf;
    let pos = this.pos;
    let lo = 0;
    let hi = 0;
    for (let i = 0; i < 10; i++) {
      if (pos >= this.end) throw new ProtoError('premature EOF');
      const c = b[pos++];
      const bits = c & 0x7f;
      if (i < 4) lo += bits * 2 ** (7 * i);
      else if (i === 4) {
        lo += (bits & 0x0f) * 2 ** 28;
        hi += bits >>> 4;
      } else hi += bits * 2 ** (7 * i - 32);
      if (c < 0x80) {
        if (i === 9 && c > 1) throw new ProtoError('invalid varint');
        this.pos = pos;
        hi = hi % 2 ** 32;
        if (hi === 0) return BigInt(lo);
        return BigInt.asIntN(64, (BigInt(hi) << 32n) | BigInt(lo));
      }
    }
    throw new ProtoError('invalid varint');
  }

  uint64(): bigint {
    return BigInt.asUintN(64, this.int64());
  }

  /** int32 (and enum) fields: the low 32 bits of the varint, signed. */
  int32(): number {
    // Negative int32s come as 10-byte varints; their low 32 bits are the value.
    const b = this.buf;
    let pos = this.pos;
    let lo = 0;
    for (let i = 0; i < 10; i++) {
      if (pos >= this.end) throw new ProtoError('premature EOF');
      const c = b[pos++];
      if (i < 5) lo |= (c & 0x7f) << (7 * i);
      if (c < 0x80) {
        if (i === 9 && c > 1) throw new ProtoError('invalid varint');
        this.pos = pos;
        return lo | 0;
      }
    }
    throw new ProtoError('invalid varint');
  }

  float(): number {
    if (this.pos + 4 > this.end) throw new ProtoError('premature EOF');
    const v = this.dv().getFloat32(this.pos, true);
    this.pos += 4;
    return v;
  }

  double(): number {
    if (this.pos + 8 > this.end) throw new ProtoError('premature EOF');
    const v = this.dv().getFloat64(this.pos, true);
    this.pos += 8;
    return v;
  }

  /** The extent of a length-delimited field: [start, end). */
  span(): [number, number] {
    const n = this.varint();
    const start = this.pos;
    if (n > this.end - start) throw new ProtoError('premature EOF');
    this.pos = start + n;
    return [start, start + n];
  }

  /** A bytes field: a view of the buffer, not a copy. */
  bytes(): Uint8Array {
    const [s, e] = this.span();
    return this.buf.subarray(s, e);
  }

  string(): string {
    const [s, e] = this.span();
    return utf8d.decode(this.buf.subarray(s, e));
  }

  /** A reader over an embedded message. */
  sub(): ProtoReader {
    const [s, e] = this.span();
    if (this.depth + 1 >= MAX_DEPTH) throw new ProtoError('maximum recursion depth reached');
    return new ProtoReader(this.buf, s, e, this.depth + 1);
  }

  /** The next tag: [field number, wire type]. */
  tag(): [number, number] {
    const t = this.varint();
    const no = Math.floor(t / 8);
    const wt = t % 8;
    if (no === 0 || wt > 5 || no > 0x1fffffff) throw new ProtoError(`illegal tag: field no ${no} wire type ${wt}`);
    return [no, wt];
  }

  skip(wt: number, no: number): void {
    switch (wt) {
      case Wire.Varint:
        this.varint();
        return;
      case Wire.Bit64:
        if (this.pos + 8 > this.end) throw new ProtoError('premature EOF');
        this.pos += 8;
        return;
      case Wire.Bit32:
        if (this.pos + 4 > this.end) throw new ProtoError('premature EOF');
        this.pos += 4;
        return;
      case Wire.LengthDelimited:
        this.span();
        return;
      case Wire.StartGroup: {
        if (this.depth + 1 >= MAX_DEPTH) throw new ProtoError('maximum recursion depth reached');
        for (;;) {
          if (this.pos >= this.end) throw new ProtoError('premature EOF');
          const [n, w] = this.tag();
          if (w === Wire.EndGroup) {
            if (n !== no) throw new ProtoError(`invalid end group tag: field no ${n}, expected ${no}`);
            return;
          }
          this.skip(w, n);
        }
      }
      default:
        throw new ProtoError(`cannot skip wire type ${wt} (field no ${no})`);
    }
  }

  /** Calls `field` for each field; a field it does not take (returns false) is skipped. */
  fields(field: (no: number, wt: number) => boolean): void {
    while (this.pos < this.end) {
      // tag(), without the pair it allocates (once per field of every message).
      const t = this.varint();
      const no = Math.floor(t / 8);
      const wt = t % 8;
      if (no === 0 || wt > 5 || no > 0x1fffffff) throw new ProtoError(`illegal tag: field no ${no} wire type ${wt}`);
      if (wt === Wire.EndGroup) throw new ProtoError(`unexpected end group tag (field no ${no})`);
      if (!field(no, wt)) this.skip(wt, no);
    }
  }

  /** A repeated scalar field, packed (one length-delimited run) or not (one value per tag). */
  repeated<T>(wt: number, scalar: Wire, read: (this: ProtoReader) => T, out: T[]): void {
    if (wt === Wire.LengthDelimited) {
      const [s, e] = this.span();
      const saved = this.pos;
      const inner = new ProtoReader(this.buf, s, e, this.depth);
      while (inner.pos < e) out.push(read.call(inner));
      this.pos = saved;
    } else if (wt === scalar) out.push(read.call(this));
    else throw new ProtoError(`a field of wire type ${scalar} came as ${wt}`);
  }
}

function want(wt: number, expected: number, what: string): void {
  if (wt !== expected) throw new ProtoError(`${what} has wire type ${wt}, expected ${expected}`);
}

// ---- Messages --------------------------------------------------------------------------------

export interface StringStringEntryProto {
  key: string;
  value: string;
}
export interface OperatorSetIdProto {
  domain: string;
  version: bigint;
}
export interface TensorProto {
  dims: bigint[];
  dataType: number;
  /** Present when the tensor is one segment of a larger one (not supported; the loader refuses it). */
  segment?: { begin: bigint; end: bigint };
  floatData: number[];
  int32Data: number[];
  stringData: Uint8Array[];
  int64Data: bigint[];
  name: string;
  docString: string;
  rawData: Uint8Array;
  externalData: StringStringEntryProto[];
  dataLocation: number;
  doubleData: number[];
  uint64Data: bigint[];
}
export interface SparseTensorProto {
  values?: TensorProto;
  indices?: TensorProto;
  dims: bigint[];
}
export interface TensorShapeProto_Dimension {
  value: { case: 'dimValue'; value: bigint } | { case: 'dimParam'; value: string } | { case: undefined; value?: undefined };
  denotation: string;
}
export interface TensorShapeProto {
  dim: TensorShapeProto_Dimension[];
}
export interface TypeProto_Tensor {
  elemType: number;
  shape?: TensorShapeProto;
}
export interface TypeProto_Sequence {
  elemType?: TypeProto;
}
export interface TypeProto_Map {
  keyType: number;
  valueType?: TypeProto;
}
export interface TypeProto_Optional {
  elemType?: TypeProto;
}
export interface TypeProto {
  value:
    | { case: 'tensorType'; value: TypeProto_Tensor }
    | { case: 'sequenceType'; value: TypeProto_Sequence }
    | { case: 'mapType'; value: TypeProto_Map }
    | { case: 'optionalType'; value: TypeProto_Optional }
    | { case: 'sparseTensorType'; value: TypeProto_Tensor }
    | { case: undefined; value?: undefined };
  denotation: string;
}
export interface ValueInfoProto {
  name: string;
  type?: TypeProto;
  docString: string;
}
/** AttributeProto.AttributeType. */
export const AttrType = {
  UNDEFINED: 0,
  FLOAT: 1,
  INT: 2,
  STRING: 3,
  TENSOR: 4,
  GRAPH: 5,
  FLOATS: 6,
  INTS: 7,
  STRINGS: 8,
  TENSORS: 9,
  GRAPHS: 10,
  SPARSE_TENSOR: 11,
  SPARSE_TENSORS: 12,
  TYPE_PROTO: 13,
  TYPE_PROTOS: 14,
} as const;
export const attrTypeName = (t: number): string =>
  [
    'UNDEFINED',
    'FLOAT',
    'INT',
    'STRING',
    'TENSOR',
    'GRAPH',
    'FLOATS',
    'INTS',
    'STRINGS',
    'TENSORS',
    'GRAPHS',
    'SPARSE_TENSOR',
    'SPARSE_TENSORS',
    'TYPE_PROTO',
    'TYPE_PROTOS',
  ][t] ?? String(t);
/** The singular values are undefined where the file does not set them (onnx.proto is proto2). */
export interface AttributeProto {
  name: string;
  refAttrName: string;
  docString: string;
  type: number;
  f?: number;
  i?: bigint;
  s?: Uint8Array;
  t?: TensorProto;
  g?: GraphProto;
  sparseTensor?: SparseTensorProto;
  tp?: TypeProto;
  floats: number[];
  ints: bigint[];
  strings: Uint8Array[];
  tensors: TensorProto[];
  graphs: GraphProto[];
  sparseTensors: SparseTensorProto[];
  typeProtos: TypeProto[];
}
export interface NodeProto {
  input: string[];
  output: string[];
  name: string;
  opType: string;
  domain: string;
  overload: string;
  attribute: AttributeProto[];
  docString: string;
}
export interface GraphProto {
  node: NodeProto[];
  name: string;
  initializer: TensorProto[];
  sparseInitializer: SparseTensorProto[];
  docString: string;
  input: ValueInfoProto[];
  output: ValueInfoProto[];
  valueInfo: ValueInfoProto[];
}
export interface FunctionProto {
  name: string;
  input: string[];
  output: string[];
  attribute: string[];
  attributeProto: AttributeProto[];
  node: NodeProto[];
  docString: string;
  opsetImport: OperatorSetIdProto[];
  domain: string;
  overload: string;
  valueInfo: ValueInfoProto[];
}
export interface ModelProto {
  irVersion: bigint;
  opsetImport: OperatorSetIdProto[];
  producerName: string;
  producerVersion: string;
  domain: string;
  modelVersion: bigint;
  docString: string;
  graph?: GraphProto;
  metadataProps: StringStringEntryProto[];
  functions: FunctionProto[];
}

// ---- Reading ---------------------------------------------------------------------------------

const LD = Wire.LengthDelimited;

function readEntry(r: ProtoReader): StringStringEntryProto {
  const m: StringStringEntryProto = { key: '', value: '' };
  r.fields((no, wt) => {
    if (no === 1) {
      want(wt, LD, 'StringStringEntryProto.key');
      m.key = r.string();
    } else if (no === 2) {
      want(wt, LD, 'StringStringEntryProto.value');
      m.value = r.string();
    } else return false;
    return true;
  });
  return m;
}

function readOpset(r: ProtoReader): OperatorSetIdProto {
  const m: OperatorSetIdProto = { domain: '', version: 0n };
  r.fields((no, wt) => {
    if (no === 1) {
      want(wt, LD, 'OperatorSetIdProto.domain');
      m.domain = r.string();
    } else if (no === 2) {
      want(wt, Wire.Varint, 'OperatorSetIdProto.version');
      m.version = r.int64();
    } else return false;
    return true;
  });
  return m;
}

export const emptyTensor = (): TensorProto => ({
  dims: [],
  dataType: 0,
  floatData: [],
  int32Data: [],
  stringData: [],
  int64Data: [],
  name: '',
  docString: '',
  rawData: new Uint8Array(0),
  externalData: [],
  dataLocation: 0,
  doubleData: [],
  uint64Data: [],
});

export function readTensor(r: ProtoReader, m: TensorProto = emptyTensor()): TensorProto {
  r.fields((no, wt) => {
    switch (no) {
      case 1:
        r.repeated(wt, Wire.Varint, r.int64, m.dims);
        return true;
      case 2:
        want(wt, Wire.Varint, 'TensorProto.data_type');
        m.dataType = r.int32();
        return true;
      case 3: {
        want(wt, LD, 'TensorProto.segment');
        const s = r.sub();
        const seg = (m.segment ??= { begin: 0n, end: 0n });
        s.fields((n, w) => {
          if (n === 1) {
            want(w, Wire.Varint, 'Segment.begin');
            seg.begin = s.int64();
          } else if (n === 2) {
            want(w, Wire.Varint, 'Segment.end');
            seg.end = s.int64();
          } else return false;
          return true;
        });
        return true;
      }
      case 4:
        r.repeated(wt, Wire.Bit32, r.float, m.floatData);
        return true;
      case 5:
        r.repeated(wt, Wire.Varint, r.int32, m.int32Data);
        return true;
      case 6:
        want(wt, LD, 'TensorProto.string_data');
        m.stringData.push(r.bytes());
        return true;
      case 7:
        r.repeated(wt, Wire.Varint, r.int64, m.int64Data);
        return true;
      case 8:
        want(wt, LD, 'TensorProto.name');
        m.name = r.string();
        return true;
      case 9:
        want(wt, LD, 'TensorProto.raw_data');
        m.rawData = r.bytes();
        return true;
      case 10:
        r.repeated(wt, Wire.Bit64, r.double, m.doubleData);
        return true;
      case 11:
        r.repeated(wt, Wire.Varint, r.uint64, m.uint64Data);
        return true;
      case 12:
        want(wt, LD, 'TensorProto.doc_string');
        m.docString = r.string();
        return true;
      case 13:
        want(wt, LD, 'TensorProto.external_data');
        m.externalData.push(readEntry(r.sub()));
        return true;
      case 14:
        want(wt, Wire.Varint, 'TensorProto.data_location');
        m.dataLocation = r.int32();
        return true;
      default:
        return false;
    }
  });
  return m;
}

export function readSparseTensor(r: ProtoReader, m: SparseTensorProto = { dims: [] }): SparseTensorProto {
  r.fields((no, wt) => {
    if (no === 1) {
      want(wt, LD, 'SparseTensorProto.values');
      m.values = readTensor(r.sub(), m.values);
    } else if (no === 2) {
      want(wt, LD, 'SparseTensorProto.indices');
      m.indices = readTensor(r.sub(), m.indices);
    } else if (no === 3) r.repeated(wt, Wire.Varint, r.int64, m.dims);
    else return false;
    return true;
  });
  return m;
}

function readShape(r: ProtoReader, m: TensorShapeProto = { dim: [] }): TensorShapeProto {
  r.fields((no, wt) => {
    if (no !== 1) return false;
    want(wt, LD, 'TensorShapeProto.dim');
    const s = r.sub();
    const d: TensorShapeProto_Dimension = { value: { case: undefined }, denotation: '' };
    s.fields((n, w) => {
      if (n === 1) {
        want(w, Wire.Varint, 'Dimension.dim_value');
        d.value = { case: 'dimValue', value: s.int64() };
      } else if (n === 2) {
        want(w, LD, 'Dimension.dim_param');
        d.value = { case: 'dimParam', value: s.string() };
      } else if (n === 3) {
        want(w, LD, 'Dimension.denotation');
        d.denotation = s.string();
      } else return false;
      return true;
    });
    m.dim.push(d);
    return true;
  });
  return m;
}

function readTensorType(r: ProtoReader, m: TypeProto_Tensor = { elemType: 0 }): TypeProto_Tensor {
  r.fields((no, wt) => {
    if (no === 1) {
      want(wt, Wire.Varint, 'TypeProto.Tensor.elem_type');
      m.elemType = r.int32();
    } else if (no === 2) {
      want(wt, LD, 'TypeProto.Tensor.shape');
      m.shape = readShape(r.sub(), m.shape);
    } else return false;
    return true;
  });
  return m;
}

/** TypeProto.Sequence and TypeProto.Optional: one field, elem_type. */
function readElemOf(r: ProtoReader, m: TypeProto_Sequence = {}): TypeProto_Sequence {
  r.fields((no, wt) => {
    if (no !== 1) return false;
    want(wt, LD, 'TypeProto elem_type');
    m.elemType = readType(r.sub(), m.elemType);
    return true;
  });
  return m;
}

function readMapType(r: ProtoReader, m: TypeProto_Map = { keyType: 0 }): TypeProto_Map {
  r.fields((no, wt) => {
    if (no === 1) {
      want(wt, Wire.Varint, 'TypeProto.Map.key_type');
      m.keyType = r.int32();
    } else if (no === 2) {
      want(wt, LD, 'TypeProto.Map.value_type');
      m.valueType = readType(r.sub(), m.valueType);
    } else return false;
    return true;
  });
  return m;
}

export function readType(r: ProtoReader, m: TypeProto = { value: { case: undefined }, denotation: '' }): TypeProto {
  r.fields((no, wt) => {
    // A oneof member given again merges into the one set; another member replaces it.
    const v = m.value;
    switch (no) {
      case 1:
        want(wt, LD, 'TypeProto.tensor_type');
        m.value = { case: 'tensorType', value: readTensorType(r.sub(), v.case === 'tensorType' ? v.value : undefined) };
        return true;
      case 4:
        want(wt, LD, 'TypeProto.sequence_type');
        m.value = { case: 'sequenceType', value: readElemOf(r.sub(), v.case === 'sequenceType' ? v.value : undefined) };
        return true;
      case 5:
        want(wt, LD, 'TypeProto.map_type');
        m.value = { case: 'mapType', value: readMapType(r.sub(), v.case === 'mapType' ? v.value : undefined) };
        return true;
      case 9:
        want(wt, LD, 'TypeProto.optional_type');
        m.value = { case: 'optionalType', value: readElemOf(r.sub(), v.case === 'optionalType' ? v.value : undefined) };
        return true;
      case 8:
        want(wt, LD, 'TypeProto.sparse_tensor_type');
        m.value = { case: 'sparseTensorType', value: readTensorType(r.sub(), v.case === 'sparseTensorType' ? v.value : undefined) };
        return true;
      case 6:
        want(wt, LD, 'TypeProto.denotation');
        m.denotation = r.string();
        return true;
      default:
        return false;
    }
  });
  return m;
}

function readValueInfo(r: ProtoReader): ValueInfoProto {
  const m: ValueInfoProto = { name: '', docString: '' };
  r.fields((no, wt) => {
    if (no === 1) {
      want(wt, LD, 'ValueInfoProto.name');
      m.name = r.string();
    } else if (no === 2) {
      want(wt, LD, 'ValueInfoProto.type');
      m.type = readType(r.sub(), m.type);
    } else if (no === 3) {
      want(wt, LD, 'ValueInfoProto.doc_string');
      m.docString = r.string();
    } else return false;
    return true;
  });
  return m;
}

function readAttribute(r: ProtoReader): AttributeProto {
  const m: AttributeProto = {
    name: '',
    refAttrName: '',
    docString: '',
    type: 0,
    floats: [],
    ints: [],
    strings: [],
    tensors: [],
    graphs: [],
    sparseTensors: [],
    typeProtos: [],
  };
  r.fields((no, wt) => {
    switch (no) {
      case 1:
        want(wt, LD, 'AttributeProto.name');
        m.name = r.string();
        return true;
      case 21:
        want(wt, LD, 'AttributeProto.ref_attr_name');
        m.refAttrName = r.string();
        return true;
      case 13:
        want(wt, LD, 'AttributeProto.doc_string');
        m.docString = r.string();
        return true;
      case 20:
        want(wt, Wire.Varint, 'AttributeProto.type');
        m.type = r.int32();
        return true;
      case 2:
        want(wt, Wire.Bit32, 'AttributeProto.f');
        m.f = r.float();
        return true;
      case 3:
        want(wt, Wire.Varint, 'AttributeProto.i');
        m.i = r.int64();
        return true;
      case 4:
        want(wt, LD, 'AttributeProto.s');
        m.s = r.bytes();
        return true;
      case 5:
        want(wt, LD, 'AttributeProto.t');
        m.t = readTensor(r.sub(), m.t);
        return true;
      case 6:
        want(wt, LD, 'AttributeProto.g');
        m.g = readGraph(r.sub(), m.g);
        return true;
      case 22:
        want(wt, LD, 'AttributeProto.sparse_tensor');
        m.sparseTensor = readSparseTensor(r.sub(), m.sparseTensor);
        return true;
      case 14:
        want(wt, LD, 'AttributeProto.tp');
        m.tp = readType(r.sub(), m.tp);
        return true;
      case 7:
        r.repeated(wt, Wire.Bit32, r.float, m.floats);
        return true;
      case 8:
        r.repeated(wt, Wire.Varint, r.int64, m.ints);
        return true;
      case 9:
        want(wt, LD, 'AttributeProto.strings');
        m.strings.push(r.bytes());
        return true;
      case 10:
        want(wt, LD, 'AttributeProto.tensors');
        m.tensors.push(readTensor(r.sub()));
        return true;
      case 11:
        want(wt, LD, 'AttributeProto.graphs');
        m.graphs.push(readGraph(r.sub()));
        return true;
      case 23:
        want(wt, LD, 'AttributeProto.sparse_tensors');
        m.sparseTensors.push(readSparseTensor(r.sub()));
        return true;
      case 15:
        want(wt, LD, 'AttributeProto.type_protos');
        m.typeProtos.push(readType(r.sub()));
        return true;
      default:
        return false;
    }
  });
  return m;
}

function readNode(r: ProtoReader): NodeProto {
  const m: NodeProto = { input: [], output: [], name: '', opType: '', domain: '', overload: '', attribute: [], docString: '' };
  r.fields((no, wt) => {
    switch (no) {
      case 1:
        want(wt, LD, 'NodeProto.input');
        m.input.push(r.string());
        return true;
      case 2:
        want(wt, LD, 'NodeProto.output');
        m.output.push(r.string());
        return true;
      case 3:
        want(wt, LD, 'NodeProto.name');
        m.name = r.string();
        return true;
      case 4:
        want(wt, LD, 'NodeProto.op_type');
        m.opType = r.string();
        return true;
      case 5:
        want(wt, LD, 'NodeProto.attribute');
        m.attribute.push(readAttribute(r.sub()));
        return true;
      case 6:
        want(wt, LD, 'NodeProto.doc_string');
        m.docString = r.string();
        return true;
      case 7:
        want(wt, LD, 'NodeProto.domain');
        m.domain = r.string();
        return true;
      case 8:
        want(wt, LD, 'NodeProto.overload');
        m.overload = r.string();
        return true;
      default:
        return false;
    }
  });
  return m;
}

export const emptyGraph = (): GraphProto => ({
  node: [],
  name: '',
  initializer: [],
  sparseInitializer: [],
  docString: '',
  input: [],
  output: [],
  valueInfo: [],
});

export function readGraph(r: ProtoReader, m: GraphProto = emptyGraph()): GraphProto {
  r.fields((no, wt) => {
    switch (no) {
      case 1:
        want(wt, LD, 'GraphProto.node');
        m.node.push(readNode(r.sub()));
        return true;
      case 2:
        want(wt, LD, 'GraphProto.name');
        m.name = r.string();
        return true;
      case 5:
        want(wt, LD, 'GraphProto.initializer');
        m.initializer.push(readTensor(r.sub()));
        return true;
      case 15:
        want(wt, LD, 'GraphProto.sparse_initializer');
        m.sparseInitializer.push(readSparseTensor(r.sub()));
        return true;
      case 10:
        want(wt, LD, 'GraphProto.doc_string');
        m.docString = r.string();
        return true;
      case 11:
        want(wt, LD, 'GraphProto.input');
        m.input.push(readValueInfo(r.sub()));
        return true;
      case 12:
        want(wt, LD, 'GraphProto.output');
        m.output.push(readValueInfo(r.sub()));
        return true;
      case 13:
        want(wt, LD, 'GraphProto.value_info');
        m.valueInfo.push(readValueInfo(r.sub()));
        return true;
      default:
        return false;
    }
  });
  return m;
}

function readFunction(r: ProtoReader): FunctionProto {
  const m: FunctionProto = {
    name: '',
    input: [],
    output: [],
    attribute: [],
    attributeProto: [],
    node: [],
    docString: '',
    opsetImport: [],
    domain: '',
    overload: '',
    valueInfo: [],
  };
  r.fields((no, wt) => {
    switch (no) {
      case 1:
        want(wt, LD, 'FunctionProto.name');
        m.name = r.string();
        return true;
      case 4:
        want(wt, LD, 'FunctionProto.input');
        m.input.push(r.string());
        return true;
      case 5:
        want(wt, LD, 'FunctionProto.output');
        m.output.push(r.string());
        return true;
      case 6:
        want(wt, LD, 'FunctionProto.attribute');
        m.attribute.push(r.string());
        return true;
      case 11:
        want(wt, LD, 'FunctionProto.attribute_proto');
        m.attributeProto.push(readAttribute(r.sub()));
        return true;
      case 7:
        want(wt, LD, 'FunctionProto.node');
        m.node.push(readNode(r.sub()));
        return true;
      case 8:
        want(wt, LD, 'FunctionProto.doc_string');
        m.docString = r.string();
        return true;
      case 9:
        want(wt, LD, 'FunctionProto.opset_import');
        m.opsetImport.push(readOpset(r.sub()));
        return true;
      case 10:
        want(wt, LD, 'FunctionProto.domain');
        m.domain = r.string();
        return true;
      case 13:
        want(wt, LD, 'FunctionProto.overload');
        m.overload = r.string();
        return true;
      case 12:
        want(wt, LD, 'FunctionProto.value_info');
        m.valueInfo.push(readValueInfo(r.sub()));
        return true;
      default:
        return false;
    }
  });
  return m;
}

export function readModel(r: ProtoReader): ModelProto {
  const m: ModelProto = {
    irVersion: 0n,
    opsetImport: [],
    producerName: '',
    producerVersion: '',
    domain: '',
    modelVersion: 0n,
    docString: '',
    metadataProps: [],
    functions: [],
  };
  r.fields((no, wt) => {
    switch (no) {
      case 1:
        want(wt, Wire.Varint, 'ModelProto.ir_version');
        m.irVersion = r.int64();
        return true;
      case 8:
        want(wt, LD, 'ModelProto.opset_import');
        m.opsetImport.push(readOpset(r.sub()));
        return true;
      case 2:
        want(wt, LD, 'ModelProto.producer_name');
        m.producerName = r.string();
        return true;
      case 3:
        want(wt, LD, 'ModelProto.producer_version');
        m.producerVersion = r.string();
        return true;
      case 4:
        want(wt, LD, 'ModelProto.domain');
        m.domain = r.string();
        return true;
      case 5:
        want(wt, Wire.Varint, 'ModelProto.model_version');
        m.modelVersion = r.int64();
        return true;
      case 6:
        want(wt, LD, 'ModelProto.doc_string');
        m.docString = r.string();
        return true;
      case 7:
        want(wt, LD, 'ModelProto.graph');
        m.graph = readGraph(r.sub(), m.graph);
        return true;
      case 14:
        want(wt, LD, 'ModelProto.metadata_props');
        m.metadataProps.push(readEntry(r.sub()));
        return true;
      case 25:
        want(wt, LD, 'ModelProto.functions');
        m.functions.push(readFunction(r.sub()));
        return true;
      default:
        return false;
    }
  });
  return m;
}

/** A serialized ModelProto. */
export const decodeModelProto = (bytes: Uint8Array): ModelProto => readModel(new ProtoReader(bytes));
/** A serialized TensorProto. */
export const decodeTensorProto = (bytes: Uint8Array): TensorProto => readTensor(new ProtoReader(bytes));
/** A serialized SparseTensorProto. */
export const decodeSparseTensorProto = (bytes: Uint8Array): SparseTensorProto => readSparseTensor(new ProtoReader(bytes));

// ---- Writing ---------------------------------------------------------------------------------

/**
 * A message being written: its bytes as a list of pieces (large bytes fields are kept by
 * reference, never copied until the end) and their total length.
 */
class Out {
  parts: Uint8Array[] = [];
  len = 0;
  private scratch = new Uint8Array(64);
  private at = 0;

  private flush(): void {
    if (this.at) {
      this.parts.push(this.scratch.slice(0, this.at));
      this.at = 0;
    }
  }
  private room(n: number): void {
    if (this.at + n > this.scratch.length) {
      this.flush();
      if (n > this.scratch.length) this.scratch = new Uint8Array(Math.max(n, this.scratch.length * 2));
    }
  }
  /** A non-negative integer below 2^53 as a varint. */
  uvarint(v: number): void {
    this.room(10);
    const s = this.scratch;
    const start = this.at;
    while (v >= 0x80) {
      s[this.at++] = (v % 128) | 0x80;
      v = Math.floor(v / 128);
    }
    s[this.at++] = v;
    this.len += this.at - start;
  }
  int64(v: bigint): void {
    let u = BigInt.asUintN(64, v);
    this.room(10);
    const s = this.scratch;
    const start = this.at;
    while (u >= 0x80n) {
      s[this.at++] = Number(u & 0x7fn) | 0x80;
      u >>= 7n;
    }
    s[this.at++] = Number(u);
    this.len += this.at - start;
  }
  int32(v: number): void {
    if (v >= 0) this.uvarint(v);
    else this.int64(BigInt(v));
  }
  tag(no: number, wt: number): void {
    this.uvarint(no * 8 + wt);
  }
  float(v: number): void {
    this.room(4);
    new DataView(this.scratch.buffer).setFloat32(this.at, v, true);
    this.at += 4;
    this.len += 4;
  }
  double(v: number): void {
    this.room(8);
    new DataView(this.scratch.buffer).setFloat64(this.at, v, true);
    this.at += 8;
    this.len += 8;
  }
  /** Raw bytes, kept by reference when large. */
  raw(b: Uint8Array): void {
    if (b.length <= 32) {
      this.room(b.length);
      this.scratch.set(b, this.at);
      this.at += b.length;
    } else {
      this.flush();
      this.parts.push(b);
    }
    this.len += b.length;
  }
  /** A finished sub-message (its length first). */
  message(no: number, m: Out): void {
    m.flush();
    this.tag(no, Wire.LengthDelimited);
    this.uvarint(m.len);
    this.flush();
    for (const p of m.parts) this.parts.push(p);
    this.len += m.len;
  }
  bytesField(no: number, b: Uint8Array): void {
    this.tag(no, Wire.LengthDelimited);
    this.uvarint(b.length);
    this.raw(b);
  }
  stringField(no: number, s: string): void {
    this.bytesField(no, utf8e.encode(s));
  }
  finish(): Uint8Array {
    this.flush();
    if (this.parts.length === 1 && this.parts[0].length === this.len) return this.parts[0];
    const out = new Uint8Array(this.len);
    let at = 0;
    for (const p of this.parts) {
      out.set(p, at);
      at += p.length;
    }
    return out;
  }
}

/** Packed repeated scalars, written only when there are any. */
function packed<T>(o: Out, no: number, xs: readonly T[], write: (w: Out, x: T) => void): void {
  if (!xs.length) return;
  const inner = new Out();
  for (const x of xs) write(inner, x);
  o.message(no, inner);
}

const str = (o: Out, no: number, s: string | undefined): void => {
  if (s) o.stringField(no, s);
};

function writeEntry(e: StringStringEntryProto): Out {
  const o = new Out();
  str(o, 1, e.key);
  str(o, 2, e.value);
  return o;
}

function writeOpset(e: OperatorSetIdProto): Out {
  const o = new Out();
  str(o, 1, e.domain);
  o.tag(2, Wire.Varint);
  o.int64(e.version);
  return o;
}

export function writeTensor(t: TensorProto): Out {
  const o = new Out();
  packed(o, 1, t.dims, (w, d) => w.int64(d));
  if (t.dataType) {
    o.tag(2, Wire.Varint);
    o.int32(t.dataType);
  }
  packed(o, 4, t.floatData, (w, v) => w.float(v));
  packed(o, 5, t.int32Data, (w, v) => w.int32(v));
  for (const s of t.stringData) o.bytesField(6, s);
  packed(o, 7, t.int64Data, (w, v) => w.int64(v));
  str(o, 8, t.name);
  if (t.rawData.length) o.bytesField(9, t.rawData);
  packed(o, 10, t.doubleData, (w, v) => w.double(v));
  packed(o, 11, t.uint64Data, (w, v) => w.int64(v));
  for (const e of t.externalData) o.message(13, writeEntry(e));
  if (t.dataLocation) {
    o.tag(14, Wire.Varint);
    o.int32(t.dataLocation);
  }
  return o;
}

function writeSparse(s: SparseTensorProto): Out {
  const o = new Out();
  if (s.values) o.message(1, writeTensor(s.values));
  if (s.indices) o.message(2, writeTensor(s.indices));
  packed(o, 3, s.dims, (w, d) => w.int64(d));
  return o;
}

function writeShape(s: TensorShapeProto): Out {
  const o = new Out();
  for (const d of s.dim) {
    const m = new Out();
    if (d.value.case === 'dimValue') {
      m.tag(1, Wire.Varint);
      m.int64(d.value.value);
    } else if (d.value.case === 'dimParam') m.stringField(2, d.value.value);
    str(m, 3, d.denotation);
    o.message(1, m);
  }
  return o;
}

function writeTensorType(t: TypeProto_Tensor): Out {
  const o = new Out();
  if (t.elemType) {
    o.tag(1, Wire.Varint);
    o.int32(t.elemType);
  }
  if (t.shape) o.message(2, writeShape(t.shape));
  return o;
}

export function writeType(t: TypeProto): Out {
  const o = new Out();
  const v = t.value;
  switch (v.case) {
    case 'tensorType':
      o.message(1, writeTensorType(v.value));
      break;
    case 'sparseTensorType':
      o.message(8, writeTensorType(v.value));
      break;
    case 'sequenceType':
    case 'optionalType': {
      const m = new Out();
      if (v.value.elemType) m.message(1, writeType(v.value.elemType));
      o.message(v.case === 'sequenceType' ? 4 : 9, m);
      break;
    }
    case 'mapType': {
      const m = new Out();
      if (v.value.keyType) {
        m.tag(1, Wire.Varint);
        m.int32(v.value.keyType);
      }
      if (v.value.valueType) m.message(2, writeType(v.value.valueType));
      o.message(5, m);
      break;
    }
  }
  str(o, 6, t.denotation);
  return o;
}

function writeValueInfo(v: ValueInfoProto): Out {
  const o = new Out();
  str(o, 1, v.name);
  if (v.type) o.message(2, writeType(v.type));
  str(o, 3, v.docString);
  return o;
}

function writeAttribute(a: AttributeProto): Out {
  const o = new Out();
  str(o, 1, a.name);
  if (a.f !== undefined) {
    o.tag(2, Wire.Bit32);
    o.float(a.f);
  }
  if (a.i !== undefined) {
    o.tag(3, Wire.Varint);
    o.int64(a.i);
  }
  if (a.s !== undefined) o.bytesField(4, a.s);
  if (a.t) o.message(5, writeTensor(a.t));
  if (a.g) o.message(6, writeGraph(a.g));
  packed(o, 7, a.floats, (w, v) => w.float(v));
  packed(o, 8, a.ints, (w, v) => w.int64(v));
  for (const s of a.strings) o.bytesField(9, s);
  for (const t of a.tensors) o.message(10, writeTensor(t));
  for (const g of a.graphs) o.message(11, writeGraph(g));
  str(o, 13, a.docString);
  if (a.tp) o.message(14, writeType(a.tp));
  for (const t of a.typeProtos) o.message(15, writeType(t));
  if (a.type) {
    o.tag(20, Wire.Varint);
    o.int32(a.type);
  }
  str(o, 21, a.refAttrName);
  if (a.sparseTensor) o.message(22, writeSparse(a.sparseTensor));
  for (const s of a.sparseTensors) o.message(23, writeSparse(s));
  return o;
}

function writeNode(n: NodeProto): Out {
  const o = new Out();
  for (const s of n.input) o.stringField(1, s);
  for (const s of n.output) o.stringField(2, s);
  str(o, 3, n.name);
  str(o, 4, n.opType);
  for (const a of n.attribute) o.message(5, writeAttribute(a));
  str(o, 6, n.docString);
  str(o, 7, n.domain);
  str(o, 8, n.overload);
  return o;
}

export function writeGraph(g: GraphProto): Out {
  const o = new Out();
  for (const n of g.node) o.message(1, writeNode(n));
  str(o, 2, g.name);
  for (const t of g.initializer) o.message(5, writeTensor(t));
  str(o, 10, g.docString);
  for (const v of g.input) o.message(11, writeValueInfo(v));
  for (const v of g.output) o.message(12, writeValueInfo(v));
  for (const v of g.valueInfo) o.message(13, writeValueInfo(v));
  for (const s of g.sparseInitializer) o.message(15, writeSparse(s));
  return o;
}

function writeFunction(f: FunctionProto): Out {
  const o = new Out();
  str(o, 1, f.name);
  for (const s of f.input) o.stringField(4, s);
  for (const s of f.output) o.stringField(5, s);
  for (const s of f.attribute) o.stringField(6, s);
  for (const n of f.node) o.message(7, writeNode(n));
  str(o, 8, f.docString);
  for (const op of f.opsetImport) o.message(9, writeOpset(op));
  str(o, 10, f.domain);
  for (const a of f.attributeProto) o.message(11, writeAttribute(a));
  for (const v of f.valueInfo) o.message(12, writeValueInfo(v));
  str(o, 13, f.overload);
  return o;
}

export function writeModel(m: ModelProto): Out {
  const o = new Out();
  o.tag(1, Wire.Varint);
  o.int64(m.irVersion);
  str(o, 2, m.producerName);
  str(o, 3, m.producerVersion);
  str(o, 4, m.domain);
  if (m.modelVersion) {
    o.tag(5, Wire.Varint);
    o.int64(m.modelVersion);
  }
  str(o, 6, m.docString);
  if (m.graph) o.message(7, writeGraph(m.graph));
  for (const op of m.opsetImport) o.message(8, writeOpset(op));
  for (const e of m.metadataProps) o.message(14, writeEntry(e));
  for (const f of m.functions) o.message(25, writeFunction(f));
  return o;
}

/** The bytes of a ModelProto. */
export const encodeModelProto = (m: ModelProto): Uint8Array => writeModel(m).finish();
/** The bytes of a TensorProto. */
export const encodeTensorProto = (t: TensorProto): Uint8Array => writeTensor(t).finish();
