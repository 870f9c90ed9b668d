// Elementwise math on small host tensors (shape computations), numpy broadcasting included.
import { OnnxDataType, type HostTensor } from '../../onnx/index.js';
import { broadcastOffsets } from './shape-host.js';
import { broadcastShape, hostOf, sizeOf } from './util.js';

type Scalar = number | bigint;

/** Applies `f` elementwise over broadcast inputs; the result has element type `outType`. */
export function hostElementwise(inputs: HostTensor[], outType: number, f: (...xs: Scalar[]) => Scalar | boolean): HostTensor {
  const dims = inputs.map((t) => t.dims).reduce((a, b) => broadcastShape(a, b));
  const offsets = inputs.map((t) => broadcastOffsets(t.dims, dims));
  const data = inputs.map((t) => t.data as ArrayLike<Scalar>);
  const n = sizeOf(dims);
  const out: Scalar[] = new Array(n);
  for (let i = 0; i < n; i++) {
    const r = f(...data.map((d, k) => d[offsets[k][i]]));
    out[i] = typeof r === 'boolean' ? (r ? 1 : 0) : r;
  }
  return hostOf(outType, out, dims);
}

export const isBig = (t: number): boolean => t === OnnxDataType.INT64 || t === OnnxDataType.UINT64;
export const isIntType = (t: number): boolean =>
  [
    OnnxDataType.INT8,
    OnnxDataType.INT16,
    OnnxDataType.INT32,
    OnnxDataType.INT64,
    OnnxDataType.UINT8,
    OnnxDataType.UINT16,
    OnnxDataType.UINT32,
    OnnxDataType.UINT64,
  ].includes(t);

/** Host types the shape-math fast path handles (numbers and 64-bit integers). */
export const hostMathTypes = new Set<number>([
  OnnxDataType.INT64,
  OnnxDataType.INT32,
  OnnxDataType.FLOAT,
  OnnxDataType.DOUBLE,
  OnnxDataType.BOOL,
]);
