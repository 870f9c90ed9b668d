// ONNX element types <-> MLX dtypes, and host tensors <-> MLX arrays.
import * as mx from '@mlx/core';
import { InvalidFeedError } from '../errors.js';
import { dataTypeName as onnxTypeName, OnnxDataType, undecodedBytes, type HostTensor } from '../onnx/index.js';
import { UnholdableTypeError } from '../errors.js';

const toMx = new Map<number, mx.Dtype>([
  [OnnxDataType.FLOAT, 'float32'],
  [OnnxDataType.UINT8, 'uint8'],
  [OnnxDataType.INT8, 'int8'],
  [OnnxDataType.UINT16, 'uint16'],
  [OnnxDataType.INT16, 'int16'],
  [OnnxDataType.INT32, 'int32'],
  [OnnxDataType.INT64, 'int64'],
  [OnnxDataType.BOOL, 'bool'],
  [OnnxDataType.FLOAT16, 'float16'],
  [OnnxDataType.DOUBLE, 'float64'],
  [OnnxDataType.UINT32, 'uint32'],
  [OnnxDataType.UINT64, 'uint64'],
  [OnnxDataType.BFLOAT16, 'bfloat16'],
  [OnnxDataType.COMPLEX64, 'complex64'],
  // 4-bit integers are held unpacked, one value per byte.
  [OnnxDataType.INT4, 'int8'],
  [OnnxDataType.UINT4, 'uint8'],
  [OnnxDataType.INT2, 'int8'],
  [OnnxDataType.UINT2, 'uint8'],
]);
const fromMx = new Map<mx.Dtype, number>([
  ['float32', OnnxDataType.FLOAT],
  ['uint8', OnnxDataType.UINT8],
  ['int8', OnnxDataType.INT8],
  ['uint16', OnnxDataType.UINT16],
  ['int16', OnnxDataType.INT16],
  ['int32', OnnxDataType.INT32],
  ['int64', OnnxDataType.INT64],
  ['bool', OnnxDataType.BOOL],
  ['float16', OnnxDataType.FLOAT16],
  ['float64', OnnxDataType.DOUBLE],
  ['uint32', OnnxDataType.UINT32],
  ['uint64', OnnxDataType.UINT64],
  ['bfloat16', OnnxDataType.BFLOAT16],
  ['complex64', OnnxDataType.COMPLEX64],
]);

/** The MLX dtype holding an ONNX element type, or undefined (strings, float8, complex128). */
export function mxDtypeOf(t: number): mx.Dtype | undefined {
  return toMx.get(t);
}

export function onnxTypeOf(d: mx.Dtype): number {
  const t = fromMx.get(d);
  if (t === undefined) throw new Error(`no ONNX element type for MLX dtype ${d}`);
  return t;
}

/**
 * Bytes copied between host memory and MLX arrays by upload() and download(), since the process
 * started: every feed, result and host read of device data goes through them, so the difference
 * of two readings is what a run moved (constants uploaded at session creation included).
 */
export interface TransferStats {
  uploadedBytes: number;
  downloadedBytes: number;
  uploads: number;
  downloads: number;
}

const transfers: TransferStats = { uploadedBytes: 0, downloadedBytes: 0, uploads: 0, downloads: 0 };

/** A copy of the process-wide transfer counters. */
export function transferStats(): TransferStats {
  return { ...transfers };
}

/**
 * Uploads a host tensor. Throws for element types MLX cannot hold. A large tensor whose values were
 * never read on the host goes up from its file bytes, without a decoded copy. `resident`: kept for
 * the session's life (a constant), placed in MLX's arena of resident arrays (huge pages on Linux's CPU build).
 */
