// The canonical host layout of each element type (see HostTensor) and the conversions from
// ONNX's serialized forms: little-endian fixed-width bytes and packed 4-bit and 2-bit values.
import { OnnxDataType, type HostData, type HostTensor, type TypedArray } from './ir.js';

const T = OnnxDataType;

/** Bits one element takes in raw_data (complex: both parts); undefined for strings and unknown codes. */
export function bitsPerElement(dtype: number): number | undefined {
  switch (dtype) {
    case T.UINT2:
    case T.INT2:
      return 2;
    case T.UINT4:
    case T.INT4:
    case T.FLOAT4E2M1:
      return 4;
    case T.UINT8:
    case T.INT8:
    case T.BOOL:
    case T.FLOAT8E4M3FN:
    case T.FLOAT8E4M3FNUZ:
    case T.FLOAT8E5M2:
    case T.FLOAT8E5M2FNUZ:
    case T.FLOAT8E8M0:
      return 8;
    case T.UINT16:
    case T.INT16:
    case T.FLOAT16:
    case T.BFLOAT16:
      return 16;
    case T.FLOAT:
    case T.INT32:
    case T.UINT32:
      return 32;
    case T.DOUBLE:
    case T.INT64:
    case T.UINT64:
    case T.COMPLEX64:
      return 64;
    case T.COMPLEX128:
      return 128;
    default:
      return undefined;
  }
}

export const isSubByte = (dtype: number): boolean => (bitsPerElement(dtype) ?? 8) < 8;
const isSigned = (dtype: number): boolean => dtype === T.INT4 || dtype === T.INT2;

/** Bytes that `n` elements take in raw_data (sub-byte types packed, the last byte padded). */
export function rawByteLength(dtype: number, n: number): number {
  const bits = bitsPerElement(dtype);
  if (bits === undefined) throw new RangeError(`element type ${dtype} has no fixed-width encoding`);
  return Math.ceil((n * bits) / 8);
}

/** A zero-filled host array of `n` elements in the canonical layout. */
export function allocHost(dtype: number, n: number): HostData {
  switch (dtype) {
    case T.FLOAT:
      return new Float32Array(n);
    case T.DOUBLE:
      return new Float64Array(n);
    case T.COMPLEX64:
      return new Float32Array(2 * n);
    case T.COMPLEX128:
      return new Float64Array(2 * n);
    case T.INT8:
    case T.INT4:
    case T.INT2:
      return new Int8Array(n);
    case T.INT16:
      return new Int16Array(n);
    case T.INT32:
      return new Int32Array(n);
    case T.INT64:
      return new BigInt64Array(n);
    case T.UINT16:
    case T.FLOAT16:
    case T.BFLOAT16:
      return new Uint16Array(n);
    case T.UINT32:
      return new Uint32Array(n);
    case T.UINT64:
      return new BigUint64Array(n);
    case T.STRING:
      return new Array<string>(n).fill('');
    // uint8, bool, uint4, uint2, float8 and float4 types: one byte per value.
    default:
      return new Uint8Array(n);
  }
}

/**
 * Unpacks `n` sub-byte values (2 or 4 bits each, first value in the least significant bits) from
 * `bytes` (each entry one byte: raw_data, or int32_data whose entries hold one byte each).
 */
export function unpackSubByte(bytes: ArrayLike<number>, n: number, bits: 2 | 4, signed: boolean): Int8Array | Uint8Array {
  const out = signed ? new Int8Array(n) : new Uint8Array(n);
  const perByte = 8 / bits;
  const mask = (1 << bits) - 1;
  const half = 1 << (bits - 1);
  for (let i = 0; i < n; i++) {
    let v = (bytes[Math.floor(i / perByte)] >> ((i % perByte) * bits)) & mask;
    if (signed && v >= half) v -= 1 << bits;
    out[i] = v;
  }
  return out;
}

/** The inverse of unpackSubByte: the bytes raw_data holds for these values. */
export function packSubByte(values: ArrayLike<number>, bits: 2 | 4): Uint8Array {
  const perByte = 8 / bits;
  const out = new Uint8Array(Math.ceil(values.length / perByte));
  const mask = (1 << bits) - 1;
  for (let i = 0; i < values.length; i++) out[Math.floor(i / perByte)] |= (values[i] & mask) << ((i % perByte) * bits);
  return out;
}

