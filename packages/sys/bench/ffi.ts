// FFI cost of the raw koffi layer: ns per call for a bare call, scalar ops, array create+free, and
// 1 MB copies in and out (what @mlx/core's Array.fromTypedArray and toTypedArray do underneath).
// Medians over several repeats; figures, not pass/fail. Run with `tools/dev bench ffi`.
import { loadMlxC, MlxDtype, type MlxHandle } from '../src/index.js';

const c = loadMlxC();
const { fn, koffi } = c;
const errors: string[] = [];
fn.mlx_set_error_handler(
  koffi.register((m: string) => void errors.push(m), koffi.pointer(c.types.callbacks.mlx_error_handler_func as never)),
  null,
  null,
);
const stream = fn.mlx_default_cpu_stream_new();
const REPEATS = Number(process.env.BENCH_REPEATS ?? 7);

/** Median ns per iteration of `body` over REPEATS timed runs of `iters` iterations (after one warm-up run). */
function bench(name: string, iters: number, body: () => void, bytes?: number): void {
  const run = () => {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < iters; i++) body();
    return Number(process.hrtime.bigint() - t0) / iters;
  };
  run();
  const times = Array.from({ length: REPEATS }, run).sort((a, b) => a - b);
  const med = times[REPEATS >> 1];
  const rate = bytes ? `  ${(bytes / med).toFixed(2).padStart(6)} GB/s` : '';
  console.log(
    `${name.padEnd(58)} ${med.toFixed(0).padStart(9)} ns/call  (min ${times[0].toFixed(0)}, max ${times.at(-1)!.toFixed(0)})${rate}`,
  );
}

function check(rc: number, what: string): void {
  if (rc !== 0) throw new Error(`${what} failed: ${errors.at(-1)}`);
}

const a = fn.mlx_array_new_float32(1.5);
const b = fn.mlx_array_new_float32(2.5);
check(fn.mlx_array_eval(a), 'eval');
const item = [0];
const one = new Float32Array([1]);
const oneShape = Int32Array.from([1]);
const MB = 1 << 20;
const big = new Float32Array(MB / 4).map((_, i) => i);
const bigShape = Int32Array.from([MB / 4]);
const out = fn.mlx_array_new_data(big, bigShape, 1, MlxDtype.FLOAT32);
check(fn.mlx_array_eval(out), 'eval');

console.log(`MLX C library: ${c.path}`);
console.log(`node ${process.version}, koffi ${(koffi as unknown as { version: string }).version ?? ''}, ${REPEATS} repeats, medians\n`);

bench('bare call: mlx_array_ndim(a)', 200_000, () => {
  fn.mlx_array_ndim(a);
});
bench('scalar create+free: mlx_array_new_float32 + free', 100_000, () => {
  fn.mlx_array_free(fn.mlx_array_new_float32(3));
});
bench('array create+free: mlx_array_new_data([1]) + free', 100_000, () => {
  fn.mlx_array_free(fn.mlx_array_new_data(one, oneShape, 1, MlxDtype.FLOAT32));
});
bench('scalar add, lazy: mlx_add + result free', 100_000, () => {
  const r = fn.mlx_array_new();
  fn.mlx_add(r, a, b, stream);
  fn.mlx_array_free(r);
});
bench('scalar add, evaluated: mlx_add + item + free', 10_000, () => {
  const r: MlxHandle = fn.mlx_array_new();
  fn.mlx_add(r, a, b, stream);
  fn.mlx_array_item_float32(item, r);
  fn.mlx_array_free(r);
});
bench(
  'copy in 1 MB: mlx_array_new_data(Float32Array) + free',
  1_000,
  () => {
    fn.mlx_array_free(fn.mlx_array_new_data(big, bigShape, 1, MlxDtype.FLOAT32));
  },
  MB,
);
const rc = [false];
// As toTypedArray does: a fresh 1 MB ArrayBuffer per read (allocation and page faults included).
bench(
  'copy out 1 MB: eval + data pointer + new Float32Array',
  1_000,
  () => {
    fn.mlx_array_eval(out);
    fn._mlx_array_is_row_contiguous(rc as never, out);
    const view = koffi.view(fn.mlx_array_data_float32(out), MB);
    const copy = new Float32Array(view.slice(0));
    if (copy.length !== MB / 4) throw new Error('short copy');
  },
  MB,
);
// The copy alone, into a buffer reused across reads.
const dst = new Float32Array(MB / 4);
bench(
  'copy out 1 MB: eval + data pointer + into a reused buffer',
  1_000,
  () => {
    fn.mlx_array_eval(out);
    fn._mlx_array_is_row_contiguous(rc as never, out);
    dst.set(new Float32Array(koffi.view(fn.mlx_array_data_float32(out), MB)));
  },
  MB,
);

for (const h of [a, b, out]) fn.mlx_array_free(h);
fn.mlx_stream_free(stream);
