// Layer norm and RMS norm over the trailing axes [axis, ndim), with their pullbacks registered as
// custom VJPs. The forward is the project's fused norm kernels (mx.ext.fusedLayerNorm /
// mx.ext.fusedRmsNorm: one native pass per row for float32 on the CPU, MLX's fast norms elsewhere)
// where the layout fits them, else the statistics spelled out. The pullback is the closed form
// (one pass, no saved statistics needed: it recomputes mean and 1/std from x, which is cheaper
// than keeping them alive across the forward).
import * as mx from '@mlx/core';
import { add, astype, broadcastTo, mean, multiply, reshape, rsqrt, scope, square, subtract, type Array } from '@mlx/core';
import { reduceToShape } from './broadcast.js';
import { defineCustomVjp } from './custom-vjp.js';

/**
 * Which forward runs. 'auto': the fused kernels when the normalised axis is the last one and the
 * input is not float64 (MLX's fast norms compute in float32), else the composite. 'fused': the
 * fused kernels always (several trailing axes are flattened into one). 'composite': plain ops.
 */
export type NormImplementation = 'auto' | 'fused' | 'composite';

export interface NormOptions {
  /** Added to the variance (mean square for RMS norm) before the square root (default 1e-5). */
  eps?: number;
  /** First normalised axis; every axis from it to the last is normalised (default −1). */
  axis?: number;
  /**
   * The composite computes the statistics of float16/bfloat16 input in float32 and casts the
   * result back (default true); false keeps the input's precision. The fused kernels always
   * accumulate in float32.
   */
  upcast?: boolean;
  /** Which forward runs (default 'auto'). */
  implementation?: NormImplementation;
}

/** The options of the *WithStats functions, which always run the composite. */
export type NormStatsOptions = Omit<NormOptions, 'implementation'>;

interface NormConfig {
  [key: string]: number | boolean | string;
  eps: number;
  axis: number;
  hasWeight: boolean;
  hasBias: boolean;
  upcast: boolean;
  implementation: NormImplementation;
}

function normConfig(x: Array, options: NormOptions, hasWeight: boolean, hasBias: boolean): NormConfig {
  const ndim = x.ndim;
  const axis = options.axis ?? -1;
  const a = axis < 0 ? axis + ndim : axis;
  if (!Number.isInteger(a) || a < 0 || a >= ndim) throw new RangeError(`norm axis ${axis} is out of range for an array of rank ${ndim}`);
  return {
    eps: options.eps ?? 1e-5,
    axis: a,
    hasWeight,
    hasBias,
    upcast: options.upcast ?? true,
    implementation: options.implementation ?? 'auto',
  };
}

const normAxes = (ndim: number, axis: number) => globalThis.Array.from({ length: ndim - axis }, (_, i) => axis + i);

/** float16/bfloat16 widened to float32 for the statistics; other dtypes as they are. */
const widened = (x: Array, upcast: boolean) => (upcast && (x.dtype === 'float16' || x.dtype === 'bfloat16') ? astype(x, 'float32') : x);

/** The composite's result in the input's dtype (it differs after widening or with wider parameters). */
const inDtypeOf = (y: Array, x: Array) => (y.dtype === x.dtype ? y : astype(y, x.dtype));

type Path = 'composite' | 'last' | 'flattened';

function pathOf(x: Array, c: NormConfig): Path {
  if (c.implementation === 'composite') return 'composite';
  const last = c.axis === x.ndim - 1;
  if (c.implementation === 'auto' && (x.dtype === 'float64' || !last)) return 'composite';
  return last ? 'last' : 'flattened';
}

/** Whether every given parameter is a vector of the last axis (what the fused kernels take as is). */
function vectors(x: Array, ...params: (Array | undefined)[]): boolean {
  const n = x.shape[x.ndim - 1];
  return params.every((p) => !p || (p.ndim === 1 && p.shape[0] === n));
}

/**
 * The fused kernel `norm` over the normalised axes: over the last axis with vector parameters
 * inside the kernel and others applied afterwards by broadcasting; over several axes flattened
 * into one, the parameters broadcast to the normalised shape and flattened with them.
 */
