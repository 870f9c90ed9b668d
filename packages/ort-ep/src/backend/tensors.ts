// Tensors at the user's boundary: an onnxruntime-common Tensor fed to a run becomes a host tensor,
// a host result becomes a Tensor of the caller's onnxruntime-common copy. The layout conversion
// itself is runtime/ort-tensor.ts, shared with the fallback; this adds the checks and messages
// of a feed and of a result.
import type { OnnxValue, Tensor } from 'onnxruntime-common';
import { OnnxDataType, dataTypeName, type HostTensor } from '../onnx/index.js';
import { InvalidFeedError } from '../errors.js';
import { hostToOrtData, onnxTypeOfOrt, ortCanHold, ortDataToHost } from '../runtime/ort-tensor.js';

/** The part of an onnxruntime-common module that makes result tensors. */
export type TensorModule = { Tensor: typeof Tensor };

/** An onnxruntime-common Tensor as a host tensor (data is not copied where layouts agree). */
export function tensorToHost(name: string, t: OnnxValue): HostTensor {
  const tensor = t as Tensor;
  if (!tensor || typeof tensor !== 'object' || !('type' in tensor) || !('dims' in tensor)) {
    throw new InvalidFeedError(`input '${name}' is not a Tensor`);
  }
  if (tensor.location && tensor.location !== 'cpu' && tensor.location !== 'cpu-pinned') {
    throw new InvalidFeedError(
      `input '${name}' is on '${tensor.location}'; the MLX backend takes CPU tensors and its own 'gpu-buffer' tensors`,
    );
  }
  const dtype = onnxTypeOfOrt(tensor.type);
  if (dtype === undefined)
    throw new InvalidFeedError(`input '${name}' has tensor type '${tensor.type}', which the MLX backend does not take`);
  return ortDataToHost(dtype, tensor.dims, tensor.data);
}

/** A host result as a Tensor of `ort`'s onnxruntime-common copy (data shared; int4 packed). */
export function hostToTensor(ort: TensorModule, t: HostTensor & { pinned?: boolean }): Tensor {
  if (t.dtype === OnnxDataType.BFLOAT16 || !ortCanHold(t.dtype)) {
    throw new Error(
      `output element type ${dataTypeName(t.dtype)} cannot be held by onnxruntime-common's Tensor; use MlxSession from @mlx/ort-ep`,
    );
  }
  const { type, data } = hostToOrtData(t);
  // Data in a pooled host block (preferredOutputLocation 'cpu-pinned').
  if (t.pinned) return ort.Tensor.fromPinnedBuffer(type as 'float32', data as Float32Array, t.dims);
  return new ort.Tensor(type as 'float32', data as Float32Array, t.dims);
}

/**
 * A pre-allocated CPU tensor whose data a result can be read into directly: same element type,
 * an unpacked typed array (not int4's packed bytes, not a Float16Array).
 */
export function directDestination(t: Tensor): HostTensor | undefined {
  if (t.location !== 'cpu' && t.location !== 'cpu-pinned') return undefined;
  const dtype = onnxTypeOfOrt(t.type);
  if (dtype === undefined || t.type === 'int4' || t.type === 'uint4' || t.type === 'string') return undefined;
  if (!ArrayBuffer.isView(t.data) || (t.type === 'float16' && !(t.data instanceof Uint16Array))) return undefined;
  return { dtype, dims: [...t.dims], data: t.data as HostTensor['data'] };
}

/** Copies a host output into a pre-allocated CPU tensor of the same type and shape. */
export function copyInto(dst: Tensor, src: Tensor, name: string): void {
  if (dst.location !== 'cpu' && dst.location !== 'cpu-pinned')
    throw new InvalidFeedError(`output '${name}': a pre-allocated tensor on '${dst.location}' that the MLX backend did not make`);
  if (dst.type !== src.type || dst.dims.length !== src.dims.length || dst.dims.some((d, i) => d !== src.dims[i]))
    throw new InvalidFeedError(
      `output '${name}' is ${src.type} [${src.dims.join(', ')}], but its pre-allocated tensor is ${dst.type} [${dst.dims.join(', ')}]`,
    );
  (dst.data as unknown as { set(a: ArrayLike<unknown>): void }).set(src.data as ArrayLike<unknown>);
}
