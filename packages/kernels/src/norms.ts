// Layer norm and RMS norm over the trailing axes [axis, ndim), with their pullbacks registered as
// custom VJPs. The forward is MLX's fast.layerNorm / fast.rmsNorm on the trailing axes flattened
// into one; the pullback is the closed form (one pass, no saved statistics needed: it recomputes
// mean and 1/std from x, which is cheaper than keeping them alive across the forward).
import { add, broadcastTo, fast, mean, multiply, reshape, rsqrt, scope, square, subtract, type Array } from '@mlx/core';
import { reduceToShape } from './broadcast.js';
import { defineCustomVjp } from './custom-vjp.js';

export interface NormOptions {
  /** Added to the variance (mean square for RMS norm) before the square root (default 1e-5). */
  eps?: number;
  /** First normalised axis; every axis from it to the last is normalised (default −1). */
  axis?: number;
}

interface NormConfig {
  [key: string]: number | boolean;
  eps: number;
  axis: number;
  hasWeight: boolean;
  hasBias: boolean;
}

function normConfig(x: Array, options: NormOptions, hasWeight: boolean, hasBias: boolean): NormConfig {
  const ndim = x.ndim;
  const axis = options.axis ?? -1;
  const a = axis < 0 ? axis + ndim : axis;
  if (!Number.isInteger(a) || a < 0 || a >= ndim) throw new RangeError(`norm axis ${axis} is out of range for an array of rank ${ndim}`);
  return { eps: options.eps ?? 1e-5, axis: a, hasWeight, hasBias };
}

const normAxes = (ndim: number, axis: number) => globalThis.Array.from({ length: ndim - axis }, (_, i) => axis + i);

/** x as [...leading, n] and a per-feature parameter as [n] (broadcast to the normalised shape first). */
function flattened(x: Array, axis: number): { x2: Array; param: (p: Array | undefined) => Array | null } {
  const shape = x.shape;
  const normShape = shape.slice(axis);
  const n = normShape.reduce((a, b) => a * b, 1);
  return {
    x2: reshape(x, [...shape.slice(0, axis), n]),
    param: (p) => (p ? reshape(broadcastTo(p, normShape), [n]) : null),
  };
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

/** Layer norm from plain ops (differentiated by MLX's autodiff: the reference for tests). */
export function layerNormComposite(x: Array, weight?: Array | null, bias?: Array | null, options: NormOptions = {}): Array {
  const c = normConfig(x, options, !!weight, !!bias);
  return scope(() => {
    const axes = normAxes(x.ndim, c.axis);
    const centred = subtract(x, mean(x, axes, { keepdims: true }));
    let y = multiply(centred, rsqrt(add(mean(square(centred), axes, { keepdims: true }), c.eps)));
    if (weight) y = multiply(y, weight);
    if (bias) y = add(y, bias);
    return y;
  });
}

// MLX's fast norms compute in float32 whatever the input dtype; float64 takes the composite.
const layerNormOp = defineCustomVjp<NormConfig>(
  (inputs, c) => {
    const { x, w, b } = unpack(inputs, c);
    if (x.dtype === 'float64') return [layerNormComposite(x, w, b, c)];
    const { x2, param } = flattened(x, c.axis);
    return [reshape(fast.layerNorm(x2, param(w), param(b), c.eps), x.shape)];
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

/** RMS norm from plain ops (the autodiff reference). */
export function rmsNormComposite(x: Array, weight?: Array | null, options: NormOptions = {}): Array {
  const c = normConfig(x, options, !!weight, false);
  return scope(() => {
    const axes = normAxes(x.ndim, c.axis);
    const y = multiply(x, rsqrt(add(mean(square(x), axes, { keepdims: true }), c.eps)));
    return weight ? multiply(y, weight) : y;
  });
}

const rmsNormOp = defineCustomVjp<NormConfig>(
  (inputs, c) => {
    const { x, w } = unpack(inputs, c);
    if (x.dtype === 'float64') return [rmsNormComposite(x, w, c)];
    const { x2, param } = flattened(x, c.axis);
    return [reshape(fast.rmsNorm(x2, param(w), c.eps), x.shape)];
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
