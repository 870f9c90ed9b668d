// Whole-model latency of the 'mlx' provider (compiled and eager), onnxruntime-node's CPU provider
// and onnxruntime-web's wasm, each engine alone in its own process (model-worker.ts), alternated,
// over several rounds; medians of the per-process medians (each process warms up for at least 3
// runs and 300 ms first; its runs 3-22, while V8 still compiles the JavaScript, are a table of their
// own), ratios to onnxruntime-node, first-run
// times (the compiled path's first run analyses a signature, its second traces it), the cold
// start (the native library's load, create and the first two runs of a fresh process with empty
// kernel caches: every process gets caches of its own; onnxruntime-node loads its library when
// required, MLX in create(): model-worker.ts times both), peak RSS and the largest event-loop
// gap; the load average is printed before and after.
// Writes reports/bench-models.json and bench/models.svg. Never a test.
//   tools/dev bench models [--rounds 3] [--runs 20] [--filter regex] [--engines mlx,mlx-eager,ort-node,ort-web]
//   (also mlx-worker: the compiled path with every evaluation on the worker thread (shortEvalMs 0);
//   mlx-unfused: the compiled path without the fused CPU kernels and graph rewrites; mlx-no-NAME:
//   the compiled path with every graph rewrite but NAME, e.g. mlx-no-conv-epilogue; BENCH_THREADS
//   threads for every engine, default 2)
//   [--models dir,...] (extra model folders in the shared layout, e.g. from bench/export-models.py)
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { barChart } from './chart.js';

const here = dirname(fileURLToPath(import.meta.url));
const pkg = join(here, '..');
const arg = (n: string, d?: string) => {
  const i = process.argv.indexOf(`--${n}`);
  return i >= 0 ? process.argv[i + 1] : d;
};
const rounds = Number(arg('rounds', '3'));
const runs = arg('runs', '20')!;
const filter = new RegExp(arg('filter', '.')!);
const engines = arg('engines', 'mlx,mlx-eager,ort-node,ort-web')!.split(',');
const sharedModels = join(pkg, '..', '..', '..', 'shared', 'models');
const extra = (arg('models') ?? '').split(',').filter(Boolean);

interface Sample {
  engine: string;
  model: string;
  /** The engine's native library load where it falls outside create() (onnxruntime-node's require; model-worker.ts). */
  loadMs?: number;
  createMs: number;
  firstMs: number;
  secondMs: number;
  medianMs: number;
  /** The median of the first 20 runs after the first two (warm-up; model-worker.ts). */
  earlyMs?: number;
  p10Ms: number;
  p90Ms: number;
  maxLoopGapMs: number;
  peakRssMiB: number;
  ffiPerRun?: number;
  error?: string;
}

const modelDirs = [...(existsSync(sharedModels) ? readdirSync(sharedModels).map((m) => join(sharedModels, m)) : []), ...extra].filter(
  (d) => existsSync(join(d, 'model.onnx')) && filter.test(d.split('/').at(-1)!),
);

const median = (xs: number[]) => (xs.length ? [...xs].sort((a, b) => a - b)[xs.length >> 1] : NaN);

function worker(engine: string, dir: string, env: NodeJS.ProcessEnv): Sample {
  const r = spawnSync(
    process.execPath,
    ['--conditions=source', '--import', 'tsx', join(here, 'model-worker.ts'), '--engine', engine, '--model', dir, '--runs', runs],
    {
      cwd: pkg,
      env: { ...process.env, ...env },
      encoding: 'utf8',
      timeout: 600_000,
    },
  );
  const line = r.stdout
    .trim()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .at(-1);
  if (!line) return { engine, model: dir.split('/').at(-1)!, error: (r.stderr || 'no output').trim().split('\n').at(-1) } as Sample;
  return JSON.parse(line) as Sample;
}

const load = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');

