// The inputs mlx-ort makes up when it is given none: deterministic pseudo-random tensors of the
// model's input types (floats in [-1, 1), integers 0 and 1 (valid token ids, token types and
// masks alike), booleans).
import { OnnxDataType, type HostTensor } from './onnx/index.js';

export function randomInput(elemType: number, dims: number[], seed: number): HostTensor {
  const n = dims.reduce((a, b) => a * b, 1);
  let s = seed >>> 0 || 1;
  const rnd = () => (s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 32;
  switch (elemType) {
    case OnnxDataType.FLOAT:
      return { dtype: elemType, dims, data: Float32Array.from({ length: n }, () => rnd() * 2 - 1) };
    case OnnxDataType.DOUBLE:
      return { dtype: elemType, dims, data: Float64Array.from({ length: n }, () => rnd() * 2 - 1) };
    case OnnxDataType.INT64:
      return { dtype: elemType, dims, data: BigInt64Array.from({ length: n }, () => BigInt(Math.floor(rnd() * 2))) };
    case OnnxDataType.INT32:
      return { dtype: elemType, dims, data: Int32Array.from({ length: n }, () => Math.floor(rnd() * 2)) };
    case OnnxDataType.BOOL:
      return { dtype: elemType, dims, data: Uint8Array.from({ length: n }, () => (rnd() < 0.5 ? 1 : 0)) };
    default:
      throw new Error(`mlx-ort run: cannot make a random input of element type ${elemType}`);
  }
}
