// transformers.js's generation loop by hand: an InferenceSession of onnxruntime-node whose
// executionProviders are ['mlx'] (compiled, and `compiled: false`) or ['cpu'], fed host tensors
// every step as transformers.js 4.3 feeds them (input_ids of the new token, an attention_mask one
// longer each step, position_ids for GPT-2, and the past_key_values.* inputs set to the present.*
// Tensors of the previous run's outputs, [1, kv heads, T, d] with T one longer each step; the first
// step feeds empty pasts [1, kv heads, 0, d]). Greedy tokens (the last row's argmax, read on the
// host), tokens/s of the decode steps (prefill apart). Each variant runs alone in its own process
// (this file with --worker), alternated over --rounds rounds; figures are medians. Never a test.
//   tools/dev bench host-loop [--model llama|gpt2] [--size tiny|8x512] [--prompt 8] [--tokens 96]
//     [--repeats 3] [--rounds 3] [--variants mlx,mlx-eager,mlx-device,ort-node] [--base OTHER/packages/ort-ep]
// mlx-device (and mlx-device-eager, compiled false): mlx({ presentsOnDevice: true }), the present.*
// outputs as 'gpu-buffer' Tensors, so the cache fed back is the device Tensors of the last run
// (transformers.js's recipe for mlx, see the README).
// --base: a before/after in one run: the mlx variants again from another checkout (its
// bench/host-loop.ts, copied there), as base:mlx and base:mlx-eager, alternated with these.
// --size tiny is the consumer test's 2-layer, 64-wide decoder (tools/consumer-test.mjs);
// 8x512 is 8 layers, 512 wide (try --prompt 1024). BENCH_THREADS: onnxruntime-node's intra-op
// threads (default 2).
import { createRequire } from 'node:module';
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { InferenceSession, Tensor } from 'onnxruntime-common';
import { workerResult } from './decoder-sizes.js';
import { buildDecoder, type DecoderConfig, headSize, kvHeadsOf } from '../test/helpers/decoder.js';

const arg = (n: string, d?: string) => {
  const i = process.argv.indexOf(`--${n}`);
  return i >= 0 ? process.argv[i + 1] : d;
};
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

const kind = arg('model', 'llama') as 'llama' | 'gpt2';
const size = arg('size', 'tiny')!;
const promptLen = Number(arg('prompt', '8'));
const tokens = Number(arg('tokens', '96'));
const repeats = Number(arg('repeats', '3'));
const rounds = Number(arg('rounds', '3'));

// The consumer test's decoders (gpt2-kv, llama-kv), and a larger one for long contexts.
const SHAPES: Record<string, Record<'llama' | 'gpt2', Omit<DecoderConfig, 'maxPositions'>>> = {
  tiny: {
    gpt2: { kind: 'gpt2', layers: 2, hidden: 64, heads: 4, ffn: 256, vocab: 512, seed: 11 },
    llama: { kind: 'llama', layers: 2, hidden: 64, heads: 4, kvHeads: 2, ffn: 128, vocab: 512, seed: 5 },
  },
  '8x512': {
    gpt2: { kind: 'gpt2', layers: 8, hidden: 512, heads: 8, ffn: 2048, vocab: 8192, seed: 11 },
    llama: { kind: 'llama', layers: 8, hidden: 512, heads: 8, kvHeads: 4, ffn: 1376, vocab: 8192, seed: 5 },
  },
};
if (!SHAPES[size]) throw new Error(`--size: one of ${Object.keys(SHAPES).join(', ')}`);
const config: DecoderConfig = { ...SHAPES[size][kind], maxPositions: promptLen + tokens + 2 };

interface Result {
  variant: string;
  tokensPerSecond: number;
  msPerToken: number;
  prefillMs: number;
  /** Process CPU time (all threads) a decode step, ms: less moved by other load than wall time. */
  cpuMsPerToken: number;
  error?: string;
}