export function upload(t: HostTensor, resident = false): mx.Array {
  const d = mxDtypeOf(t.dtype);
  if (!d) throw new UnholdableTypeError(t.dtype);
  const raw = undecodedBytes(t);
  transfers.uploads++;
  if (raw) {
    transfers.uploadedBytes += raw.byteLength;
    return mx.Array.fromBytes(raw, t.dims, d, { resident });
  }
  if (!ArrayBuffer.isView(t.data)) throw new UnholdableTypeError(t.dtype);
  transfers.uploadedBytes += t.data.byteLength;
  return mx.Array.fromTypedArray(t.data, t.dims, d, { resident });
}

/**
 * Downloads an array into a pooled host block (mx.hostBuffer: page-locked on MLX's CUDA build, so
 * the copy engine writes it directly, and its pages exist already); plain download() where the
 * array is small, the pool is at its limit, or the element type is repacked on the host (int4).
 * `pinned` in the result says which it got.
 */
export function downloadPinned(a: mx.Array, onnxType?: number): HostTensor & { pinned?: boolean } {
  const t = onnxType ?? onnxTypeOf(a.dtype);
  const repacked = t === OnnxDataType.INT4 || t === OnnxDataType.UINT4 || t === OnnxDataType.INT2 || t === OnnxDataType.UINT2;
  const ab = repacked ? undefined : mx.hostBuffer(a.nbytes);
  if (!ab) return download(a, onnxType);
  const ctor = mx.typedArrayCtor(a.dtype);
  const n = a.size * (a.dtype === 'complex64' ? 2 : 1);
  const data = counted(a.readInto(new ctor(ab, 0, n) as mx.TypedArray));
  return { dtype: t, dims: a.shape, data, pinned: true };
}

/**
 * Downloads an array straight into `dst`'s data (a pre-allocated output), which must have the
 * array's element type and shape and a typed array of the class download() would give; on a
 * mismatch nothing is written and the error names `where`.
 */
export function downloadInto(a: mx.Array, onnxType: number, dst: HostTensor, where: string): HostTensor {
  const dims = a.shape;
  checkDestination(dst, onnxType, dims, where);
  const ctor = mx.typedArrayCtor(a.dtype);
  const data = dst.data as unknown;
  const n = a.size * (a.dtype === 'complex64' ? 2 : 1);
  if (!(data instanceof ctor) || (data as mx.TypedArray).length !== n) {
    // A layout the array does not read into directly (a packed int4 buffer, a Float16Array).
    const host = download(a, onnxType);
    (data as { set(v: ArrayLike<unknown>): void }).set(host.data as ArrayLike<unknown>);
    return dst;
  }
  counted(a.readInto(data as mx.TypedArray));
  return dst;
}

/** A pre-allocated output must match the result's element type and shape exactly. */
export function checkDestination(dst: HostTensor, onnxType: number, dims: readonly number[], where: string): void {
  if (dst.dtype !== onnxType || dst.dims.length !== dims.length || dst.dims.some((d, i) => d !== dims[i]))
    throw new InvalidFeedError(
      `${where} is ${onnxTypeName(onnxType)} [${dims.join(', ')}], but its pre-allocated buffer is ${onnxTypeName(dst.dtype)} [${dst.dims.join(', ')}]`,
    );
}

/** Downloads an array (evaluating it), keeping an ONNX element type that MLX widens (int4, uint4). */
export function download(a: mx.Array, onnxType?: number): HostTensor {
  return { dtype: onnxType ?? onnxTypeOf(a.dtype), dims: a.shape, data: counted(a.toTypedArray()) };
}

/** Counts transfers made elsewhere (a one-call run's feeds and results) in the transfer counters. */
export function countTransfers(uploads: number, uploadedBytes: number, downloads: number, downloadedBytes: number): void {
  transfers.uploads += uploads;
  transfers.uploadedBytes += uploadedBytes;
  transfers.downloads += downloads;
  transfers.downloadedBytes += downloadedBytes;
}

/** Counts one download of `data` in the transfer counters; returns it. */
function counted<T extends mx.TypedArray>(data: T): T {
  transfers.downloads++;
  transfers.downloadedBytes += data.byteLength;
  return data;
}
