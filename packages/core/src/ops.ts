// The public op surface: every generated op (one per C function, e.g. sumAxes), plus curated
// functions with MLX's Python-style signatures where mlx-c splits one op into several entries
// (sum(a, axis?, keepdims?) dispatches to mlx_sum / mlx_sum_axis / mlx_sum_axes).
import type { Array, ArrayLike } from './array.js';
import type { Dtype } from './dtype.js';
import * as g from './generated/ops.js';
import type { OpOptions } from './stream.js';

export * from './generated/ops.js';

export type Axis = number | readonly number[];
export interface ReduceOptions extends OpOptions {
  keepdims?: boolean;
}

type Reducer = {
  all: (a: ArrayLike, keepdims: boolean, o?: OpOptions) => Array;
  axis: (a: ArrayLike, axis: number, keepdims: boolean, o?: OpOptions) => Array;
  axes: (a: ArrayLike, axes: readonly number[], keepdims: boolean, o?: OpOptions) => Array;
};
function reducer(r: Reducer) {
  return (a: ArrayLike, axis?: Axis | null, opts: ReduceOptions = {}): Array => {
    const k = opts.keepdims ?? false;
    if (axis == null) return r.all(a, k, opts);
    if (typeof axis === 'number') return r.axis(a, axis, k, opts);
    return r.axes(a, axis, k, opts);
  };
}

export const sum = reducer({ all: g.sum, axis: g.sumAxis, axes: g.sumAxes });
export const mean = reducer({ all: g.mean, axis: g.meanAxis, axes: g.meanAxes });
export const prod = reducer({ all: g.prod, axis: g.prodAxis, axes: g.prodAxes });
export const max = reducer({ all: g.max, axis: g.maxAxis, axes: g.maxAxes });
export const min = reducer({ all: g.min, axis: g.minAxis, axes: g.minAxes });
export const all = reducer({ all: g.all, axis: g.allAxis, axes: g.allAxes });
export const any = reducer({ all: g.any, axis: g.anyAxis, axes: g.anyAxes });
export const logsumexp = reducer({ all: g.logsumexp, axis: g.logsumexpAxis, axes: g.logsumexpAxes });

export interface VarOptions extends ReduceOptions {
  ddof?: number;
}
function varLike(allF: typeof g.var_, axisF: typeof g.varAxis, axesF: typeof g.varAxes) {
  return (a: ArrayLike, axis?: Axis | null, opts: VarOptions = {}): Array => {
    const k = opts.keepdims ?? false;
    const ddof = opts.ddof ?? 0;
    if (axis == null) return allF(a, k, ddof, opts);
    if (typeof axis === 'number') return axisF(a, axis, k, ddof, opts);
    return axesF(a, axis, k, ddof, opts);
  };
}
export const variance = varLike(g.var_, g.varAxis, g.varAxes);
export const std = varLike(g.std, g.stdAxis, g.stdAxes);

export function argmax(a: ArrayLike, axis?: number | null, opts: ReduceOptions = {}): Array {
  return axis == null ? g.argmax(a, opts.keepdims ?? false, opts) : g.argmaxAxis(a, axis, opts.keepdims ?? false, opts);
}
export function argmin(a: ArrayLike, axis?: number | null, opts: ReduceOptions = {}): Array {
  return axis == null ? g.argmin(a, opts.keepdims ?? false, opts) : g.argminAxis(a, axis, opts.keepdims ?? false, opts);
}

export interface SoftmaxOptions extends OpOptions {
  /** Compute in float32 for lower-precision inputs. */
  precise?: boolean;
}
export function softmax(a: ArrayLike, axis: Axis | null = -1, opts: SoftmaxOptions = {}): Array {
  const p = opts.precise ?? false;
  if (axis == null) return g.softmax(a, p, opts);
  if (typeof axis === 'number') return g.softmaxAxis(a, axis, p, opts);
  return g.softmaxAxes(a, axis, p, opts);
}