async function worker(variant: string): Promise<void> {
  const require = createRequire(import.meta.url);
  const ort = require('onnxruntime-node') as typeof import('onnxruntime-node');
  ort.env.logLevel = 'error';
  const threads = Number(process.env.BENCH_THREADS ?? 2);
  let options: InferenceSession.SessionOptions;
  if (variant === 'ort-node') options = { executionProviders: ['cpu'], intraOpNumThreads: threads, interOpNumThreads: 1 };
  else {
    const { mlx } = await import('../src/index.js');
    // mlx-device: the presents stay on the device ('gpu-buffer' Tensors, fed back as the pasts);
    // -eager: compiled false.
    const compiled = !variant.endsWith('-eager');
    const presentsOnDevice = variant.startsWith('mlx-device');
    options = { executionProviders: [mlx({ compiled, presentsOnDevice })] } as InferenceSession.SessionOptions;
  }
  const session = (await ort.InferenceSession.create(buildDecoder(config), options as never)) as unknown as InferenceSession;
  const kvHeads = kvHeadsOf(config);
  const H = headSize(config);
  const layers = config.layers;
  const i64 = (values: number[], dims: number[]) => new ort.Tensor('int64', BigInt64Array.from(values, BigInt), dims) as unknown as Tensor;
  const prompt = Array.from({ length: promptLen }, (_, i) => (i * 7919 + 13) % config.vocab);
  const argmaxLast = (logits: Tensor): number => {
    const V = logits.dims.at(-1)!;
    const data = logits.data as Float32Array;
    let best = 0;
    const off = data.length - V;
    for (let i = 1; i < V; i++) if (data[off + i] > data[off + best]) best = i;
    return best;
  };

  // One generation: the prompt's run (timed apart), then `tokens` steps, each fed the last run's presents.
  const generateOnce = async (): Promise<{ prefillMs: number; decodeMs: number; cpuMs: number; ids: number[] }> => {
    let feeds: Record<string, Tensor> = {
      input_ids: i64(prompt, [1, promptLen]),
      attention_mask: i64(
        prompt.map(() => 1),
        [1, promptLen],
      ),
    };
    if (session.inputNames.includes('position_ids'))
      feeds.position_ids = i64(
        prompt.map((_, i) => i),
        [1, promptLen],
      );
    for (let l = 0; l < layers; l++)
      for (const kv of ['key', 'value'])
        feeds[`past_key_values.${l}.${kv}`] = new ort.Tensor('float32', new Float32Array(0), [1, kvHeads, 0, H]) as unknown as Tensor;
    const ids: number[] = [];
    let total = promptLen;
    const t0 = performance.now();
    let t1 = t0;
    let c1 = process.cpuUsage();
    for (let step = 0; step <= tokens; step++) {
      const out = await session.run(feeds);
      const next = argmaxLast(out.logits as Tensor);
      ids.push(next);
      if (step === 0) {
        t1 = performance.now();
        c1 = process.cpuUsage();
      }
      const nextFeeds: Record<string, Tensor> = {
        input_ids: i64([next], [1, 1]),
        attention_mask: i64(new Array(total + 1).fill(1), [1, total + 1]),
      };
      if (session.inputNames.includes('position_ids')) nextFeeds.position_ids = i64([total], [1, 1]);
      for (const name of Object.keys(out))
        if (name.startsWith('present')) nextFeeds[name.replace('present', 'past_key_values')] = out[name] as Tensor;
      // As transformers.js's cache update does: a replaced 'gpu-buffer' past is disposed.
      for (const [name, t] of Object.entries(feeds)) if (t.location === 'gpu-buffer' && nextFeeds[name] !== t) t.dispose();
      feeds = nextFeeds;
      total++;
    }
    const c = process.cpuUsage(c1);
    for (const t of Object.values(feeds)) if (t.location === 'gpu-buffer') t.dispose();
    return { prefillMs: t1 - t0, decodeMs: performance.now() - t1, cpuMs: (c.user + c.system) / 1000, ids };
  };

  await generateOnce();
  const decode: number[] = [];
  const prefill: number[] = [];
  const cpu: number[] = [];
  let first: number[] | undefined;
  for (let r = 0; r < repeats; r++) {
    const g = await generateOnce();
    first ??= g.ids;
    decode.push(g.decodeMs);
    prefill.push(g.prefillMs);
    cpu.push(g.cpuMs);
  }
  const ms = median(decode) / tokens;
  const result: Result & { ids: number[] } = {
    variant,
    tokensPerSecond: 1000 / ms,
    msPerToken: ms,
    prefillMs: median(prefill),
    cpuMsPerToken: median(cpu) / tokens,
    ids: first!.slice(0, 16),
  };
  console.log(JSON.stringify(result));
  await session.release();
}

async function main(): Promise<void> {
  const base = arg('base');
  const own = arg('variants', 'mlx,mlx-eager,mlx-device,ort-node')!.split(',');
  const variants = base ? [...own, ...own.filter((v) => v !== 'ort-node').map((v) => `base:${v}`)] : own;
  const script = fileURLToPath(import.meta.url);
  const scriptOf = (v: string) => (v.startsWith('base:') ? join(base!, 'bench', 'host-loop.ts') : script);
  const fwd = ['--model', kind, '--size', size, '--prompt', String(promptLen), '--tokens', String(tokens), '--repeats', String(repeats)];
  const load0 = loadavg();
  console.log(
    `host loop (transformers.js's): ${kind} ${size} (${config.layers} layers, ${config.hidden} wide), prompt ${promptLen}, ${tokens} greedy tokens, ${rounds} rounds`,
  );
  const all = new Map<string, Result[]>(variants.map((v) => [v, []]));
  const idsOf = new Map<string, string>();
  for (let round = 0; round < rounds; round++)
    for (const v of round % 2 ? [...variants].reverse() : variants) {
      const r = workerResult(scriptOf(v), ['--variant', v.replace('base:', ''), ...fwd]) as unknown as Result & { ids?: number[] };
      if (r.error) {
        console.log(`  ${v}: ${r.error}`);
        continue;
      }
      all.get(v)!.push(r);
      idsOf.set(v, JSON.stringify(r.ids));
      console.log(
        `  round ${round + 1} ${v}: ${r.tokensPerSecond.toFixed(1)} tokens/s (${r.msPerToken.toFixed(3)} ms a token, CPU ${r.cpuMsPerToken.toFixed(3)} ms), prefill ${r.prefillMs.toFixed(2)} ms`,
      );
    }
  console.log('\n| variant | tokens/s (median of rounds) | ms a token | CPU ms a token | prefill (ms) |\n|---|---|---|---|---|');
  for (const [v, rs] of all) {
    if (!rs.length) continue;
    const tps = median(rs.map((r) => r.tokensPerSecond));
    const cpu = median(rs.map((r) => r.cpuMsPerToken));
    console.log(
      `| ${v} | ${tps.toFixed(1)} | ${(1000 / tps).toFixed(3)} | ${cpu.toFixed(3)} | ${median(rs.map((r) => r.prefillMs)).toFixed(2)} |`,
    );
  }
  if (new Set(idsOf.values()).size > 1)
    console.log(`tokens differ between variants: ${[...idsOf].map(([v, i]) => `${v} ${i}`).join('; ')}`);
  const load1 = loadavg();
  console.log(`load average ${load0.map((x) => x.toFixed(2)).join(' / ')} -> ${load1.map((x) => x.toFixed(2)).join(' / ')}`);
}

if (process.argv.includes('--worker')) await worker(arg('variant', 'mlx')!);
else await main();
