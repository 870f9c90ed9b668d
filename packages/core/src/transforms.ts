// Closures from JS functions, and the transforms built on them: compile, vjp, jvp, valueAndGrad,
// custom VJPs and checkpointing. MLX calls the JS function synchronously on the calling thread
// while it traces; one trampoline per callback kind serves every closure, keyed by its payload.
import { spawnSync } from 'node:child_process';
import type { MlxHandle } from '@mlx/sys';
import { Array } from './array.js';
import { makeVector, readVector, takeVector } from './call.js';
import { toInt32Array } from './ints.js';
import { flushDisposed, scope } from './lifetime.js';
import { check, checkHandle, fn, koffi, native, recordCallbackError } from './native.js';
import { defaultStream } from './stream.js';

type ArrayFn = (inputs: Array[]) => Array[];
type CustomVjpFn = (primals: Array[], cotangents: Array[], outputs: Array[]) => Array[];

const bodies = new Map<bigint, ArrayFn>();
const vjpBodies = new Map<bigint, CustomVjpFn>();

function writeResult(resPtr: unknown, outs: Array[]): void {
  const res = koffi.decode(resPtr, 'mlx_vector_array') as MlxHandle;
  for (const o of outs) {
    if (!(o instanceof Array)) throw new TypeError(`a traced function must return Arrays, got ${typeof o}`);
    check(fn.mlx_vector_array_append_value(res, o.handle), 'mlx_vector_array_append_value');
  }
}

// Every Array created during a callback (its inputs, intermediates, outputs) is freed when it returns:
// the native side keeps its own references to what it needs.
let trampolineFn: unknown;
let customTrampolineFn: unknown;
const trampoline = (): unknown =>
  (trampolineFn ??= koffi.register(
    (resPtr: unknown, input: MlxHandle, payload: unknown) => {
      try {
        const body = bodies.get(koffi.address(payload));
        if (!body) throw new Error('internal error: closure called after it was disposed');
        scope(() => {
          writeResult(resPtr, body(readVector(input)));
        });
        return 0;
      } catch (e) {
        recordCallbackError(e);
        return 1;
      }
    },
    koffi.pointer(native().types.callbacks.mlx_closure_fun_payload as never),
  ));

const customTrampoline = (): unknown =>
  (customTrampolineFn ??= koffi.register(
    (resPtr: unknown, primals: MlxHandle, cotangents: MlxHandle, outputs: MlxHandle, payload: unknown) => {
      try {
        const body = vjpBodies.get(koffi.address(payload));
        if (!body) throw new Error('internal error: custom vjp called after it was disposed');
        scope(() => {
          writeResult(resPtr, body(readVector(primals), readVector(cotangents), readVector(outputs)));
        });
        return 0;
      } catch (e) {
        recordCallbackError(e);
        return 1;
      }
    },
    koffi.pointer(native().types.callbacks.mlx_closure_custom_fun_payload as never),
  ));

// Buffers of Closure.apply: input and result addresses, and each result's dtype, ndim and up to 8
// dims. JS is single-threaded, but apply is re-entrant: a compiled function's trace runs its JS body,
// which may apply other closures (a custom VJP, a checkpoint). Only the outermost call uses these
// shared buffers; a nested call gets its own, so that it never overwrites what the outer call still
// has to pass again or read back.
const META_STRIDE = 10;
let applyIns = new BigUint64Array(16);
let applyOuts = new BigUint64Array(64);
let applyMeta = new Int32Array(64 * META_STRIDE);
const applyCount = new BigUint64Array(1);
let applyDepth = 0;

/** A native closure (mlx_closure) that calls a JS function. */
export class Closure {
  #handle: MlxHandle;
  #key: Uint8Array;
  #deps: { dispose(): void }[] = [];
  /** How many results the last apply gave. */
  #results = 0;

  /** @internal */
  constructor(handle: MlxHandle, key: Uint8Array, deps: { dispose(): void }[] = []) {
    this.#handle = handle;
    this.#key = key;
    this.#deps = deps;
  }

  static fromFunction(body: ArrayFn): Closure {
    const key = Buffer.alloc(1);
    bodies.set(koffi.address(key), body);
    const h = checkHandle(fn.mlx_closure_new_func_payload(trampoline(), key, null), 'mlx_closure_new_func_payload');
    return new Closure(h, key);
  }

