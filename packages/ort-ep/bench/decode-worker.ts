// One engine decoding one Llama-shaped model (GroupQueryAttention, grouped KV heads) in its own
// process (decode.ts spawns it); prints one JSON line.
//   node --conditions=source --import tsx bench/decode-worker.ts --engine mlx|ort-node --size tiny|small|100m
//     [--model llama|gpt2] [--quant none|int4] [--device cpu|gpu] [--prefill 512] [--contexts 128,1024,4096] [--tokens 16] [--warmup 4]
// - prefill: one run of a prompt of --prefill tokens into an empty cache (median of 3 after one warm-up);
// - decode at context C: generate() after a C-token prompt; the time of each step after --warmup
//   steps, as tokens/s, and the bytes each step moved (mlx: host<->device copies, transferStats();
//   onnxruntime-node: the bytes of its feeds and outputs, which cross into and out of its native
//   memory).
// mlx runs shared-buffer mode (kvCapacity: the cache stays on the device and the presents are
// written into the pasts); onnxruntime-node runs the growing cache its JS API allows (CPU tensors
// in and out each step).
import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';
import type { InferenceSession, Tensor } from 'onnxruntime-common';
import { generate, transferStats } from '../src/index.js';
import { SIZES } from './decoder-sizes.js';
import { buildDecoder, type DecoderConfig, parameterCount } from '../test/helpers/decoder.js';

const arg = (n: string, d?: string) => {
  const i = process.argv.indexOf(`--${n}`);
  return i >= 0 ? process.argv[i + 1] : d;
};
const engine = arg('engine', 'mlx')!;
const device = arg('device', 'cpu') as 'cpu' | 'gpu';
const prefillLen = Number(arg('prefill', '512'));
const contexts = arg('contexts', '128,1024,4096')!.split(',').map(Number);
const tokens = Number(arg('tokens', '16'));
const warmup = Number(arg('warmup', '4'));

const size = arg('size', 'small')!;
// --model gpt2: the same sizes as a GPT-2-shaped graph (present = Concat(past, new)), growing caches on both engines.
const kind = arg('model', 'llama') as 'llama' | 'gpt2';
// --quant int4: every projection of the Llama graph is MatMulNBits (4 bits, block 32).
const quant = arg('quant', 'none') as 'none' | 'int4';
const longest = Math.max(prefillLen, ...contexts) + warmup + tokens + 1;
const config: DecoderConfig = { ...SIZES[size], kind, maxPositions: longest, int4: quant === 'int4' };

const require = createRequire(import.meta.url);
const ort = require('onnxruntime-node') as typeof import('onnxruntime-node');
ort.env.logLevel = 'error';
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const prompt = (n: number) => Array.from({ length: n }, (_, i) => (i * 7919 + 13) % config.vocab);
const bytesOf = (ts: Iterable<Tensor>) => {
  let n = 0;
  for (const t of ts) if (t.location === 'cpu') n += (t.data as ArrayBufferView).byteLength;
  return n;
};

async function main(): Promise<void> {
  const bytes = buildDecoder(config);
  if (engine === 'mlx') await import('../src/index.js');
  const threads = Number(process.env.BENCH_THREADS ?? 2);
  const options =
    engine === 'mlx'
      ? { executionProviders: [{ name: 'mlx', device }], preferredOutputLocation: 'gpu-buffer' }
      : { executionProviders: ['cpu'], intraOpNumThreads: threads, interOpNumThreads: 1 };
  const t0 = performance.now();
  const session = (await ort.InferenceSession.create(bytes, options as never)) as unknown as InferenceSession;
  const createMs = performance.now() - t0;
  // onnxruntime-node: count the bytes of each run's feeds and outputs.
  // Both engines: the time of each session.run (the rest of a step is generate()'s own work).
  let ioBytes = 0;
  const runMs: number[] = [];
  const run = session.run.bind(session);
  (session as { run: unknown }).run = async (feeds: Record<string, Tensor>, fetches: never) => {
    const t = performance.now();
    const out = (await run(feeds, fetches)) as Record<string, Tensor>;
    runMs.push(performance.now() - t);
    ioBytes += bytesOf(Object.values(feeds)) + bytesOf(Object.values(out));
    return out;
  };
  const moved = () => (engine === 'mlx' ? transferStats().uploadedBytes + transferStats().downloadedBytes : ioBytes);
  const kv = (n: number) => (engine === 'mlx' && kind === 'llama' ? n + warmup + tokens + 1 : undefined);

  // Each step runs from the previous step's token to its own (the run, the logits' download, the
  // choice of the token and the loop's own work).
  let last = 0;
  let lastBytes = 0;
  const times: number[] = [];
  const bytesMoved: number[] = [];
  const onStep = (step: number) => {
    const now = performance.now();
    const b = moved();
    if (step > 0) {
      times.push(now - last);
      bytesMoved.push(b - lastBytes);
    }
    last = now;
    lastBytes = b;
  };
  const begin = () => {
    times.length = 0;
    bytesMoved.length = 0;
    last = performance.now();
    lastBytes = moved();
  };

  // Prefill: the prompt's run alone, from an empty cache to its first token.
  const prefill: number[] = [];
  for (let r = 0; r < 4; r++) {
    const start = performance.now();
    for await (const _ of generate(session, {
      inputIds: prompt(prefillLen),
      maxNewTokens: 1,
      kvCapacity: kv(prefillLen),
      Tensor: ort.Tensor as never,
    }));
    if (r > 0) prefill.push(performance.now() - start);
  }

  const decode: {
    context: number;
    tokensPerSecond: number;
    msPerToken: number;
    runMsPerToken: number;
    bytesPerToken: number;
    ids: number[];
  }[] = [];
  for (const context of contexts) {
    begin();
    runMs.length = 0;
    // The tokens generated (greedy), to compare engines and settings.
    const ids: number[] = [];
    for await (const id of generate(session, {
      inputIds: prompt(context),
      maxNewTokens: warmup + tokens + 1,
      kvCapacity: kv(context),
      Tensor: ort.Tensor as never,
      onStep,
    }))
      ids.push(id);
    const ms = median(times.slice(warmup));
    // runMs[0] is the prompt's run.
    decode.push({
      context,
      tokensPerSecond: 1000 / ms,
      msPerToken: ms,
      runMsPerToken: median(runMs.slice(1 + warmup)),
      bytesPerToken: median(bytesMoved.slice(warmup)),
      ids,
    });
  }
  // mlx: the compiled path's signature cache over the whole run (hits are replays of a trace).
  const handler = (session as unknown as { handler?: { session?: { compileStats?: unknown } } }).handler;
  const compileStats = engine === 'mlx' ? handler?.session?.compileStats : undefined;
  await session.release();
  console.log(
    JSON.stringify({
      engine,
      device: engine === 'mlx' ? device : 'cpu',
      size,
      model: kind,
      quant,
      parameters: parameterCount(config),
      // What a decode step must read at least: the weights (the model's bytes, which they are
      // almost all of) and, per position of context, every layer's K and V (float32).
      weightBytes: bytes.byteLength,
      kvBytesPerPosition:
        config.layers * 2 * ((config as { kvHeads?: number }).kvHeads ?? config.heads) * (config.hidden / config.heads) * 4,
      createMs,
      prefillTokens: prefillLen,
      prefillMs: median(prefill),
      decode,
      compileStats,
    }),
  );
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
