// fp32 matmul throughput on MLX's CPU backend (which calls the BLAS that libmlx was linked with):
// median time and GFLOP/s of an n x n matmul, evaluation included, after a warm-up.
// `tools/dev bench blas [n] [repeats]`; MLX_C_LIBRARY selects another build (e.g. one against the
// reference BLAS, see README.md).
import { readFileSync } from 'node:fs';
import { loadMlxC, MlxDtype } from '../src/index.js';

const n = Number(process.argv[2] ?? 1024);
const repeats = Number(process.argv[3] ?? 15);
const c = loadMlxC();
const { fn, koffi } = c;
const errors: string[] = [];
fn.mlx_set_error_handler(
  koffi.register((m: string) => void errors.push(m), koffi.pointer(c.types.callbacks.mlx_error_handler_func as never)),
  null,
  null,
);
const stream = fn.mlx_default_cpu_stream_new();

let seed = 12345;
const rand = () => (seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32 - 0.5;
const shape = Int32Array.from([n, n]);
const a = fn.mlx_array_new_data(Float32Array.from({ length: n * n }, rand), shape, 2, MlxDtype.FLOAT32);
const b = fn.mlx_array_new_data(Float32Array.from({ length: n * n }, rand), shape, 2, MlxDtype.FLOAT32);

function matmulOnce(): number {
  const r = fn.mlx_array_new();
  const t0 = process.hrtime.bigint();
  if (fn.mlx_matmul(r, a, b, stream) !== 0 || fn.mlx_array_eval(r) !== 0) throw new Error(`matmul failed: ${errors.at(-1)}`);
  const t = Number(process.hrtime.bigint() - t0) / 1e6;
  fn.mlx_array_free(r);
  return t;
}

// Which BLAS the process actually mapped (the wheel's files may be links to OpenBLAS).
const blasLibs = [
  ...new Set(
    readFileSync('/proc/self/maps', 'utf8')
      .split('\n')
      .map((l) => l.split(/\s+/)[5])
      .filter((p) => p && /blas|lapack/i.test(p)),
  ),
];

for (let i = 0; i < 3; i++) matmulOnce();
const times = Array.from({ length: repeats }, matmulOnce).sort((x, y) => x - y);
const med = times[repeats >> 1];
const gflops = (2 * n ** 3) / (med * 1e6);
console.log(`MLX C library: ${c.path}`);
console.log(`BLAS mapped:   ${blasLibs.join(', ') || '(none found in /proc/self/maps)'}`);
console.log(
  `threads:       OPENBLAS_NUM_THREADS=${process.env.OPENBLAS_NUM_THREADS ?? '(unset)'}, ${(await import('node:os')).availableParallelism()} CPUs available`,
);
console.log(
  `fp32 matmul ${n}x${n}: median ${med.toFixed(2)} ms (min ${times[0].toFixed(2)}, max ${times.at(-1)!.toFixed(2)}, ${repeats} runs) = ${gflops.toFixed(1)} GFLOP/s`,
);

fn.mlx_array_free(a);
fn.mlx_array_free(b);
fn.mlx_stream_free(stream);
