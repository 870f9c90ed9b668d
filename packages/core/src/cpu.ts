// The fused CPU kernels' knobs: one thread count for their pool and for OpenBLAS. The kernels
// themselves are in the `ext` namespace (ext.fusedActivation, ext.smallMatmul, ...).
import { check, fn } from './native.js';
import type { Array } from './array.js';
import { toInt32 } from './ints.js';

/** Threads the fused CPU kernels use (the calling thread included). */
export function cpuThreads(): number {
  const out = [0];
  check(fn.mlxc_cpu_threads(out as never), 'mlxc_cpu_threads');
  return Number(out[0]);
}

/**
 * Sets the threads of the fused CPU kernels' pool and of OpenBLAS (MLX's matrix products on the
 * CPU) together; 0 or less: the cores this process may run on (the default).
 */
export function setCpuThreads(n: number): void {
  check(fn.mlxc_cpu_set_threads(toInt32(n, 'setCpuThreads: n')), 'mlxc_cpu_set_threads');
}

/** Whether the fused CPU kernels run their AVX2+FMA build on this machine. */
export function cpuKernelsUseAvx2(): boolean {
  const out = [false];
  check(fn.mlxc_cpu_has_avx2(out as never), 'mlxc_cpu_has_avx2');
  return Boolean(out[0]);
}

/** Whether the fused CPU kernels run their AVX-512F build on this machine (it takes precedence over AVX2). */
export function cpuKernelsUseAvx512(): boolean {
  const out = [false];
  check(fn.mlxc_cpu_has_avx512(out as never), 'mlxc_cpu_has_avx512');
  return Boolean(out[0]);
}

/**
 * Whether `ext.convPackWeight`'s panels hold their two halves of 16 output channels one after
 * another (`[P, ...k, C, 32]` in shape, each panel's data its first 16 channels' `[...k, C, 16]`
 * and then the other 16's): the layout of the AVX2 build, whose kernel streams a half panel
 * front to back. Fixed for the process; code that packs convolution weights itself follows it.
 */
export function convPanelsSplit(): boolean {
  // Read once: packed ops ask on every eager run.
  if (panelsSplit === undefined) {
    const out = [false];
    check(fn.mlxc_conv_split_halves(out as never), 'mlxc_conv_split_halves');
    panelsSplit = Boolean(out[0]);
  }
  return panelsSplit;
}
let panelsSplit: boolean | undefined;

/**
 * A [k, n] matrix in host memory -> its transpose [n, k], on the native library's threads (a
 * constant weight stored transposed once, without building MLX arrays). Float32Array for 4-byte
 * elements, Uint16Array for 2-byte ones (float16 and bfloat16 bits); `w` holds at least `k * n`.
 */
export function transposeHost<T extends Float32Array | Uint16Array>(w: T, k: number, n: number): T {
  if (!(w instanceof Float32Array) && !(w instanceof Uint16Array))
    throw new TypeError('transposeHost: w must be a Float32Array or a Uint16Array');
  if (!Number.isSafeInteger(k) || !Number.isSafeInteger(n) || k < 1 || n < 1)
    throw new RangeError(`transposeHost: k and n must be integers of at least 1, got ${k} and ${n}`);
  if (w.length < k * n) throw new RangeError(`transposeHost: w holds ${w.length} elements, fewer than k * n = ${k * n}`);
  const out = (w instanceof Float32Array ? new Float32Array(k * n) : new Uint16Array(k * n)) as T;
  check(fn.mlxc_transpose_host(out, w, k, n, w.BYTES_PER_ELEMENT), 'mlxc_transpose_host');
  return out;
}

/**
 * A float32 `[k, n]` matrix in host memory packed into `ext.denseGemm`'s panels, `[ceil(n / 32), k,
 * 32]` with zeros past `n` (what `ext.densePackWeight` makes of it as an array), by the library on
 * the kernels' threads: the layout a constant weight is packed into once, without building MLX
 * arrays (a graph rewrite's initializer). `w` holds at least `k * n` floats. Where the AVX2 build
 * runs, each panel's data is its first 16 columns' `[k, 16]` and then the other 16's (the same
 * rule as `convPanelsSplit()`): the layout is the kernels' own, for `ext.denseGemm` of this process.
 * `w` may also be a Uint8Array of little-endian float32 bytes at any offset (a weight's bytes as a
 * model file holds them), read without a decoded copy.
 */
