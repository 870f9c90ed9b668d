// exp and the functions built on it, accurate in every dtype. MLX's CPU backend evaluates exp,
// sigmoid, erf, logaddexp, logsumexp and softmax with float32 polynomial approximations even on
// float64 arrays (relative error ≈ 5e-7, piecewise, so a central difference of exp in float64 is
// off by tens of percent). expm1, tanh, log and power are exact there. For float64 the kernels
// therefore build exp from expm1 (whose VJP is exact too) and the rest from exp; other dtypes use
// MLX's own ops unchanged.
import * as mx from '@mlx/core';
import type { Array } from '@mlx/core';

const needsExactPath = (x: Array) => x.dtype === 'float64';

export function exp(x: Array): Array {
  if (!needsExactPath(x)) return mx.exp(x);
  using m1 = mx.expm1(x);
  return mx.add(m1, 1);
}

/** σ(x) = (1 + tanh(x/2))/2 in float64. */
export function sigmoid(x: Array): Array {
  if (!needsExactPath(x)) return mx.sigmoid(x);
  return mx.scope(() => mx.multiply(mx.add(mx.tanh(mx.multiply(x, 0.5)), 1), 0.5));
}

/** A row maximum that is 0 where the row is ±∞ everywhere, so that x − max stays finite or −∞. */
function finiteMax(x: Array, axis: number): Array {
  const m = mx.stopGradient(mx.max(x, axis, { keepdims: true }));
  return mx.where(mx.isinf(m), mx.scalar(0, x.dtype), m);
}

export function logsumexp(x: Array, axis: number, options: { keepdims?: boolean } = {}): Array {
  if (!needsExactPath(x)) return mx.logsumexp(x, axis, options);
  return mx.scope(() => {
    const m = finiteMax(x, axis);
    const out = mx.add(mx.log(mx.sum(exp(mx.subtract(x, m)), axis, { keepdims: true })), m);
    return options.keepdims ? out : mx.squeeze(out, axis);
  });
}

export function logaddexp(a: Array, b: Array): Array {
  if (!needsExactPath(a)) return mx.logaddexp(a, b);
  return mx.scope(() => {
    const m0 = mx.stopGradient(mx.maximum(a, b));
    const m = mx.where(mx.isinf(m0), mx.scalar(0, a.dtype), m0);
    return mx.add(mx.log(mx.add(exp(mx.subtract(a, m)), exp(mx.subtract(b, m)))), m);
  });
}

/** Softmax along `axis` (computed in float32 for half types, like MLX's precise softmax). */
export function softmax(x: Array, axis: number): Array {
  if (!needsExactPath(x)) return mx.softmax(x, axis, { precise: true });
  return mx.scope(() => exp(mx.subtract(x, logsumexp(x, axis, { keepdims: true }))));
}
