// mlx-ort: run an ONNX model on MLX, check which nodes the MLX provider claims, run the demo.
// Each command parses its own options with node:util parseArgs (strict: unknown options and
// missing values are errors) and has its own --help. Nothing native loads before a command needs
// MLX, so --help, --version and usage errors work without the native library.
import { readFileSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import * as mx from '@mlx/core';
import { MlxSession, type MlxProgressEvent } from './session.js';
import { checkModel } from './check.js';
import { formatPartitions } from './plan/partition.js';
import { randomInput } from './cli-inputs.js';
import { metadataOf, type TensorMetadata } from './execute/options.js';
import { decodeModel, readModelFile, readTestDataset, type HostTensor, type TestValue } from './onnx/index.js';

const commands = {
  run: {
    synopsis: 'mlx-ort run <model.onnx> [--device cpu|gpu] [--runs N] [--dim name=value ...] [--inputs DIR] [--compare]',
    about: `runs the model and prints each output's shape and a summary, and the median time of
      --runs N runs (default 5) after the first two, which are timed apart (the compiled path
      analyses the inputs' signature on the first and traces it on the second). --dim must name a
      symbolic dimension of the model's inputs. Inputs are random (symbolic dimensions default to 1, or --dim), or those of --inputs DIR
      (a test_data_set_<k> folder: input_<i>.pb, output_<i>.pb), whose outputs it then compares
      with. --compare also runs onnxruntime-node's CPU provider on the same inputs and prints
      the largest difference from it.`,
    options: {
      device: { type: 'string' },
      runs: { type: 'string' },
      dim: { type: 'string', multiple: true },
      inputs: { type: 'string' },
      compare: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  },
  check: {
    synopsis: 'mlx-ort check <model.onnx>',
    about: 'lists the nodes the MLX provider claims (by op) and those it does not, with reasons',
    options: { help: { type: 'boolean', short: 'h' } },
  },
  bench: {
    synopsis: 'mlx-ort bench <model.onnx> [--device cpu|gpu] [--runs N] [--rounds R] [--threads T] [--dim name=value ...]',
    about: `times the model on mlx beside onnxruntime-node's CPU provider (when it is installed), each
      engine alone in a process of its own, alternated over --rounds R rounds (default 3): the
      session's creation, its first two runs, and the median of --runs N runs after them (default
      20), on random inputs (--dim as for run); --threads T for both engines (default 2). Prints a
      table of medians over rounds and the ratio to onnxruntime-node, with the load average.`,
    options: {
      device: { type: 'string' },
      runs: { type: 'string' },
      rounds: { type: 'string' },
      threads: { type: 'string' },
      dim: { type: 'string', multiple: true },
      help: { type: 'boolean', short: 'h' },
    },
  },
  profile: {
    synopsis: 'mlx-ort profile <model.onnx> [--device cpu|gpu] [--runs N] [--dim name=value ...] [--inputs DIR] [--prefix P] [--top K]',
    about: `runs the model node by node (compiled: false) --runs N times (default 10) after one
      unprofiled run, with profiling on, and prints the time per op type and the --top K slowest
      nodes (default 20), each with its share of node time, from the profile it writes
      (onnxruntime's format, P_<date>.json; default P mlx_ort_profile). Inputs as for run.`,
    options: {
      device: { type: 'string' },
      runs: { type: 'string' },
      dim: { type: 'string', multiple: true },
      inputs: { type: 'string' },
      prefix: { type: 'string' },
      top: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  },
  bisect: {
    synopsis: 'mlx-ort bisect <model.onnx> [--inputs DIR] [--dim name=value ...] [--device cpu|gpu] [--rtol R] [--atol A] [--out DIR]',
    about: `runs the model on mlx node by node and on onnxruntime-node's CPU provider with every
      node output exposed, and reports the first node in topological order whose output leaves
      |mlx - onnxruntime| <= atol + rtol * |onnxruntime| (default rtol 1e-3, atol 1e-4; integer
      outputs must be equal): an error histogram in ulps and the worst element. It writes that
      node alone to --out DIR (default <model>_bisect): model.onnx and test_data_set_0 with
      onnxruntime's inputs and outputs, for mlx-ort run --inputs. Inputs as for run.`,
    options: {
      inputs: { type: 'string' },
      dim: { type: 'string', multiple: true },
      device: { type: 'string' },
      rtol: { type: 'string' },
      atol: { type: 'string' },
      out: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  },
  generate: {
    synopsis:
      'mlx-ort generate <model-dir> --prompt TEXT [--max-new-tokens N] [--device cpu|gpu] [--temperature T] [--top-k K] [--top-p P] [--seed S]',
    about: `generates text from a decoder's folder (model.onnx, decoder_model_merged.onnx or onnx/model.onnx,
      and tokenizer.json, read with @huggingface/tokenizers), printed as it comes (greedy unless a
      sampling option is given; stops at generation_config.json's eos_token_id, or after --max-new-tokens,
      default 64); then the time to the first token and tokens per second on stderr.`,
    options: {
      prompt: { type: 'string' },
      'max-new-tokens': { type: 'string' },
      device: { type: 'string' },
      temperature: { type: 'string' },
      'top-k': { type: 'string' },
      'top-p': { type: 'string' },
      seed: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  },
  demo: {
    synopsis: 'mlx-ort demo [--device cpu|gpu]',
    about: 'voice activity detection with Silero VAD on a synthesized recording, side by side with onnxruntime-node',
    options: { device: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
  },
} as const satisfies Record<string, { synopsis: string; about: string; options: ParseArgsConfig['options'] }>;
type Command = keyof typeof commands;

const commandUsage = (c: Command) => `  ${commands[c].synopsis}\n      ${commands[c].about}`;
const usage = `usage:
${(Object.keys(commands) as Command[]).map(commandUsage).join('\n')}
  mlx-ort --version
  mlx-ort <command> --help`;

/** Bad command-line input: the message and the command's usage go to stderr, exit code 2. */
class UsageError extends Error {
  constructor(
    message: string,
    readonly command?: Command,
  ) {
    super(message);
    this.name = 'UsageError';
  }
}

/** This package's version (package.json is one folder above both src/ and dist/). */
export function cliVersion(): string {
  return (createRequire(import.meta.url)('../package.json') as { version: string }).version;
}

function parse<C extends Command>(command: C, args: string[]) {
  const options = commands[command].options as (typeof commands)[C]['options'];
  try {
    return parseArgs({ args, options, allowPositionals: true, strict: true });
  } catch (e) {
    throw new UsageError((e as Error).message, command);
  }
}

function device(v: string | undefined, command: Command): 'cpu' | 'gpu' | undefined {
  if (v === undefined || v === 'cpu' || v === 'gpu') return v;
  throw new UsageError(`--device must be cpu or gpu, got '${v}'`, command);
}

function positiveInt(v: string, what: string, command: Command): number {
  if (!/^\d+$/.test(v) || Number(v) < 1 || !Number.isSafeInteger(Number(v)))
    throw new UsageError(`${what} must be a positive integer, got '${v}'`, command);
  return Number(v);
}

function modelPath(positionals: string[], command: Command): string {
  if (positionals.length !== 1)
    throw new UsageError(
      positionals.length ? `one model path expected, got ${positionals.length}: ${positionals.join(' ')}` : 'no model path given',
      command,
    );
  return positionals[0];
}

const isTensor = (v: TestValue | undefined): v is HostTensor => !!v && 'dims' in v;
const numbers = (t: { data: unknown }) => Array.from(t.data as ArrayLike<number | bigint>, Number);
/** --dim name=value options, each value a positive integer. */
function parseDims(given: readonly string[] | undefined, command: Command): Map<string, number> {
  const dims = new Map<string, number>();
  for (const d of given ?? []) {
    const m = /^([^=]+)=(.*)$/.exec(d);
    if (!m) throw new UsageError(`--dim takes name=value, got '${d}'`, command);
    dims.set(m[1], positiveInt(m[2], `--dim ${m[1]}`, command));
  }
  return dims;
}

/** A --dim that names no symbolic dimension of the model's inputs is a mistake, not a no-op. */
function checkDimNames(dims: ReadonlyMap<string, number>, inputs: readonly TensorMetadata[], command: Command): void {
  const symbolic = new Set(inputs.flatMap((m) => m.shape.filter((d): d is string => typeof d === 'string')));
  for (const name of dims.keys())
    if (!symbolic.has(name))
      throw new UsageError(
        `--dim ${name}: the model's inputs have no dimension named '${name}' (${symbolic.size ? `they have ${[...symbolic].map((d) => `'${d}'`).join(', ')}` : 'none is symbolic'})`,
        command,
      );
}

/**
 * The largest |a - b| over the elements: NaN beside NaN (and equal infinities) count as equal, NaN
 * beside a number as an infinite difference; other shapes of data differ infinitely.
 */
function largestDifference(a: { data: unknown }, b: { data: unknown }): number {
  const x = numbers(a);
  const y = numbers(b);
  if (x.length !== y.length) return Number.POSITIVE_INFINITY;
  let m = 0;
  for (let i = 0; i < x.length; i++) {
    const u = x[i];
    const w = y[i];
    if (u === w || (Number.isNaN(u) && Number.isNaN(w))) continue;
    const d = Math.abs(u - w);
    m = Math.max(m, Number.isNaN(d) ? Number.POSITIVE_INFINITY : d);
  }
  return m;
}

/** onnxruntime-node, from this package or the working directory, or a clear error. */
function requireOnnxruntimeNode(): typeof import('onnxruntime-node') {
  for (const base of [import.meta.url, join(process.cwd(), 'package.json')]) {
    try {
      return createRequire(base)('onnxruntime-node');
    } catch (e) {
      if ((e as { code?: string }).code !== 'MODULE_NOT_FOUND') throw e;
    }
  }
  throw new Error('--compare runs onnxruntime-node, which is not installed: `npm install onnxruntime-node` (or leave out --compare)');
}

/** Loads a session, with a progress line for large models and for loads longer than a second. */
async function loadSession(path: string, dev: 'cpu' | 'gpu' | undefined): Promise<MlxSession> {
  let size = 0;
  try {
    size = statSync(path).size;
  } catch {
    // MlxSession.create reports a missing file
  }
  if (size >= 32 * 2 ** 20) console.error(`loading ${path} (${(size / 2 ** 20).toFixed(0)} MiB)...`);
  const t0 = performance.now();
  const session = await MlxSession.create(path, { device: dev, onProgress: progressLines(dev ?? mx.defaultDevice().type) });
  const s = (performance.now() - t0) / 1000;
  if (s > 1) console.error(`loaded ${path} in ${s.toFixed(1)} s`);
  return session;
}

const phaseNames: Record<MlxProgressEvent['phase'], string> = {
  load: 'loading and planning',
  upload: 'uploading the constants',
  fallback: 'opening the onnxruntime fallback',
  warmup: 'warming up',
  analyse: 'analysing a new input signature',
  trace: 'tracing a new input signature',
};

/**
 * Progress lines on stderr for what takes long the first time: a phase that took over a second,
 * and, on a GPU, the start of a trace's evaluation (where MLX builds its kernels, seconds on a
 * cold cache).
 */
function progressLines(device: 'cpu' | 'gpu'): (e: MlxProgressEvent) => void {
  return (e) => {
    if (e.state === 'start' && e.phase === 'trace' && device === 'gpu') console.error('building GPU kernels for a new input signature...');
    if (e.state === 'end' && (e.ms ?? 0) > 1000)
      console.error(`${phaseNames[e.phase]}${e.detail ? ` (${e.detail})` : ''} took ${(e.ms! / 1000).toFixed(1)} s`);
  };
}

async function run(args: string[]): Promise<void> {
  const { values, positionals } = parse('run', args);
  if (values.help) return void console.log(commandUsage('run'));
  const path = modelPath(positionals, 'run');
  const dev = device(values.device, 'run');
  const runs = values.runs === undefined ? 5 : positiveInt(values.runs, '--runs', 'run');
  const dims = parseDims(values.dim, 'run');
  if (values.inputs && dims.size) throw new UsageError('--dim applies to random inputs; --inputs gives them', 'run');
  const ort = values.compare ? requireOnnxruntimeNode() : undefined;

  const session = await loadSession(path, dev);
  try {
    const { feeds, expected } = feedsFor(session, path, values.inputs, dims, 'run');
    // The compiled path's first run of a signature analyses it and the second traces it: they are
    // timed apart, and the median is over the runs after them.
    const timed = async () => {
      const t0 = performance.now();
      const o = await session.run(feeds);
      return { o, ms: performance.now() - t0 };
    };
    const first = await timed();
    const second = await timed();
    const times: number[] = [];
    let out: Record<string, unknown> = second.o;
    for (let r = 0; r < runs; r++) {
      const { o, ms } = await timed();
      out = o;
      times.push(ms);
    }
    times.sort((a, b) => a - b);
    console.log(
      `model ${path} on ${dev ?? mx.defaultDevice().type}: median ${times[times.length >> 1].toFixed(2)} ms over ${runs} runs (after a first run of ${first.ms.toFixed(2)} ms and a second of ${second.ms.toFixed(2)} ms)`,
    );
    console.log(`device: ${session.device} (MLX backend ${session.backend})`);
    for (const [name, v] of Object.entries(out)) {
      const nums = numbers(v as HostTensor);
      const mean = nums.reduce((a, b) => a + b, 0) / Math.max(nums.length, 1);
      console.log(
        `  ${name}: [${(v as HostTensor).dims.join(', ')}] mean ${mean.toPrecision(6)} first ${nums
          .slice(0, 4)
          .map((x) => x.toPrecision(5))
          .join(', ')}`,
      );
    }
    if (expected) {
      session.outputNames.forEach((name, i) => {
        const want = expected[i];
        if (isTensor(want) && isTensor(out[name] as TestValue))
          console.log(`  ${name}: largest |mlx - expected| = ${largestDifference(out[name] as HostTensor, want).toExponential(3)}`);
      });
    }
    if (ort) {
      const s = await ort.InferenceSession.create(readModelFile(path));
      const f: Record<string, import('onnxruntime-node').Tensor> = {};
      const types = { 1: 'float32', 7: 'int64', 6: 'int32', 9: 'bool', 11: 'float64' } as unknown as Record<number, 'float32'>;
      for (const [k, t] of Object.entries(feeds)) f[k] = new ort.Tensor(types[t.dtype], t.data as Float32Array, t.dims);
      const ref = await s.run(f);
      for (const [name, v] of Object.entries(out)) {
        const diff = largestDifference(v as HostTensor, ref[name]);
        console.log(`  ${name}: largest |mlx - onnxruntime-node| = ${diff.toExponential(3)}`);
      }
      await s.release();
    }
  } finally {
    session.release();
  }
}

/**
 * A session's feeds: those of a test_data_set folder (with its expected outputs), or random ones
 * (symbolic dimensions from --dim, else 1).
 */
function feedsFor(
  session: MlxSession,
  path: string,
  inputs: string | undefined,
  dims: ReadonlyMap<string, number>,
  command: Command,
): { feeds: Record<string, HostTensor>; expected?: TestValue[] } {
  checkDimNames(dims, session.inputMetadata, command);
  const feeds: Record<string, HostTensor> = {};
  if (inputs) {
    const data = readTestDataset(inputs, decodeModel(readModelFile(path), { modelPath: path }));
    if (data.inputs.length !== session.inputNames.length)
      throw new UsageError(
        `${inputs} has ${data.inputs.length} inputs; the model takes ${session.inputNames.length} (${session.inputNames.join(', ')})`,
        command,
      );
    data.inputs.forEach((t, i) => {
      if (!isTensor(t)) throw new UsageError(`${inputs}: input ${i} is not a tensor`, command);
      feeds[session.inputNames[i]] = t;
    });
    return { feeds, expected: data.outputs };
  }
  session.inputMetadata.forEach((m, i) => {
    const shape = m.shape.map((d) => (typeof d === 'string' ? (dims.get(d) ?? 1) : d < 0 ? 1 : d));
    feeds[m.name] = randomInput(m.elemType, shape, 1234 + i);
  });
  return { feeds };
}

async function profile(args: string[]): Promise<void> {
  const { values, positionals } = parse('profile', args);
  if (values.help) return void console.log(commandUsage('profile'));
  const path = modelPath(positionals, 'profile');
  const dev = device(values.device, 'profile');
  const runs = values.runs === undefined ? 10 : positiveInt(values.runs, '--runs', 'profile');
  const top = values.top === undefined ? 20 : positiveInt(values.top, '--top', 'profile');
  const dims = parseDims(values.dim, 'profile');
  if (values.inputs && dims.size) throw new UsageError('--dim applies to random inputs; --inputs gives them', 'profile');
  if (values.prefix === '') throw new UsageError('--prefix must not be empty', 'profile');
  const session = await MlxSession.create(path, {
    device: dev,
    compiled: false,
    profileFilePrefix: values.prefix ?? 'mlx_ort_profile',
    onProgress: progressLines(dev ?? mx.defaultDevice().type),
  });
  try {
    const { feeds } = feedsFor(session, path, values.inputs, dims, 'profile');
    // One run first, not profiled: first calls pay for allocations the later ones reuse.
    await session.run(feeds);
    session.startProfiling();
    for (let r = 0; r < runs; r++) await session.run(feeds);
    const file = session.endProfiling()!;
    const { summarizeProfile, formatSummary } = await import('./profile-summary.js');
    const events = JSON.parse(readFileSync(file, 'utf8'));
    console.log(`model ${path} on ${session.device}, node by node (compiled: false), ${runs} run(s) after one unprofiled`);
    console.log(formatSummary(summarizeProfile(events), top));
    console.log('');
    console.log(`profile: ${file} (Chrome trace JSON: Perfetto, chrome://tracing)`);
  } finally {
    session.release();
  }
}

async function check(args: string[]): Promise<void> {
  const { values, positionals } = parse('check', args);
  if (values.help) return void console.log(commandUsage('check'));
  const path = modelPath(positionals, 'check');
  // A regular file within protobuf's 2 GiB: /dev/zero or a FIFO is refused, not read until memory runs out or waited on.
  const r = checkModel(readModelFile(path), { modelPath: path });
  const claimedCount = [...r.claimed.values()].reduce((a, b) => a + b, 0);
  // One section per line group; add new sections (partitions, devices) as further blocks.
  const lines: string[] = [
    `${path}: ${r.nodes} nodes, ${claimedCount} claimed by the MLX provider, ${r.unclaimed.length} not (opsets: ${[...r.opsets].map(([d, v]) => `${d} ${v}`).join(', ')})`,
    `MLX devices: cpu${mx.gpuAvailable() ? `, gpu (${mx.cudaAvailable() ? 'cuda' : 'metal'})` : ''}`,
    'claimed:',
    ...[...r.claimed].sort().map(([k, n]) => `  ${k} x${n}`),
  ];
  lines.push(...formatPartitions(r.partitions, r.cpuBackend));
  if (r.unclaimed.length) {
    lines.push('not claimed:');
    for (const u of r.unclaimed) lines.push(`  ${u.domain}::${u.opType} (opset ${u.opset}) node '${u.nodeName}': ${u.reason}`);
  }
  for (const l of lines) console.log(l);
}

async function bench(args: string[]): Promise<void> {
  const { values, positionals } = parse('bench', args);
  if (values.help) return void console.log(commandUsage('bench'));
  const path = modelPath(positionals, 'bench');
  const dev = device(values.device, 'bench');
  const runs = values.runs === undefined ? 20 : positiveInt(values.runs, '--runs', 'bench');
  const rounds = values.rounds === undefined ? 3 : positiveInt(values.rounds, '--rounds', 'bench');
  const threads = values.threads === undefined ? 2 : positiveInt(values.threads, '--threads', 'bench');
  const dims = parseDims(values.dim, 'bench');
  // The model is read (and its --dim names checked) here, before any process starts.
  const g = decodeModel(readModelFile(path), { modelPath: path }).graph;
  checkDimNames(dims, g.inputs.filter((i) => !g.inputsWithDefaults.has(i.name)).map(metadataOf), 'bench');
  const { bench: orchestrate } = await import('./cli-bench.js');
  await orchestrate({ model: path, runs, rounds, threads, dims: Object.fromEntries(dims), device: dev });
}

function tolerance(v: string | undefined, what: string, command: Command): number | undefined {
  if (v === undefined) return undefined;
  const x = Number(v);
  if (v.trim() === '' || !Number.isFinite(x) || x < 0) throw new UsageError(`${what} must be a number >= 0, got '${v}'`, command);
  return x;
}

async function bisectCommand(args: string[]): Promise<void> {
  const { values, positionals } = parse('bisect', args);
  if (values.help) return void console.log(commandUsage('bisect'));
  const path = modelPath(positionals, 'bisect');
  const dev = device(values.device, 'bisect');
  const rtol = tolerance(values.rtol, '--rtol', 'bisect');
  const atol = tolerance(values.atol, '--atol', 'bisect');
  const dims = parseDims(values.dim, 'bisect');
  if (values.inputs && dims.size) throw new UsageError('--dim applies to random inputs; --inputs gives them', 'bisect');
  if (values.out === '') throw new UsageError('--out must not be empty', 'bisect');
  const out = values.out ?? `${basename(path).replace(/\.onnx$/i, '')}_bisect`;
  const { bisect, formatBisect } = await import('./bisect.js');
  const report = await bisect(path, {
    device: dev,
    rtol,
    atol,
    outDir: out,
    feeds: (session) => feedsFor(session, path, values.inputs, dims, 'bisect').feeds,
  });
  for (const l of formatBisect(report)) console.log(l);
}

async function generateCommand(args: string[]): Promise<void> {
  const { values, positionals } = parse('generate', args);
  if (values.help) return void console.log(commandUsage('generate'));
  const path = modelPath(positionals, 'generate');
  if (values.prompt === undefined || values.prompt === '') throw new UsageError('--prompt TEXT is required', 'generate');
  const maxNewTokens = values['max-new-tokens'] === undefined ? 64 : positiveInt(values['max-new-tokens'], '--max-new-tokens', 'generate');
  const num = (v: string | undefined, what: string, ok: (x: number) => boolean, range: string) => {
    if (v === undefined) return undefined;
    const x = Number(v);
    if (v.trim() === '' || !Number.isFinite(x) || !ok(x)) throw new UsageError(`${what} must be ${range}, got '${v}'`, 'generate');
    return x;
  };
  const temperature = num(values.temperature, '--temperature', (x) => x > 0, 'a number > 0');
  const topK = num(values['top-k'], '--top-k', (x) => Number.isInteger(x) && x >= 1, 'an integer ≥ 1');
  const topP = num(values['top-p'], '--top-p', (x) => x > 0 && x <= 1, 'in (0, 1]');
  const seed = num(values.seed, '--seed', Number.isSafeInteger, 'an integer');
  const sampled = temperature !== undefined || topK !== undefined || topP !== undefined || seed !== undefined;
  const { generateText } = await import('./cli-generate.js');
  const r = await generateText({
    path,
    prompt: values.prompt,
    maxNewTokens,
    device: device(values.device, 'generate'),
    sampling: sampled ? { temperature, topK, topP, seed } : 'greedy',
  });
  process.stdout.write('\n');
  console.error(`${r.ids.length} tokens; first after ${r.firstMs.toFixed(1)} ms, then ${r.tokensPerSecond.toFixed(1)} tokens/s`);
}

async function demo(args: string[]): Promise<void> {
  const { values, positionals } = parse('demo', args);
  if (values.help) return void console.log(commandUsage('demo'));
  if (positionals.length) throw new UsageError(`demo takes no arguments, got ${positionals.join(' ')}`, 'demo');
  const { runDemo } = await import('./demo/vad.js');
  return runDemo({ device: device(values.device, 'demo') });
}

/** Runs the command line; usage errors set process.exitCode = 2, other errors propagate. */
export async function main(argv: string[]): Promise<void> {
  const [cmd, ...rest] = argv;
  try {
    if (cmd === '--version' || cmd === '-v' || cmd === 'version') return void console.log(cliVersion());
    if (cmd === 'run') return await run(rest);
    if (cmd === 'check') return await check(rest);
    if (cmd === 'bench') return await bench(rest);
    if (cmd === 'profile') return await profile(rest);
    if (cmd === 'generate') return await generateCommand(rest);
    if (cmd === 'bisect') return await bisectCommand(rest);
    if (cmd === 'demo') return await demo(rest);
    console.log(usage);
    if (cmd && cmd !== 'help' && cmd !== '--help' && cmd !== '-h') {
      console.error(`mlx-ort: unknown command '${cmd}'`);
      process.exitCode = 2;
    }
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    console.error(`mlx-ort${e.command ? ` ${e.command}` : ''}: ${e.message}`);
    console.error(e.command ? `usage: ${commands[e.command].synopsis}\n(mlx-ort ${e.command} --help says more)` : usage);
    process.exitCode = 2;
  }
}
