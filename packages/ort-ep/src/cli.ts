// mlx-ort: run an ONNX model on MLX, check which nodes the MLX provider claims, run the demo.
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';
import * as mx from '@mlx/core';
import { MlxSession } from './session.js';
import { checkModel } from './check.js';
import { OnnxDataType, type HostTensor } from './onnx/index.js';
import { runDemo } from './demo/vad.js';

const usage = `usage:
  mlx-ort run <model.onnx> [--device cpu|gpu] [--runs N] [--compare] [--dim name=value ...]
      runs the model on random inputs (symbolic dimensions default to 1, or --dim), prints
      each output's shape and a summary, the median time, and with --compare the largest
      difference from onnxruntime-node's CPU provider on the same inputs
  mlx-ort check <model.onnx>
      lists the nodes the MLX provider claims (by op) and those it does not, with reasons
  mlx-ort demo [--device cpu|gpu]
      voice activity detection with Silero VAD on a synthesized recording, side by side with onnxruntime-node`;

function opt(args: string[], name: string): string | undefined {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : undefined;
}

function randomInput(elemType: number, dims: number[], seed: number): HostTensor {
  const n = dims.reduce((a, b) => a * b, 1);
  let s = seed >>> 0 || 1;
  const rnd = () => (s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 32;
  switch (elemType) {
    case OnnxDataType.FLOAT:
      return { dtype: elemType, dims, data: Float32Array.from({ length: n }, () => rnd() * 2 - 1) };
    case OnnxDataType.DOUBLE:
      return { dtype: elemType, dims, data: Float64Array.from({ length: n }, () => rnd() * 2 - 1) };
    case OnnxDataType.INT64:
      return { dtype: elemType, dims, data: BigInt64Array.from({ length: n }, () => BigInt(Math.floor(rnd() * 4))) };
    case OnnxDataType.INT32:
      return { dtype: elemType, dims, data: Int32Array.from({ length: n }, () => Math.floor(rnd() * 4)) };
    case OnnxDataType.BOOL:
      return { dtype: elemType, dims, data: Uint8Array.from({ length: n }, () => (rnd() < 0.5 ? 1 : 0)) };
    default:
      throw new Error(`mlx-ort run: cannot make a random input of element type ${elemType}`);
  }
}

async function run(args: string[]): Promise<void> {
  const path = args[0];
  if (!path) throw new Error(usage);
  const device = opt(args, 'device') as 'cpu' | 'gpu' | undefined;
  const runs = Number(opt(args, 'runs') ?? 5);
  const dims = new Map<string, number>();
  args.forEach((a, i) => {
    if (a === '--dim') {
      const [k, v] = args[i + 1].split('=');
      dims.set(k, Number(v));
    }
  });
  const session = await MlxSession.create(path, { device });
  const feeds: Record<string, HostTensor> = {};
  session.inputMetadata.forEach((m, i) => {
    const shape = m.shape.map((d) => (typeof d === 'string' ? (dims.get(d) ?? 1) : d < 0 ? 1 : d));
    feeds[m.name] = randomInput(m.elemType, shape, 1234 + i);
  });
  const times: number[] = [];
  let out: Record<string, unknown> = {};
  for (let r = 0; r < runs; r++) {
    const t0 = performance.now();
    out = await session.run(feeds);
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  console.log(`model ${path} on ${device ?? mx.defaultDevice().type}: median ${times[times.length >> 1].toFixed(2)} ms over ${runs} runs`);
  console.log(`device: ${session.device} (MLX backend ${session.backend})`);
  for (const [name, v] of Object.entries(out)) {
    const t = v as HostTensor;
    const nums = Array.from(t.data as ArrayLike<number | bigint>, Number);
    const mean = nums.reduce((a, b) => a + b, 0) / Math.max(nums.length, 1);
    console.log(
      `  ${name}: [${t.dims.join(', ')}] mean ${mean.toPrecision(6)} first ${nums
        .slice(0, 4)
        .map((x) => x.toPrecision(5))
        .join(', ')}`,
    );
  }
  if (args.includes('--compare')) {
    const require = createRequire(import.meta.url);
    const ort = require('onnxruntime-node') as typeof import('onnxruntime-node');
    const s = await ort.InferenceSession.create(await readFile(path));
    const f: Record<string, import('onnxruntime-node').Tensor> = {};
    for (const [k, t] of Object.entries(feeds))
      f[k] = new ort.Tensor(
        ({ 1: 'float32', 7: 'int64', 6: 'int32', 9: 'bool', 11: 'float64' } as unknown as Record<number, 'float32'>)[t.dtype],
        t.data as Float32Array,
        t.dims,
      );
    const ref = await s.run(f);
    for (const [name, v] of Object.entries(out)) {
      const a = Array.from((v as HostTensor).data as ArrayLike<number | bigint>, Number);
      const b = Array.from(ref[name].data as ArrayLike<number | bigint>, Number);
      const diff = a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i])), 0);
      console.log(`  ${name}: largest |mlx - onnxruntime-node| = ${diff.toExponential(3)}`);
    }
  }
  session.release();
}

async function check(args: string[]): Promise<void> {
  const path = args[0];
  if (!path) throw new Error(usage);
  const r = checkModel(new Uint8Array(await readFile(path)), { modelPath: path });
  const claimedCount = [...r.claimed.values()].reduce((a, b) => a + b, 0);
  console.log(
    `${path}: ${r.nodes} nodes, ${claimedCount} claimed by the MLX provider, ${r.unclaimed.length} not (opsets: ${[...r.opsets].map(([d, v]) => `${d} ${v}`).join(', ')})`,
  );
  console.log(`MLX devices: cpu${mx.gpuAvailable() ? `, gpu (${mx.cudaAvailable() ? 'cuda' : 'metal'})` : ''}`);
  console.log('claimed:');
  for (const [k, n] of [...r.claimed].sort()) console.log(`  ${k} x${n}`);
  if (r.unclaimed.length) {
    console.log('not claimed:');
    for (const u of r.unclaimed) console.log(`  ${u.domain}::${u.opType} (opset ${u.opset}) node '${u.nodeName}': ${u.reason}`);
  }
}

export async function main(argv: string[]): Promise<void> {
  const [cmd, ...rest] = argv;
  if (cmd === 'run') return run(rest);
  if (cmd === 'check') return check(rest);
  if (cmd === 'demo') return runDemo({ device: opt(rest, 'device') as 'cpu' | 'gpu' | undefined });
  console.log(usage);
  if (cmd && cmd !== 'help' && cmd !== '--help') process.exitCode = 2;
}
