// The two forms of mlx.fused::Attention (src/ops/mlx/attention.ts) at BERT-base and GPT-2 small
// shapes, against the graph as exported (MatMul, Mul, Add, Softmax, MatMul: what runs with the
// rewrites off): MLX's fused scaled_dot_product_attention, and the composition with the fused
// softmax kernel; and on the CPU the native attention kernel (mx.ext.fusedAttention, what the CPU
// runs in float32). On the CPU, MLX's fused op is itself a composition with MLX's softmax. Each form
// alone, evaluated, median of N runs after warm-up, on MLX's default device (MLX_DEVICE). Never a test.
//   tools/dev bench sdpa [--runs 30]
import { performance } from 'node:perf_hooks';
import * as mx from '@mlx/core';

const runs = Number(process.argv[process.argv.indexOf('--runs') + 1] || 30);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const rand = (shape: number[]) => mx.random.normal(shape, 'float32', 0, 1, null);

function time(f: () => mx.Array): number {
  const ts: number[] = [];
  for (let i = 0; i < runs + 3; i++) {
    const t = performance.now();
    mx.scope(() => mx.evaluate(f()));
    if (i >= 3) ts.push(performance.now() - t);
  }
  return median(ts);
}

const softmax = (s: mx.Array) => (mx.defaultStream().device.type === 'cpu' ? mx.ext.fusedSoftmax(s, false) : mx.softmax(s, -1));

console.log(`device ${mx.defaultStream().device.type}, ${runs} runs, medians in ms`);
const onCpu = mx.defaultStream().device.type === 'cpu';
console.log(`| shape | graph as exported | MLX fused SDPA | composite, fused softmax |${onCpu ? ' native kernel |' : ''}`);
console.log(`|---|---|---|---|${onCpu ? '---|' : ''}`);
for (const [name, b, h, s, d, causal] of [
  ['BERT-base, padding mask', 1, 12, 128, 64, false],
  ['BERT-base batch 8', 8, 12, 128, 64, false],
  ['GPT-2 small, causal mask', 1, 12, 256, 64, true],
] as const) {
  const [q, k, v] = [rand([b, h, s, d]), rand([b, h, s, d]), rand([b, h, s, d])];
  const maskData = new Float32Array(b * s * (causal ? s : 1));
  for (let i = 0; i < maskData.length; i++) {
    const col = i % s;
    const row = Math.floor(i / s) % s;
    maskData[i] = causal ? (col > row ? -3.4e38 : 0) : col >= s - 8 ? -3.4e38 : 0;
  }
  const mask = mx.array(maskData, { shape: causal ? [b, 1, s, s] : [b, 1, 1, s] });
  const kt = mx.swapaxes(k, -1, -2);
  mx.evaluate(q, k, v, mask);
  const scale = 1 / Math.sqrt(d);
  const exported = () => mx.matmul(softmax(mx.add(mx.multiply(mx.matmul(q, kt), scale), mask)), v);
  const fused = () => mx.fast.scaledDotProductAttention(q, k, v, scale, 'array', mask);
  const composite = () => mx.matmul(softmax(mx.add(mx.matmul(mx.multiply(q, scale), kt), mask)), v);
  const native = () => mx.ext.fusedAttention(q, k, v, mask, scale, false, 0, false);
  console.log(
    `| ${name} [${b}, ${h}, ${s}, ${d}] | ${time(exported).toFixed(3)} | ${time(fused).toFixed(3)} | ${time(composite).toFixed(3)} |${onCpu ? ` ${time(native).toFixed(3)} |` : ''}`,
  );
}
