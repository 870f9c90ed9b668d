// The sampler of generate() (src/sampler.ts) against the one it replaced (kept below for the
// comparison: a heap for top-k, a sort of the tokens above (1 - p) / V of the probability for
// top-p, Math.exp in float64 over the vocabulary): milliseconds a token, the median of --calls calls
// after --warm warm-up calls, per mode, at V = 32,000 and 128,256, over a flat logit distribution
// (N(0, 1) logits: thousands of plausible tokens) and a peaked one (a few tokens far above a flat
// rest, as a trained model's usually are). Each call gets fresh logits (one of --rows rows, so no
// cache of the previous call helps). Prints the load average before and after. Never a test.
// generate()'s two paths from logits that a step leaves on the device ([1, 1, V] MLX arrays, made
// before the timing): 'host' downloads the row and samples it with src/sampler.ts (greedy: the
// host argmax), 'device' chooses on the device (src/sampler-device.ts) and downloads the token id.
//   tools/dev bench sampler [--calls 300] [--warm 50] [--rows 8] [--vocab 32000,128256] [--which old,new,host,device]
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import * as mx from '@mlx/core';
import { pickToken } from '../src/generate.js';
import { download } from '../src/runtime/convert.js';
import { deviceToken } from '../src/sampler-device.js';
import { type SamplerSettings, sample } from '../src/sampler.js';

const arg = (n: string, d: string) => {
  const i = process.argv.indexOf(`--${n}`);
  return i >= 0 ? process.argv[i + 1] : d;
};
const calls = Number(arg('calls', '300'));
const warm = Number(arg('warm', '50'));
const nrows = Number(arg('rows', '8'));
const vocabs = arg('vocab', '32000,128256').split(',').map(Number);
const which = arg('which', 'old,new,host,device').split(',');
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

/** mulberry32, as generate()'s seeded(). */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A standard normal draw (Box-Muller). */
const normal = (r: () => number) => Math.sqrt(-2 * Math.log(1 - r())) * Math.cos(2 * Math.PI * r());

function rows(V: number, kind: 'flat' | 'peaked', seed: number): Float32Array[] {
  const r = seeded(seed);
  return Array.from({ length: nrows }, () => {
    const l = Float32Array.from({ length: V }, () => normal(r) * (kind === 'flat' ? 1 : 2));
    if (kind === 'peaked') for (let j = 0; j < 5; j++) l[Math.floor(r() * V)] = 18 - 2 * j;
    return l;
  });
}

const MODES: [string, SamplerSettings | undefined][] = [
  ['greedy', undefined],
  ['temperature 0.8', { temperature: 0.8 }],
  ['top-k 50', { topK: 50 }],
  ['top-p 0.9', { topP: 0.9 }],
  ['top-k 50 + top-p 0.9', { topK: 50, topP: 0.9, temperature: 0.7 }],
  ['top-k 1000 + top-p 0.95', { topK: 1000, topP: 0.95 }],
];

// ---- the previous sampler, verbatim but for its name and signature ----
/** Whether token a ranks before token b: the larger logit, ties to the lower id (as a stable sort by logit). */
const before = (logits: ArrayLike<number>, a: number, b: number): boolean => logits[a] > logits[b] || (logits[a] === logits[b] && a < b);

/**
 * The ids of the k highest logits, best first (ties to the lower id), in O(V log k): a min-heap of
 * the best k seen, never a sort of the vocabulary.
 */
function topIds(logits: ArrayLike<number>, k: number): number[] {
  const heap: number[] = []; // heap[0]: the worst of the best k
  const worse = (a: number, b: number) => before(logits, b, a);
  const down = (i: number) => {
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let w = i;
      if (l < heap.length && worse(heap[l], heap[w])) w = l;
      if (r < heap.length && worse(heap[r], heap[w])) w = r;
      if (w === i) return;
      [heap[i], heap[w]] = [heap[w], heap[i]];
      i = w;
    }
  };
  for (let id = 0; id < logits.length; id++) {
    if (heap.length < k) {
      heap.push(id);
      for (let i = heap.length - 1; i > 0; ) {
        const p = (i - 1) >> 1;
        if (!worse(heap[i], heap[p])) break;
        [heap[i], heap[p]] = [heap[p], heap[i]];
        i = p;
      }
    } else if (before(logits, id, heap[0])) {
      heap[0] = id;
      down(0);
    }
  }
  return heap.sort((a, b) => (before(logits, a, b) ? -1 : 1));
}

/**
 * The next token from one position's logits. Ties go to the lowest id, as argmax does. Sampling
 * never sorts the vocabulary: top-k keeps the k best in a heap; top-p sorts only the tokens whose
 * probability is at least (1 - p) / V (those below hold at most 1 - p in all, so the smallest set
 * reaching p is among them), giving the choice a full sort would; temperature alone draws over the
 * vocabulary in id order.
 */
