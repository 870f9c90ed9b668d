// The prefix cache across processes: time to first token for a prompt of a --prefix-token shared
// prefix and a few new tokens, cold (the whole prompt prefilled) against a second process that
// opens the prefix cache folder a first process wrote (PrefixCache with `dir`) and runs only the new
// tokens. Each engine ('mlx', and onnxruntime-node's CPU provider through the same generate()) runs
// every phase alone in its own process (this file with --worker), engines alternating over
// --rounds rounds; figures are medians over rounds. onnxruntime-node's plain cold prefill is the
// reference the issue names. Prints the load average before and after. Never a test.
//   tools/dev bench prefix-cache [--size tiny|small|100m] [--prefix 4096] [--suffix 8] [--rounds 3] [--engines mlx,ort]
// BENCH_THREADS sets onnxruntime-node's intra-op threads (default 2).
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import type { InferenceSession } from 'onnxruntime-common';
import { SIZES, workerResult } from './decoder-sizes.js';
import { buildDecoder, type DecoderConfig, parameterCount } from '../test/helpers/decoder.js';

const arg = (n: string, d?: string) => {
  const i = process.argv.indexOf(`--${n}`);
  return i >= 0 ? process.argv[i + 1] : d;
};
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

const size = arg('size', '100m')!;
const prefixLen = Number(arg('prefix', '4096'));
const suffixLen = Number(arg('suffix', '8'));
const config: DecoderConfig = { ...SIZES[size], maxPositions: prefixLen + 2 * suffixLen + 4, seed: 5 };
const prefix = Array.from({ length: prefixLen }, (_, i) => (i * 7919 + 13) % config.vocab);
const suffix = (salt: number) => Array.from({ length: suffixLen }, (_, i) => (i * 31 + salt) % config.vocab);

interface Phase {
  phase: string;
  engine: string;
  ttftMs: number;
  createMs: number;
  tokensReused?: number;
  error?: string;
}

/** One phase in this process: 'cold' (no cache), 'write' (cold, storing into --dir) or 'reuse' (opening --dir). */
async function worker(engine: string, phase: string, dir: string): Promise<void> {
  const require = createRequire(import.meta.url);
  const ort = require('onnxruntime-node') as typeof import('onnxruntime-node');
  ort.env.logLevel = 'error';
  const { generate, PrefixCache } = await import('../src/index.js');
  const threads = Number(process.env.BENCH_THREADS ?? 2);
  const options =
    engine === 'mlx'
      ? { executionProviders: [{ name: 'mlx', device: 'cpu' }], preferredOutputLocation: 'gpu-buffer' }
      : { executionProviders: ['cpu'], intraOpNumThreads: threads, interOpNumThreads: 1 };
  const bytes = buildDecoder(config);
  const c0 = performance.now();
  const session = (await ort.InferenceSession.create(bytes, options as never)) as unknown as InferenceSession;
  const createMs = performance.now() - c0;
  // The time from generate() to the first token, the prefix cache's folder opened inside it.
  const t0 = performance.now();
  const cache = phase === 'cold' ? undefined : new PrefixCache({ model: `bench-${size}-${config.seed}`, dir });
  const prompt = [...prefix, ...suffix(phase === 'reuse' ? 7 : 3)];
  let ttftMs = 0;
  for await (const _ of generate(session as never, {
    inputIds: prompt,
    maxNewTokens: 1,
    kvCapacity: engine === 'mlx' ? prompt.length + 1 : undefined,
    Tensor: ort.Tensor as never,
    prefixCache: cache,
  }))
    ttftMs = performance.now() - t0;
  await session.release();
  const result: Phase = { phase, engine, ttftMs, createMs, tokensReused: cache?.stats.tokensReused };
  console.log(JSON.stringify(result));
}

function spawn(engine: string, phase: string, dir: string): Phase {
  const pass = ['size', 'prefix', 'suffix'].flatMap((n) => (arg(n) ? [`--${n}`, arg(n)!] : []));
  return { phase, engine, ...workerResult(fileURLToPath(import.meta.url), [engine, phase, dir, ...pass]) } as Phase;
}

function main(): void {
  const engines = arg('engines', 'mlx,ort')!.split(',');
  const rounds = Number(arg('rounds', '3'));
  const load = () =>
    loadavg()
      .map((x) => x.toFixed(2))
      .join(' ');
  const loadBefore = load();
  const results: Phase[] = [];
  let fileBytes = 0;
  for (let round = 0; round < rounds; round++)
    for (const engine of round % 2 ? [...engines].reverse() : engines) {
      const dir = mkdtempSync(join(tmpdir(), 'prefix-bench-'));
      try {
        // A cold prefill without the cache, one that writes the folder, then a second process reusing it.
        for (const phase of ['cold', 'write', 'reuse']) {
          const r = spawn(engine, phase, dir);
          if (r.error) console.error(`${engine} ${phase}: ${r.error}`);
          else results.push(r);
        }
        fileBytes = readdirSync(dir).reduce((n, f) => n + statSync(join(dir, f)).size, 0);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }
  const med = (engine: string, phase: string) => {
    const xs = results.filter((r) => r.engine === engine && r.phase === phase).map((r) => r.ttftMs);
    return xs.length ? median(xs) : Number.NaN;
  };
  console.log(
    `Llama-shaped (GQA) decoder, ${size}, ${(parameterCount(config) / 1e6).toFixed(1)}M parameters (random weights); ` +
      `prompt: a ${prefixLen}-token shared prefix and ${suffixLen} new tokens; the cache file: ${(fileBytes / 2 ** 20).toFixed(1)} MiB; ${rounds} rounds\n`,
  );
  console.log(
    '| engine | cold prefill: time to first token (ms) | second process, prefix from the folder (ms) | ÷ cold | ÷ onnxruntime-node cold |',
  );
  console.log('|---|---|---|---|---|');
  const ortCold = med('ort', 'cold');
  for (const e of engines) {
    const cold = med(e, 'cold');
    const reuse = med(e, 'reuse');
    console.log(
      `| ${e === 'ort' ? 'onnxruntime-node' : e} | ${cold.toFixed(1)} | ${reuse.toFixed(1)} | ${((100 * reuse) / cold).toFixed(1)}% | ` +
        `${Number.isNaN(ortCold) ? '-' : `${((100 * reuse) / ortCold).toFixed(1)}%`} |`,
    );
  }
  console.log(`\nload average (1, 5, 15 min): before ${loadBefore}, after ${load()}`);
}

const w = arg('worker');
if (w) {
  const i = process.argv.indexOf('--worker');
  worker(w, process.argv[i + 2], process.argv[i + 3]).catch((e) => {
    console.error(e);
    process.exit(1);
  });
} else main();
