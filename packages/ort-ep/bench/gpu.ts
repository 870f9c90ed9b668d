// The 'mlx' provider on a GPU: correctness (every shared model, compiled and eager, and a sample of
// ONNX node cases, at the tolerances of the CPU runs) and speed (first-run and warm times of large
// exported models, and the bandwidth of feeds and results crossing the bus), and the references:
// gpu_baselines.py exports the large models with the machine's torch (fixed seeds) and times torch
// CUDA eager and onnxruntime CPU on them. Prints medians, ratios and first-run times, and writes one
// JSON file and an SVG chart. On a machine with MLX's CUDA build (MLX_BACKEND=cuda tools/dev setup):
//   tools/dev bench gpu [--exports DIR] [--models DIR] [--cases DIR] [--out FILE] [--chart FILE]
//     [--only baselines,models,cases,overhead,transfers,speed] [--shard i/K] [--runs N]
// or from the bundle tools/gpu-bundle.sh makes (for machines without a registry).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import * as mx from '@mlx/core';
import { readTestCase, type HostTensor } from '../src/onnx/index.js';
import { NodeExecutionError } from '../src/errors.js';
import { MlxSession } from '../src/session.js';
import { compareTensor } from '../test/conformance/compare.js';
import { runCase } from '../test/conformance/runner.js';
import { barChart } from './chart.js';

const arg = (n: string, d?: string) => {
  const i = process.argv.indexOf(`--${n}`);
  return i >= 0 ? process.argv[i + 1] : d;
};
const device = arg('device', 'gpu') as 'gpu' | 'cpu';
const runs = Number(arg('runs', '20'));
const modes = (arg('modes', 'compiled,eager') as string).split(',').map((m) => m === 'compiled');
const sync = process.argv.includes('--sync');
const out = arg('out');
const save = () => {
  if (out) writeFileSync(out, JSON.stringify(report, null, 2));
};
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

/**
 * A token id outside gpt2-tiny's vocabulary (512 rows) on this device: the run must fail with a
 * NodeExecutionError naming the Gather node and the index, and the session must keep working.
 */
async function outOfVocabulary(dir: string): Promise<void> {
  const model = join(dir, 'gpt2-tiny');
  if (!existsSync(join(model, 'model.onnx'))) return;
  const tc = readTestCase(model);
  const [ids, mask] = tc.datasets[0].inputs as HostTensor[];
  const rows: Record<string, string> = {};
  for (const compiled of [true, false]) {
    const s = await MlxSession.create(join(model, 'model.onnx'), { device, compiled });
    try {
      for (const bad of [512n, -513n, 2n ** 40n]) {
        const data = BigInt64Array.from(ids.data as BigInt64Array);
        data[1] = bad;
        const e = await s.run({ input_ids: { ...ids, data }, attention_mask: mask }).then(
          () => undefined,
          (err: Error) => err,
        );
        const ok = e instanceof NodeExecutionError && /\(Gather\).*out of range/.test(e.message);
        rows[`${compiled ? 'compiled' : 'eager'} ${bad}`] = ok ? `pass: ${e.message}` : `FAIL: ${e ? e.message : 'no error'}`;
      }
      const good = await s.run({ input_ids: ids, attention_mask: mask });
      const c = compareTensor(good[s.outputNames[0]] as HostTensor, tc.datasets[0].outputs[0] as HostTensor, { rtol: 1e-3, atol: 1e-4 });
      rows[`${compiled ? 'compiled' : 'eager'} then a good feed`] = c.ok ? 'pass' : `FAIL: ${c.why}`;
    } finally {
      s.release();
    }
  }
  for (const [k, v] of Object.entries(rows)) log(`  out-of-vocabulary ${k}: ${v}`);
  report.outOfVocabulary = rows;
}