function oldPick(logits: ArrayLike<number>, sampling: SamplerSettings, random: () => number): number {
  const temperature = sampling.temperature ?? 1;
  const V = logits.length;
  const topP = sampling.topP ?? 1;
  let top: number[];
  // Top-p alone: every token's weight, computed once; its sum normalizes.
  let all: Float64Array | undefined;
  let allSum = 0;
  if (sampling.topK && sampling.topK > 0 && sampling.topK < V) top = topIds(logits, sampling.topK);
  else if (topP < 1) {
    let max = logits[0];
    for (let i = 1; i < V; i++) if (logits[i] > max) max = logits[i];
    all = new Float64Array(V);
    for (let i = 0; i < V; i++) allSum += all[i] = Math.exp((logits[i] - max) / temperature);
    const floor = ((1 - topP) / V) * allSum;
    top = [];
    for (let i = 0; i < V; i++) if (all[i] >= floor) top.push(i);
    top.sort((a, b) => logits[b] - logits[a] || a - b);
  } else {
    // The whole vocabulary: drawn in id order, no order needed.
    let max = logits[0];
    for (let i = 1; i < V; i++) if (logits[i] > max) max = logits[i];
    let total = 0;
    const w = new Float64Array(V);
    for (let i = 0; i < V; i++) total += w[i] = Math.exp((logits[i] - max) / temperature);
    let r = random() * total;
    for (let i = 0; i < V; i++) {
      r -= w[i];
      if (r < 0) return i;
    }
    let last = V - 1;
    while (last > 0 && w[last] === 0) last--;
    return last;
  }
  const max = logits[top[0]];
  const weights = all ? top.map((i) => all![i]) : top.map((i) => Math.exp((logits[i] - max) / temperature));
  // The normalizer of top-p is over the top-k set (or every token).
  const sum = all ? allSum : weights.reduce((a, b) => a + b, 0);
  let keep = top.length;
  if (topP < 1) {
    let acc = 0;
    for (let j = 0; j < top.length; j++) {
      acc += weights[j] / sum;
      if (acc >= topP) {
        keep = j + 1;
        break;
      }
    }
  }
  const kept = weights.slice(0, keep);
  const total = kept.reduce((a, b) => a + b, 0);
  let r = random() * total;
  for (let j = 0; j < keep; j++) {
    r -= kept[j];
    if (r < 0) return top[j];
  }
  return top[keep - 1];
}

// ---- the measurement ----
type Engine = (l: Float32Array, d: mx.Array, s: SamplerSettings | undefined, r: () => number, step: number) => number;
const greedyOr =
  (f: (l: Float32Array, s: SamplerSettings, r: () => number) => number) =>
  (l: Float32Array, s: SamplerSettings | undefined, r: () => number) =>
    s ? f(l, s, r) : pickToken(l, 'greedy');
const engines: Record<string, Engine> = {
  old: (l, _d, s, r) => greedyOr(oldPick)(l, s, r),
  new: (l, _d, s, r) => greedyOr(sample)(l, s, r),
  host: (_l, d, s, r) => greedyOr(sample)(download(d).data as Float32Array, s, r),
  device: (_l, d, s, _r, step) => deviceToken(d, s, 1, step),
};

function time(f: Engine, data: Float32Array[], dev: mx.Array[], s: SamplerSettings | undefined): number {
  const r = seeded(1);
  const t: number[] = [];
  let sink = 0;
  for (let c = 0; c < warm + calls; c++) {
    const l = data[c % data.length];
    const d = dev[c % dev.length];
    const a = performance.now();
    sink += f(l, d, s, r, c);
    const b = performance.now();
    if (c >= warm) t.push(b - a);
  }
  if (sink < 0) console.log(sink);
  return median(t);
}

console.log(
  `load average ${loadavg()
    .map((x) => x.toFixed(2))
    .join(' ')}; ${calls} calls a figure (median), ms a token`,
);
console.log(`| V | logits | mode | ${which.join(' | ')} |`);
console.log(`|---|---|---|${which.map(() => '---|').join('')}`);
for (const V of vocabs)
  for (const kind of ['flat', 'peaked'] as const) {
    const data = rows(V, kind, V + (kind === 'flat' ? 1 : 2));
    const dev = data.map((l) => mx.array(l, { shape: [1, 1, V] }));
    for (const [name, s] of MODES) {
      const ms = which.map((w) => time(engines[w], data, dev, s));
      console.log(`| ${V} | ${kind} | ${name} | ${ms.map((x) => x.toFixed(3)).join(' | ')} |`);
    }
    for (const d of dev) d.dispose();
  }
console.log(
  `load average ${loadavg()
    .map((x) => x.toFixed(2))
    .join(' ')}`,
);
