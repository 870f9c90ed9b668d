// TensorProto -> HostTensor. A tensor's values come from raw_data, from external data, or from
// the typed field its element type uses (onnx.proto's table); every size is checked against the
// dims before anything is allocated, so a corrupt file gives an error instead of a huge array.
import { OnnxLoadError, messageOf } from '../errors.js';
import { ExternalDataSource } from './external.js';
import {
  OnnxDataType,
  dataTypeName,
  elementCount,
  isKnownDataType,
  type ExternalDataSpec,
  type HostData,
  type HostTensor,
  type SparseTensorIR,
} from './ir.js';
import { decodeTensorProto, type SparseTensorProto, type TensorProto } from './proto.js';
import { allocHost, bitsPerElement, lazyTensor, normalizeBool, rawByteLength, unpackSubByte } from './layout.js';

const T = OnnxDataType;
const utf8 = new TextDecoder();

export interface TensorContext {
  /** Where external data is read from (decodeModel passes one for the whole model). */
  external?: ExternalDataSource;
  /** For a standalone decode: the model's folder and/or the caller's external data. */
  modelDir?: string;
  externalData?: readonly (ExternalDataSpec | string)[];
  /** How messages name the tensor; default `tensor '<name>'`. */
  where?: string;
}

type Field = 'float_data' | 'double_data' | 'int32_data' | 'int64_data' | 'uint64_data' | 'string_data';

/** The typed field that holds values of each element type, and how many entries a value takes. */
function typedField(dtype: OnnxDataType): { field: Field; perValue: number } {
  switch (dtype) {
    case T.FLOAT:
      return { field: 'float_data', perValue: 1 };
    case T.COMPLEX64:
      return { field: 'float_data', perValue: 2 };
    case T.DOUBLE:
      return { field: 'double_data', perValue: 1 };
    case T.COMPLEX128:
      return { field: 'double_data', perValue: 2 };
    case T.INT64:
      return { field: 'int64_data', perValue: 1 };
    case T.UINT32:
    case T.UINT64:
      return { field: 'uint64_data', perValue: 1 };
    case T.STRING:
      return { field: 'string_data', perValue: 1 };
    // int32_data also carries the narrow integer, bool and 16/8/4/2-bit float types (their bits).
    default:
      return { field: 'int32_data', perValue: 1 };
  }
}

function fieldValues(p: TensorProto, f: Field): ArrayLike<number | bigint | Uint8Array> {
  switch (f) {
    case 'float_data':
      return p.floatData;
    case 'double_data':
      return p.doubleData;
    case 'int32_data':
      return p.int32Data;
    case 'int64_data':
      return p.int64Data;
    case 'uint64_data':
      return p.uint64Data;
    case 'string_data':
      return p.stringData;
  }
}

const allFields: Field[] = ['float_data', 'double_data', 'int32_data', 'int64_data', 'uint64_data', 'string_data'];

function describe(dtype: OnnxDataType, dims: number[]): string {
  return `${dataTypeName(dtype)} [${dims.join(', ')}]`;
}

function fromTyped(p: TensorProto, dtype: OnnxDataType, dims: number[], n: number, where: string): HostData {
  const { field, perValue } = typedField(dtype);
  const values = fieldValues(p, field);
  const bits = bitsPerElement(dtype);
  const subByte = bits !== undefined && bits < 8;
  // Sub-byte values are packed into int32_data entries of one byte each (two or four values).
  const want = subByte ? rawByteLength(dtype, n) : n * perValue;
  if (values.length !== want) {
    const others = allFields.filter((f) => f !== field && fieldValues(p, f).length).map((f) => `${f} has ${fieldValues(p, f).length}`);
    const what = n > 0 && values.length === 0 && !others.length ? 'has no data' : `has ${values.length} entries in ${field}`;
    throw new OnnxLoadError(
      `${where}: ${describe(dtype, dims)} ${what}, ${want} expected in ${field}${others.length ? ` (${others.join(', ')})` : ''}`,
    );
  }
  switch (field) {
    case 'float_data':
      return Float32Array.from(p.floatData);
    case 'double_data':
      return Float64Array.from(p.doubleData);
    case 'int64_data':
      return BigInt64Array.from(p.int64Data);
    case 'uint64_data':
      return dtype === T.UINT64 ? BigUint64Array.from(p.uint64Data) : Uint32Array.from(p.uint64Data, Number);
    case 'string_data':
      return p.stringData.map((s) => utf8.decode(s));
    case 'int32_data': {
      if (subByte) return unpackSubByte(p.int32Data, n, bits as 2 | 4, dtype === T.INT4 || dtype === T.INT2);
      const out = allocHost(dtype, n) as Int32Array;
      out.set(p.int32Data); // narrower arrays keep the low bits: the integer value, or a float's bit pattern
      if (dtype === T.BOOL) normalizeBool(out as unknown as Uint8Array);
      return out;
    }
  }
}

function fromBytes(bytes: Uint8Array, dtype: OnnxDataType, dims: number[], n: number, where: string, source: string): HostTensor {
  if (dtype === T.STRING) throw new OnnxLoadError(`${where}: string tensors cannot use ${source}; their values go in string_data`);
  const want = rawByteLength(dtype, n);
  if (bytes.length !== want) {
    throw new OnnxLoadError(`${where}: ${source} has ${bytes.length} bytes, but ${describe(dtype, dims)} needs ${want}`);
  }
  return lazyTensor(dtype, dims, bytes, n) as HostTensor;
}

function decodeDims(p: TensorProto, where: string): number[] {
  return p.dims.map((d) => {
    const v = Number(d);
    if (d < 0n || !Number.isSafeInteger(v)) throw new OnnxLoadError(`${where}: invalid dimension ${d} in dims [${p.dims.join(', ')}]`);
    return v;
  });
}

