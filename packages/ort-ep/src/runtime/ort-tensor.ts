// The one converter between onnxruntime-common's Tensor layout and host tensors, used where
// tensors cross to onnxruntime (fallback partitions, runtime/onnxruntime.ts) and where they come
// from and go back to the user (the backend, backend/handler.ts). Data is shared, not copied,
// except where the layouts differ: onnxruntime-common holds int4/uint4 packed two to a byte, and
// float16 may come as a Float16Array, whose bits are taken.
import { OnnxDataType, dataTypeName, packSubByte, unpackSubByte, type HostTensor } from '../onnx/index.js';

/** onnxruntime-common's Tensor element types, as ONNX element types. */
const ORT_TYPES = new Set<number>([
  OnnxDataType.FLOAT,
  OnnxDataType.UINT8,
  OnnxDataType.INT8,
  OnnxDataType.UINT16,
  OnnxDataType.INT16,
  OnnxDataType.INT32,
  OnnxDataType.INT64,
  OnnxDataType.STRING,
  OnnxDataType.BOOL,
  OnnxDataType.FLOAT16,
  OnnxDataType.DOUBLE,
  OnnxDataType.UINT32,
  OnnxDataType.UINT64,
  OnnxDataType.INT4,
  OnnxDataType.UINT4,
]);
const ORT_NAMES = new Map<string, number>([...ORT_TYPES].map((t) => [dataTypeName(t), t]));

/** Whether onnxruntime-common's Tensor can carry this element type across. */
export const ortCanHold = (dtype: number): boolean => ORT_TYPES.has(dtype);

/** The ONNX element type of an onnxruntime-common Tensor type name ('float32', 'int4'), or undefined. */
export const onnxTypeOfOrt = (type: string): number | undefined => ORT_NAMES.get(type);

/** The data of an onnxruntime-common Tensor of element type `dtype` as a host tensor. */
export function ortDataToHost(dtype: number, dims: readonly number[], data: unknown): HostTensor {
  const shape = [...dims];
  const n = shape.reduce((a, b) => a * b, 1);
  let host = data as HostTensor['data'];
  if (dtype === OnnxDataType.INT4 || dtype === OnnxDataType.UINT4)
    host = unpackSubByte(host as Uint8Array, n, 4, dtype === OnnxDataType.INT4);
  else if (dtype === OnnxDataType.FLOAT16 && !(host instanceof Uint16Array)) {
    // Float16Array, where the runtime has it: take its bits.
    const v = host as unknown as ArrayBufferView;
    host = new Uint16Array(v.buffer, v.byteOffset, n);
  }
  return { dtype, dims: shape, data: host };
}

/** The onnxruntime-common type name and data of a host tensor (the caller checked ortCanHold). */
export function hostToOrtData(t: HostTensor): { type: string; data: unknown } {
  const type = dataTypeName(t.dtype);
  if (t.dtype === OnnxDataType.INT4 || t.dtype === OnnxDataType.UINT4) return { type, data: packSubByte(t.data as ArrayLike<number>, 4) };
  return { type, data: t.data };
}
