// Continuous batching: N concurrent streams through createGenerator() against one stream alone,
// for the 'mlx' provider, with onnxruntime-node's plain generate() (one stream) beside it. Prints
// aggregate tokens/s, per-token latency (p50, p99: the gaps between a stream's tokens), and time to
// first token. Each variant runs alone in its own process (this file with --worker), alternating
// over --rounds rounds; figures are medians over rounds. Prints the load average. Never a test.
//   tools/dev bench serve [--size tiny|small|100m] [--streams 8] [--prompt 64] [--tokens 64] [--rounds 3]
// BENCH_THREADS sets onnxruntime-node's intra-op threads (default 2).
import { createRequire } from 'node:module';
import { loadavg } from 'node:os';
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
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];

const size = arg('size', '100m')!;
const streams = Number(arg('streams', '8'));
const promptLen = Number(arg('prompt', '64'));
const tokens = Number(arg('tokens', '64'));
const capacity = promptLen + tokens + 1;
const config: DecoderConfig = { ...SIZES[size], maxPositions: capacity + 1, seed: 9 };
const promptOf = (s: number) => Array.from({ length: promptLen }, (_, i) => (i * 7919 + 13 + s * 101) % config.vocab);

interface Result {
  variant: string;
  tokensPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  ttftMs: number;
  error?: string;
}

async function worker(variant: string): Promise<void> {
  const require = createRequire(import.meta.url);
  const ort = require('onnxruntime-node') as typeof import('onnxruntime-node');
  ort.env.logLevel = 'error';
  const { createGenerator, generate } = await import('../src/index.js');
  const [engine, mode] = variant.split('-');
  const threads = Number(process.env.BENCH_THREADS ?? 2);
  const options =
    engine === 'mlx'
      ? { executionProviders: [{ name: 'mlx', device: 'cpu' }], preferredOutputLocation: 'gpu-buffer' }
      : { executionProviders: ['cpu'], intraOpNumThreads: threads, interOpNumThreads: 1 };
  const session = (await ort.InferenceSession.create(buildDecoder(config), options as never)) as unknown as InferenceSession;
  const n = mode === 'batch' ? streams : 1;
  let result: Result | undefined;
  // The first two passes compile and warm the caches (a feed signature runs eagerly on its first
  // run and is traced on its second, src/execute/signature.ts; each prompt's comes once a pass);
  // the third is measured.
  for (let pass = 0; pass < 3; pass++) {
    const gaps: number[] = [];
    const ttfts: number[] = [];
    let produced = 0;
    const t0 = performance.now();
    const consume = async (stream: AsyncIterable<number>) => {
      let last = performance.now();
      let first = true;
      for await (const _ of stream) {
        const now = performance.now();
        if (first) ttfts.push(now - t0);
        else gaps.push(now - last);
        first = false;
        last = now;
        produced++;
      }
    };
    if (mode === 'batch' || mode === 'one') {
      const server = createGenerator(session as never, { maxBatch: n, kvCapacity: capacity, Tensor: ort.Tensor as never });
      await Promise.all(Array.from({ length: n }, (_, s) => consume(server.submit(promptOf(s), { maxNewTokens: tokens }))));
      await server.close();
    } else
      await consume(
        generate(session as never, {
          inputIds: promptOf(0),
          maxNewTokens: tokens,
          kvCapacity: engine === 'mlx' ? capacity : undefined,
          Tensor: ort.Tensor as never,
        }),
      );
    const ms = performance.now() - t0;
    result = { variant, tokensPerSecond: (1000 * produced) / ms, p50Ms: pct(gaps, 50), p99Ms: pct(gaps, 99), ttftMs: median(ttfts) };
  }
  await session.release();
  console.log(JSON.stringify(result));
}

function spawn(variant: string): Result {
  const pass = ['size', 'streams', 'prompt', 'tokens'].flatMap((n) => (arg(n) ? [`--${n}`, arg(n)!] : []));
  return { variant, ...workerResult(fileURLToPath(import.meta.url), [variant, ...pass]) } as Result;
}

function main(): void {
  // mlx-one: one stream through the generator; mlx-batch: --streams of them; mlx-plain and ort-plain: generate() alone.
  const variants = arg('engines', 'mlx-batch,mlx-one,mlx-plain,ort-plain')!.split(',');
  const rounds = Number(arg('rounds', '3'));
  const load = () =>
    loadavg()
      .map((x) => x.toFixed(2))
      .join(' ');
  const loadBefore = load();
  const runs = new Map<string, Result[]>(variants.map((v) => [v, []]));
  for (let round = 0; round < rounds; round++)
    for (const v of round % 2 ? [...variants].reverse() : variants) {
      const r = spawn(v);
      if (r.error) console.error(`${v}: ${r.error}`);
      else runs.get(v)!.push(r);
    }
  console.log(
    `Llama-shaped (GQA) decoder, ${size}, ${(parameterCount(config) / 1e6).toFixed(1)}M parameters (random weights); ` +
      `prompts of ${promptLen} tokens, ${tokens} new tokens each; batch: ${streams} concurrent streams; ${rounds} rounds\n`,
  );
  console.log('| variant | streams | aggregate tokens/s | per-token p50 (ms) | p99 (ms) | time to first token (ms) | ÷ one stream |');
  console.log('|---|---|---|---|---|---|---|');
  const m = (v: string, k: keyof Result) => median((runs.get(v) ?? []).map((r) => r[k] as number));
  const one = runs.get('mlx-one')?.length ? m('mlx-one', 'tokensPerSecond') : Number.NaN;
  for (const v of variants) {
    if (!runs.get(v)?.length) continue;
    const tps = m(v, 'tokensPerSecond');
    console.log(
      `| ${v} | ${v.endsWith('batch') ? streams : 1} | ${tps.toFixed(1)} | ${m(v, 'p50Ms').toFixed(2)} | ${m(v, 'p99Ms').toFixed(2)} | ` +
        `${m(v, 'ttftMs').toFixed(1)} | ${v === 'mlx-batch' && !Number.isNaN(one) ? `${(tps / one).toFixed(2)}×` : '-'} |`,
    );
  }
  console.log(`\nload average (1, 5, 15 min): before ${loadBefore}, after ${load()}`);
}

const w = arg('worker');
if (w)
  worker(w).catch((e) => {
    console.error(e);
    process.exit(1);
  });
else main();