const hostIsLittleEndian = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/**
 * Decodes the raw_data form of `n` elements (the caller has checked the length). The bytes are
 * copied: raw_data is a view into the file at any offset, and typed arrays need alignment.
 */
export function fromRawBytes(bytes: Uint8Array, dtype: number, n: number): HostData {
  const bits = bitsPerElement(dtype);
  if (bits === undefined) throw new RangeError(`element type ${dtype} cannot be stored in raw_data`);
  if (bits < 8) return unpackSubByte(bytes, n, bits as 2 | 4, isSigned(dtype));
  const out = allocHost(dtype, n) as TypedArray;
  const dst = new Uint8Array(out.buffer, out.byteOffset, out.byteLength);
  dst.set(bytes.subarray(0, dst.length));
  if (!hostIsLittleEndian) swapBytes(dst, out.BYTES_PER_ELEMENT);
  if (dtype === T.BOOL) normalizeBool(out as Uint8Array);
  return out;
}

// Only reached on big-endian hosts (ONNX stores little-endian; x86-64 and arm64 are little-endian).
function swapBytes(b: Uint8Array, width: number): void {
  if (width === 1) return;
  for (let i = 0; i < b.length; i += width) b.subarray(i, i + width).reverse();
}

/** Booleans are 0/1 in the host layout; files may hold any non-zero byte for true. */
export function normalizeBool(b: Uint8Array): void {
  for (let i = 0; i < b.length; i++) if (b[i] > 1) b[i] = 1;
}

/** The inverse of fromRawBytes: the little-endian raw_data bytes of a host tensor's data. */
export function toRawBytes(dtype: number, data: HostData): Uint8Array {
  if (Array.isArray(data)) throw new RangeError('string tensors have no raw_data form');
  const bits = bitsPerElement(dtype);
  if (bits !== undefined && bits < 8) return packSubByte(data as ArrayLike<number>, bits as 2 | 4);
  const out = new Uint8Array(data.byteLength);
  out.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
  if (!hostIsLittleEndian) swapBytes(out, data.BYTES_PER_ELEMENT);
  return out;
}

// Large tensors read from raw_data or external data stay bytes until their values are first read
// on the host: most are weights that only ever go to MLX, which takes the bytes directly, so the
// file's copy is the only one until the upload, and none after it.

/** Tensors at least this large (bytes) are decoded on first read. */
export const LAZY_DECODE_BYTES = 1 << 20;

const undecoded = new WeakMap<object, Uint8Array>();

/**
 * A host tensor whose `data` is decoded from little-endian `bytes` on first read (and kept);
 * until then `undecodedBytes` gives the bytes themselves. Only for types of whole bytes other than
 * bool (bool bytes need normalising) on little-endian hosts; others decode at once.
 */
export function lazyTensor(dtype: number, dims: number[], bytes: Uint8Array, n: number): { dtype: number; dims: number[]; data: HostData } {
  const bits = bitsPerElement(dtype);
  if (!hostIsLittleEndian || bits === undefined || bits < 8 || dtype === T.BOOL || bytes.length < LAZY_DECODE_BYTES) {
    return { dtype, dims, data: fromRawBytes(bytes, dtype, n) };
  }
  const t = { dtype, dims } as { dtype: number; dims: number[]; data: HostData };
  let decoded: HostData | undefined;
  undecoded.set(t, bytes);
  Object.defineProperty(t, 'data', {
    enumerable: true,
    configurable: true,
    get() {
      if (!decoded) {
        decoded = fromRawBytes(bytes, dtype, n);
        undecoded.delete(t);
      }
      return decoded;
    },
  });
  return t;
}

/**
 * The elements `t` holds, and whether they are float32 in a Float32Array or not yet decoded: both
 * asked without decoding a lazy tensor's bytes (reading `data` decodes them). Rewrites that only
 * check a weight's form before packing its bytes use it.
 */
export function heldFloat32s(t: HostTensor): number | undefined {
  if (t.dtype !== T.FLOAT) return undefined;
  const raw = undecoded.get(t);
  if (raw) return raw.byteLength / 4;
  return t.data instanceof Float32Array ? t.data.length : undefined;
}

/** The raw little-endian bytes of a lazy tensor whose values have not been read yet, else undefined. */
export function undecodedBytes(t: object): Uint8Array | undefined {
  return undecoded.get(t);
}
