// The fused CPU kernels against MLX's own CPU ops for the same computation, at the sizes of
// BERT-base and GPT-2 small (seq 128/256): median of warm runs, evaluation included, and the ratio.
// `tools/dev bench fused-cpu [--threads N] [--repeats R]`. Figures, not a test.
import * as mx from '../src/index.js';

const arg = (name: string, dflt: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const repeats = arg('repeats', 21);
const threads = arg('threads', 0);
mx.setCpuThreads(threads);
const cpu = { stream: 'cpu' } as const;

let seed = 7;
const rand = (n: number, lo = -4, hi = 4) =>
  Float32Array.from({ length: n }, () => lo + ((hi - lo) * (seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0)) / 2 ** 32);
const input = (shape: number[], lo?: number, hi?: number) => {
  const a = mx.array(
    rand(
      shape.reduce((p, d) => p * d, 1),
      lo,
      hi,
    ),
    { shape },
  );
  mx.evaluate(a);
  return a;
};

function median(f: () => mx.Array): number {
  const times: number[] = [];
  for (let i = 0; i < repeats + 3; i++) {
    const t0 = performance.now();
    const y = f();
    mx.evaluate(y);
    const t = performance.now() - t0;
    y.dispose();
    if (i >= 3) times.push(t);
  }
  times.sort((a, b) => a - b);
  return times[times.length >> 1];
}

const gelu = (x: mx.Array) => mx.multiply(mx.multiply(x, 0.5, cpu), mx.add(mx.erf(mx.multiply(x, Math.SQRT1_2, cpu), cpu), 1, cpu), cpu);
const geluTanh = (x: mx.Array) => {
  const inner = mx.multiply(mx.add(x, mx.multiply(mx.power(x, 3, cpu), 0.044715, cpu), cpu), Math.sqrt(2 / Math.PI), cpu);
  return mx.multiply(mx.multiply(x, 0.5, cpu), mx.add(mx.tanh(inner, cpu), 1, cpu), cpu);
};

const bert = input([128, 3072]);
const gpt = input([256, 3072]);
const bias = input([3072]);
const scores = input([12, 128, 128], -8, 8);
const hidden = input([256, 768]);
const w = input([768], 0.5, 1.5);
const b = input([768], -0.5, 0.5);

const cases: [string, () => mx.Array, () => mx.Array][] = [
  ['erf [128,3072]', () => mx.erf(bert, cpu), () => mx.ext.fusedActivation(bert, null, 'erf', cpu)],
  ['tanh [256,3072]', () => mx.tanh(gpt, cpu), () => mx.ext.fusedActivation(gpt, null, 'tanh', cpu)],
  ['exp [256,3072]', () => mx.exp(gpt, cpu), () => mx.ext.fusedActivation(gpt, null, 'exp', cpu)],
  ['GELU erf [128,3072]', () => gelu(bert), () => mx.ext.fusedActivation(bert, null, 'gelu', cpu)],
  ['bias + GELU erf [128,3072]', () => gelu(mx.add(bert, bias, cpu)), () => mx.ext.fusedActivation(bert, bias, 'gelu', cpu)],
  ['GELU tanh [256,3072]', () => geluTanh(gpt), () => mx.ext.fusedActivation(gpt, null, 'gelu_tanh', cpu)],
  ['softmax [12,128,128]', () => mx.softmax(scores, -1, cpu), () => mx.ext.fusedSoftmax(scores, false, cpu)],
  [
    'log-softmax [12,128,128]',
    () => mx.subtract(scores, mx.logsumexp(scores, -1, { keepdims: true, stream: 'cpu' }), cpu),
    () => mx.ext.fusedSoftmax(scores, true, cpu),
  ],
  ['layer norm [256,768]', () => mx.fast.layerNorm(hidden, w, b, 1e-5, cpu), () => mx.ext.fusedLayerNorm(hidden, w, b, 1e-5, cpu)],
  ['RMS norm [256,768]', () => mx.fast.rmsNorm(hidden, w, 1e-6, cpu), () => mx.ext.fusedRmsNorm(hidden, w, 1e-6, cpu)],
];

console.log(`fused CPU kernels vs MLX's CPU ops: ${mx.cpuThreads()} threads, AVX2 ${mx.cpuKernelsUseAvx2()}, median of ${repeats}`);
console.log('| op | MLX | fused | MLX ÷ fused |\n|---|---|---|---|');
for (const [name, ref, fused] of cases) {
  const a = median(ref);
  const f = median(fused);
  console.log(`| ${name} | ${a.toFixed(3)} ms | ${f.toFixed(3)} ms | ${(a / f).toFixed(1)} |`);
}
