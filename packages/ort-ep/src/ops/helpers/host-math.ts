// Elementwise math on small host tensors (shape computations), numpy broadcasting included.
import { OnnxDataType, type HostTensor } from '../../onnx/index.js';
import { broadcastShape, hostOf, sizeOf } from './util.js';

type Scalar = number | bigint;

function strides(dims: readonly number[]): number[] {
  const s = new Array<number>(dims.length).fill(0);
  let acc = 1;
  for (let i = dims.length - 1; i >= 0; i--) {
    s[i] = dims[i] === 1 ? 0 : acc;
    acc *= dims[i];
  }
  return s;
}

/** Element i of `t` read at broadcast position `idx` of `out`. */
function reader(t: HostTensor, out: readonly number[]): (idx: number[]) => Scalar {
  const pad = out.length - t.dims.length;
  const st = strides(t.dims);
  const data = t.data as ArrayLike<Scalar>;
  return (idx) => {
    let off = 0;
    for (let d = 0; d < t.dims.length; d++) off += idx[d + pad] * st[d];
    return data[off];
  };
}

/** Applies `f` elementwise over broadcast inputs; the result has element type `outType`. */
export function hostElementwise(inputs: HostTensor[], outType: number, f: (...xs: Scalar[]) => Scalar | boolean): HostTensor {
  const dims = inputs.map((t) => t.dims).reduce((a, b) => broadcastShape(a, b));
  const readers = inputs.map((t) => reader(t, dims));
  const n = sizeOf(dims);
  const out: Scalar[] = new Array(n);
  const idx = new Array<number>(dims.length).fill(0);
  for (let i = 0; i < n; i++) {
    const r = f(...readers.map((rd) => rd(idx)));
    out[i] = typeof r === 'boolean' ? (r ? 1 : 0) : r;
    for (let d = dims.length - 1; d >= 0; d--) {
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
  }
  return hostOf(outType, out, dims);
}

export const isBig = (t: number): boolean => t === OnnxDataType.INT64 || t === OnnxDataType.UINT64;
export const isIntType = (t: number): boolean =>
  [OnnxDataType.INT8, OnnxDataType.INT16, OnnxDataType.INT32, OnnxDataType.INT64, OnnxDataType.UINT8,
    OnnxDataType.UINT16, OnnxDataType.UINT32, OnnxDataType.UINT64].includes(t);

/** Host types the shape-math fast path handles (numbers and 64-bit integers). */
export const hostMathTypes = new Set<number>([
  OnnxDataType.INT64, OnnxDataType.INT32, OnnxDataType.FLOAT, OnnxDataType.DOUBLE, OnnxDataType.BOOL,
]);
