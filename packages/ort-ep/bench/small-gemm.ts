// Matrix products with few rows on the CPU (LLM decoding's shapes): MLX's own ops (matmul with the
// weight [K, N] as ONNX stores it, quantized_matmul for 4 bits) against the native kernels the
// 'mlx' provider uses (smallMatmul, smallQuantizedMatmul), and one MatMul / MatMulNBits node run
// through the 'mlx' provider and through onnxruntime-node's CPU provider (session.run: each
// includes its engine's fixed cost per run). Medians of --runs warm runs. Never a test.
//   tools/dev bench small-gemm [--runs 41] [--threads 2]
import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';
import * as mx from '@mlx/core';
import type { InferenceSession, Tensor } from 'onnxruntime-common';
import '../src/index.js';
import { model, node, v } from '../test/helpers/build.js';

const arg = (n: string, d: number) => {
  const i = process.argv.indexOf(`--${n}`);
  return i >= 0 ? Number(process.argv[i + 1]) : d;
};
const runs = arg('runs', 41);
const threads = arg('threads', 2);
mx.setCpuThreads(threads);
const require = createRequire(import.meta.url);
const ort = require('onnxruntime-node') as typeof import('onnxruntime-node');
ort.env.logLevel = 'error';
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const cpu = { stream: 'cpu' } as const;

let seed = 5;
const rand = (n: number) => Float32Array.from({ length: n }, () => (seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32 - 0.5);

function timeOp(f: () => mx.Array): number {
  const t: number[] = [];
  for (let i = 0; i < runs + 3; i++) {
    const t0 = performance.now();
    const y = f();
    mx.evaluate(y);
    if (i >= 3) t.push(performance.now() - t0);
    y.dispose();
  }
  return median(t);
}

async function timeSession(bytes: Uint8Array, feeds: Record<string, Tensor>, ep: 'mlx' | 'cpu'): Promise<number> {
  const options = ep === 'mlx' ? { executionProviders: ['mlx'] } : { executionProviders: ['cpu'], intraOpNumThreads: threads };
  const s = (await ort.InferenceSession.create(bytes, options as never)) as unknown as InferenceSession;
  const t: number[] = [];
  for (let i = 0; i < runs + 3; i++) {
    const t0 = performance.now();
    await s.run(feeds);
    if (i >= 3) t.push(performance.now() - t0);
  }
  await s.release();
  return median(t);
}

const fmt = (ms: number) => `${ms.toFixed(3)} ms`;
const shapes: [number, number, number][] = [
  [1, 256, 8192],
  [1, 768, 2048],
  [1, 2048, 768],
  [1, 768, 32000],
  [4, 768, 2048],
  [8, 768, 2048],
];

async function main(): Promise<void> {
  console.log(`${mx.cpuThreads()} threads (onnxruntime-node: ${threads}), AVX2 build: ${mx.cpuKernelsUseAvx2()}, median of ${runs}\n`);
  console.log('float32, y = a [M, K] @ W [K, N]\n');
  console.log('| M x K x N | MLX matmul | smallMatmul | MatMul node, mlx | MatMul node, onnxruntime-node |\n|---|---|---|---|---|');
  for (const [M, K, N] of shapes) {
    const av = rand(M * K);
    const wv = rand(K * N);
    const a = mx.array(av, { shape: [M, K] });
    const w = mx.array(wv, { shape: [K, N] });
    mx.evaluate(a, w);
    const mlx = timeOp(() => mx.matmul(a, w, cpu));
    const small = timeOp(() => mx.ext.smallMatmul(a, w, null, cpu));
    const bytes = model({
      opsets: { '': 17 },
      inputs: [v('a', 'float32', [M, K])],
      outputs: [v('y', 'float32')],
      initializers: [{ name: 'w', type: 'float32', dims: [K, N], values: wv }],
      nodes: [node('MatMul', ['a', 'w'], ['y'])],
    });
    const feeds = { a: new ort.Tensor('float32', av, [M, K]) as unknown as Tensor };
    const ep = await timeSession(bytes, feeds, 'mlx');
    const ref = await timeSession(bytes, feeds, 'cpu');
    console.log(`| ${M} x ${K} x ${N} | ${fmt(mlx)} | ${fmt(small)} | ${fmt(ep)} | ${fmt(ref)} |`);
    a.dispose();
    w.dispose();
  }

  console.log('\n4-bit weights (block 32, zero points), y = a [M, K] @ dequantize(B)^T\n');
  console.log(
    '| M x K x N | MLX quantized_matmul | smallQuantizedMatmul | MatMulNBits node, mlx | MatMulNBits node, onnxruntime-node |\n|---|---|---|---|---|',
  );
  for (const [M, K, N] of shapes) {
    const av = rand(M * K);
    const w = mx.array(rand(N * K), { shape: [N, K] });
    const [wq, sc, bi] = mx.quantize(w, 32, 4, 'affine', null, cpu);
    const a = mx.array(av, { shape: [M, K] });
    mx.evaluate(a, wq, sc, bi);
    const mlx = timeOp(() => mx.quantizedMatmul(a, wq, sc, bi, true, 32, 4, 'affine', cpu));
    const small = timeOp(() => mx.ext.smallQuantizedMatmul(a, wq, sc, bi, true, 32, 4, cpu));
    // The same codes in MatMulNBits' layout: B [N, K / 32, 16] bytes, scales [N * K / 32], zero points packed.
    const blocks = K / 32;
    const q = new Uint8Array(N * blocks * 16);
    for (let i = 0; i < q.length; i++) q[i] = (Math.imul(i, 2654435761) >>> 24) & 0xff;
    const zp = new Uint8Array(N * Math.ceil(blocks / 2)).fill(0x88);
    const bytes = model({
      opsets: { '': 17, 'com.microsoft': 1 },
      inputs: [v('a', 'float32', [M, K])],
      outputs: [v('y', 'float32')],
      initializers: [
        { name: 'b', type: 'uint8', dims: [N, blocks, 16], raw: q },
        { name: 's', type: 'float32', dims: [N * blocks], values: rand(N * blocks) },
        { name: 'z', type: 'uint8', dims: [N * Math.ceil(blocks / 2)], raw: zp },
      ],
      nodes: [node('MatMulNBits', ['a', 'b', 's', 'z'], ['y'], { domain: 'com.microsoft', attrs: { K, N, bits: 4, block_size: 32 } })],
    });
    const feeds = { a: new ort.Tensor('float32', av, [M, K]) as unknown as Tensor };
    const ep = await timeSession(bytes, feeds, 'mlx');
    const ref = await timeSession(bytes, feeds, 'cpu');
    console.log(`| ${M} x ${K} x ${N} | ${fmt(mlx)} | ${fmt(small)} | ${fmt(ep)} | ${fmt(ref)} |`);
    for (const x of [a, w, wq, sc, bi]) x.dispose();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
