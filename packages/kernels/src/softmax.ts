// Softmax and log-softmax along one axis. On the last axis of a float32 array the forward is the
// project's fused row kernel (mx.ext.fusedSoftmax: one native pass per row on the CPU, MLX's softmax
// elsewhere); otherwise MLX's precise softmax (float32 accumulation for half types), and in
// float64 the exact form (MLX's exp is float32-accurate there: see accurate-math.ts). Log-softmax
// is (x − max) − log(Σ exp(x − max)), in that order: next to the float32 limit x − logsumexp(x)
// loses the log term, and a row holding +inf is NaN throughout (inf − inf), as in onnxruntime.
// Both are differentiated by MLX's autodiff (the fused kernels differentiate as their composition).
import * as mx from '@mlx/core';
import { astype, log, max, moveaxis, subtract, sum, type Array } from '@mlx/core';
import { exp, softmax as preciseSoftmax } from './accurate-math.js';
import type { ActivationImplementation } from './activations.js';

export interface SoftmaxOptions {
  /**
   * 'auto' (default): the fused kernel on the last axis of float32 input, else the composite.
   * 'fused': the fused kernel always (another axis is moved last and back). 'composite': plain ops.
   */
  implementation?: ActivationImplementation;
}

function resolvedAxis(x: Array, axis: number): number {
  const a = axis < 0 ? axis + x.ndim : axis;
  if (!Number.isInteger(a) || a < 0 || a >= x.ndim)
    throw new RangeError(`softmax axis ${axis} is out of range for an array of rank ${x.ndim}`);
  return a;
}

/** Whether the fused row kernel runs, and `x` with the axis last for it. */
function fusedOn(x: Array, a: number, options: SoftmaxOptions): boolean {
  const implementation = options.implementation ?? 'auto';
  if (implementation === 'composite') return false;
  return implementation === 'fused' || (x.dtype === 'float32' && a === x.ndim - 1);
}

function viaFused(x: Array, a: number, log: boolean): Array {
  if (a === x.ndim - 1) return mx.ext.fusedSoftmax(x, log);
  return mx.scope(() => moveaxis(mx.ext.fusedSoftmax(moveaxis(x, a, -1), log), -1, a));
}

/** softmax along `axis` (default −1). Empty arrays are returned as they are. */
export function softmax(x: Array, axis = -1, options: SoftmaxOptions = {}): Array {
  if (x.size === 0) return x;
  const a = resolvedAxis(x, axis);
  if (fusedOn(x, a, options)) return viaFused(x, a, false);
  return preciseSoftmax(x, a);
}

/**
 * log-softmax along `axis` (default −1): (x − max) − log(Σ exp(x − max)), computed in float32
 * for float16/bfloat16 input and returned in x's dtype. Empty arrays are returned as they are.
 */
export function logSoftmax(x: Array, axis = -1, options: SoftmaxOptions = {}): Array {
  if (x.size === 0) return x;
  const a = resolvedAxis(x, axis);
  if (fusedOn(x, a, options)) return viaFused(x, a, true);
  return mx.scope(() => {
    const xs = x.dtype === 'float16' || x.dtype === 'bfloat16' ? astype(x, 'float32') : x;
    const d = subtract(xs, max(xs, a, { keepdims: true }));
    const y = subtract(d, log(sum(exp(d), a, { keepdims: true })));
    return y.dtype === x.dtype ? y : astype(y, x.dtype);
  });
}
