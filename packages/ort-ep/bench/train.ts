// Training: one step (forward, backward, AdamW update) of the 7M and 100M Llama-shaped decoders
// (decoder-sizes.ts SIZES small and 100m, random weights, test/helpers/decoder.ts) and BERT-base
// (bench/export-models.py's export) on the 'mlx' provider (MlxSession.trainStep, graphRewrites
// off, every parameter trained) against torch eager on this CPU with the same architecture and
// sizes (bench/train_baselines.py, the bench Python of tools/install-bench-python.sh). Losses: a
// next-token cross-entropy on a fixed random batch (decoders), the mean square of the last hidden
// state plus that of the pooled output (BERT). Each engine runs alone in its own process,
// alternated over --rounds rounds; a figure is the median over rounds of each process's median
// step (after --warmup steps), and its peak RSS (VmHWM). Threads: BENCH_THREADS (default 2) for
// both. The load average is printed before and after. Writes reports/bench-train.json. Never a test.
//   tools/dev bench train [--rounds 3] [--steps 3] [--warmup 1] [--filter regex] [--engines mlx,torch]
//     (engines: mlx, torch, and mlx-composed-adamw: mlx with AdamW composed from MLX's ops, fused: false)
//     [--bert DIR] (a folder holding BERT-base's model.onnx; default: exported by
//     bench/export-models.py into reports/bench-models/ when missing) [--out DIR]
//     [--env NAME=VALUE,...] (set for every engine's process, e.g. MALLOC_MMAP_THRESHOLD_=131072: glibc's
//     fixed mmap threshold, which returns freed large buffers to the system at once)
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildDecoder, type DecoderConfig } from '../test/helpers/decoder.js';
import { SIZES } from './decoder-sizes.js';

const here = dirname(fileURLToPath(import.meta.url));
const pkg = join(here, '..');
const repo = join(pkg, '..', '..');
const arg = (n: string, d?: string) => {
  const i = process.argv.indexOf(`--${n}`);
  return i >= 0 ? process.argv[i + 1] : d;
};
const median = (xs: number[]) => (xs.length ? [...xs].sort((a, b) => a - b)[xs.length >> 1] : Number.NaN);
const threads = Number(process.env.BENCH_THREADS ?? 2);

interface Case {
  name: string;
  kind: 'decoder' | 'bert';
  batch: number;
  seq: number;
  config?: DecoderConfig;
}

// 100M: a smaller batch, to keep a step within seconds on two cores.
const CASES: Case[] = [
  { name: 'decoder-7m', kind: 'decoder', batch: 4, seq: 128, config: { ...SIZES.small, maxPositions: 128 } },
  { name: 'decoder-100m', kind: 'decoder', batch: 1, seq: 128, config: { ...SIZES['100m'], maxPositions: 128 } },
  { name: 'bert-base', kind: 'bert', batch: 2, seq: 128 },
];

interface Sample {
  engine: string;
  model: string;
  parameters: number;
  createMs: number;
  stepMs: number[];
  medianMs: number;
  loadRssMiB: number;
  peakRssMiB: number;
  /** MLX's own peak (mx.memory.peak): the arrays, without the process's host memory. */
  mlxPeakMiB?: number;
  losses: number[];
  error?: string;
}

/** A line of /proc/self/status in MiB (VmRSS now, VmHWM the high-water mark). */
function statusMiB(field: string): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) / 1024 : process.resourceUsage().maxRSS / 1024;
}

/** A seeded generator of integers in [0, n). */
function ints(count: number, n: number, seed: number): number[] {
  let s = seed >>> 0 || 1;
  return Array.from({ length: count }, () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s % n;
  });
}

// --- The mlx worker: one process, one model, warmup + timed steps of trainStep. ---

