// The cost of fallback partitions: one model (a chain of `layers` layers of Neg + Relu, or with
// --matmul MatMul [width, width] + Relu, on a [rows, width] activation) run four ways in one
// process, alternated over rounds:
//   - onnxruntime-node alone (CPU provider);
//   - mlx, every node on MLX;
//   - mlx with the middle Relu disabled (disabledOps: one fallback partition, two hops);
//   - mlx with every Relu disabled (one fallback partition per layer).
// Prints medians and, per hop (MLX -> onnxruntime -> MLX), the added time. Never passes or fails.
//
//   tools/dev bench fallback [--rows 1,64,1024] [--width 1024] [--layers 8] [--runs 30] [--device cpu|gpu] [--matmul]
import { createRequire } from 'node:module';
import { create, toBinary } from '@bufbuild/protobuf';
import { ModelProtoSchema } from 'onnx-buf';
import '../src/index.js';

const require = createRequire(import.meta.url);
const ort = require('onnxruntime-node') as typeof import('onnxruntime-node');
ort.env.logLevel = 'error';

const arg = (name: string, dflt: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : dflt;
};
const rowsList = arg('rows', '1,64,1024').split(',').map(Number);
const width = Number(arg('width', '1024'));
const matmul = process.argv.includes('--matmul');
const layers = Number(arg('layers', '8'));
const runs = Number(arg('runs', '30'));
const device = arg('device', 'cpu');

function seeded(n: number, seed: number): Float32Array {
  let s = seed >>> 0 || 1;
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = ((s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 32 - 0.5) * 0.1;
  return out;
}

/** x -> (Neg or MatMul w_i, then Relu) x layers -> y; the middle layer's Relu is a LeakyRelu (alpha 0). */
function chain(): Uint8Array {
  const node: object[] = [];
  const initializer: object[] = [];
  let cur = 'x';
  for (let i = 0; i < layers; i++) {
    if (matmul) {
      const w = seeded(width * width, i + 1);
      initializer.push({ name: `w${i}`, dataType: 1, dims: [BigInt(width), BigInt(width)], rawData: new Uint8Array(w.buffer) });
      node.push({ opType: 'MatMul', name: `mm_${i}`, input: [cur, `w${i}`], output: [`m${i}`] });
    } else node.push({ opType: 'Neg', name: `neg_${i}`, input: [cur], output: [`m${i}`] });
    const out = i === layers - 1 ? 'y' : `r${i}`;
    // The middle layer's activation is a LeakyRelu with alpha 0 (= Relu), so that it can be disabled alone.
    node.push(
      i === layers >> 1
        ? { opType: 'LeakyRelu', name: `relu_${i}`, input: [`m${i}`], output: [out], attribute: [{ name: 'alpha', type: 1, f: 0 }] }
        : { opType: 'Relu', name: `relu_${i}`, input: [`m${i}`], output: [out] },
    );
    cur = out;
  }
  const info = (name: string) => ({
    name,
    type: {
      value: {
        case: 'tensorType',
        value: {
          elemType: 1,
          shape: { dim: [{ value: { case: 'dimParam', value: 'N' } }, { value: { case: 'dimValue', value: BigInt(width) } }] },
        },
      },
    },
  });
  return toBinary(
    ModelProtoSchema,
    create(ModelProtoSchema, {
      irVersion: 9n,
      opsetImport: [{ domain: '', version: 17n }],
      graph: { name: 'chain', node, initializer, input: [info('x')], output: [info('y')] } as never,
    }),
  );
}

const median = (a: number[]) => [...a].sort((p, q) => p - q)[a.length >> 1];

async function main(): Promise<void> {
  const bytes = chain();
  const variants: [string, object][] = [
    ['onnxruntime-node', {}],
    ['mlx', { executionProviders: [{ name: 'mlx', device }] }],
    ['mlx, 1 fallback partition', { executionProviders: [{ name: 'mlx', device, disabledOps: ['LeakyRelu'] }] }],
    [`mlx, ${layers} fallback partitions`, { executionProviders: [{ name: 'mlx', device, disabledOps: ['Relu', 'LeakyRelu'] }] }],
  ];
  console.log(
    `fallback cost: ${layers} x (${matmul ? `MatMul ${width}x${width}` : 'Neg'} + Relu), ${runs} runs each, device ${device}, medians in ms`,
  );
  for (const rows of rowsList) {
    const x = new ort.Tensor('float32', seeded(rows * width, 99), [rows, width]);
    const sessions = await Promise.all(variants.map(([, o]) => ort.InferenceSession.create(bytes, o as never)));
    const times: number[][] = variants.map(() => []);
    // Warm-up: the compiled path analyses on run 1 and traces on run 2.
    for (const s of sessions) for (let r = 0; r < 3; r++) await s.run({ x });
    for (let r = 0; r < runs; r++) {
      for (let k = 0; k < sessions.length; k++) {
        const t0 = performance.now();
        await sessions[k].run({ x });
        times[k].push(performance.now() - t0);
      }
    }
    const m = times.map(median);
    const bytesPerHop = rows * width * 4;
    console.log(`rows ${rows} (activation ${(bytesPerHop / 1024).toFixed(0)} KiB):`);
    variants.forEach(([name], k) => console.log(`  ${name.padEnd(30)} ${m[k].toFixed(3)}`));
    // One partition: two hops (MLX -> onnxruntime, onnxruntime -> MLX), the Relu itself on onnxruntime.
    console.log(
      `  added per fallback partition:  ${(m[2] - m[1]).toFixed(3)} (one), ${((m[3] - m[1]) / layers).toFixed(3)} (each of ${layers})`,
    );
    for (const s of sessions) await s.release();
  }
}

await main();
