// Speculative decoding: tokens/s of generateSpeculative() (a draft proposes --k tokens, the target
// verifies them in one run) against plain generate() on the same target, for the 'mlx' provider and
// onnxruntime-node's CPU provider. The target is a Llama-shaped decoder (test/helpers/decoder.ts,
// random weights) whose layers past the first --draft-layers are quiet (small output projections),
// and the draft is that target truncated to its first --draft-layers layers (the same embeddings;
// the lm_head quantized to 8 or 4 bits from the target's, --draft-head int8|int4, or the same,
// f32): the issue's "draft made by truncating the target". Each variant runs alone in its
// own process (this file with --worker), the variants alternate over --rounds rounds, and figures
// are medians over rounds of each process's median over --reps generations. Both caches are in
// place (kvCapacity) for every variant. Prints the load average before and after. Never a test.
//   tools/dev bench speculative [--size tiny|small|100m] [--draft-layers 1] [--draft-head int4|int8|f32] [--k 4] [--prompt 32] [--tokens 64]
//     [--reps 3] [--rounds 3] [--engines mlx-plain,mlx-spec,ort-plain,ort-spec] [--device cpu|gpu]
//     [--prompt-kind plain|repeat|copy]
// Variants ENGINE-lookup run generate() with promptLookup { ngram: 3, maxDraft: k } (draft-free
// proposals from the prompt and the text so far); --prompt-kind repeat makes the prompt its first
// half twice, copy a prompt that holds the passage the model will write (see promptKind below).
// BENCH_THREADS sets onnxruntime-node's intra-op threads (default 2).
import { createRequire } from 'node:module';
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import type { InferenceSession } from 'onnxruntime-common';
import { workerResult } from './decoder-sizes.js';
import { buildDecoder, type DecoderConfig, parameterCount } from '../test/helpers/decoder.js';

const arg = (n: string, d?: string) => {
  const i = process.argv.indexOf(`--${n}`);
  return i >= 0 ? process.argv[i + 1] : d;
};
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

const SIZES: Record<string, DecoderConfig> = {
  tiny: { kind: 'llama', layers: 4, hidden: 64, heads: 4, kvHeads: 2, ffn: 128, vocab: 512, maxPositions: 0 },
  small: { kind: 'llama', layers: 8, hidden: 256, heads: 8, kvHeads: 2, ffn: 704, vocab: 8192, maxPositions: 0 },
  // decode.ts's ~110M shape.
  '100m': { kind: 'llama', layers: 12, hidden: 768, heads: 12, kvHeads: 4, ffn: 2048, vocab: 32000, maxPositions: 0 },
};
const size = arg('size', 'small')!;
const draftLayers = Number(arg('draft-layers', '1'));
const k = Number(arg('k', '4'));
const promptLen = Number(arg('prompt', '32'));
const tokens = Number(arg('tokens', '64'));
const reps = Number(arg('reps', '3'));
const device = arg('device', 'cpu')!;
// --prompt-kind: plain (distinct tokens), repeat (the prompt's first half twice), or copy: a model
// whose every layer is quiet (so its greedy next token is nearly a function of the current one) and
// a prompt holding the passage it will produce: filler, a token a, the model's own greedy
// continuation of a (--tokens of it, made before timing), filler, and a again; the text to come
// repeats the prompt's (as in editing code), which is what prompt lookup proposes from.
const promptKind = arg('prompt-kind', 'plain')!;
if (!['plain', 'repeat', 'copy'].includes(promptKind)) throw new Error(`--prompt-kind must be plain, repeat or copy, got ${promptKind}`);
const FILLER = 16;
const promptTotal = promptKind === 'copy' ? 2 * FILLER + 2 + tokens : promptLen;
const capacity = promptTotal + tokens + 1;
const targetConfig: DecoderConfig = {
  ...SIZES[size],
  maxPositions: capacity,
  seed: 11,
  quietFrom: promptKind === 'copy' ? 0 : draftLayers,
  quietScale: promptKind === 'copy' ? 0.002 : 0.05,
};
// --draft-head int4 (the default) / int8: the draft's lm_head as 4- or 8-bit blocks quantized from
// the target's own (test/helpers/decoder.ts, headBits), an eighth or a quarter of the head's bytes;
// f32: the target's head. (8 bits keeps the float32 head's acceptance; onnxruntime-node's CPU
// provider runs a one-row 8-bit MatMulNBits far slower than its 4-bit one, hence 4 by default.)
const draftHead = arg('draft-head', 'int4')!;

if (!['int8', 'int4', 'f32'].includes(draftHead)) throw new Error(`--draft-head must be int8, int4 or f32, got ${draftHead}`);
const headBits = draftHead === 'int8' ? 8 : draftHead === 'int4' ? 4 : undefined;
const draftConfig: DecoderConfig = { ...targetConfig, keepLayers: draftLayers, headBits };

/**
 * Generations run before the timed ones. A feed signature runs eagerly on its first run and is
 * traced on its second (src/execute/signature.ts), and the prompt's signatures (the target's
 * prompt + first proposals, the draft's prompt) come once a generation: with one warm-up the
 * first timed generation traced them (the draft's 32-token prompt: 233 ms against 25 once
 * compiled), and the median of two timed generations is the slower one.
 */
const WARMUP = 2;

interface Result {
  variant: string;
  tokensPerSecond: number;
  msPerToken: number;
  targetRunsPerToken: number;
  acceptance?: number;
  error?: string;
}

