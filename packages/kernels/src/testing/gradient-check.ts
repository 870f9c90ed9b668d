// The kernels' gradient standard in one place: a kernel's registered custom VJP must match
// central finite differences of its forward in float64 on the CPU stream, and MLX's autodiff of
// its composite reference; its explicit *Vjp function must give the same numbers.
import * as mx from '@mlx/core';
import type { Array } from '@mlx/core';
import { finiteDifferenceVjp, randn, relativeError } from './numeric.js';

export interface GradientCheck {
  /** The kernel (its custom VJP is what vjp() differentiates). */
  kernel: (...xs: Array[]) => Array;
  /** The same function from plain ops, differentiated by MLX's autodiff. */
  composite: (...xs: Array[]) => Array;
  primals: Array[];
  /** Which primals are differentiable (others are constants such as labels). Default: all. */
  wrt?: number[];
  step?: number;
}

export interface GradientErrors {
  forward: number;
  finiteDifference: number[];
  autodiff: number[];
}

/** Relative errors of the kernel's VJP against finite differences and autodiff (call inside onCpu). */
export function gradientErrors(check: GradientCheck): GradientErrors {
  return mx.scope(() => {
    const out = check.kernel(...check.primals);
    const cotangent = randn(out.shape, out.dtype);
    const wrt = check.wrt ?? check.primals.map((_, i) => i);
    const [, custom] = mx.vjp(check.kernel, check.primals, [cotangent]);
    const [, auto] = mx.vjp(check.composite, check.primals, [cotangent]);
    const fd = finiteDifferenceVjp(check.kernel, check.primals, cotangent, { wrt, step: check.step });
    return {
      forward: relativeError(out, check.composite(...check.primals)),
      finiteDifference: wrt.map((i, n) => relativeError(custom[i], fd[n])),
      autodiff: wrt.map((i) => relativeError(custom[i], auto[i])),
    };
  });
}