async function mlxWorker(): Promise<void> {
  const mx = await import('@mlx/core');
  const { MlxSession, OnnxDataType } = await import('../src/index.js');
  type HostTensor = import('../src/index.js').HostTensor;
  const c = CASES.find((k) => k.name === arg('model'))!;
  const steps = Number(arg('steps', '3'));
  const warmup = Number(arg('warmup', '1'));
  const { batch: B, seq: S } = c;
  const t0 = performance.now();
  const s = await MlxSession.create(arg('path')!, { device: 'cpu', graphRewrites: false, intraOpNumThreads: threads });
  const i64 = (data: number[]): HostTensor => ({ dtype: OnnxDataType.INT64, dims: [B, S], data: BigInt64Array.from(data.map(BigInt)) });
  const feeds: Record<string, HostTensor> = {};
  let output: (o: Record<string, import('@mlx/core').Array>) => import('@mlx/core').Array;
  let fetches: string[];
  // Every floating-point initializer (the copies parameters() makes are lazy: never computed).
  const all = s.parameters();
  let wrt = Object.keys(all);
  if (c.kind === 'decoder') {
    const cfg = c.config!;
    const H = cfg.hidden / cfg.heads;
    feeds.input_ids = i64(ints(B * S, cfg.vocab, 2));
    feeds.attention_mask = i64(new Array(B * S).fill(1));
    for (const n of s.inputNames)
      if (n.startsWith('past_key_values.'))
        feeds[n] = { dtype: OnnxDataType.FLOAT, dims: [B, cfg.kvHeads!, 0, H], data: new Float32Array(0) };
    const labels = Int32Array.from(ints(B * S, cfg.vocab, 3));
    fetches = ['logits'];
    // Next-token cross-entropy (the labels made inside: evaluated with the step).
    output = (o) => {
      const y = mx.expandDims(mx.array(labels, { shape: [B, S] }), -1);
      return mx.mean(mx.subtract(mx.logsumexp(o.logits, -1), mx.squeeze(mx.takeAlongAxis(o.logits, y, -1), -1)));
    };
    // The rotary tables are constants (torch's buffers), not parameters.
    wrt = wrt.filter((n) => n !== 'cos_cache' && n !== 'sin_cache');
  } else {
    feeds.input_ids = i64(ints(B * S, 30522, 2));
    feeds.attention_mask = i64(new Array(B * S).fill(1));
    feeds.token_type_ids = i64(new Array(B * S).fill(0));
    fetches = ['last_hidden_state', 'pooler_output'];
    output = (o) => mx.add(mx.mean(mx.square(o.last_hidden_state)), mx.mean(mx.square(o.pooler_output)));
  }
  // --adamw composed (engine mlx-composed-adamw): AdamW from MLX's ops instead of the fused kernel.
  const optimizer = new mx.optim.AdamW({ lr: 1e-4, weightDecay: 0.01, fused: arg('adamw') !== 'composed' });
  const createMs = performance.now() - t0;
  const loadRssMiB = statusMiB('VmRSS');
  const stepMs: number[] = [];
  const losses: number[] = [];
  const parameters = wrt.reduce((n, k) => n + all[k].size, 0);
  mx.dispose(Object.values(all));
  for (let i = 0; i < warmup + steps; i++) {
    const t = performance.now();
    const r = await s.trainStep(feeds, { output, optimizer, wrt, fetches });
    losses.push(r.loss);
    if (i >= warmup) stepMs.push(performance.now() - t);
  }
  console.log(
    JSON.stringify({
      engine: 'mlx',
      model: c.name,
      parameters,
      createMs,
      stepMs,
      medianMs: median(stepMs),
      loadRssMiB,
      peakRssMiB: statusMiB('VmHWM'),
      mlxPeakMiB: mx.memory.peak() / 2 ** 20,
      losses,
    }),
  );
  optimizer.dispose();
  s.release();
}

// --- The orchestrator. ---

