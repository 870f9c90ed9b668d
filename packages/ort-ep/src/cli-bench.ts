// mlx-ort bench: a model's time on the mlx provider beside onnxruntime-node's CPU provider, each
// engine alone in a process of its own (a fresh process per engine and round, alternated), so that
// neither warms the other's caches or shares its threads. Each process creates the session, times
// its first two runs apart (the compiled path analyses the inputs' signature on the first and
// traces it on the second) and then N runs; the table gives, per engine, the median over rounds
// of each process's figures, and the ratio to onnxruntime-node.
import { spawn } from 'node:child_process';
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { randomInput } from './cli-inputs.js';
import { metadataOf } from './execute/options.js';
import { decodeModel, readModelFile } from './onnx/index.js';
import { requireOptional } from './runtime/packages.js';

/** What the orchestrator passes each worker process. */
export interface BenchWorkerArgs {
  engine: 'mlx' | 'onnxruntime-node';
  model: string;
  runs: number;
  dims: Record<string, number>;
  device?: 'cpu' | 'gpu';
  threads: number;
}

/** What a worker prints (one JSON line). */
export interface BenchResult {
  engine: string;
  createMs: number;
  firstMs: number;
  secondMs: number;
  medianMs: number;
  error?: string;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

type Ort = typeof import('onnxruntime-node');

/** onnxruntime-node as the application resolves it (runtime/packages.ts); undefined when it is not installed. */
export const findOnnxruntimeNode = (): Ort | undefined => requireOptional<Ort>('onnxruntime-node');

/** One engine in this process: create, two first runs, N timed runs. */
export async function benchWorker(a: BenchWorkerArgs): Promise<BenchResult> {
  const ort = findOnnxruntimeNode();
  const bytes = readModelFile(a.model);
  type Session = {
    inputNames: readonly string[];
    run(f: Record<string, unknown>): Promise<unknown>;
    release(): Promise<void> | void;
  };
  let create: () => Promise<Session>;
  if (a.engine === 'onnxruntime-node') {
    if (!ort) throw new Error('onnxruntime-node is not installed');
    create = async () =>
      (await ort.InferenceSession.create(bytes, {
        executionProviders: ['cpu'],
        intraOpNumThreads: a.threads,
        interOpNumThreads: 1,
      })) as unknown as Session;
  } else if (ort) {
    // Through onnxruntime's own InferenceSession, as an application would use the provider.
    await import('./backend/register.js');
    create = async () =>
      (await ort.InferenceSession.create(bytes, {
        executionProviders: [{ name: 'mlx', device: a.device ?? 'cpu' } as never],
        intraOpNumThreads: a.threads,
      })) as unknown as Session;
  } else {
    const { MlxSession } = await import('./session.js');
    create = async () =>
      (await MlxSession.create(bytes, { device: a.device ?? 'cpu', intraOpNumThreads: a.threads })) as unknown as Session;
  }
  // The inputs: random, of the declared shapes (symbolic dimensions from --dim, else 1), read from
  // the model file alone (nothing native loads in onnxruntime-node's process).
  const g = decodeModel(bytes, { modelPath: a.model }).graph;
  const hostFeeds = Object.fromEntries(
    g.inputs
      .filter((i) => !g.inputsWithDefaults.has(i.name))
      .map(metadataOf)
      .map((m, i) => [
        m.name,
        randomInput(
          m.elemType,
          m.shape.map((d) => (typeof d === 'string' ? (a.dims[d] ?? 1) : d < 0 ? 1 : d)),
          1234 + i,
        ),
      ]),
  );
  const feedsOf = async (): Promise<Record<string, unknown>> => {
    if (!ort) return hostFeeds;
    const types: Record<number, string> = { 1: 'float32', 11: 'float64', 7: 'int64', 6: 'int32', 9: 'bool' };
    return Object.fromEntries(
      Object.entries(hostFeeds).map(([k, t]) => [k, new ort.Tensor(types[t.dtype] as 'float32', t.data as Float32Array, t.dims)]),
    );
  };
  const t0 = performance.now();
  const s = await create();
  const createMs = performance.now() - t0;
  const feeds = await feedsOf();
  const timed = async () => {
    const t = performance.now();
    await s.run(feeds);
    return performance.now() - t;
  };
  const firstMs = await timed();
  const secondMs = await timed();
  const times: number[] = [];
  for (let i = 0; i < a.runs; i++) times.push(await timed());
  await s.release();
  return { engine: a.engine, createMs, firstMs, secondMs, medianMs: median(times) };
}

/** Runs one worker process; its last JSON line is the result (or an error naming what failed). */
function runWorker(a: BenchWorkerArgs): Promise<BenchResult> {
  const self = fileURLToPath(import.meta.url);
  // From the sources (tests, the repository): TypeScript through tsx, the packages' sources.
  const source = self.endsWith('.ts') ? ['--conditions=source', '--import', 'tsx'] : [];
  const code = `import(${JSON.stringify(import.meta.url)}).then(async (m) => console.log(JSON.stringify(await m.benchWorker(${JSON.stringify(a)})))).catch((e) => { console.log(JSON.stringify({ engine: ${JSON.stringify(a.engine)}, error: String(e && e.message || e).split('\\n')[0] })); process.exitCode = 1; });`;
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [...source, '--input-type=module', '-e', code], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d));
    child.stderr.on('data', (d: Buffer) => (err += d));
    child.on('close', (code, signal) => {
      const line = out
        .trim()
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .at(-1);
      if (line) return resolve(JSON.parse(line) as BenchResult);
      const why = signal ? `killed by ${signal}` : `exit code ${code}`;
      resolve({ engine: a.engine, error: `${why}: ${err.trim().split('\n').slice(-1)[0] ?? ''}` } as BenchResult);
    });
  });
}