  get handle(): MlxHandle {
    if (!this.#handle.ctx) throw new Error('closure was disposed');
    return this.#handle;
  }

  /**
   * Calls the closure: one native call that takes the inputs' addresses and returns the results'
   * addresses with their dtypes and shapes (so reading them later costs no call either).
   */
  apply(inputs: readonly Array[]): Array[] {
    const h = this.handle;
    const n = inputs.length;
    const outer = applyDepth === 0;
    let ins: BigUint64Array;
    if (!outer) ins = new BigUint64Array(Math.max(1, n));
    else {
      if (n > applyIns.length) applyIns = new BigUint64Array(Math.max(n, 2 * applyIns.length));
      ins = applyIns;
    }
    for (let i = 0; i < n; i++) ins[i] = inputs[i].address;
    // Room for as many results as this closure gave last time, so that the call is not repeated.
    let cap = Math.max(this.#results, outer ? applyOuts.length : 16);
    let outs = outer && cap <= applyOuts.length ? applyOuts : new BigUint64Array(cap);
    let meta = outer && cap <= applyOuts.length ? applyMeta : new Int32Array(cap * META_STRIDE);
    const count = outer ? applyCount : new BigUint64Array(1);
    applyDepth++;
    try {
      for (;;) {
        check(fn.mlxc_closure_apply_arrays(count, outs, meta, cap, META_STRIDE, h, ins, n), 'mlxc_closure_apply_arrays');
        if (Number(count[0]) <= cap) break;
        // More results than room: nothing was kept; grow the buffers and call again (the same
        // inputs: `ins` is this call's own or, outermost, untouched by nested calls).
        cap = Number(count[0]);
        outs = new BigUint64Array(cap);
        meta = new Int32Array(cap * META_STRIDE);
      }
    } finally {
      applyDepth--;
    }
    if (outer && outs !== applyOuts && outs.length > applyOuts.length) {
      applyOuts = outs;
      applyMeta = meta;
    }
    const k = Number(count[0]);
    this.#results = k;
    const out: Array[] = [];
    for (let i = 0; i < k; i++) {
      const m = i * META_STRIDE;
      const nd = meta[m + 1];
      const shape = nd <= META_STRIDE - 2 ? globalThis.Array.from(meta.subarray(m + 2, m + 2 + nd)) : undefined;
      out.push(Array.fromAddress(outs[i], meta[m], shape));
    }
    return out;
  }

  dispose(): void {
    if (!this.#handle.ctx) return;
    fn.mlx_closure_free(this.#handle);
    this.#handle = { ctx: null };
    bodies.delete(koffi.address(this.#key));
    for (const d of this.#deps) d.dispose();
  }
  [Symbol.dispose](): void {
    this.dispose();
  }
}

type Returned = Array | Array[];
const asList = (r: Returned): Array[] => (r instanceof Array ? [r] : r);

function closureOf(f: (...xs: Array[]) => Returned, single: { value?: boolean }): Closure {
  return Closure.fromFunction((ins) => {
    const r = f(...ins);
    single.value = r instanceof Array;
    return asList(r);
  });
}

function withVectors<T>(lists: readonly (readonly Array[])[], body: (vs: MlxHandle[]) => T): T {
  const vs = lists.map(makeVector);
  try {
    return body(vs);
  } finally {
    for (const v of vs) fn.mlx_vector_array_free(v);
  }
}

// How many JS-started differentiations (vjp, jvp, valueAndGrad, grad) are running now: the
// functions they differentiate are traced while it is positive. A graph built while it is 0 is
// never differentiated through a custom VJP (MLX differentiates only what it traces itself), so
// @mlx/kernels builds its kernels bare then: no CustomTransforms and StopGradient node per call.
let differentiations = 0;

/** Whether a function is being traced for a derivative (vjp, jvp, valueAndGrad, grad) now. */
export function differentiating(): boolean {
  return differentiations > 0;
}

// mlx_vjp and mlx_jvp take the same arguments (closure, primals, and cotangents or tangents) and
// return [outputs, products] the same way.
type ProductFn = typeof fn.mlx_vjp;
function product(
  native: ProductFn,
  name: string,
  f: (...xs: Array[]) => Returned,
  primals: readonly Array[],
  seeds: readonly Array[],
): [Array[], Array[]] {
  const single = {};
  using cl = closureOf(f, single);
  return withVectors([primals, seeds], ([p, s]) => {
    const r0 = { ctx: null };
    const r1 = { ctx: null };
    differentiations++;
    try {
      check(native(r0, r1, cl.handle, p, s), name);
    } finally {
      differentiations--;
    }
    return [takeVector(r0), takeVector(r1)];
  });
}

/** Vector-Jacobian product: [outputs, vjps] of `f` at `primals` against `cotangents`. */
export function vjp(f: (...xs: Array[]) => Returned, primals: readonly Array[], cotangents: readonly Array[]): [Array[], Array[]] {
  return product(fn.mlx_vjp, 'mlx_vjp', f, primals, cotangents);
}

/** Jacobian-vector product: [outputs, jvps] of `f` at `primals` along `tangents`. */
export function jvp(f: (...xs: Array[]) => Returned, primals: readonly Array[], tangents: readonly Array[]): [Array[], Array[]] {
  return product(fn.mlx_jvp, 'mlx_jvp', f, primals, tangents);
}

/**
 * Returns a function computing `[value, grad]` of `f`: `f`'s first output must be a scalar (the
 * value differentiated); `grad` is one Array for a numeric `argnums`, a list for a list.
 */
export function valueAndGrad(f: (...xs: Array[]) => Returned, argnums: number | readonly number[] = 0) {
  const argnumList = toInt32Array(typeof argnums === 'number' ? [argnums] : argnums, 'valueAndGrad: argnums', 'dim');
  return (...xs: Array[]): [Returned, Array | Array[]] => {
    const single: { value?: boolean } = {};
    using cl = closureOf(f, single);
    const vag = { ctx: null };
    check(fn.mlx_value_and_grad(vag, cl.handle, argnumList, argnumList.length), 'mlx_value_and_grad');
    try {
      return withVectors([xs], ([input]) => {
        const r0 = { ctx: null };
        const r1 = { ctx: null };
        differentiations++;
        try {
          check(fn.mlx_closure_value_and_grad_apply(r0, r1, vag, input), 'mlx_closure_value_and_grad_apply');
        } finally {
          differentiations--;
        }
        const values = takeVector(r0);
        const grads = takeVector(r1);
        return [single.value ? values[0] : values, typeof argnums === 'number' ? grads[0] : grads];
      });
    } finally {
      fn.mlx_closure_value_and_grad_free(vag);
    }
  };
}

/** The gradient of a scalar-valued `f` with respect to `argnums`. */
export function grad(f: (...xs: Array[]) => Array, argnums: number | readonly number[] = 0) {
  const vg = valueAndGrad(f, argnums);
  return (...xs: Array[]): Array | Array[] => {
    const [value, g] = vg(...xs);
    for (const v of asList(value)) v.dispose();
    return g;
  };
}

/** A JS function that MLX traces once per input signature and runs as one fused graph. */
export interface CompiledFunction {
  (...xs: Array[]): Returned;
  dispose(): void;
}

/** The closure behind each CompiledFunction (host-program.ts runs it in one native call). */
const closures = new WeakMap<CompiledFunction, Closure>();

/** @internal The native closure of a function from compile() or captureGraph(). */
export function closureOfCompiled(f: CompiledFunction): Closure {
  const cl = closures.get(f);
  if (!cl) throw new TypeError('expected a function made by compile() or captureGraph()');
  return cl;
}

function callableOf(cl: Closure, single: { value?: boolean }, extra: () => void = () => {}): CompiledFunction {
  const call = ((...xs: Array[]) => {
    const outs = cl.apply(xs);
    return single.value ? outs[0] : outs;
  }) as CompiledFunction;
  call.dispose = () => {
    cl.dispose();
    extra();
  };
  closures.set(call, cl);
  return call;
}

let cpuCompiler: boolean | undefined;

/**
 * Whether MLX's compile traces on the CPU in this process. On the CPU MLX compiles only where a C++
 * compiler answers (it runs `g++ --version` and, without one, gives compile()'s function back
 * untraced); asked once per process. Where it does not, compile() on the CPU captures instead (see
 * compile).
 */
export function cpuCompileAvailable(): boolean {
  cpuCompiler ??= spawnSync('sh', ['-c', 'g++ --version > /dev/null 2>&1'], { stdio: 'ignore' }).status === 0;
  return cpuCompiler;
}

/** The compile mode last set (setCompileMode, enableCompile, disableCompile); MLX_DISABLE_COMPILE disables it from the start, as in MLX. */
let compileModeNow: CompileMode = process.env.MLX_DISABLE_COMPILE !== undefined ? 'disabled' : 'enabled';

/**
 * Compiles `f`. The result caches one trace per input shapes and dtypes (any shapes with
 * `shapeless`). Dispose it to release the trace and the JS function. On MLX's CPU backend each new
 * fused kernel is built with the system C++ compiler the first time it runs. Where the default
 * device is the CPU and no C++ compiler answers (cpuCompileAvailable()), MLX would run `f` on every
 * call: the result is captureGraph(f) instead, traced once per input shapes and dtypes and replayed
 * natively, without simplification or fusion (`shapeless` then traces each shape once). Compiled
 * while the compile mode is 'disabled', `f` runs on every call, as MLX has it.
 */
export function compile(f: (...xs: Array[]) => Returned, options: { shapeless?: boolean } = {}): CompiledFunction {
  // MLX 0.32 keys each trace by the default stream of the default device; if that stream is first
  // created during the first call, the second call misses the cache and traces again. Creating it here
  // keeps it to one trace per input signature.
  const stream = defaultStream();
  if (stream.device.type === 'cpu' && compileModeNow !== 'disabled' && !cpuCompileAvailable()) return captureGraph(f);
  const single: { value?: boolean } = {};
  const src = closureOf(f, single);
  const res = { ctx: null };
  try {
    check(fn.mlx_compile(res, src.handle, options.shapeless ?? false), 'mlx_compile');
  } catch (e) {
    src.dispose();
    throw e;
  }
  // The compiled closure calls back into `src` when it traces, so they live and die together.
  return callableOf(new Closure(res, Buffer.alloc(1), [src]), single);
}

/**
 * `f` traced once per input dtypes and shapes, and replayed from native code on every later call
 * (`mlxc_capture`): like compile() without its graph simplification and fusion, and so without the
 * C++ compiler MLX's CPU compile needs (which also builds every new fused kernel with it, seconds
 * each). `f` is traced with placeholder inputs: it must not read their data. Dispose the result to
 * release its traces.
 */
export function captureGraph(f: (...xs: Array[]) => Returned): CompiledFunction {
  const single: { value?: boolean } = {};
  const src = closureOf(f, single);
  const res = { ctx: null };
  try {
    check(fn.mlxc_capture(res, src.handle), 'mlxc_capture');
  } catch (e) {
    src.dispose();
    throw e;
  }
  // The capturing closure calls back into `src` when it traces, so they live and die together.
  return callableOf(new Closure(res, Buffer.alloc(1), [src]), single);
}

/**
 * `f` with a custom vector-Jacobian product: `vjpFn(primals, cotangents, outputs)` returns one
 * cotangent per primal. Transforms (vjp, valueAndGrad, grad) of anything that calls the result use it.
 */
export function customVjp(f: (...xs: Array[]) => Returned, vjpFn: CustomVjpFn): CompiledFunction {
  const single: { value?: boolean } = {};
  const src = closureOf(f, single);
  const key = Buffer.alloc(1);
  vjpBodies.set(koffi.address(key), vjpFn);
  const custom = checkHandle(fn.mlx_closure_custom_new_func_payload(customTrampoline(), key, null), 'mlx_closure_custom_new_func_payload');
  const res = { ctx: null };
  try {
    check(fn.mlx_custom_vjp(res, src.handle, custom), 'mlx_custom_vjp');
  } finally {
    fn.mlx_closure_custom_free(custom);
  }
  const release = () => vjpBodies.delete(koffi.address(key));
  return callableOf(new Closure(res, Buffer.alloc(1), [src, { dispose: release }]), single);
}

/** `f` whose intermediates are recomputed in the backward pass instead of kept. */
export function checkpoint(f: (...xs: Array[]) => Returned): CompiledFunction {
  const single: { value?: boolean } = {};
  const src = closureOf(f, single);
  const res = { ctx: null };
  check(fn.mlx_checkpoint(res, src.handle), 'mlx_checkpoint');
  return callableOf(new Closure(res, Buffer.alloc(1), [src]), single);
}

function evalWith(native: typeof fn.mlx_eval, name: string, xs: (Array | readonly Array[])[]): void {
  flushDisposed();
  const v = makeVector(xs.flat() as Array[]);
  try {
    check(native(v), name);
  } finally {
    fn.mlx_vector_array_free(v);
  }
}

/** Evaluates arrays together (one graph walk). */
export function evaluate(...xs: (Array | readonly Array[])[]): void {
  evalWith(fn.mlx_eval, 'mlx_eval', xs);
}

/** Starts evaluating arrays in the background; reading their data waits for the result. */
export function asyncEval(...xs: (Array | readonly Array[])[]): void {
  evalWith(fn.mlx_async_eval, 'mlx_async_eval', xs);
}

export function enableCompile(): void {
  check(fn.mlx_enable_compile(), 'mlx_enable_compile');
  compileModeNow = 'enabled';
}
export function disableCompile(): void {
  check(fn.mlx_disable_compile(), 'mlx_disable_compile');
  compileModeNow = 'disabled';
}

export type CompileMode = 'disabled' | 'no_simplify' | 'no_fuse' | 'enabled';
const compileModes: Record<CompileMode, number> = { disabled: 0, no_simplify: 1, no_fuse: 2, enabled: 3 };

/**
 * Sets how compile() works, process-wide: 'enabled' (the default) simplifies and fuses graphs;
 * 'no_fuse' simplifies without fusing (on the CPU, fusing builds each new kernel with the system
 * C++ compiler); 'no_simplify' only traces; 'disabled' makes compiled functions run eagerly.
 */
export function setCompileMode(mode: CompileMode): void {
  const m = compileModes[mode];
  if (m === undefined) throw new TypeError(`compile mode must be one of ${Object.keys(compileModes).join(', ')}, got '${String(mode)}'`);
  check(fn.mlx_set_compile_mode(m), 'mlx_set_compile_mode');
  compileModeNow = mode;
}