/** A sample of node cases: eager and compiled (three runs), through MlxSession. */
async function nodeCases(dir: string): Promise<void> {
  // --shard i/K: every K-th case from the i-th, so that K processes share the sample.
  const [shard, shards] = (arg('shard', '0/1') as string).split('/').map(Number);
  const names = readdirSync(dir)
    .filter((c) => existsSync(join(dir, c, 'model.onnx')))
    .sort()
    .filter((_, i) => i % shards === shard);
  const results: Record<string, string> = {};
  let pass = 0;
  report.nodeCases = { total: names.length, pass, results };
  for (const name of names) {
    const eager = await runCase(join(dir, name), 'mlx', { compiled: false, device, viaSession: true });
    const compiled = await runCase(join(dir, name), 'mlx', { compiled: true, runs: 3, device, viaSession: true });
    const ok = eager.status === 'pass' && compiled.status === 'pass';
    if (ok) pass++;
    results[name] = ok
      ? 'pass'
      : `${eager.status === 'pass' ? '' : `eager ${eager.status}: ${eager.detail} `}${compiled.status === 'pass' ? '' : `compiled ${compiled.status}: ${compiled.detail}`}`.trim();
    report.nodeCases = { total: names.length, pass, results };
    save(); // a run cut short still leaves the cases done so far
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
    // warmup() on the data set's feeds: the first run (analysis; MLX's kernels compiled, by NVRTC
    // on a cold kernel cache) and the second (the compiled path's trace); then the first request.
    const { runsMs } = await s.warmup({ feeds });
    const first = await time();
    for (let i = 0; i < 3; i++) await time();
    const times: number[] = [];
    for (let i = 0; i < runs; i++) times.push((await time()).ms);
    // The same runs with the results left on the device (keepOnDevice), as torch's timing leaves
    // them: the difference is the download of the results into JS memory.
    const onDevice: number[] = [];
    for (let i = 0; i < runs + 3; i++) {
      const t = performance.now();
      const out = await s.run(feeds, s.outputNames, { keepOnDevice: true });
      const ms = performance.now() - t;
      for (const v of Object.values(out)) if (v && typeof v === 'object' && 'kind' in v && v.kind === 'device') v.array.dispose();
      if (i >= 3) onDevice.push(ms);
    }
    // Results into pooled host blocks (pinnedOutputs: page-locked on CUDA), and into the same
    // pre-allocated block-backed outputs every run (outputBuffers): the download without a fresh
    // destination's page faults.
    const pinned: number[] = [];
    for (let i = 0; i < runs + 3; i++) {
      const t = performance.now();
      await s.run(feeds, s.outputNames, { pinnedOutputs: true });
      if (i >= 3) pinned.push(performance.now() - t);
    }
    const buffers: Record<string, HostTensor> = {};
    for (const [k, v] of Object.entries(first.out)) {
      const h = v as HostTensor;
      const ab = ArrayBuffer.isView(h.data) ? mx.hostBuffer(h.data.byteLength) : undefined;
      const Ctor = (h.data as unknown as { constructor: new (b: ArrayBuffer, o: number, n: number) => HostTensor['data'] }).constructor;
      if (ab) buffers[k] = { dtype: h.dtype, dims: h.dims, data: new Ctor(ab, 0, (h.data as ArrayLike<number>).length) };
    }
    const reused: number[] = [];
    for (let i = 0; i < runs + 3; i++) {
      const t = performance.now();
      await s.run(feeds, s.outputNames, { outputBuffers: buffers });
      if (i >= 3) reused.push(performance.now() - t);
    }
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
      warmupMs: runsMs,
      firstRequestMs: first.ms,
      medianMs: median(times),
      minMs: Math.min(...times),
      resultsOnDeviceMedianMs: median(onDevice),
      pinnedOutputsMedianMs: median(pinned),
      preallocatedBlocksMedianMs: median(reused),
      relErrVsOrt: Math.sqrt(num / Math.max(den, 1e-30)),
    };
    log(
      `  ${name.padEnd(20)} create ${createMs.toFixed(0)} ms, warmup ${runsMs.map((m) => m.toFixed(0)).join(' + ')} ms, first request ${first.ms.toFixed(1)} ms, warm median ${median(times).toFixed(2)} ms (results left on the device ${median(onDevice).toFixed(2)} ms, into pinned blocks ${median(pinned).toFixed(2)} ms, into the same pre-allocated blocks ${median(reused).toFixed(2)} ms), rel. error vs onnxruntime CPU ${(rows[name] as { relErrVsOrt: number }).relErrVsOrt.toExponential(2)}`,
    );
    s.release();
    report.speed = rows;
    save();
  }
}

/**
 * Feeds and results crossing the bus: y = x * 2 on n float32s, split into upload (the array made
 * from JS data), compute and download (toTypedArray). Each way of moving the data that
 * mlxc_array_new_data_on / mlxc_array_read know (MLXC_TRANSFER) is measured in the same process:
 * 'unified' is MLX's own path (unified memory, with the prefetch the provider used before), the
 * others copy into and out of device memory.
 */
