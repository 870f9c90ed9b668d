// LLM decoding: prefill and decode tokens/s of a Llama-shaped model (GroupQueryAttention, random
// weights, test/helpers/decoder.ts) for the 'mlx' provider and onnxruntime-node's CPU provider,
// each engine alone in its own process (decode-worker.ts), with the bytes each token moves
// between host and device (mlx) or into and out of onnxruntime (its feeds and outputs).
// Engines alternate over --rounds rounds; figures are medians over the rounds (a shared machine's
// load moves single runs by 2-4x). A second table sets each context's tokens/s against the memory
// bound: the bytes a token must read (the weights, and the KV cache at that context) over the
// machine's measured copy bandwidth. Each round's own ratio is printed too (the medians' spread).
// Writes reports/bench-decode.json and bench/decode.svg. Never a test.
//   tools/dev bench decode [--size tiny|small|100m|qwen0.5b] [--model llama|gpt2] [--quant none|int4] [--prefill 512] [--contexts 128,1024,4096]
//     [--tokens 16] [--rounds 3] [--engines mlx,ort-node] [--device cpu|gpu] [--out DIR]
// BENCH_THREADS sets onnxruntime-node's intra-op threads (default 2, this project's CI machines).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { barChart } from './chart.js';

const here = dirname(fileURLToPath(import.meta.url));
const pkg = join(here, '..');
const arg = (n: string, d?: string) => {
  const i = process.argv.indexOf(`--${n}`);
  return i >= 0 ? process.argv[i + 1] : d;
};
const engines = arg('engines', 'mlx,ort-node')!.split(',');
const rounds = Number(arg('rounds', '3'));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const pass = ['size', 'model', 'quant', 'prefill', 'contexts', 'tokens', 'warmup', 'device'].flatMap((n) =>
  arg(n) ? [`--${n}`, arg(n)!] : [],
);

interface Result {
  engine: string;
  model: string;
  quant?: string;
  device: string;
  size: string;
  parameters: number;
  createMs: number;
  prefillTokens: number;
  prefillMs: number;
  decode: { context: number; tokensPerSecond: number; msPerToken: number; runMsPerToken?: number; bytesPerToken: number }[];
  weightBytes: number;
  kvBytesPerPosition: number;
  error?: string;
}

// The bundle tools/gpu-bundle.sh makes (for machines without a registry) carries the worker as one
// file beside this one; in the repository it runs from its source.
const bundled = join(here, 'decode-worker.mjs');
const workerArgs = existsSync(bundled) ? [bundled] : ['--conditions=source', '--import', 'tsx', join(here, 'decode-worker.ts')];

function worker(engine: string): Result {
  const r = spawnSync(process.execPath, [...workerArgs, '--engine', engine, ...pass], { cwd: pkg, encoding: 'utf8', timeout: 1_800_000 });
  const line = r.stdout
    .trim()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .at(-1);
  if (!line) return { engine, error: (r.stderr || 'no output').trim().split('\n').slice(-3).join(' | ') } as Result;
  return JSON.parse(line) as Result;
}

const fmtBytes = (n: number) =>
  n >= 1 << 20 ? `${(n / (1 << 20)).toFixed(1)} MiB` : n >= 1024 ? `${(n / 1024).toFixed(1)} KiB` : `${n} B`;

/**
 * The machine's memory bandwidth as a copy moves it (bytes read plus bytes written per second),
 * best of several copies of a buffer far larger than the caches.
 */
function copyBandwidth(): number {
  const n = 256 << 20;
  const src = Buffer.alloc(n, 1);
  const dst = Buffer.alloc(n);
  let best = Number.POSITIVE_INFINITY;
  for (let i = 0; i < 6; i++) {
    const t = performance.now();
    src.copy(dst);
    best = Math.min(best, performance.now() - t);
  }
  return (2 * n) / (best / 1000);
}

