// The native channels-last convolution (mx.ext.convGemm with a packed weight) against MLX's CPU
// conv_general on the same channels-last data, at every convolution shape of ResNet-50 (224²,
// batch 1, each with its count in the network): the fastest of R evaluated runs, bias + Relu
// included, and the CPU time of that run (user + system of the process: on a shared machine a
// run whose second thread got no core shows CPU time close to its wall time). Figures, not a test.
//   tools/dev bench conv-gemm [--threads 2] [--repeats 11] [--ref 0|1]
import { performance } from 'node:perf_hooks';
import * as mx from '../src/index.js';

const arg = (name: string, dflt: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const repeats = arg('repeats', 11);
const withRef = arg('ref', 1) === 1;
mx.setCpuThreads(arg('threads', 2));

function time(f: () => mx.Array): { ms: number; cpuMs: number } {
  let best = { ms: Number.POSITIVE_INFINITY, cpuMs: 0 };
  for (let i = 0; i < repeats + 2; i++) {
    const t = performance.now();
    const c0 = process.cpuUsage();
    mx.scope(() => mx.evaluate(f()));
    const c = process.cpuUsage(c0);
    const ms = performance.now() - t;
    if (i >= 2 && ms < best.ms) best = { ms, cpuMs: (c.user + c.system) / 1000 };
  }
  return best;
}

// [C, O, input size, kernel, stride, count in ResNet-50]
const convs: [number, number, number, number, number, number][] = [
  [3, 64, 224, 7, 2, 1],
  [64, 64, 56, 1, 1, 1],
  [64, 64, 56, 3, 1, 3],
  [64, 256, 56, 1, 1, 4],
  [256, 64, 56, 1, 1, 2],
  [256, 128, 56, 1, 1, 1],
  [128, 128, 56, 3, 2, 1],
  [128, 512, 28, 1, 1, 4],
  [256, 512, 56, 1, 2, 1],
  [512, 128, 28, 1, 1, 3],
  [128, 128, 28, 3, 1, 3],
  [512, 256, 28, 1, 1, 1],
  [256, 256, 28, 3, 2, 1],
  [256, 1024, 14, 1, 1, 6],
  [512, 1024, 28, 1, 2, 1],
  [1024, 256, 14, 1, 1, 5],
  [256, 256, 14, 3, 1, 5],
  [1024, 512, 14, 1, 1, 1],
  [512, 512, 14, 3, 2, 1],
  [512, 2048, 7, 1, 1, 3],
  [1024, 2048, 14, 1, 2, 1],
  [2048, 512, 7, 1, 1, 2],
  [512, 512, 7, 3, 1, 2],
];
const zero = mx.array(0, { dtype: 'float32' });
let flops = 0;
const total = { mine: 0, mineCpu: 0, ref: 0 };
console.log(`fastest of ${repeats} runs, ${mx.cpuThreads()} threads; GFLOP/s of the fastest run (per core: of its CPU time)`);
console.log('| conv (C -> O, input, kernel, stride) x count | conv_general | convGemm | GFLOP/s | per core |\n|---|---|---|---|---|');
for (const [c, o, hw, k, s, n] of convs) {
  const p = k >> 1;
  const x = mx.random.normal([1, hw, hw, c], 'float32', 0, 1, null);
  const w = mx.random.normal([o, k, k, c], 'float32', 0, 0.1, null);
  const b = mx.random.normal([o], 'float32', 0, 1, null);
  const wp = mx.ext.convPackWeight(w);
  mx.evaluate(x, w, wp, b);
  const oh = Math.floor((hw + 2 * p - k) / s) + 1;
  const f = 2 * o * c * k * k * oh * oh;
  const mine = time(() => mx.ext.convGemm(x, wp, o, b, null, [s, s], [p, p], [p, p], [1, 1], 0, Number.POSITIVE_INFINITY));
  const ref = withRef
    ? time(() => mx.maximum(mx.add(mx.convGeneral(x, w, [s, s], [p, p], [p, p], [1, 1], [1, 1], 1, false), b), zero)).ms
    : Number.NaN;
  flops += f * n;
  total.mine += mine.ms * n;
  total.mineCpu += mine.cpuMs * n;
  total.ref += ref * n;
  console.log(
    `| ${c} -> ${o}, ${hw}², ${k}x${k}, s${s} x${n} | ${ref.toFixed(2)} ms | ${mine.ms.toFixed(2)} ms | ${(f / mine.ms / 1e6).toFixed(0)} | ${(f / mine.cpuMs / 1e6).toFixed(0)} |`,
  );
}
console.log(
  `| all ${(flops / 1e9).toFixed(2)} GFLOP | ${total.ref.toFixed(1)} ms | ${total.mine.toFixed(1)} ms | ${(flops / total.mine / 1e6).toFixed(0)} | ${(flops / total.mineCpu / 1e6).toFixed(0)} |`,
);