export function packDensePanels(w: Float32Array | Uint8Array, k: number, n: number): Float32Array {
  if (!(w instanceof Float32Array) && !(w instanceof Uint8Array))
    throw new TypeError('packDensePanels: w must be a Float32Array or a Uint8Array of float32 bytes');
  if (!Number.isSafeInteger(k) || !Number.isSafeInteger(n) || k < 1 || n < 1)
    throw new RangeError(`packDensePanels: k and n must be integers of at least 1, got ${k} and ${n}`);
  const floats = w instanceof Float32Array ? w.length : Math.floor(w.length / 4);
  if (floats < k * n) throw new RangeError(`packDensePanels: w holds ${floats} floats, fewer than k * n = ${k * n}`);
  const out = new Float32Array(Math.ceil(n / 32) * k * 32);
  check(fn.mlxc_dense_pack_host(out, w, k, n), 'mlxc_dense_pack_host');
  return out;
}

/**
 * An ONNX convolution weight `[o, c, ...kernel]` (`s` kernel taps, `group` groups of `o / group`
 * output channels, `c` input channels each) in host memory packed into the native convolution's
 * panels, `[group * ceil(o / group / 32), ...kernel, c, 32]` (each group's panels in turn, zeros past
 * its channels; halves apart where `convPanelsSplit()` says so), by the library on the kernels'
 * threads: the layout `ext.convPackWeight` makes of a channels-last weight, for weights packed
 * once at plan time. `w` is a Float32Array or a Uint8Array of its little-endian bytes at any offset.
 */
export function convPackHost(w: Float32Array | Uint8Array, o: number, c: number, s: number, group: number): Float32Array {
  if (!(w instanceof Float32Array) && !(w instanceof Uint8Array))
    throw new TypeError('convPackHost: w must be a Float32Array or a Uint8Array of float32 bytes');
  for (const [name, v] of [
    ['o', o],
    ['c', c],
    ['s', s],
    ['group', group],
  ] as const)
    if (!Number.isSafeInteger(v) || v < 1) throw new RangeError(`convPackHost: ${name} must be an integer of at least 1, got ${v}`);
  if (o % group !== 0) throw new RangeError(`convPackHost: ${o} output channels do not split into ${group} groups`);
  const floats = w instanceof Float32Array ? w.length : Math.floor(w.length / 4);
  if (floats < o * c * s) throw new RangeError(`convPackHost: w holds ${floats} floats, fewer than o * c * s = ${o * c * s}`);
  const out = new Float32Array(group * Math.ceil(o / group / 32) * s * c * 32);
  check(fn.mlxc_conv_pack_host(out, w, o, c, s, group), 'mlxc_conv_pack_host');
  return out;
}

/** greedyRows()'s flag from the native call (reused: one call at a time on a thread). */
const greedyDone = [false];

/**
 * The greedy token (the index of the largest logit, NaN counted as -Infinity, the first of equal
 * maxima: ext.greedyArgmax's choice) of each of `x`'s last `rows` rows, its last axis the
 * vocabulary, read where the array's data lies in host memory: no graph, no primitive, one native
 * call (x is evaluated first if lazy). Undefined where that cannot be done (x is not float32, not
 * row-contiguous, or in a GPU's memory): ext.greedyArgmax then serves.
 */
export function greedyRows(x: Array, rows = 1): Int32Array | undefined {
  if (!Number.isSafeInteger(rows) || rows < 1) throw new RangeError(`greedyRows: rows must be a positive integer, got ${String(rows)}`);
  if (x.disposed) throw new TypeError('greedyRows: the array was disposed');
  const ids = new Int32Array(rows);
  check(fn.mlxc_greedy_rows(ids, rows, greedyDone as never, x.handle), 'mlxc_greedy_rows');
  return greedyDone[0] ? ids : undefined;
}