function fusedForward(
  x: Array,
  w: Array | undefined,
  b: Array | undefined,
  c: NormConfig,
  norm: (x: Array, w: Array | null, b: Array | null) => Array,
): Array {
  if (pathOf(x, c) === 'last') {
    if (vectors(x, w, b)) return norm(x, w ?? null, b ?? null);
    let y = norm(x, null, null);
    if (w) y = multiply(y, w);
    return b ? add(y, b) : y;
  }
  return scope(() => {
    const shape = x.shape;
    const normShape = shape.slice(c.axis);
    const n = normShape.reduce((p, q) => p * q, 1);
    const flat = (p: Array | undefined) => (p ? reshape(broadcastTo(p, normShape), [n]) : null);
    return reshape(norm(reshape(x, [...shape.slice(0, c.axis), n]), flat(w), flat(b)), shape);
  });
}

/** Splits [x, weight?, bias?] by the config flags. */
function unpack(inputs: Array[], c: NormConfig): { x: Array; w?: Array; b?: Array } {
  let i = 1;
  const w = c.hasWeight ? inputs[i++] : undefined;
  const b = c.hasBias ? inputs[i++] : undefined;
  return { x: inputs[0], w, b };
}

export interface LayerNormGradients {
  dx: Array;
  dweight?: Array;
  dbias?: Array;
}

/** The layer-norm pullback: dx = rstd·(g − mean(g) − x̂·mean(g·x̂)) with g = dy·w. */
export function layerNormVjp(
  x: Array,
  weight: Array | null | undefined,
  bias: Array | null | undefined,
  gradOut: Array,
  options: NormOptions = {},
): LayerNormGradients {
  const c = normConfig(x, options, !!weight, !!bias);
  return scope(() => {
    const axes = normAxes(x.ndim, c.axis);
    const centred = subtract(x, mean(x, axes, { keepdims: true }));
    const rstd = rsqrt(add(mean(square(centred), axes, { keepdims: true }), c.eps));
    const xhat = multiply(centred, rstd);
    const g = weight ? multiply(gradOut, weight) : gradOut;
    const inner = subtract(
      subtract(g, mean(g, axes, { keepdims: true })),
      multiply(xhat, mean(multiply(g, xhat), axes, { keepdims: true })),
    );
    const dx = multiply(rstd, inner);
    const dweight = weight ? reduceToShape(multiply(gradOut, xhat), weight.shape) : undefined;
    const dbias = bias ? reduceToShape(gradOut, bias.shape) : undefined;
    return { dx, dweight, dbias };
  });
}

/** Layer norm with the statistics it normalised by. */
export interface LayerNormStats {
  /** The normalised x, scaled and shifted, in x's dtype. */
  y: Array;
  /** mean(x) over the normalised axes, kept as size 1, in the dtype the statistics were computed in. */
  mean: Array;
  /** 1/sqrt(var(x) + eps), shaped and typed like `mean`. */
  invStd: Array;
}

function layerNormStats(x: Array, w: Array | null | undefined, b: Array | null | undefined, c: NormConfig): LayerNormStats {
  return scope(() => {
    const xs = widened(x, c.upcast);
    const axes = normAxes(x.ndim, c.axis);
    const mu = mean(xs, axes, { keepdims: true });
    const centred = subtract(xs, mu);
    const invStd = rsqrt(add(mean(square(centred), axes, { keepdims: true }), c.eps));
    let y = multiply(centred, invStd);
    if (w) y = multiply(y, w);
    if (b) y = add(y, b);
    return { y: inDtypeOf(y, x), mean: mu, invStd };
  });
}

/**
 * Layer norm and its statistics, from plain ops (what ONNX's Mean and InvStdDev outputs need).
 * The statistics are computed in float32 for float16/bfloat16 input unless `upcast` is false.
 * Differentiated by MLX's autodiff (no custom VJP).
 */
export function layerNormWithStats(x: Array, weight?: Array | null, bias?: Array | null, options: NormStatsOptions = {}): LayerNormStats {
  return layerNormStats(x, weight, bias, normConfig(x, options, !!weight, !!bias));
}

/** Layer norm from plain ops (differentiated by MLX's autodiff: the reference for tests). */
export function layerNormComposite(x: Array, weight?: Array | null, bias?: Array | null, options: NormStatsOptions = {}): Array {
  return layerNormStats(x, weight, bias, normConfig(x, options, !!weight, !!bias)).y;
}