function main(): void {
  const loadBefore = loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');
  const runs = new Map<string, Result[]>(engines.map((e) => [e, []]));
  for (let round = 0; round < rounds; round++)
    for (const e of round % 2 ? [...engines].reverse() : engines) {
      const r = worker(e);
      if (r.error) console.error(`${e}: ${r.error}`);
      else runs.get(e)!.push(r);
    }
  const results: Result[] = [...runs.values()]
    .filter((rs) => rs.length)
    .map((rs) => ({
      ...rs[0],
      rounds: rs.length,
      prefillMs: median(rs.map((r) => r.prefillMs)),
      decode: rs[0].decode.map((d, i) => {
        const ms = median(rs.map((r) => r.decode[i].msPerToken));
        return {
          ...d,
          msPerToken: ms,
          tokensPerSecond: 1000 / ms,
          runMsPerToken: median(rs.map((r) => r.decode[i].runMsPerToken ?? Number.NaN)),
          bytesPerToken: median(rs.map((r) => r.decode[i].bytesPerToken)),
        };
      }),
    }));
  const ok = results;
  if (!ok.length) process.exit(1);
  const ref = ok.find((r) => r.engine === 'ort-node');
  const int4 = ok[0].quant === 'int4';
  const shape = ok[0].model === 'gpt2' ? 'GPT-2-shaped (Concat past/present)' : `Llama-shaped (GQA${int4 ? ', int4 MatMulNBits' : ''})`;
  const suffix = (ok[0].size === 'small' ? '' : `-${ok[0].size}`) + (ok[0].model === 'gpt2' ? '-gpt2' : '') + (int4 ? '-int4' : '');
  console.log(`model: ${shape}, ${ok[0].size}, ${(ok[0].parameters / 1e6).toFixed(1)}M parameters, random weights\n`);
  console.log(
    '| engine | prefill ms (tokens) | ' +
      ok[0].decode.map((d) => `decode tok/s @${d.context}`).join(' | ') +
      ' | bytes/token @' +
      ok[0].decode.map((d) => d.context).join('/') +
      ' | ms per run() @' +
      ok[0].decode.map((d) => d.context).join('/') +
      ' |',
  );
  console.log('|---|---|' + ok[0].decode.map(() => '---|').join('') + '---|---|');
  for (const r of ok) {
    const ratio = (i: number) =>
      ref && r !== ref ? ` (${(r.decode[i].tokensPerSecond / ref.decode[i].tokensPerSecond).toFixed(2)}×)` : '';
    console.log(
      `| ${r.engine} (${r.device}) | ${r.prefillMs.toFixed(1)} (${r.prefillTokens})${ref && r !== ref ? ` (${(ref.prefillMs / r.prefillMs).toFixed(2)}×)` : ''} | ` +
        r.decode.map((d, i) => `${d.tokensPerSecond.toFixed(1)}${ratio(i)}`).join(' | ') +
        ` | ${r.decode.map((d) => fmtBytes(d.bytesPerToken)).join(' / ')}` +
        ` | ${r.decode.map((d) => (Number.isFinite(d.runMsPerToken) ? d.runMsPerToken!.toFixed(3) : '-')).join(' / ')} |`,
    );
  }
  // Each round's own ratio (that round's process of each engine), so that a median's spread shows:
  // on a shared machine one engine's rate moves by 20-40% from process to process.
  const refRuns = runs.get('ort-node') ?? [];
  const perRound: Record<string, number[][]> = {};
  for (const [e, rs] of runs) {
    if (e === 'ort-node' || !refRuns.length || !rs.length) continue;
    const n = Math.min(rs.length, refRuns.length);
    perRound[e] = ok[0].decode.map((_, i) =>
      Array.from({ length: n }, (_, k) => rs[k].decode[i].tokensPerSecond / refRuns[k].decode[i].tokensPerSecond),
    );
    console.log(
      `
${e} / ort-node, round by round: ` +
        ok[0].decode.map((d, i) => `@${d.context} ${perRound[e][i].map((x) => x.toFixed(2)).join(' ')}`).join('; '),
    );
  }
  const bandwidth = copyBandwidth();
  const loadAfter = loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');
  console.log(
    `\nmemory bound: copy bandwidth ${(bandwidth / 1e9).toFixed(1)} GB/s (read + write); a token reads the weights (${fmtBytes(ok[0].weightBytes)}) and the KV cache (${fmtBytes(ok[0].kvBytesPerPosition)} per position)`,
  );
  console.log('| context | bytes a token reads | bound tok/s | ' + ok.map((r) => `${r.engine} tok/s (of bound)`).join(' | ') + ' |');
  console.log('|---|---|---|' + ok.map(() => '---|').join(''));
  const bounds = ok[0].decode.map((d) => {
    const read = ok[0].weightBytes + ok[0].kvBytesPerPosition * d.context;
    return { context: d.context, read, bound: bandwidth / read };
  });
  bounds.forEach((b, i) =>
    console.log(
      `| ${b.context} | ${fmtBytes(b.read)} | ${b.bound.toFixed(1)} | ` +
        ok
          .map((r) => `${r.decode[i].tokensPerSecond.toFixed(1)} (${((100 * r.decode[i].tokensPerSecond) / b.bound).toFixed(0)}%)`)
          .join(' | ') +
        ' |',
    ),
  );
  console.log(`\nload average: ${loadBefore} before, ${loadAfter} after`);
  // --out DIR: the JSON and the chart go there (default: reports/ and bench/ of the package).
  const outDir = arg('out');
  const jsonDir = outDir ?? join(pkg, 'reports');
  mkdirSync(jsonDir, { recursive: true });
  writeFileSync(
    join(jsonDir, `bench-decode${suffix}.json`),
    JSON.stringify(
      { date: new Date().toISOString(), load: { before: loadBefore, after: loadAfter }, bandwidth, bounds, results, perRound },
      null,
      2,
    ),
  );
  writeFileSync(
    join(outDir ?? here, `decode${suffix}.svg`),
    barChart({
      title: `Decode tokens/s, ${shape}, ${(ok[0].parameters / 1e6).toFixed(0)}M parameters, by context`,
      groups: ok[0].decode.map((d) => `context ${d.context}`),
      series: ok.map((r) => ({ name: `${r.engine} (${r.device})`, values: r.decode.map((d) => d.tokensPerSecond) })),
      log: true,
      unit: 'tokens/s',
    }),
  );
}

main();