/** Decodes one TensorProto into the canonical host layout (see HostTensor). */
export function decodeTensor(p: TensorProto, ctx: TensorContext = {}): HostTensor {
  const where = ctx.where ?? `tensor '${p.name || '<unnamed>'}'`;
  const dtype = p.dataType;
  if (dtype === T.UNDEFINED) throw new OnnxLoadError(`${where}: data_type is not set`);
  if (!isKnownDataType(dtype)) throw new OnnxLoadError(`${where}: unknown data_type ${dtype}`);
  const dims = decodeDims(p, where);
  const n = elementCount(dims);
  if (!Number.isSafeInteger(n)) throw new OnnxLoadError(`${where}: dims [${dims.join(', ')}] have more elements than can be addressed`);
  if (p.segment) throw new OnnxLoadError(`${where}: segmented tensors (TensorProto.segment) are not supported`);
  let t: HostTensor;
  if (p.dataLocation === 1) {
    const own = ctx.external ? undefined : new ExternalDataSource(ctx.modelDir, ctx.externalData);
    try {
      const bytes = (ctx.external ?? own)!.read(where, p.externalData);
      t = fromBytes(bytes, dtype, dims, n, where, `external data (${p.externalData.find((e) => e.key === 'location')?.value})`);
    } finally {
      own?.close();
    }
  } else if (p.rawData.length > 0) {
    t = fromBytes(p.rawData, dtype, dims, n, where, 'raw_data');
  } else {
    t = { dtype, dims, data: fromTyped(p, dtype, dims, n, where) };
  }
  if (p.name) t.name = p.name;
  return t;
}

function parseError(what: string, bytes: Uint8Array, e: unknown): OnnxLoadError {
  const msg = messageOf(e);
  if (bytes.length === 0) return new OnnxLoadError(`not a ${what}: it is empty`);
  if (/premature EOF/i.test(msg))
    return new OnnxLoadError(`truncated ${what}: the data ends inside a field (${bytes.length} bytes)`, { cause: e });
  return new OnnxLoadError(`not a ${what}: ${msg}`, { cause: e });
}

/** Decodes a standalone serialized TensorProto (the ONNX test-data `.pb` files). */
export function decodeTensorBytes(bytes: Uint8Array, ctx: TensorContext = {}): HostTensor {
  let p: TensorProto;
  try {
    p = decodeTensorProto(bytes);
  } catch (e) {
    throw parseError('serialized TensorProto', bytes, e);
  }
  return decodeTensor(p, ctx);
}

/** Decodes a SparseTensorProto (values and indices as host tensors). */
export function decodeSparseTensor(p: SparseTensorProto, ctx: TensorContext = {}): SparseTensorIR {
  const name = p.values?.name || '<unnamed>';
  const where = ctx.where ?? `sparse tensor '${name}'`;
  if (!p.values || !p.indices) throw new OnnxLoadError(`${where}: values or indices are missing`);
  const dims = p.dims.map((d) => {
    if (d < 0n || !Number.isSafeInteger(Number(d))) throw new OnnxLoadError(`${where}: invalid dimension ${d}`);
    return Number(d);
  });
  const values = decodeTensor(p.values, { ...ctx, where: `${where} values` });
  const indices = decodeTensor(p.indices, { ...ctx, where: `${where} indices` });
  if (indices.dtype !== T.INT64) throw new OnnxLoadError(`${where}: indices must be int64, got ${dataTypeName(indices.dtype)}`);
  return { dims, values, indices };
}

/** The dense form of a sparse tensor (zeros, or '' for strings, where no value is given). */
export function sparseToDense(sp: SparseTensorIR, where = 'sparse tensor'): HostTensor {
  const { dims, values, indices } = sp;
  const n = elementCount(dims);
  const nnz = values.dims.length === 1 ? values.dims[0] : -1;
  if (nnz < 0) throw new OnnxLoadError(`${where}: values must be 1-D, got [${values.dims.join(', ')}]`);
  const idx = indices.data as BigInt64Array;
  const rank = dims.length;
  const linear = indices.dims.length === 1;
  if (linear ? indices.dims[0] !== nnz : indices.dims.length !== 2 || indices.dims[0] !== nnz || indices.dims[1] !== rank) {
    throw new OnnxLoadError(`${where}: indices [${indices.dims.join(', ')}] do not fit ${nnz} values of a rank-${rank} tensor`);
  }
  const strides = dims.map((_, i) => elementCount(dims.slice(i + 1)));
  const dense = allocHost(values.dtype, n);
  const per = values.dtype === T.COMPLEX64 || values.dtype === T.COMPLEX128 ? 2 : 1;
  for (let k = 0; k < nnz; k++) {
    let pos = 0;
    if (linear) pos = Number(idx[k]);
    else {
      for (let r = 0; r < rank; r++) {
        const c = Number(idx[k * rank + r]);
        if (c < 0 || c >= dims[r])
          throw new OnnxLoadError(`${where}: index ${c} of value ${k} is outside dimension ${r} (size ${dims[r]})`);
        pos += c * strides[r];
      }
    }
    if (!(pos >= 0 && pos < n))
      throw new OnnxLoadError(`${where}: index ${pos} of value ${k} is outside the ${n} elements of [${dims.join(', ')}]`);
    for (let j = 0; j < per; j++) (dense as unknown[])[pos * per + j] = (values.data as unknown as unknown[])[k * per + j];
  }
  return { dtype: values.dtype, dims: [...dims], data: dense, ...(values.name ? { name: values.name } : {}) };
}