async function transfers(): Promise<void> {
  const rows: Record<string, Record<string, unknown>> = {};
  // WAY or WAY/PREFAULT: MLXC_PREFAULT, how a download populates its fresh destination's pages.
  const ways = (arg('transfer-modes', 'unified,pageable,pinned,staged,staged/single,staged/touch,staged/none') as string).split(',');
  const before = process.env.MLXC_TRANSFER;
  for (const way of ways) {
    process.env.MLXC_TRANSFER = way.split('/')[0];
    process.env.MLXC_PREFAULT = way.split('/')[1] ?? 'parallel';
    rows[way] = {};
    for (const mib of [1, 16, 64, 256, 1024]) {
      const n = (mib << 20) / 4;
      const x = new Float32Array(n).fill(1.5);
      using stream = mx.newStream(device, { anyThread: true });
      const up: number[] = [];
      const ins: number[] = [];
      const outs: number[] = [];
      let resident = -1;
      for (let r = 0; r < (mib >= 1024 ? 3 : 7); r++) {
        let t = performance.now();
        const a = mx.withStream(stream, () => mx.Array.fromTypedArray(x, [n]));
        if (device === 'gpu' && way.startsWith('unified')) a.prefetch('device');
        const tUp = performance.now() - t;
        resident = a.deviceIndex;
        const y = mx.withStream(stream, () => mx.multiply(a, 2));
        t = performance.now();
        await mx.evalInBackground([y], {}, stream);
        const tEval = performance.now() - t;
        t = performance.now();
        const back = mx.withStream(stream, () => y.toTypedArray() as Float32Array);
        const tDown = performance.now() - t;
        if (back[0] !== 3 || back[n - 1] !== 3) throw new Error(`wrong result (${way}, ${mib} MiB)`);
        a.dispose();
        y.dispose();
        up.push(tUp);
        ins.push(tUp + tEval);
        outs.push(tDown);
      }
      const gbps = (ms: number) => (mib * 1.048576) / ms; // GB/s (10^9 bytes per second)
      rows[way][`${mib}MiB`] = {
        uploadMs: median(up),
        inMs: median(ins),
        outMs: median(outs),
        uploadGBps: gbps(median(up)),
        inGBps: gbps(median(ins)),
        outGBps: gbps(median(outs)),
        inputOnDevice: resident,
      };
      log(
        `  ${way.padEnd(13)} ${String(mib).padStart(4)} MiB: upload ${median(up).toFixed(2)} ms (${gbps(median(up)).toFixed(1)} GB/s), upload+x2 ${median(ins).toFixed(2)} ms (${gbps(median(ins)).toFixed(1)} GB/s), download ${median(outs).toFixed(2)} ms (${gbps(median(outs)).toFixed(1)} GB/s)${resident >= 0 ? ', input in device memory' : ''}`,
      );
      if (way === 'staged') Object.assign(rows[way][`${mib}MiB`] as object, reuseRows(x, n, mib, stream, gbps));
    }
  }
  delete process.env.MLXC_PREFAULT;
  if (before === undefined) delete process.env.MLXC_TRANSFER;
  else process.env.MLXC_TRANSFER = before;
  report.transfers = rows;
}

/**
 * Where a download's time goes when the destination is fresh: the same sizes read into a
 * destination that is reused (its pages exist), into a pooled host block (mx.hostBuffer:
 * page-locked, written by the copy engine directly), and uploaded from a block; and the host's
 * own rate of populating fresh memory (a new Float32Array filled), the bound of a fresh download.
 */
