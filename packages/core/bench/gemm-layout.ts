// Which layout of a constant weight MLX's CPU GEMM (OpenBLAS) prefers: y = a @ W with W stored
// [K, N] (as ONNX MatMul has it) or stored transposed, [N, K], and read through a transposed view
// (the BLAS's transB), at the shapes of BERT-base / GPT-2 small. Medians of warm runs.
// `tools/dev bench gemm-layout [--threads N]`. Figures, not a test.
import * as mx from '../src/index.js';

const arg = (name: string, dflt: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
mx.setCpuThreads(arg('threads', 2));
const repeats = arg('repeats', 31);
const cpu = { stream: 'cpu' } as const;
let seed = 3;
const rand = (n: number) => Float32Array.from({ length: n }, () => (seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32 - 0.5);

function median(f: () => mx.Array): number {
  const t: number[] = [];
  for (let i = 0; i < repeats + 3; i++) {
    const t0 = performance.now();
    const y = f();
    mx.evaluate(y);
    if (i >= 3) t.push(performance.now() - t0);
    y.dispose();
  }
  return t.sort((a, b) => a - b)[t.length >> 1];
}

console.log(`${mx.cpuThreads()} threads, median of ${repeats}`);
console.log('| M x K x N | W [K,N] | W stored [N,K] (transB) | ratio |\n|---|---|---|---|');
for (const [m, k, n] of [
  [128, 768, 768],
  [128, 768, 3072],
  [128, 3072, 768],
  [256, 768, 2304],
  [256, 3072, 768],
]) {
  const a = mx.array(rand(m * k), { shape: [m, k] });
  const w = mx.array(rand(k * n), { shape: [k, n] });
  const wt = mx.contiguous(mx.transpose(w, null, cpu), false, cpu);
  mx.evaluate(a, w, wt);
  const nn = median(() => mx.matmul(a, w, cpu));
  const nt = median(() => mx.matmul(a, mx.transpose(wt, null, cpu), cpu));
  console.log(`| ${m} x ${k} x ${n} | ${nn.toFixed(3)} ms | ${nt.toFixed(3)} ms | ${(nn / nt).toFixed(2)} |`);
}