const layerNormOp = defineCustomVjp<NormConfig>(
  (inputs, c) => {
    const { x, w, b } = unpack(inputs, c);
    if (pathOf(x, c) === 'composite') return [layerNormStats(x, w, b, c).y];
    return [fusedForward(x, w, b, c, (x2, w2, b2) => mx.ext.fusedLayerNorm(x2, w2, b2, c.eps))];
  },
  (inputs, [dy], _outputs, c) => {
    const { x, w, b } = unpack(inputs, c);
    const g = layerNormVjp(x, w, b, dy, c);
    return [g.dx, ...(g.dweight ? [g.dweight] : []), ...(g.dbias ? [g.dbias] : [])];
  },
);

/**
 * Layer normalisation of x over the axes [axis, ndim): (x − mean)/sqrt(var + eps)·weight + bias,
 * weight and bias broadcastable to x.shape[axis:]. Differentiable (pullback: layerNormVjp).
 */
export function layerNorm(x: Array, weight?: Array | null, bias?: Array | null, options: NormOptions = {}): Array {
  const c = normConfig(x, options, !!weight, !!bias);
  return layerNormOp([x, ...(weight ? [weight] : []), ...(bias ? [bias] : [])], c)[0];
}

export interface RmsNormGradients {
  dx: Array;
  dweight?: Array;
}

/** The RMS-norm pullback: dx = rstd·(g − x̂·mean(g·x̂)) with g = dy·w. */
export function rmsNormVjp(x: Array, weight: Array | null | undefined, gradOut: Array, options: NormOptions = {}): RmsNormGradients {
  const c = normConfig(x, options, !!weight, false);
  return scope(() => {
    const axes = normAxes(x.ndim, c.axis);
    const rstd = rsqrt(add(mean(square(x), axes, { keepdims: true }), c.eps));
    const xhat = multiply(x, rstd);
    const g = weight ? multiply(gradOut, weight) : gradOut;
    const dx = multiply(rstd, subtract(g, multiply(xhat, mean(multiply(g, xhat), axes, { keepdims: true }))));
    return { dx, dweight: weight ? reduceToShape(multiply(gradOut, xhat), weight.shape) : undefined };
  });
}

/** RMS norm with the statistic it normalised by. */
export interface RmsNormStats {
  /** The normalised x, scaled, in x's dtype. */
  y: Array;
  /** 1/sqrt(mean(x²) + eps) over the normalised axes, kept as size 1, in the dtype it was computed in. */
  invStd: Array;
}

function rmsNormStats(x: Array, w: Array | null | undefined, c: NormConfig): RmsNormStats {
  return scope(() => {
    const xs = widened(x, c.upcast);
    const axes = normAxes(x.ndim, c.axis);
    const invStd = rsqrt(add(mean(square(xs), axes, { keepdims: true }), c.eps));
    const y = multiply(xs, invStd);
    return { y: inDtypeOf(w ? multiply(y, w) : y, x), invStd };
  });
}

/** RMS norm and its statistic from plain ops (as layerNormWithStats). */
export function rmsNormWithStats(x: Array, weight?: Array | null, options: NormStatsOptions = {}): RmsNormStats {
  return rmsNormStats(x, weight, normConfig(x, options, !!weight, false));
}

/** RMS norm from plain ops (the autodiff reference). */
export function rmsNormComposite(x: Array, weight?: Array | null, options: NormStatsOptions = {}): Array {
  return rmsNormStats(x, weight, normConfig(x, options, !!weight, false)).y;
}

const rmsNormOp = defineCustomVjp<NormConfig>(
  (inputs, c) => {
    const { x, w } = unpack(inputs, c);
    if (pathOf(x, c) === 'composite') return [rmsNormStats(x, w, c).y];
    return [fusedForward(x, w, undefined, c, (x2, w2) => mx.ext.fusedRmsNorm(x2, w2, c.eps))];
  },
  (inputs, [dy], _outputs, c) => {
    const { x, w } = unpack(inputs, c);
    const g = rmsNormVjp(x, w, dy, c);
    return [g.dx, ...(g.dweight ? [g.dweight] : [])];
  },
);

/**
 * RMS normalisation of x over the axes [axis, ndim): x/sqrt(mean(x²) + eps)·weight, weight
 * broadcastable to x.shape[axis:]. Differentiable (pullback: rmsNormVjp).
 */
export function rmsNorm(x: Array, weight?: Array | null, options: NormOptions = {}): Array {
  const c = normConfig(x, options, !!weight, false);
  return rmsNormOp([x, ...(weight ? [weight] : [])], c)[0];
}