function reuseRows(x: Float32Array, n: number, mib: number, stream: mx.Stream, gbps: (ms: number) => number): Record<string, number> {
  const rounds = mib >= 1024 ? 3 : 7;
  const reused = new Float32Array(n).fill(0);
  const block = mx.hostBuffer(n * 4);
  const pinnedView = block ? new Float32Array(block, 0, n) : undefined;
  if (pinnedView) pinnedView.set(x);
  const into: number[] = [];
  const intoBlock: number[] = [];
  const upBlock: number[] = [];
  const touch: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const y = mx.withStream(stream, () => mx.multiply(mx.Array.fromTypedArray(x, [n]), 2).eval());
    let t = performance.now();
    mx.withStream(stream, () => y.readInto(reused));
    into.push(performance.now() - t);
    if (reused[0] !== 3 || reused[n - 1] !== 3) throw new Error(`wrong result (reused, ${mib} MiB)`);
    if (pinnedView) {
      t = performance.now();
      mx.withStream(stream, () => y.readInto(pinnedView));
      intoBlock.push(performance.now() - t);
      if (pinnedView[0] !== 3 || pinnedView[n - 1] !== 3) throw new Error(`wrong result (block, ${mib} MiB)`);
      pinnedView.set(x);
      t = performance.now();
      const a = mx.withStream(stream, () => mx.Array.fromTypedArray(pinnedView, [n]));
      upBlock.push(performance.now() - t);
      a.dispose();
    }
    y.dispose();
    t = performance.now();
    const fresh = new Float32Array(n).fill(1);
    touch.push(performance.now() - t);
    if (fresh[n - 1] !== 1) throw new Error('fill');
  }
  const row: Record<string, number> = {
    reusedOutMs: median(into),
    reusedOutGBps: gbps(median(into)),
    freshFillGBps: gbps(median(touch)),
  };
  let line = `  ${'staged'.padEnd(13)} ${String(mib).padStart(4)} MiB: download into a reused array ${gbps(median(into)).toFixed(1)} GB/s`;
  if (intoBlock.length) {
    Object.assign(row, {
      blockOutMs: median(intoBlock),
      blockOutGBps: gbps(median(intoBlock)),
      blockUploadMs: median(upBlock),
      blockUploadGBps: gbps(median(upBlock)),
    });
    line += `, into a host block ${gbps(median(intoBlock)).toFixed(1)} GB/s (${mx.hostMemory.stats().pinned ? 'page-locked' : 'not page-locked'}), upload from a block ${gbps(median(upBlock)).toFixed(1)} GB/s`;
  } else line += ', no host block (pool limit)';
  log(`${line}; the host fills fresh memory at ${gbps(median(touch)).toFixed(1)} GB/s`);
  return row;
}

/**
 * MLX's cost per operation on this device, apart from the work: a chain of n dependent operations
 * on small arrays (adds on [1, 768]; products [1, 768] x [768, 768]) evaluated at once, eagerly
 * and through one compiled function. What a decode step of a small model pays per node.
 */
async function overhead(): Promise<void> {
  const rows: Record<string, unknown> = {};
  using stream = mx.newStream(device, { anyThread: true });
  for (const kind of ['add', 'matmul'] as const) {
    for (const n of [100, 400]) {
      const times: number[] = [];
      mx.withStream(stream, () => {
        const x0 = mx.ones([1, 768], 'float32');
        const w = mx.multiply(mx.ones([768, 768], 'float32'), 1 / 768);
        mx.evaluate([x0, w]);
        for (let r = 0; r < 12; r++) {
          const t = performance.now();
          let x = x0;
          const made: mx.Array[] = [];
          for (let i = 0; i < n; i++) {
            x = kind === 'add' ? mx.add(x, x0) : mx.matmul(x, w);
            made.push(x);
          }
          x.eval();
          if (r >= 2) times.push(performance.now() - t);
          mx.dispose(made);
        }
        mx.dispose([x0, w]);
      });
      const us = (median(times) * 1000) / n;
      rows[`${kind} x${n}`] = { msPerChain: median(times), usPerOp: us };
      log(`  ${kind.padEnd(6)} chain of ${n}: ${median(times).toFixed(2)} ms, ${us.toFixed(1)} us per operation`);
    }
  }
  report.overhead = rows;
}

const here = dirname(fileURLToPath(import.meta.url));
const MODELS = ['bert-base', 'bert-base-b8', 'gpt2-small', 'resnet50', 'matmul4096'];

/** gpu_baselines.py: exports the models with the machine's torch, times torch CUDA and onnxruntime CPU. */
function baselines(exportsDir: string): void {
  const py = [join(here, 'gpu_baselines.py'), join(here, '..', 'bench', 'gpu_baselines.py')].find(existsSync);
  if (!py) throw new Error('gpu_baselines.py not found beside the benchmark');
  mkdirSync(exportsDir, { recursive: true });
  const json = join(exportsDir, 'baselines.json');
  const r = spawnSync(process.env.PYTHON ?? 'python3', [py, exportsDir, json, '--runs', String(runs), '--only', MODELS.join(',')], {
    stdio: 'inherit',
    env: { ...process.env, PYTHONUNBUFFERED: '1' },
  });
  if (r.status !== 0) throw new Error(`gpu_baselines.py failed (exit ${r.status})`);
  report.baselines = JSON.parse(readFileSync(json, 'utf8'));
  save();
}