/** The bench Python (torch, transformers, onnx): tools/install-bench-python.sh installs it once. */
function benchPython(): string {
  const r = spawnSync('bash', [join(repo, 'tools', 'install-bench-python.sh')], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  const py = r.stdout.trim().split('\n').at(-1);
  if (r.status !== 0 || !py) throw new Error('tools/install-bench-python.sh failed');
  return py;
}

/** The ONNX file each case trains: the decoders built here, BERT-base exported by export-models.py when missing. */
function modelPath(c: Case, dir: string, python: () => string): string {
  if (c.kind === 'decoder') {
    // Built anew each time (seconds): a file kept from an older decoder.ts would be measured silently.
    const p = join(dir, `${c.name}.onnx`);
    writeFileSync(p, buildDecoder(c.config!));
    return p;
  }
  const given = arg('bert');
  if (given) return join(given, 'model.onnx');
  const p = join(dir, 'bert-base', 'model.onnx');
  if (!existsSync(p)) {
    const r = spawnSync(python(), [join(here, 'export-models.py'), dir, '--only', 'bert-base'], { stdio: 'inherit' });
    if (r.status !== 0) throw new Error('bench/export-models.py could not export bert-base');
  }
  return p;
}

function lastJson(stdout: string, stderr: string): Record<string, unknown> {
  const line = stdout
    .trim()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .at(-1);
  if (!line) return { error: (stderr || 'no output').trim().split('\n').slice(-3).join(' | ') };
  return JSON.parse(line) as Record<string, unknown>;
}

function run(engine: string, c: Case, path: string, python: () => string): Sample {
  const common = ['--steps', arg('steps', '3')!, '--warmup', arg('warmup', '1')!];
  const extra = Object.fromEntries(
    (arg('env') ?? '')
      .split(',')
      .filter(Boolean)
      .map((kv) => kv.split('=') as [string, string]),
  );
  const env = { ...process.env, ...extra, BENCH_THREADS: String(threads) };
  const r =
    engine === 'mlx' || engine === 'mlx-composed-adamw'
      ? spawnSync(
          process.execPath,
          [
            '--conditions=source',
            '--import',
            'tsx',
            join(here, 'train.ts'),
            '--worker',
            '--model',
            c.name,
            '--path',
            path,
            ...(engine === 'mlx-composed-adamw' ? ['--adamw', 'composed'] : []),
            ...common,
          ],
          { cwd: pkg, env, encoding: 'utf8', timeout: 1_800_000, maxBuffer: 64 << 20 },
        )
      : spawnSync(
          python(),
          [
            join(here, 'train_baselines.py'),
            '--model',
            c.kind,
            '--batch',
            String(c.batch),
            '--seq',
            String(c.seq),
            '--threads',
            String(threads),
            ...(c.config ? ['--config', JSON.stringify(c.config)] : []),
            ...common,
          ],
          { cwd: pkg, env, encoding: 'utf8', timeout: 1_800_000, maxBuffer: 64 << 20 },
        );
  return { engine, model: c.name, ...lastJson(r.stdout ?? '', r.stderr ?? '') } as Sample;
}

const load = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');

function main(): void {
  const rounds = Number(arg('rounds', '3'));
  const engines = arg('engines', 'mlx,torch')!.split(',');
  const filter = new RegExp(arg('filter', '.')!);
  const outDir = arg('out') ?? join(pkg, 'reports');
  const modelDir = join(pkg, 'reports', 'bench-models');
  mkdirSync(outDir, { recursive: true });
  mkdirSync(modelDir, { recursive: true });
  let py: string | undefined;
  const python = () => (py ??= benchPython());
  const cases = CASES.filter((c) => filter.test(c.name));
  const paths = new Map(cases.map((c) => [c.name, modelPath(c, modelDir, python)]));
  const loadBefore = load();
  console.log(`load average before: ${loadBefore}; threads: ${threads}; rounds: ${rounds}${arg('env') ? `; env ${arg('env')}` : ''}`);
  const samples = new Map<string, Sample[]>();
  for (let round = 0; round < rounds; round++)
    for (const c of cases)
      for (const e of round % 2 ? [...engines].reverse() : engines) {
        const s = run(e, c, paths.get(c.name)!, python);
        if (s.error) console.error(`${e} ${c.name}: ${s.error}`);
        else {
          const key = `${c.name}/${e}`;
          samples.set(key, [...(samples.get(key) ?? []), s]);
          console.error(`round ${round + 1}: ${e} ${c.name}: ${s.medianMs.toFixed(0)} ms/step, peak ${s.peakRssMiB.toFixed(0)} MiB`);
        }
      }
  const loadAfter = load();
  const results = cases.flatMap((c) =>
    engines.flatMap((e) => {
      const ss = samples.get(`${c.name}/${e}`) ?? [];
      if (!ss.length) return [];
      return [
        {
          model: c.name,
          engine: e,
          batch: c.batch,
          seq: c.seq,
          parameters: ss[0].parameters,
          rounds: ss.length,
          stepMs: median(ss.map((s) => s.medianMs)),
          peakRssMiB: median(ss.map((s) => s.peakRssMiB)),
          loadRssMiB: median(ss.map((s) => s.loadRssMiB)),
          mlxPeakMiB: e.startsWith('mlx') ? median(ss.map((s) => s.mlxPeakMiB ?? Number.NaN)) : undefined,
          createMs: median(ss.map((s) => s.createMs)),
          losses: ss[0].losses,
          samples: ss.map((s) => ({ stepMs: s.stepMs, peakRssMiB: s.peakRssMiB })),
        },
      ];
    }),
  );
  console.log(
    '\n| model | batch x seq | parameters | engine | step ms | × torch | peak RSS MiB | × torch | RSS after load MiB | MLX peak MiB |',
  );
  console.log('|---|---|---|---|---|---|---|---|---|---|');
  for (const r of results) {
    const ref = results.find((t) => t.model === r.model && t.engine === 'torch');
    const x = (a: number, b?: number) => (b && r !== ref ? `${(a / b).toFixed(2)}×` : '');
    console.log(
      `| ${r.model} | ${r.batch} x ${r.seq} | ${(r.parameters / 1e6).toFixed(1)}M | ${r.engine} | ${r.stepMs.toFixed(0)} | ${x(r.stepMs, ref?.stepMs)} | ${r.peakRssMiB.toFixed(0)} | ${x(r.peakRssMiB, ref?.peakRssMiB)} | ${r.loadRssMiB.toFixed(0)} | ${r.mlxPeakMiB === undefined ? '' : r.mlxPeakMiB.toFixed(0)} |`,
    );
  }
  console.log(`\nload average: ${loadBefore} before, ${loadAfter} after`);
  writeFileSync(
    join(outDir, 'bench-train.json'),
    JSON.stringify(
      { date: new Date().toISOString(), threads, env: arg('env'), load: { before: loadBefore, after: loadAfter }, results },
      null,
      2,
    ),
  );
}

if (process.argv.includes('--worker')) await mlxWorker();
else main();