function main(): void {
  const cold = mkdtempSync(join(tmpdir(), 'mlx-ort-bench-cache-'));
  const samples: Sample[] = [];
  const loadBefore = load();
  console.log(
    `${modelDirs.length} models, ${rounds} rounds, ${runs} timed runs per process; engines: ${engines.join(', ')}; load average ${loadBefore}`,
  );
  let n = 0;
  for (let round = 0; round < rounds; round++) {
    for (const [mi, dir] of modelDirs.entries()) {
      // Alternate the order so that no engine always runs first (or after the same neighbour).
      const order = engines.map((_, i) => engines[(i + round + mi) % engines.length]);
      for (const e of order) {
        // Every process starts with empty kernel caches of its own (a cold start): MLX's folder
        // lives under TMPDIR, the lasting one the provider links it to (MLX_ORT_CPU_JIT=1) under
        // MLX_ORT_CACHE_DIR, CUDA's under MLX_PTX_CACHE_DIR.
        const fresh = join(cold, String(n++));
        mkdirSync(join(fresh, 'tmp'), { recursive: true });
        const s = worker(e, dir, {
          MLX_ORT_CACHE_DIR: join(fresh, 'lasting'),
          TMPDIR: join(fresh, 'tmp'),
          MLX_PTX_CACHE_DIR: join(fresh, 'ptx'),
          ...(e === 'mlx-unfused' && { MLXC_CPU_KERNELS: 'off' }),
        });
        rmSync(fresh, { recursive: true, force: true });
        samples.push({ ...s, round } as Sample & { round: number });
        if (s.error) console.log(`  ${s.model} on ${e}: ${s.error}`);
      }
    }
    console.log(`round ${round + 1}/${rounds} done`);
  }
  // Native calls per run, counted in processes of their own (the counting wrapper costs time).
  const ffi = new Map<string, number>();
  for (const dir of modelDirs) {
    for (const e of engines.filter((x) => x.startsWith('mlx'))) {
      const s = worker(e, dir, { MLX_SYS_COUNT_CALLS: '1', ...(e === 'mlx-unfused' && { MLXC_CPU_KERNELS: 'off' }) });
      if (s.ffiPerRun !== undefined) ffi.set(`${s.model}\0${e}`, s.ffiPerRun);
    }
  }
  rmSync(cold, { recursive: true, force: true });

  const models = modelDirs.map((d) => d.split('/').at(-1)!);
  const rows = models.map((m) => {
    const per: Record<string, Record<string, number>> = {};
    for (const e of engines) {
      const ok = samples.filter((s) => s.model === m && s.engine === e && !s.error);
      per[e] = {
        medianMs: median(ok.map((s) => s.medianMs)),
        earlyMs: median(ok.map((s) => s.earlyMs ?? NaN)),
        createMs: median(ok.map((s) => s.createMs)),
        firstTwoMs: median(ok.map((s) => s.firstMs + s.secondMs)),
        coldStartMs: median(ok.map((s) => (s.loadMs ?? 0) + s.createMs + s.firstMs + s.secondMs)),
        peakRssMiB: median(ok.map((s) => s.peakRssMiB)),
        maxLoopGapMs: Math.max(...ok.map((s) => s.maxLoopGapMs), 0),
        ffiPerRun: ffi.get(`${m}\0${e}`) ?? NaN,
      };
    }
    return { model: m, engines: per };
  });

  // At least one space between columns, whatever the engine names.
  const pad = (s: string, n: number) => ` ${s.padStart(n - 1)}`;
  /** One figure per model and engine, with each engine's ratio to onnxruntime-node (and their geomean). */
  const table = (title: string, key: 'medianMs' | 'earlyMs' | 'coldStartMs', digits: number, geomean: boolean) => {
    console.log(`\n${title}; ratio = engine / ort-node`);
    const others = engines.filter((e) => e !== 'ort-node');
    console.log(['model'.padEnd(22), ...engines.map((e) => pad(e, 11)), ...others.map((e) => pad(`${e}/ort`, 14))].join(''));
    for (const r of rows) {
      const base = r.engines['ort-node']?.[key];
      console.log(
        [
          r.model.padEnd(22),
          ...engines.map((e) => pad(r.engines[e][key].toFixed(digits), 11)),
          ...others.map((e) => pad((r.engines[e][key] / base).toFixed(2), 14)),
        ].join(''),
      );
    }
    const geo = (e: string) =>
      Math.exp(rows.reduce((a, r) => a + Math.log(r.engines[e][key] / r.engines['ort-node'][key]), 0) / rows.length);
    if (geomean && engines.includes('ort-node'))
      console.log(['geomean ratio'.padEnd(22), ...others.map((e) => `${e}/ort ${geo(e).toFixed(2)}`)].join('  '));
  };
  table(
    "median ms per run after a warm-up of at least 3 runs and 300 ms (median over rounds of each process's median)",
    'medianMs',
    3,
    true,
  );
  // The runs right after the first two, where each engine's JavaScript is still interpreted and
  // compiled on V8's threads: what a short-lived process sees, apart from the steady run above.
  table('runs 3-22: median ms of the 20 runs after the first two, V8 still optimizing (median over rounds)', 'earlyMs', 3, true);
  table(
    'cold start: ms for the native library load, create and the first two runs in a fresh process with empty kernel caches (median over rounds)',
    'coldStartMs',
    1,
    false,
  );
  console.log(
    '\nper engine: create and the first two runs (ms), peak RSS (MiB), largest event-loop gap while running (ms), native calls per run',
  );
  for (const r of rows) {
    for (const e of engines) {
      const x = r.engines[e];
      const calls = Number.isFinite(x.ffiPerRun) ? `  native calls/run ${x.ffiPerRun.toFixed(0)}` : '';
      console.log(
        `  ${r.model.padEnd(20)} ${e.padEnd(10)} create ${x.createMs.toFixed(0).padStart(5)}  first two ${x.firstTwoMs.toFixed(0).padStart(6)}  rss ${x.peakRssMiB.toFixed(0).padStart(5)}  gap ${x.maxLoopGapMs.toFixed(1).padStart(6)}${calls}`,
      );
    }
  }
  const loadAfter = load();
  console.log(`\nload average: ${loadBefore} before, ${loadAfter} after`);
  const out = join(pkg, '..', '..', 'reports');
  mkdirSync(out, { recursive: true });
  const report = {
    date: new Date().toISOString(),
    load: { before: loadBefore, after: loadAfter },
    rounds,
    runs: Number(runs),
    engines,
    rows,
  };
  writeFileSync(join(out, 'bench-models.json'), JSON.stringify(report, null, 2));
  writeFileSync(
    join(here, 'models.svg'),
    barChart({
      title: 'Median ms per run, each engine alone in its process (lower is better)',
      groups: rows.map((r) => r.model),
      series: engines.map((e) => ({ name: e, values: rows.map((r) => r.engines[e].medianMs) })),
      log: true,
    }),
  );
  console.log(`\nwrote reports/bench-models.json and packages/ort-ep/bench/models.svg`);
}

main();
