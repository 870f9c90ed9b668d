// Data movement on small host tensors (shape math: Shape -> Gather -> Concat -> Reshape, ...).
// Every op here is "output element i comes from input element f(i)", so one remapping loop
// serves reshape, transpose, slice, gather, expand, tile and concat, for every element type
// (int64 stays a BigInt64Array, strings a string[]).
import { OnnxDataType, type HostData, type HostTensor, type TypedArray } from '../../onnx/index.js';
import { bfloat16BitsToNumber, float16BitsToNumber } from '@mlx/core';
import { checkHostElements } from './bounds.js';
import { sizeOf } from './util.js';

/** Fresh storage of `n` elements of the same kind as `data`. */
export function allocLike(data: HostData, n: number): HostData {
  checkHostElements(n, 'a host result');
  if (Array.isArray(data)) return new Array<string>(n).fill('');
  const ctor = (data as TypedArray).constructor as new (n: number) => TypedArray;
  return new ctor(n);
}

/** Row-major strides of `dims`. */
export function stridesOf(dims: readonly number[]): number[] {
  const s = new Array<number>(dims.length);
  let acc = 1;
  for (let i = dims.length - 1; i >= 0; i--) {
    s[i] = acc;
    acc *= dims[i];
  }
  return s;
}

/** A tensor of `dims` whose element at multi-index idx is `src` element `offset(idx)`. */
export function remap(src: HostTensor, dims: readonly number[], offset: (idx: readonly number[]) => number): HostTensor {
  const n = sizeOf(dims);
  const out = allocLike(src.data, n) as unknown as { [i: number]: unknown };
  const from = src.data as unknown as ArrayLike<unknown>;
  const idx = new Array<number>(dims.length).fill(0);
  for (let i = 0; i < n; i++) {
    out[i] = from[offset(idx)];
    for (let d = dims.length - 1; d >= 0; d--) {
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
  }
  return { dtype: src.dtype, dims: [...dims], data: out as unknown as HostData };
}

/** Same data, new dims (the caller has checked the element count). */
export const hostReshape = (t: HostTensor, dims: readonly number[]): HostTensor => ({ dtype: t.dtype, dims: [...dims], data: t.data });

export function hostTranspose(t: HostTensor, perm: readonly number[]): HostTensor {
  const st = stridesOf(t.dims);
  const dims = perm.map((p) => t.dims[p]);
  return remap(t, dims, (idx) => {
    let off = 0;
    for (let d = 0; d < perm.length; d++) off += idx[d] * st[perm[d]];
    return off;
  });
}

/** Per-axis strided selection: output index i on axis d reads input index starts[d] + i * steps[d]. */
export function hostStrided(t: HostTensor, starts: readonly number[], steps: readonly number[], dims: readonly number[]): HostTensor {
  const st = stridesOf(t.dims);
  return remap(t, dims, (idx) => {
    let off = 0;
    for (let d = 0; d < dims.length; d++) off += (starts[d] + idx[d] * steps[d]) * st[d];
    return off;
  });
}

/** Flat offsets into `dims` (a shape broadcast to `out`) for every position of `out`, in order. */
export function broadcastOffsets(dims: readonly number[], out: readonly number[]): Int32Array {
  const pad = out.length - dims.length;
  const strides = new Array<number>(out.length).fill(0);
  for (let d = dims.length - 1, acc = 1; d >= 0; d--) {
    strides[d + pad] = dims[d] === 1 ? 0 : acc;
    acc *= dims[d];
  }
  const n = sizeOf(out);
  const offs = new Int32Array(n);
  const idx = new Array<number>(out.length).fill(0);
  let off = 0;
  for (let i = 0; i < n; i++) {
    offs[i] = off;
    for (let d = out.length - 1; d >= 0; d--) {
      off += strides[d];
      if (++idx[d] < out[d]) break;
      off -= strides[d] * idx[d];
      idx[d] = 0;
    }
  }
  return offs;
}

/** numpy-style broadcast of `t` to `dims` (the caller has checked compatibility). */
export function hostBroadcast(t: HostTensor, dims: readonly number[]): HostTensor {
  const pad = dims.length - t.dims.length;
  const st = stridesOf(t.dims);
  return remap(t, dims, (idx) => {
    let off = 0;
    for (let d = 0; d < t.dims.length; d++) if (t.dims[d] !== 1) off += idx[d + pad] * st[d];
    return off;
  });
}

export function hostTile(t: HostTensor, reps: readonly number[]): HostTensor {
  const st = stridesOf(t.dims);
  const dims = t.dims.map((d, i) => d * reps[i]);
  return remap(t, dims, (idx) => {
    let off = 0;
    for (let d = 0; d < dims.length; d++) off += (idx[d] % t.dims[d]) * st[d];
    return off;
  });
}

/** Gather along `axis` with already-normalised indices of shape `idxDims`. */
export function hostGather(t: HostTensor, indices: readonly number[], idxDims: readonly number[], axis: number): HostTensor {
  const st = stridesOf(t.dims);
  const q = idxDims.length;
  const dims = [...t.dims.slice(0, axis), ...idxDims, ...t.dims.slice(axis + 1)];
  const ist = stridesOf(idxDims);
  return remap(t, dims, (idx) => {
    let off = 0;
    for (let d = 0; d < axis; d++) off += idx[d] * st[d];
    let k = 0;
    for (let d = 0; d < q; d++) k += idx[axis + d] * ist[d];
    off += indices[k] * st[axis];
    for (let d = axis + 1; d < t.dims.length; d++) off += idx[d - 1 + q] * st[d];
    return off;
  });
}

export function hostConcat(ts: readonly HostTensor[], axis: number): HostTensor {
  const dims = [...ts[0].dims];
  dims[axis] = ts.reduce((a, t) => a + t.dims[axis], 0);
  const n = sizeOf(dims);
  const out = allocLike(ts[0].data, n) as unknown as { [i: number]: unknown };
  // Row-major: the output is, for each outer index, the inputs' contiguous blocks one after another.
  const outer = sizeOf(dims.slice(0, axis));
  let o = 0;
  for (let i = 0; i < outer; i++) {
    for (const t of ts) {
      const block = sizeOf(t.dims.slice(axis));
      const from = t.data as unknown as ArrayLike<unknown>;
      for (let j = 0; j < block; j++) out[o++] = from[i * block + j];
    }
  }
  return { dtype: ts[0].dtype, dims, data: out as unknown as HostData };
}

/** The value at flat position i as a number (int64 included; float16/bfloat16 decoded from their bits). */
export function numAt(t: HostTensor, i: number): number {
  const v = Number((t.data as ArrayLike<number | bigint>)[i]);
  if (t.dtype === OnnxDataType.FLOAT16) return float16BitsToNumber(v);
  if (t.dtype === OnnxDataType.BFLOAT16) return bfloat16BitsToNumber(v);
  return v;
}

/** Every value of a host tensor as a number (see numAt). */
export function hostFloats(t: HostTensor): number[] {
  const n = (t.data as ArrayLike<unknown>).length;
  const out = new Array<number>(n);
  for (let i = 0; i < n; i++) out[i] = numAt(t, i);
  return out;
}

/** A host tensor filled with `value`'s single element. */
export function hostFill(value: HostTensor, dims: readonly number[]): HostTensor {
  const n = sizeOf(dims);
  const out = allocLike(value.data, n) as unknown as { fill(v: unknown): unknown };
  out.fill((value.data as unknown as ArrayLike<unknown>)[0]);
  return { dtype: value.dtype, dims: [...dims], data: out as unknown as HostData };
}
