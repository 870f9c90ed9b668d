// The 'mlx' provider on a GPU: correctness (every shared model, compiled and eager, and a sample of
// ONNX node cases, at the tolerances of the CPU runs) and speed (first-run and warm times of large
// exported models, and the bandwidth of feeds and results crossing the bus). Writes one JSON file;
// bench/gpu-report.ts merges it with the torch and onnxruntime figures of gpu_baselines.py.
// Run on a machine with MLX's CUDA build (MLX_BACKEND=cuda tools/dev setup, or MLX_LIBMLX):
//   node --conditions=source --import tsx bench/gpu.ts --models DIR --exports DIR [--cases DIR] [--out FILE]
// or from the bundle tools/gpu-bundle.sh makes (for machines without a registry).
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import * as mx from '@mlx/core';
import { readTestCase, type HostTensor } from '../src/onnx/index.js';
import { MlxSession } from '../src/session.js';
import { compareTensor } from '../test/conformance/compare.js';
import { runCase } from '../test/conformance/runner.js';

const arg = (n: string, d?: string) => {
  const i = process.argv.indexOf(`--${n}`);
  return i >= 0 ? process.argv[i + 1] : d;
};
const device = arg('device', 'gpu') as 'gpu' | 'cpu';
const runs = Number(arg('runs', '20'));
const modes = (arg('modes', 'compiled,eager') as string).split(',').map((m) => m === 'compiled');
const sync = process.argv.includes('--sync');
const report: Record<string, unknown> = {
  date: new Date().toISOString(),
  device,
  mlx: mx.version(),
  library: mx.nativeLibraryPath,
  cuda: mx.cudaAvailable(),
};
const log = (s: string) => console.log(s);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

function feedsOf(s: MlxSession, ds: { inputs: unknown[] }): Record<string, HostTensor> {
  const f: Record<string, HostTensor> = {};
  (ds.inputs as HostTensor[]).forEach((t, i) => (f[s.inputNames[i]] = t));
  return f;
}

/** Every shared model, both data sets, three compiled runs and one eager, against the references. */
async function sharedModels(dir: string): Promise<void> {
  const rows: Record<string, string> = {};
  for (const name of readdirSync(dir).filter((m) => existsSync(join(dir, m, 'model.onnx')))) {
    const meta = JSON.parse(readFileSync(join(dir, name, 'meta.json'), 'utf8'));
    const tol = { rtol: meta.rtol ?? meta.tolerance?.rtol ?? 1e-3, atol: meta.atol ?? meta.tolerance?.atol ?? 1e-4 };
    const tc = readTestCase(join(dir, name));
    let verdict = 'pass';
    let worst = 0;
    for (const compiled of modes) {
      const s = await MlxSession.create(join(dir, name, 'model.onnx'), { device, compiled });
      try {
        for (let r = 0; r < (compiled ? 3 : 1); r++) {
          for (const ds of tc.datasets) {
            const out = sync ? s.runSync(feedsOf(s, ds)) : await s.run(feedsOf(s, ds));
            (ds.outputs as HostTensor[]).forEach((want, i) => {
              const got = out[s.outputNames[i]] as HostTensor;
              const c = compareTensor(got, want, tol);
              const a = got.data as Float32Array;
              const b = want.data as Float32Array;
              if (a instanceof Float32Array)
                for (let k = 0; k < a.length; k++) worst = Math.max(worst, Math.abs(a[k] - b[k]) / (tol.atol + tol.rtol * Math.abs(b[k])));
              if (!c.ok && verdict === 'pass') verdict = `${compiled ? 'compiled' : 'eager'} run ${r + 1}: ${c.why}`;
            });
          }
        }
      } catch (e) {
        verdict = `${compiled ? 'compiled' : 'eager'}: ${(e as Error).message.split('\n')[0]}`;
      } finally {
        s.release();
      }
    }
    rows[name] = verdict;
    log(`  ${name.padEnd(22)} ${verdict === 'pass' ? `pass (largest error ${worst.toFixed(3)} of the tolerance)` : verdict}`);
  }
  report.sharedModels = rows;
}

/** A sample of node cases: eager and compiled (three runs), through MlxSession. */
async function nodeCases(dir: string): Promise<void> {
  const names = readdirSync(dir)
    .filter((c) => existsSync(join(dir, c, 'model.onnx')))
    .sort();
  const results: Record<string, string> = {};
  let pass = 0;
  for (const name of names) {
    const eager = await runCase(join(dir, name), 'mlx', { compiled: false, device, viaSession: true });
    const compiled = await runCase(join(dir, name), 'mlx', { compiled: true, runs: 3, device, viaSession: true });
    const ok = eager.status === 'pass' && compiled.status === 'pass';
    if (ok) pass++;
    results[name] = ok
      ? 'pass'
      : `${eager.status === 'pass' ? '' : `eager ${eager.status}: ${eager.detail} `}${compiled.status === 'pass' ? '' : `compiled ${compiled.status}: ${compiled.detail}`}`.trim();
  }
  log(`  node cases: ${pass} of ${names.length} pass on ${device}`);
  for (const [n, r] of Object.entries(results)) if (r !== 'pass') log(`    ${n}: ${r.slice(0, 200)}`);
  report.nodeCases = { total: names.length, pass, results };
}

