// Whole-model latency, side by side in one run: the 'mlx' provider, onnxruntime-node's CPU provider
// and onnxruntime-web (wasm) on the same models and inputs (../shared/models, data set 0).
// Prints medians over --runs runs after a warm-up, and the ratios to MLX. Never a test.
//   tools/dev bench models [--runs 20] [--filter regex]
import { existsSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { readTestCase, type HostTensor } from '../src/onnx/index.js';
import { hostToTensor } from '../src/backend.js';
import '../src/index.js';

const require = createRequire(import.meta.url);
const ortNode = require('onnxruntime-node') as typeof import('onnxruntime-node');
const arg = (n: string) => { const i = process.argv.indexOf(`--${n}`); return i >= 0 ? process.argv[i + 1] : undefined; };
const runs = Number(arg('runs') ?? 20);
const filter = new RegExp(arg('filter') ?? '.');
const modelsDir = new URL('../../../../shared/models', import.meta.url).pathname;

type Engine = { name: string; create: (path: string) => Promise<{ run: (f: Record<string, unknown>) => Promise<unknown>; release: () => Promise<void> }>; ort: unknown };

async function engines(): Promise<Engine[]> {
  const list: Engine[] = [
    { name: 'mlx', ort: ortNode, create: (p) => ortNode.InferenceSession.create(p, { executionProviders: ['mlx'] }) as never },
    { name: 'ort-node cpu', ort: ortNode, create: (p) => ortNode.InferenceSession.create(p, { executionProviders: ['cpu'] }) as never },
  ];
  try {
    const ortWeb = (await import('onnxruntime-web')) as unknown as typeof import('onnxruntime-node');
    (ortWeb as unknown as { env: { wasm: { numThreads: number } } }).env.wasm.numThreads = 1;
    list.push({ name: 'ort-web wasm', ort: ortWeb, create: (p) => ortWeb.InferenceSession.create(p, { executionProviders: ['wasm'] }) as never });
  } catch (e) {
    console.log(`onnxruntime-web unavailable: ${(e as Error).message}`);
  }
  return list;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

async function main(): Promise<void> {
  const models = readdirSync(modelsDir).filter((m) => filter.test(m) && existsSync(join(modelsDir, m, 'model.onnx')));
  const es = await engines();
  console.log(`median ms per run over ${runs} runs (after 3 warm-up runs); ratio = engine / mlx`);
  console.log(['model'.padEnd(22), ...es.map((e) => e.name.padStart(14)), ...es.slice(1).map((e) => `${e.name}/mlx`.padStart(18))].join(''));
  for (const m of models) {
    const path = join(modelsDir, m, 'model.onnx');
    const ds = readTestCase(join(modelsDir, m)).datasets[0];
    const row: number[] = [];
    for (const e of es) {
      try {
        const s = await e.create(path);
        const names = (s as unknown as { inputNames: string[] }).inputNames;
        const feeds: Record<string, unknown> = {};
        (ds.inputs as HostTensor[]).forEach((t, i) => (feeds[names[i]] = hostToTensor(e.ort as never, t)));
        for (let i = 0; i < 3; i++) await s.run(feeds);
        const times: number[] = [];
        for (let i = 0; i < runs; i++) {
          const t0 = performance.now();
          await s.run(feeds);
          times.push(performance.now() - t0);
        }
        await s.release();
        row.push(median(times));
      } catch (err) {
        row.push(NaN);
        console.log(`  ${m} on ${e.name}: ${(err as Error).message.split('\n')[0]}`);
      }
    }
    console.log([m.padEnd(22), ...row.map((t) => t.toFixed(2).padStart(14)), ...row.slice(1).map((t) => (t / row[0]).toFixed(2).padStart(18))].join(''));
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