/** The orchestrator: rounds of alternated worker processes, then the table. */
export async function bench(
  a: Omit<BenchWorkerArgs, 'engine'> & { rounds: number },
  print: (line: string) => void = console.log,
): Promise<Map<string, BenchResult>> {
  const engines: BenchWorkerArgs['engine'][] = findOnnxruntimeNode() ? ['mlx', 'onnxruntime-node'] : ['mlx'];
  const load0 = loadavg()[0];
  const results = new Map<string, BenchResult[]>(engines.map((e) => [e, []]));
  for (let r = 0; r < a.rounds; r++) {
    // Alternated: neither engine always runs on a machine the other just warmed or loaded.
    const order = r % 2 ? [...engines].reverse() : engines;
    for (const engine of order) {
      const res = await runWorker({ ...a, engine });
      if (res.error) throw new Error(`mlx-ort bench: ${engine} failed: ${res.error}`);
      results.get(engine)!.push(res);
    }
  }
  const load1 = loadavg()[0];
  const summary = new Map<string, BenchResult>();
  for (const [engine, rs] of results)
    summary.set(engine, {
      engine,
      createMs: median(rs.map((x) => x.createMs)),
      firstMs: median(rs.map((x) => x.firstMs)),
      secondMs: median(rs.map((x) => x.secondMs)),
      medianMs: median(rs.map((x) => x.medianMs)),
    });
  const ref = summary.get('onnxruntime-node');
  const dims = Object.entries(a.dims).map(([k, v]) => `${k}=${v}`);
  print(
    `model ${a.model}: ${a.runs} runs after the first two, ${a.rounds} rounds, each engine alone in its own process, alternated; ${a.threads} threads; random inputs${dims.length ? ` (${dims.join(', ')})` : ''}`,
  );
  print(`load average ${load0.toFixed(2)} at the start, ${load1.toFixed(2)} at the end; medians over rounds (ms)`);
  print('| engine | create | first run | second run | median run | ÷ onnxruntime-node |');
  print('|---|---|---|---|---|---|');
  const f = (x: number) => (x >= 100 ? x.toFixed(1) : x.toFixed(3));
  for (const [engine, s] of summary) {
    const name = engine === 'mlx' ? `mlx (${a.device ?? 'cpu'})` : 'onnxruntime-node (cpu)';
    const ratio = ref ? (s.medianMs / ref.medianMs).toFixed(2) : '-';
    print(`| ${name} | ${f(s.createMs)} | ${f(s.firstMs)} | ${f(s.secondMs)} | ${f(s.medianMs)} | ${ratio} |`);
  }
  if (!ref) print('onnxruntime-node is not installed: `npm install onnxruntime-node` to time it beside mlx');
  return summary;
}