/** Large models: create, first run (analysis; kernels compiled by NVRTC), second (trace), warm median. */
async function speed(dir: string): Promise<void> {
  const rows: Record<string, unknown> = {};
  for (const name of readdirSync(dir)
    .filter((m) => existsSync(join(dir, m, 'model.onnx')))
    .sort()) {
    const tc = readTestCase(join(dir, name));
    const t0 = performance.now();
    const s = await MlxSession.create(join(dir, name, 'model.onnx'), { device });
    const createMs = performance.now() - t0;
    const feeds = feedsOf(s, tc.datasets[0]);
    const time = async () => {
      const t = performance.now();
      const out = await s.run(feeds);
      return { ms: performance.now() - t, out };
    };
    const first = await time();
    const second = await time();
    for (let i = 0; i < 3; i++) await time();
    const times: number[] = [];
    for (let i = 0; i < runs; i++) times.push((await time()).ms);
    // Against onnxruntime CPU's outputs on the same graph (gpu_baselines.py saves them as the data
    // set's outputs): relative error of the first output.
    const want = tc.datasets[0].outputs[0] as HostTensor;
    const got = first.out[s.outputNames[0]] as HostTensor;
    let num = 0;
    let den = 0;
    const a = got.data as Float32Array;
    const b = want.data as Float32Array;
    for (let k = 0; k < b.length; k++) {
      num += (a[k] - b[k]) ** 2;
      den += b[k] ** 2;
    }
    rows[name] = {
      createMs,
      firstMs: first.ms,
      secondMs: second.ms,
      medianMs: median(times),
      minMs: Math.min(...times),
      relErrVsOrt: Math.sqrt(num / Math.max(den, 1e-30)),
    };
    log(
      `  ${name.padEnd(20)} create ${createMs.toFixed(0)} ms, first ${first.ms.toFixed(0)} ms, second ${second.ms.toFixed(0)} ms, warm median ${median(times).toFixed(2)} ms, rel. error vs onnxruntime CPU ${(rows[name] as { relErrVsOrt: number }).relErrVsOrt.toExponential(2)}`,
    );
    s.release();
  }
  report.speed = rows;
}

/** Feeds and results crossing the bus: y = x * 2 on n float32s, split into in, compute and out. */
async function transfers(): Promise<void> {
  const rows: Record<string, unknown> = {};
  for (const mib of [16, 64, 256]) {
    const n = (mib << 20) / 4;
    const x = new Float32Array(n).fill(1.5);
    using stream = mx.newStream(device, { anyThread: true });
    const timesIn: number[] = [];
    const timesOut: number[] = [];
    const timesAll: number[] = [];
    for (let r = 0; r < 7; r++) {
      let t = performance.now();
      const a = mx.withStream(stream, () => mx.Array.fromTypedArray(x, [n]));
      // As the provider uploads: one transfer to the GPU (MLX's CUDA build), not page faults.
      if (device === 'gpu') a.prefetch('device');
      const y = mx.withStream(stream, () => mx.multiply(a, 2));
      // The upload, then the product: MLX moves the data to the GPU when the kernel reads it.
      const tUp = performance.now() - t;
      t = performance.now();
      await mx.evalInBackground([y], {}, stream);
      const tEval = performance.now() - t;
      t = performance.now();
      const back = mx.withStream(stream, () => y.toTypedArray() as Float32Array);
      const tDown = performance.now() - t;
      if (back[n - 1] !== 3) throw new Error('wrong result');
      a.dispose();
      y.dispose();
      timesIn.push(tUp + tEval);
      timesOut.push(tDown);
      timesAll.push(tUp + tEval + tDown);
    }
    const gbps = (ms: number) => mib / 1024 / (ms / 1000);
    rows[`${mib}MiB`] = { inMs: median(timesIn), outMs: median(timesOut), inGBps: gbps(median(timesIn)), outGBps: gbps(median(timesOut)) };
    log(
      `  ${mib} MiB: host->GPU (+x2) ${median(timesIn).toFixed(1)} ms (${gbps(median(timesIn)).toFixed(1)} GB/s), GPU->host ${median(timesOut).toFixed(1)} ms (${gbps(median(timesOut)).toFixed(1)} GB/s)`,
    );
  }
  report.transfers = rows;
}

async function main(): Promise<void> {
  const models = arg('models');
  const exports = arg('exports');
  const cases = arg('cases');
  const only = (arg('only', 'models,cases,transfers,speed') as string).split(',');
  if (models && only.includes('models')) {
    log(`shared models on ${device}:`);
    await sharedModels(models);
  }
  if (cases && only.includes('cases')) {
    log(`node cases on ${device}:`);
    await nodeCases(cases);
  }
  if (only.includes('transfers')) {
    log('transfers:');
    await transfers();
  }
  if (exports && only.includes('speed')) {
    log(`large models on ${device} (median of ${runs} warm runs):`);
    await speed(exports);
  }
  const out = arg('out');
  if (out) writeFileSync(out, JSON.stringify(report, null, 2));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
