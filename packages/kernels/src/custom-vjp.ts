// Registers a kernel's own backward pass as MLX's custom VJP of its forward, so that vjp /
// valueAndGrad / grad of any function that calls the kernel use it instead of differentiating
// the forward's ops. core's customVjp makes one native closure per JS function; a kernel's
// options (scale, eps, ...) are baked into the closure, so closures are cached per option set.
import { Array, customVjp, differentiating, type CompiledFunction } from '@mlx/core';

/** Options that select a closure: JSON-serialisable scalars and arrays of them (no Infinity/NaN). */
export type KernelConfig = Record<string, string | number | boolean | null | readonly number[]>;

type Forward<C> = (inputs: Array[], config: C) => Array[];
type Backward<C> = (primals: Array[], cotangents: Array[], outputs: Array[], config: C) => Array[];

// Every closure ever made, so that disposeCustomVjpCache() can release them all. Closures cannot
// be released while a graph that was built with them may still be differentiated: MLX calls
// back into the JS backward when the gradient is taken, long after the forward returned.
const caches = new Set<Map<string, CompiledFunction>>();

/**
 * Returns `apply(inputs, config)`: runs `forward` under a custom VJP whose backward is `backward`.
 * `backward` returns one cotangent per input (zeros for inputs that are treated as constants).
 * Outside a differentiation (core's `differentiating()`: inference, and traces for it) `forward`
 * runs bare: the wrapper would only add a CustomTransforms and a StopGradient node per call, and
 * a graph built there is never differentiated through it (the primitives' own VJPs serve a
 * compiled trace that is differentiated later).
 */
export function defineCustomVjp<C extends KernelConfig>(forward: Forward<C>, backward: Backward<C>) {
  const byConfig = new Map<string, CompiledFunction>();
  caches.add(byConfig);
  return (inputs: readonly Array[], config: C): Array[] => {
    if (!differentiating()) return forward([...inputs], config);
    const key = JSON.stringify(config);
    let fn = byConfig.get(key);
    if (!fn) {
      fn = customVjp(
        (...xs: Array[]) => forward(xs, config),
        (primals, cotangents, outputs) => backward(primals, cotangents, outputs, config),
      );
      byConfig.set(key, fn);
    }
    const out = fn(...inputs);
    return out instanceof Array ? [out] : out;
  };
}

/**
 * Releases every cached custom-VJP closure. Only call it when no graph built by a kernel is still
 * going to be differentiated (e.g. between training runs, or at shutdown).
 */
export function disposeCustomVjpCache(): void {
  for (const cache of caches) {
    for (const fn of cache.values()) fn.dispose();
    cache.clear();
  }
}

/** Number of live cached closures (for tests and diagnostics). */
export function customVjpCacheSize(): number {
  let n = 0;
  for (const cache of caches) n += cache.size;
  return n;
}
