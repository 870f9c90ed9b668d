// Numeric helpers for the kernels' tests: seeded inputs, norm-wise relative error, and central
// finite differences of a vector-Jacobian product (float64 on the CPU stream).
import * as mx from '@mlx/core';
import type { Array, Dtype } from '@mlx/core';

let counter = 0;
/** Standard-normal values from a fresh seeded key (deterministic per seed). */
export function randn(shape: readonly number[], dtype: Dtype = 'float32', seed = ++counter): Array {
  return mx.scope(() => mx.random.normal(shape, dtype, 0, 1, mx.random.key(seed)));
}

/** Uniform [0, 1) values from a seeded key. */
export function uniform(shape: readonly number[], seed = ++counter): Array {
  return mx.scope(() => mx.random.uniform(0, 1, shape, 'float32', mx.random.key(seed)));
}

/** a's elements as float64 on the host (row-major). */
export function values(a: Array): Float64Array {
  return Float64Array.from(mx.scope(() => mx.astype(a, 'float64')).toTypedArray() as Float64Array);
}

/** max|actual − expected| / max|expected| (0 when both are zero); NaN anywhere gives Infinity. */
export function relativeError(actual: Array, expected: Array): number {
  if (actual.shape.join() !== expected.shape.join()) throw new Error(`shapes differ: [${actual.shape}] vs [${expected.shape}]`);
  const a = values(actual);
  const e = values(expected);
  let err = 0;
  let scale = 0;
  for (let i = 0; i < a.length; i++) {
    if (Number.isNaN(a[i]) || Number.isNaN(e[i])) return Infinity;
    err = Math.max(err, Math.abs(a[i] - e[i]));
    scale = Math.max(scale, Math.abs(e[i]));
  }
  return scale === 0 ? err : err / scale;
}

export function hasNaN(a: Array): boolean {
  return values(a).some(Number.isNaN);
}

export function maxAbs(a: Array): number {
  return values(a).reduce((m, v) => Math.max(m, Math.abs(v)), 0);
}

/**
 * Central finite differences of L(xs) = Σ f(xs) ∘ cotangent with respect to each primal listed
 * in `wrt`: the reference for vector-Jacobian products. Primals must be float64.
 */
export function finiteDifferenceVjp(
  f: (...xs: Array[]) => Array,
  primals: readonly Array[],
  cotangent: Array,
  options: { step?: number; wrt?: number[] } = {},
): Array[] {
  const h = options.step ?? 1e-5;
  const wrt = options.wrt ?? primals.map((_, i) => i);
  const loss = (xs: Array[]) => mx.scope(() => mx.sum(mx.multiply(f(...xs), cotangent)).item() as number);
  return wrt.map((index) => {
    const x = primals[index];
    const base = values(x);
    const grad = new Float64Array(base.length);
    const at = (data: Float64Array) => {
      const xs = [...primals];
      xs[index] = mx.array(data, { dtype: x.dtype, shape: x.shape });
      try {
        return loss(xs);
      } finally {
        xs[index].dispose();
      }
    };
    for (let i = 0; i < base.length; i++) {
      const plus = Float64Array.from(base);
      const minus = Float64Array.from(base);
      plus[i] += h;
      minus[i] -= h;
      grad[i] = (at(plus) - at(minus)) / (2 * h);
    }
    return mx.array(grad, { dtype: 'float64', shape: x.shape });
  });
}

/** Runs `body` with the CPU stream as default (float64 exists only there). */
export function onCpu<T>(body: () => T): T {
  return mx.withStream('cpu', body);
}
