// One engine on one model in its own process (the benchmark orchestrator, models.ts, spawns it):
// creates the session, times the first two runs apart (the compiled path analyses on its first run
// of a signature and traces on its second), then a warm-up (at least --warmup runs and --warmup-ms,
// default 3 and 300; its first 20 runs' median is earlyMs) and N timed runs; prints one JSON line.
//
// The cold start (models.ts: loadMs + createMs + firstMs + secondMs) counts each engine's native
// library load, and neither engine's JavaScript import: onnxruntime-node loads its binding (and
// libonnxruntime) when it is required, so for ort-node that require is timed apart as loadMs; the
// mlx backend loads libmlxc in its init() and onnxruntime-web its wasm in its own, both inside
// create(), so their loadMs is 0.
// (Until this was fixed, onnxruntime-node's library load fell before the clock started while MLX's
// was counted.) For the mlx engines onnxruntime-node is only the API they are called through: it
// is required before the clock starts.
//   node --conditions=source --import tsx bench/model-worker.ts --engine mlx --model dir [--runs 20] [--warmup-ms 300]
import { createRequire } from 'node:module';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { join } from 'node:path';
import { readTestCase, type HostTensor } from '../src/onnx/index.js';
import { hostToTensor } from '../src/internal.js';

const arg = (n: string, d?: string) => {
  const i = process.argv.indexOf(`--${n}`);
  return i >= 0 ? process.argv[i + 1] : d;
};
const engine = arg('engine')!;
const dir = arg('model')!;
const runs = Number(arg('runs', '20'));
const warmup = Number(arg('warmup', '3'));
const warmupMs = Number(arg('warmup-ms', '300'));

type Session = { inputNames: readonly string[]; run(f: Record<string, unknown>): Promise<unknown>; release(): Promise<void> };