/** The table: mlx on the GPU against torch CUDA eager and onnxruntime CPU, and the chart. */
function summary(chartFile?: string): void {
  const base = (
    report.baselines as { models?: Record<string, { torchCuda?: { medianMs: number; firstMs: number }; ortCpu?: { medianMs: number } }> }
  )?.models;
  const speed = report.speed as Record<string, { medianMs: number; resultsOnDeviceMedianMs?: number; warmupMs: number[] }> | undefined;
  if (!base || !speed) return;
  const names = MODELS.filter((m) => speed[m] && base[m]);
  const rows: Record<string, unknown> = {};
  log('\nmodel            mlx gpu  (on device)  torch cuda   ort cpu    mlx/torch (on device)  ort/mlx   first run mlx (torch)');
  for (const m of names) {
    const x = speed[m].medianMs;
    const xd = speed[m].resultsOnDeviceMedianMs ?? Number.NaN;
    const t = base[m].torchCuda?.medianMs ?? Number.NaN;
    const o = base[m].ortCpu?.medianMs ?? Number.NaN;
    rows[m] = {
      mlxMs: x,
      mlxResultsOnDeviceMs: xd,
      torchMs: t,
      ortMs: o,
      mlxOverTorch: x / t,
      mlxOnDeviceOverTorch: xd / t,
      ortOverMlx: o / x,
      mlxFirstMs: speed[m].warmupMs[0],
      torchFirstMs: base[m].torchCuda?.firstMs,
    };
    log(
      `${m.padEnd(16)} ${x.toFixed(2).padStart(7)} ms ${xd.toFixed(2).padStart(8)} ms ${t.toFixed(2).padStart(8)} ms ${o.toFixed(1).padStart(8)} ms ${(x / t).toFixed(2).padStart(8)}x ${(xd / t).toFixed(2).padStart(8)}x ${(o / x).toFixed(1).padStart(7)}x   ${speed[m].warmupMs[0].toFixed(0)} ms (${(base[m].torchCuda?.firstMs ?? Number.NaN).toFixed(0)} ms)`,
    );
  }
  report.summary = rows;
  if (chartFile) {
    writeFileSync(
      chartFile,
      barChart({
        title: `Latency on ${(report.baselines as { gpu?: string }).gpu ?? 'the GPU'}, fp32, median of ${runs} warm runs (ms, log scale)`,
        groups: names,
        log: true,
        series: [
          { name: 'mlx (GPU), results to JS', values: names.map((m) => speed[m].medianMs) },
          { name: 'mlx (GPU), results on device', values: names.map((m) => speed[m].resultsOnDeviceMedianMs ?? Number.NaN) },
          { name: 'torch CUDA eager', values: names.map((m) => base[m].torchCuda?.medianMs ?? Number.NaN) },
          { name: 'onnxruntime CPU', values: names.map((m) => base[m].ortCpu?.medianMs ?? Number.NaN) },
        ],
      }),
    );
    log(`chart: ${chartFile}`);
  }
}

async function main(): Promise<void> {
  const shared = join(here, '..', '..', '..', '..', 'shared', 'models');
  const models = arg('models', existsSync(shared) ? shared : undefined);
  const exports = arg('exports', join(here, 'exports')) as string;
  const cases = arg('cases');
  const only = (arg('only', 'baselines,models,cases,transfers,speed') as string).split(',');
  if (arg('baselines')) report.baselines = JSON.parse(readFileSync(arg('baselines') as string, 'utf8'));
  if (only.includes('baselines')) baselines(exports);
  if (models && only.includes('models')) {
    log(`shared models on ${device}:`);
    await sharedModels(models);
    await outOfVocabulary(models);
    save();
  }
  if (cases && only.includes('cases')) {
    log(`node cases on ${device}:`);
    await nodeCases(cases);
  }
  if (only.includes('overhead')) {
    log(`cost per operation on ${device}:`);
    await overhead();
    save();
  }
  if (only.includes('transfers')) {
    log('transfers:');
    await transfers();
    save();
  }
  if (exports && only.includes('speed')) {
    log(`large models on ${device} (median of ${runs} warm runs):`);
    await speed(exports);
  }
  summary(arg('chart'));
  save();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
