// Device tensors: an onnxruntime-common Tensor of location 'gpu-buffer' whose memory is an MLX
// array the session computed, handed out for `preferredOutputLocation: 'gpu-buffer'` and taken
// back as a feed without a copy.
import type { Tensor } from 'onnxruntime-common';
import { dataTypeName } from '../onnx/index.js';
import { OrtMlxError } from '../errors.js';
import { asHost, type Value } from '../runtime/value.js';
import { hostToTensor, type TensorModule } from './tensors.js';

/**
 * The device memory behind an onnxruntime-common Tensor of location 'gpu-buffer' that this backend
 * hands out (`tensor.gpuBuffer`): an MLX array that stays where the session computed it. Feeding
 * the tensor to a run of any 'mlx' session uses the array without a copy. The Tensor's `getData()`
 * downloads it; `dispose()` frees it. `value` is undefined once it is disposed.
 */
export class MlxDeviceBuffer {
  /**
   * Set by the tensor's owner to let the next run that reads it consume it (as a donated feed,
   * MlxRunOptions.donate): MLX may then write that run's outputs into its memory, e.g. a growing
   * KV cache's new rows. The tensor is disposed by that run. generate() sets it on its caches.
   */
  consumable = false;
  constructor(public value: Extract<Value, { kind: 'device' }> | undefined) {}
  get disposed(): boolean {
    return !this.value || this.value.array.disposed;
  }
  dispose(): void {
    this.value?.array.dispose();
    this.value?.reserve?.buffer.dispose();
    this.value = undefined;
  }
}

/** The MlxDeviceBuffer of a Tensor this backend made, else undefined. */
export function deviceBufferOf(t: unknown): MlxDeviceBuffer | undefined {
  const tensor = t as Tensor;
  if (!tensor || typeof tensor !== 'object' || tensor.location !== 'gpu-buffer') return undefined;
  const b = tensor.gpuBuffer as unknown;
  return b instanceof MlxDeviceBuffer ? b : undefined;
}

/** onnxruntime-common's 'gpu-buffer' tensors take these element types (tensor-impl.ts). */
export const gpuBufferTypes = new Set(['float32', 'float16', 'int32', 'int64', 'uint32', 'uint8', 'bool']);

/** A device Value as a 'gpu-buffer' Tensor owning its array (see MlxDeviceBuffer). */
export function deviceToTensor(ort: TensorModule, v: Extract<Value, { kind: 'device' }>, where: string): Tensor {
  const buffer = new MlxDeviceBuffer(v);
  return ort.Tensor.fromGpuBuffer(buffer as never, {
    dataType: dataTypeName(v.onnxType) as Tensor.GpuBufferDataTypes,
    dims: v.array.shape,
    download: async () => {
      if (!buffer.value) throw new OrtMlxError(`${where}: the device tensor was disposed`);
      return hostToTensor(ort, asHost(buffer.value, where)).data as never;
    },
    dispose: () => buffer.dispose(),
  });
}