async function worker(variant: string): Promise<void> {
  const [engine, mode] = variant.split('-');
  const require = createRequire(import.meta.url);
  const ort = require('onnxruntime-node') as typeof import('onnxruntime-node');
  ort.env.logLevel = 'error';
  const { generate, generateSpeculative } = await import('../src/index.js');
  const threads = Number(process.env.BENCH_THREADS ?? 2);
  const options =
    engine === 'mlx'
      ? { executionProviders: [{ name: 'mlx', device }], preferredOutputLocation: 'gpu-buffer' }
      : { executionProviders: ['cpu'], intraOpNumThreads: threads, interOpNumThreads: 1 };
  const create = async (c: DecoderConfig) =>
    (await ort.InferenceSession.create(buildDecoder(c), options as never)) as unknown as InferenceSession;
  const target = await create(targetConfig);
  const draft = mode === 'spec' ? await create(draftConfig) : undefined;
  // --prompt-kind repeat: the prompt's first half twice (text that repeats), for every variant.
  const half = Math.max(1, promptLen >> 1);
  let prompt = Array.from({ length: promptLen }, (_, i) => ((promptKind === 'repeat' ? i % half : i) * 7919 + 13) % targetConfig.vocab);
  if (promptKind === 'copy') {
    const filler = (seed: number) => Array.from({ length: FILLER }, (_, i) => ((i + seed) * 7919 + 13) % targetConfig.vocab);
    const a = 4242 % targetConfig.vocab;
    const passage: number[] = [];
    for await (const t of generate(target, { inputIds: [a], maxNewTokens: tokens, kvCapacity: capacity, Tensor: ort.Tensor as never }))
      passage.push(t);
    prompt = [...filler(1), a, ...passage, ...filler(100), a];
  }
  const times: number[] = [];
  let runs = 0;
  let proposed = 0;
  let accepted = 0;
  let produced = 0;
  for (let rep = 0; rep < reps + WARMUP; rep++) {
    runs = proposed = accepted = produced = 0;
    const common = {
      inputIds: prompt,
      maxNewTokens: tokens,
      kvCapacity: capacity,
      Tensor: ort.Tensor as never,
      onStep: () => void runs++,
    };
    const t0 = performance.now();
    const stream = draft
      ? generateSpeculative(target, {
          ...common,
          draft: {
            session: draft,
            tokens: k,
            onVerify: (p, a) => {
              proposed += p;
              accepted += a;
            },
          },
        })
      : generate(target, mode === 'lookup' ? { ...common, promptLookup: { ngram: 3, maxDraft: k } } : common);
    for await (const _ of stream) produced++;
    // The warm-up generations compile and warm the caches: not counted.
    if (rep >= WARMUP) times.push(performance.now() - t0);
  }
  await target.release();
  await draft?.release();
  const ms = median(times) / produced;
  const result: Result = {
    variant,
    tokensPerSecond: 1000 / ms,
    msPerToken: ms,
    targetRunsPerToken: runs / produced,
    acceptance: draft ? accepted / proposed : undefined,
  };
  console.log(JSON.stringify(result));
}

function spawn(variant: string): Result {
  const pass = ['size', 'draft-layers', 'draft-head', 'prompt-kind', 'k', 'prompt', 'tokens', 'reps', 'device'].flatMap((n) =>
    arg(n) ? [`--${n}`, arg(n)!] : [],
  );
  return { variant, ...workerResult(fileURLToPath(import.meta.url), [variant, ...pass]) } as Result;
}

function main(): void {
  const variants = arg('engines', 'mlx-plain,mlx-spec,ort-plain,ort-spec')!.split(',');
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
  const tp = parameterCount(targetConfig);
  const dp = parameterCount(draftConfig);
  // Weight bytes a token reads: every layer's, and the lm_head (the embedding is one row): float32,
  // or 4 bits and a float32 scale per 32 for a 4-bit head.
  const readOf = (c: DecoderConfig) =>
    4 * parameterCount({ ...c, vocab: 0 }) + c.hidden * c.vocab * (c.headBits ? c.headBits / 8 + 4 / 32 : 4);
  console.log(
    `target: Llama-shaped (GQA), ${size}, ${(tp / 1e6).toFixed(1)}M parameters, layers past ${draftLayers} quiet (random weights); ` +
      `draft: its first ${draftLayers} layer(s)${draftConfig.headBits ? ` and a ${draftConfig.headBits}-bit lm_head` : ''}, ${(dp / 1e6).toFixed(1)}M parameters; ` +
      `per token the draft reads ${((100 * readOf(draftConfig)) / readOf(targetConfig)).toFixed(0)}% of the target's weight bytes ` +
      `(${(readOf(targetConfig) / readOf(draftConfig)).toFixed(1)}x fewer)`,
  );
  console.log(
    `prompt ${promptTotal} tokens (${promptKind}), ${tokens} new tokens, k = ${k}, device ${device}, ${rounds} rounds of ${reps} generations\n`,
  );
  console.log('| variant | tokens/s (end to end) | ms/token | target runs/token | draft tokens kept | vs plain, same engine |');
  console.log('|---|---|---|---|---|---|');
  const medians = new Map<string, number>();
  for (const [v, rs] of runs) if (rs.length) medians.set(v, median(rs.map((r) => r.tokensPerSecond)));
  for (const [v, rs] of runs) {
    if (!rs.length) continue;
    const tps = medians.get(v)!;
    const plain = medians.get(`${v.split('-')[0]}-plain`);
    const acc = rs[0].acceptance;
    console.log(
      `| ${v} | ${tps.toFixed(1)} | ${(1000 / tps).toFixed(2)} | ${median(rs.map((r) => r.targetRunsPerToken)).toFixed(2)} | ` +
        `${acc === undefined ? '-' : `${(100 * median(rs.map((r) => r.acceptance!))).toFixed(0)}%`} | ` +
        `${plain && !v.endsWith('plain') ? `${(tps / plain).toFixed(2)}×` : '-'} |`,
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