async function open(): Promise<{ ort: unknown; loadMs: number; create: () => Promise<Session> }> {
  const path = join(dir, 'model.onnx');
  const require = createRequire(import.meta.url);
  if (engine === 'ort-web') {
    const ortWeb = (await import('onnxruntime-web')) as unknown as typeof import('onnxruntime-node');
    (ortWeb as unknown as { env: { wasm: { numThreads: number } } }).env.wasm.numThreads = Number(process.env.BENCH_THREADS ?? 2);
    return { ort: ortWeb, loadMs: 0, create: () => ortWeb.InferenceSession.create(path, { executionProviders: ['wasm'] }) as never };
  }
  const t = performance.now();
  const ortNode = require('onnxruntime-node') as typeof import('onnxruntime-node');
  const loadMs = performance.now() - t;
  if (engine === 'ort-node') {
    const threads = Number(process.env.BENCH_THREADS ?? 2);
    return {
      ort: ortNode,
      loadMs,
      create: () =>
        ortNode.InferenceSession.create(path, { executionProviders: ['cpu'], intraOpNumThreads: threads, interOpNumThreads: 1 }) as never,
    };
  }
  await import('../src/index.js');
  // mlx-unfused: the compiled path as it was before the fused CPU kernels and the graph rewrites
  // (the orchestrator also sets MLXC_CPU_KERNELS=off for it).
  // mlx-no-NAME: the compiled path with every graph rewrite but NAME (one rewrite's effect).
  const { REWRITES } = await import('../src/plan/rewrite/index.js');
  const without = engine.startsWith('mlx-no-') ? engine.slice('mlx-no-'.length) : undefined;
  if (without && !(without in REWRITES)) throw new Error(`unknown rewrite '${without}' in engine ${engine}`);
  // mlx-unchecked: the compiled path without the device data checks (OpContext.guard), to price them.
  if (engine === 'mlx-unchecked') (await import('../src/execute/context.js')).setDataChecksForMeasurement(false);
  // mlx-worker: the compiled path with every evaluation on the worker thread (shortEvalMs 0).
  const compiled =
    engine === 'mlx' || engine === 'mlx-unfused' || engine === 'mlx-unchecked' || engine === 'mlx-worker' || without !== undefined;
  const shortEvalMs = engine === 'mlx-worker' ? 0 : undefined;
  const graphRewrites = without ? Object.keys(REWRITES).filter((n) => n !== without) : engine !== 'mlx-unfused';
  const device = (process.env.BENCH_DEVICE ?? 'cpu') as 'cpu' | 'gpu';
  const intraOpNumThreads = Number(process.env.BENCH_THREADS ?? 2);
  return {
    ort: ortNode,
    loadMs: 0,
    create: () =>
      ortNode.InferenceSession.create(path, {
        executionProviders: [{ name: 'mlx', compiled, device, graphRewrites, shortEvalMs } as never],
        intraOpNumThreads,
      }) as never,
  };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

async function main(): Promise<void> {
  const { ort, loadMs, create } = await open();
  const ds = readTestCase(dir).datasets[0];
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const s = await create();
  const createMs = performance.now() - t0;
  const feeds: Record<string, unknown> = {};
  (ds.inputs as HostTensor[]).forEach((t, i) => (feeds[s.inputNames[i]] = hostToTensor(ort as never, t)));
  const timed = async () => {
    const t = performance.now();
    await s.run(feeds);
    return performance.now() - t;
  };
  const firstMs = await timed();
  const secondMs = await timed();
  const cpu = process.cpuUsage(cpu0);
  // CPU time of every thread of the process from create() to the end of the second run: steadier
  // than wall time on a busy machine, for comparing two versions of one engine (not engines with
  // each other: onnxruntime's pool threads spin while they wait).
  const coldCpuMs = (cpu.user + cpu.system) / 1000;
  // Warm-up: at least `warmup` runs and `warmupMs` of them. A JIT-compiled engine's JavaScript
  // (onnxruntime-common's wrapper for every engine, the provider's run path here) is interpreted,
  // then compiled on V8's background threads, over a process's first tens of runs: a millisecond
  // model's runs 3-22 measured that, not the run. Those runs are reported apart (earlyMs).
  const early: number[] = [];
  const warmStart = performance.now();
  for (let i = 0; i < warmup || performance.now() - warmStart < warmupMs; i++) {
    const t = await timed();
    if (early.length < 20) early.push(t);
  }
  // Native calls per steady run (MLX_SYS_COUNT_CALLS=1, set by the orchestrator for the mlx engines).
  const mx = engine.startsWith('mlx') ? await import('@mlx/core') : undefined;
  const calls = () => [...(mx?.nativeCallCounts()?.values() ?? [])].reduce((a, b) => a + b, 0);
  const loop = monitorEventLoopDelay({ resolution: 1 });
  loop.enable();
  const times: number[] = [];
  const calls0 = calls();
  const loopStart = performance.now();
  for (let i = 0; i < runs; i++) times.push(await timed());
  const ffiPerRun = mx?.nativeCallCounts() ? (calls() - calls0) / runs : undefined;
  // Let the sampling timer fire once more, so a block that lasted to the end of the loop is counted;
  // a loop that never yielded to it at all was one gap as long as the whole loop.
  await new Promise((resolve) => setTimeout(resolve, 2));
  loop.disable();
  const maxLoopGapMs = loop.count > 0 ? loop.max / 1e6 : performance.now() - loopStart;
  await s.release();
  const sorted = [...times].sort((a, b) => a - b);
  console.log(
    JSON.stringify({
      engine,
      model: dir.split('/').at(-1),
      loadMs,
      createMs,
      firstMs,
      secondMs,
      coldCpuMs,
      medianMs: median(times),
      earlyMs: median(early),
      p10Ms: sorted[Math.floor(runs * 0.1)],
      p90Ms: sorted[Math.min(runs - 1, Math.floor(runs * 0.9))],
      maxLoopGapMs,
      peakRssMiB: process.resourceUsage().maxRSS / 1024,
      ffiPerRun,
    }),
  );
}

main().catch((e) => {
  console.log(JSON.stringify({ engine, model: dir.split('/').at(-1), error: String((e as Error).message).split('\n')[0] }));
  process.exitCode = 1;
});