export function squeeze(a: ArrayLike, axis?: Axis | null, opts?: OpOptions): Array {
  if (axis == null) return g.squeeze(a, opts);
  if (typeof axis === 'number') return g.squeezeAxis(a, axis, opts);
  return g.squeezeAxes(a, axis, opts);
}
export function expandDims(a: ArrayLike, axis: Axis, opts?: OpOptions): Array {
  return typeof axis === 'number' ? g.expandDims(a, axis, opts) : g.expandDimsAxes(a, axis, opts);
}
export function transpose(a: ArrayLike, axes?: readonly number[] | null, opts?: OpOptions): Array {
  return axes == null ? g.transpose(a, opts) : g.transposeAxes(a, axes, opts);
}
export function concatenate(arrays: readonly ArrayLike[], axis: number | null = 0, opts?: OpOptions): Array {
  return axis == null ? g.concatenate(arrays, opts) : g.concatenateAxis(arrays, axis, opts);
}
export function stack(arrays: readonly ArrayLike[], axis = 0, opts?: OpOptions): Array {
  return g.stackAxis(arrays, axis, opts);
}
/** Splits into `sections` equal parts, or at the given indices. */
export function split(a: ArrayLike, sections: number | readonly number[], axis = 0, opts?: OpOptions): Array[] {
  return typeof sections === 'number' ? g.split(a, sections, axis, opts) : g.splitSections(a, sections, axis, opts);
}
export function sort(a: ArrayLike, axis: number | null = -1, opts?: OpOptions): Array {
  return axis == null ? g.sort(a, opts) : g.sortAxis(a, axis, opts);
}
export function argsort(a: ArrayLike, axis: number | null = -1, opts?: OpOptions): Array {
  return axis == null ? g.argsort(a, opts) : g.argsortAxis(a, axis, opts);
}
export function take(a: ArrayLike, indices: ArrayLike, axis?: number | null, opts?: OpOptions): Array {
  return axis == null ? g.take(a, indices, opts) : g.takeAxis(a, indices, axis, opts);
}
export function topk(a: ArrayLike, k: number, axis: number | null = -1, opts?: OpOptions): Array {
  return axis == null ? g.topk(a, k, opts) : g.topkAxis(a, k, axis, opts);
}
export function roll(a: ArrayLike, shift: number | readonly number[], axis?: Axis | null, opts?: OpOptions): Array {
  const sh = typeof shift === 'number' ? [shift] : shift;
  if (axis == null) return g.roll(a, sh, opts);
  if (typeof axis === 'number') return g.rollAxis(a, sh, axis, opts);
  return g.rollAxes(a, sh, axis, opts);
}
export function repeat(a: ArrayLike, repeats: number, axis?: number | null, opts?: OpOptions): Array {
  return axis == null ? g.repeat(a, repeats, opts) : g.repeatAxis(a, repeats, axis, opts);
}

export interface CumOptions extends OpOptions {
  reverse?: boolean;
  inclusive?: boolean;
}
const cum =
  (f: typeof g.cumsum) =>
  (a: ArrayLike, axis = 0, o: CumOptions = {}) =>
    f(a, axis, o.reverse ?? false, o.inclusive ?? true, o);
export const cumsum = cum(g.cumsum);
export const cumprod = cum(g.cumprod);
export const cummax = cum(g.cummax);
export const cummin = cum(g.cummin);
export const logcumsumexp = cum(g.logcumsumexp);

export function arange(start: number, stop?: number, step = 1, dtype: Dtype = 'float32', opts?: OpOptions): Array {
  if (stop === undefined) return g.arange(0, start, step, dtype, opts);
  return g.arange(start, stop, step, dtype, opts);
}
export function zeros(shape: readonly number[], dtype: Dtype = 'float32', opts?: OpOptions): Array {
  return g.zeros(shape, dtype, opts);
}
export function ones(shape: readonly number[], dtype: Dtype = 'float32', opts?: OpOptions): Array {
  return g.ones(shape, dtype, opts);
}
export function full(shape: readonly number[], value: ArrayLike, dtype?: Dtype, opts?: OpOptions): Array {
  if (dtype === undefined) {
    dtype = typeof value === 'number' ? 'float32' : typeof value === 'boolean' ? 'bool' : typeof value === 'bigint' ? 'int64' : value.dtype;
  }
  return g.full(shape, value, dtype, opts);
}
export function flatten(a: ArrayLike, startAxis = 0, endAxis = -1, opts?: OpOptions): Array {
  return g.flatten(a, startAxis, endAxis, opts);
}
export function clip(a: ArrayLike, lo?: ArrayLike | null, hi?: ArrayLike | null, opts?: OpOptions): Array {
  return g.clip(a, lo, hi, opts);
}
export function reshape(a: ArrayLike, shape: readonly number[], opts?: OpOptions): Array {
  return g.reshape(a, shape, opts);
}
export function matmul(a: ArrayLike, b: ArrayLike, opts?: OpOptions): Array {
  return g.matmul(a, b, opts);
}
