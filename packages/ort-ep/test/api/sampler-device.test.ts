// generate()'s token choice on the device (src/sampler-device.ts): greedy equal to the host path's
// and onnxruntime-node's on real decoders, the frequencies of device draws against the exact
// probabilities computed here in float64 (chi-square, with a check that a wrong temperature or a
// nucleus one token wider fails it), seeds, NaN and infinite logits, the `sampler` option's errors,
// and the bytes a step downloads. No timings: those are bench/sampler.ts's.
import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { OrtMlxError } from '../../src/errors.js';
import { generate, transferStats } from '../../src/index.js';
import { deviceToken } from '../../src/sampler-device.js';
import { chi999, chiSquare } from '../helpers/chi-square.js';
import { buildDecoder, type DecoderConfig, tinyLlama } from '../helpers/decoder.js';
import { mlxCpu, ort } from '../helpers/ort.js';

type Settings = { temperature?: number; topK?: number; topP?: number };

/** The spec, by a full sort in float64: softmax(logits / T) over the top-k, then the smallest prefix reaching p, renormalized. */
function reference(logits: ArrayLike<number>, s: Settings): Float64Array {
  const V = logits.length;
  const t = s.temperature ?? 1;
  const order = Array.from({ length: V }, (_, i) => i).sort((a, b) => logits[b] - logits[a] || a - b);
  const top = s.topK && s.topK > 0 ? order.slice(0, Math.min(s.topK, V)) : order;
  const w = top.map((i) => Math.exp((logits[i] - logits[top[0]]) / t));
  const sum = w.reduce((a, b) => a + b, 0);
  let keep = top.length;
  if ((s.topP ?? 1) < 1) {
    let acc = 0;
    for (let j = 0; j < top.length; j++) {
      acc += w[j] / sum;
      if (acc >= s.topP!) {
        keep = j + 1;
        break;
      }
    }
  }
  const total = w.slice(0, keep).reduce((a, b) => a + b, 0);
  const p = new Float64Array(V);
  for (let j = 0; j < keep; j++) p[top[j]] = w[j] / total;
  return p;
}

/** A seeded generator (xorshift32) of floats in [0, 1), for the test's logits. */
function rng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 4294967296;
  };
}
const normal = (r: () => number) => Math.sqrt(-2 * Math.log(1 - r())) * Math.cos(2 * Math.PI * r());

/** Tokens drawn on the device from `logits` (one array, steps 0..n-1 of `seed`). */
function draws(logits: Float32Array, s: Settings | undefined, n: number, seed = 0): number[] {
  const a = mx.array(logits);
  try {
    return Array.from({ length: n }, (_, step) => deviceToken(a, s, seed, step));
  } finally {
    a.dispose();
  }
}

describe('greedy on the device', () => {
  it('is the argmax, ties to the lowest id, never a NaN', () => {
    const r = rng(3);
    for (let trial = 0; trial < 20; trial++) {
      const l = Float32Array.from({ length: 1000 + trial * 97 }, () => Math.floor(r() * 40) / 4);
      let best = 0;
      for (let i = 1; i < l.length; i++) if (l[i] > l[best]) best = i;
      expect(draws(l, undefined, 1)[0]).toBe(best);
    }
    expect(draws(Float32Array.of(1, Number.NaN, 3, Number.NaN, 3), undefined, 1)).toEqual([2]);
    // The last row of [1, 3, V] logits, not the first.
    const rows = mx.array(Float32Array.of(9, 0, 0, 0, 9, 0, 0, 0, 9), { shape: [1, 3, 3] });
    expect(deviceToken(rows, undefined)).toBe(2);
    rows.dispose();
  });

  it('of one row on a CPU stream is one native call, for float32 (no program), float16 and bfloat16 logits', () => {
    const r = rng(5);
    const V = 3000;
    const argmax = (xs: readonly number[]) => {
      let best = -1;
      for (let i = 0; i < xs.length; i++) if (!Number.isNaN(xs[i]) && (best < 0 || xs[i] > xs[best])) best = i;
      return Math.max(best, 0);
    };
    for (const dtype of ['float32', 'float16', 'bfloat16'] as const) {
      const rows: number[][] = [
        Array.from({ length: V }, () => Math.floor(r() * 64) / 8 - 4),
        Array.from({ length: V }, (_, i) => (i % 7 === 0 ? Number.NaN : Math.floor(r() * 64) / 8)),
        Array.from({ length: V }, () => Number.NEGATIVE_INFINITY),
        Array.from({ length: V }, () => Number.NaN),
      ];
      rows[0][V - 1] = 100;
      rows[1][0] = Number.NaN;
      for (const values of rows) {
        const a = mx.withStream(mx.defaultStreamOf('cpu'), () =>
          mx.astype(mx.array(Float32Array.from(values), { shape: [1, 1, V] }), dtype).eval(),
        );
        try {
          // The reference: the argmax of the values the array holds (rounded to its dtype), NaN never chosen, ties to the lowest id.
          const held = Array.from(mx.astype(a, 'float32').toTypedArray() as Float32Array);
          const before = mx.hostProgramStaticRuns();
          expect(
            mx.withStream(mx.defaultStreamOf('cpu'), () => deviceToken(a, undefined)),
            `${dtype} ${values[0]}`,
          ).toBe(argmax(held));
          // float32 is read where it lies (mx.greedyRows); the others run the greedy program.
          expect(mx.hostProgramStaticRuns() - before).toBe(dtype === 'float32' ? 0 : 1);
        } finally {
          a.dispose();
        }
      }
    }
  });
});

describe('device draws follow the exact probabilities', () => {
  const n = 12000;
  const V = 64;
  const r = rng(17);
  const logits = Float32Array.from({ length: V }, () => normal(r) * 2);
  const cases: Settings[] = [{ temperature: 0.7 }, { topK: 8 }, { topP: 0.8 }, { topK: 20, topP: 0.7, temperature: 1.3 }];
  for (const s of cases) {
    it(JSON.stringify(s), () => {
      const want = reference(logits, s);
      const counts = new Float64Array(V);
      for (const t of draws(logits, s, n, 7)) counts[t]++;
      for (let i = 0; i < V; i++) if (want[i] === 0) expect(counts[i], `token ${i} is outside the kept set`).toBe(0);
      const { stat, df } = chiSquare(counts, want, n);
      expect(stat, `chi-square ${stat.toFixed(1)} on ${df}`).toBeLessThan(chi999(df));
      // The power to see a 15% temperature error, and a nucleus one token wider.
      const hotter = reference(logits, { ...s, temperature: (s.temperature ?? 1) * 1.15 });
      expect(chiSquare(counts, hotter, n).stat).toBeGreaterThan(chi999(df));
      if (s.topP) {
        const kept = want.filter((x) => x > 0).length;
        const wider = reference(logits, { ...s, topP: 1, topK: kept + 1 });
        expect(chiSquare(counts, wider, n).stat).toBeGreaterThan(chi999(df));
      }
    });
  }

  it('top-p alone over a large vocabulary: the nucleus is cut by the whole row’s probabilities', () => {
    // Three tokens far above 4093 small ones: the 2048 best hold about half the mass. At p = 0.05
    // the nucleus is tokens 7 and 900 by the whole row's softmax (by the 2048 best's, 7 alone).
    const l = Float32Array.from({ length: 4096 }, (_, i) => -i * 1e-4);
    l[7] = 5;
    l[900] = 4.5;
    l[3000] = 4;
    const want = reference(l, { topP: 0.05 });
    expect([...want.keys()].filter((i) => want[i] > 0)).toEqual([7, 900]);
    const counts = new Map<number, number>();
    for (const t of draws(l, { topP: 0.05 }, 600, 2)) counts.set(t, (counts.get(t) ?? 0) + 1);
    expect([...counts.keys()].sort((a, b) => a - b)).toEqual([7, 900]);
    expect(counts.get(900)! / 600).toBeGreaterThan(want[900] - 0.08);
    expect(counts.get(900)! / 600).toBeLessThan(want[900] + 0.08);
    // At p = 0.7 the 2048 best fall short: the whole row is sorted, and the nucleus is the three
    // and the first 2500-odd small ones.
    const wide = reference(l, { topP: 0.7 });
    const kept = wide.filter((x) => x > 0).length;
    expect(kept).toBeGreaterThan(2048);
    for (const t of draws(l, { topP: 0.7 }, 300, 3)) expect(wide[t], `token ${t}`).toBeGreaterThan(0);
  });

  it('the kept set at 128,256 tokens is the full sort’s', () => {
    const big = Float32Array.from({ length: 128256 }, () => normal(r) * 2);
    for (const s of [{ topK: 50 }, { topP: 0.05, temperature: 0.5 }, { topK: 500, topP: 0.3 }]) {
      const want = reference(big, s);
      for (const t of draws(big, s, 200, 3)) expect(want[t], `${JSON.stringify(s)}: token ${t}`).toBeGreaterThan(0);
    }
  });
});

describe('seeds and unusual logits', () => {
  const r = rng(5);
  const logits = Float32Array.from({ length: 5000 }, () => normal(r));

  it('one seed, one sequence; another seed, another', () => {
    for (const s of [{ temperature: 1 }, { topK: 40 }, { topP: 0.9 }, { topK: 100, topP: 0.9, temperature: 0.8 }]) {
      expect(draws(logits, s, 30, 4), JSON.stringify(s)).toEqual(draws(logits, s, 30, 4));
      expect(draws(logits, s, 30, 5)).not.toEqual(draws(logits, s, 30, 4));
    }
  });

  it('-Infinity is never drawn, +Infinity tokens share all the mass', () => {
    const masked = Float32Array.of(Number.NEGATIVE_INFINITY, 1, Number.NEGATIVE_INFINITY, 0, Number.NEGATIVE_INFINITY);
    for (const s of [{ temperature: 2 }, { topK: 4 }, { topP: 0.999 }]) for (const t of draws(masked, s, 100)) expect([1, 3]).toContain(t);
    const inf = Float32Array.of(3, Number.POSITIVE_INFINITY, 1e30, Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY);
    const counts = [0, 0, 0, 0, 0];
    for (const t of draws(inf, { temperature: 0.5 }, 600)) counts[t]++;
    expect(counts[0] + counts[2]).toBe(0);
    for (const i of [1, 3, 4]) expect(counts[i]).toBeGreaterThan(120);
  });

  it('NaN and all -Infinity are errors, as on the host', () => {
    const nan = Float32Array.of(0, 1, Number.NaN, 2);
    for (const s of [{}, { topK: 2 }, { topP: 0.5 }])
      expect(() => draws(nan, s, 1)).toThrow(
        new OrtMlxError('generate: a logit is NaN (of 4): sampling needs a probability for every token'),
      );
    const none = new Float32Array(3).fill(Number.NEGATIVE_INFINITY);
    expect(() => draws(none, { topK: 2 }, 1)).toThrow('generate: every one of the 3 logits is -Infinity: no token can be sampled');
  });
});

const llama = tinyLlama({ maxPositions: 256, seed: 21 });
const gpt2: DecoderConfig = { kind: 'gpt2', layers: 2, hidden: 64, heads: 4, ffn: 128, vocab: 256, maxPositions: 256, seed: 3 };
const prompt = [3, 17, 42, 99, 7, 128, 5, 77];
type Session = import('onnxruntime-node').InferenceSession;
type Opts = Partial<Parameters<typeof generate>[1]>;
const onDevice = { ...mlxCpu, preferredOutputLocation: 'gpu-buffer' };

async function run(s: Session, opts: Opts): Promise<number[]> {
  const out: number[] = [];
  for await (const t of generate(s, { inputIds: prompt, maxNewTokens: 16, Tensor: ort.Tensor as never, ...opts })) out.push(t);
  return out;
}

describe('generate() with the device sampler', () => {
  for (const cfg of [llama, gpt2]) {
    it(`${cfg.kind}: greedy tokens equal the host path's and onnxruntime-node's; a step downloads the token id alone`, async () => {
      const bytes = buildDecoder(cfg);
      const reference = await ort.InferenceSession.create(bytes);
      const s = await ort.InferenceSession.create(bytes, onDevice as never);
      try {
        const want = await run(reference, {});
        const before = transferStats();
        expect(await run(s, { sampler: 'host' })).toEqual(want);
        const middle = transferStats();
        expect(await run(s, { sampler: 'device' })).toEqual(want);
        const after = transferStats();
        // The runs download the same but for the token choice: 16 rows of 256 float32 on the host
        // path, 16 token ids of 4 bytes on the device path.
        const host = middle.downloadedBytes - before.downloadedBytes;
        const device = after.downloadedBytes - middle.downloadedBytes;
        expect(host - device).toBeGreaterThanOrEqual(16 * (256 * 4 - 16));
        expect(device / 16).toBeLessThanOrEqual(16);
        // 'auto' (the default) chooses greedy tokens on the device.
        expect(await run(s, {})).toEqual(want);
        expect(transferStats().downloadedBytes - after.downloadedBytes).toBe(device);
      } finally {
        await reference.release();
        await s.release();
      }
    });
  }

  it('promptLookup: its verifications choose on the device too, downloading the rows’ ids alone', async () => {
    const bytes = buildDecoder(llama);
    const reference = await ort.InferenceSession.create(bytes);
    const s = await ort.InferenceSession.create(bytes, onDevice as never);
    // A prompt that repeats itself, so that lookup finds drafts to verify.
    const repeat = [...prompt, ...prompt, ...prompt];
    const go = async (session: Session, opts: Opts) => {
      const out: number[] = [];
      let rows = 0;
      for await (const t of generate(session, {
        inputIds: repeat,
        maxNewTokens: 24,
        kvCapacity: 96,
        Tensor: ort.Tensor as never,
        promptLookup: { ngram: 2, maxDraft: 4 },
        onStep: (_, fed) => void (rows += fed),
        ...opts,
      }))
        out.push(t);
      return { out, rows };
    };
    try {
      const want = await run(reference, { inputIds: repeat, maxNewTokens: 24 });
      for (const sampler of ['auto', 'device'] as const) {
        const before = transferStats();
        const { out, rows } = await go(s, { sampler });
        const downloaded = transferStats().downloadedBytes - before.downloadedBytes;
        expect(out, sampler).toEqual(want);
        // Runs of several rows happened (drafts were verified), and no row of 256 logits came back.
        expect(rows, sampler).toBeGreaterThan(repeat.length + 24);
        expect(downloaded, sampler).toBeLessThan(256 * 4);
      }
      expect((await go(s, { sampler: 'host' })).out).toEqual(want);
    } finally {
      await reference.release();
      await s.release();
    }
  });

  it('sampling: one seed, one sequence; auto is the host path on a CPU', async () => {
    const s = await ort.InferenceSession.create(buildDecoder(llama), onDevice as never);
    try {
      const sampling = { temperature: 0.9, topK: 40, topP: 0.95, seed: 11 };
      const a = await run(s, { sampling, sampler: 'device' });
      expect(await run(s, { sampling, sampler: 'device' })).toEqual(a);
      expect(await run(s, { sampling: { ...sampling, seed: 12 }, sampler: 'device' })).not.toEqual(a);
      const before = transferStats().downloadedBytes;
      await run(s, { sampling, sampler: 'device' });
      const device = transferStats().downloadedBytes - before;
      expect(device / 16).toBeLessThanOrEqual(16);
      // Sampling under 'auto' on MLX's CPU goes to the host (its sampler is the faster there): the
      // rows come down, and the tokens are the host sampler's.
      expect(mx.defaultStream().device.type).toBe('cpu');
      const host = transferStats().downloadedBytes;
      const auto = await run(s, { sampling });
      expect(transferStats().downloadedBytes - host - device).toBeGreaterThanOrEqual(16 * (256 * 4 - 16));
      expect(await run(s, { sampling, sampler: 'host' })).toEqual(auto);
    } finally {
      await s.release();
    }
  });

  it('bad values and host-only features are errors naming them', async () => {
    const s = await ort.InferenceSession.create(buildDecoder(llama), onDevice as never);
    const host = await ort.InferenceSession.create(buildDecoder(llama));
    try {
      await expect(run(s, { sampler: 'gpu' as never })).rejects.toThrow("generate: sampler must be 'auto', 'host' or 'device', got 'gpu'");
      await expect(run(s, { sampler: 1 as never })).rejects.toThrow("generate: sampler must be 'auto', 'host' or 'device', got 1");
      for (const [opts, name] of [
        [{ repetitionPenalty: 1.2 }, 'repetitionPenalty'],
        [{ presencePenalty: 0.5 }, 'presencePenalty'],
        [{ frequencyPenalty: 0.5 }, 'frequencyPenalty'],
        [{ logitsProcessor: () => undefined }, 'logitsProcessor'],
        [{ minNewTokens: 3, stopTokens: [5] }, 'minNewTokens'],
      ] as [Opts, string][])
        await expect(run(s, { ...opts, sampler: 'device' })).rejects.toThrow(
          new RegExp(`^generate: sampler 'device' chooses tokens on the device, but ${name}`),
        );
      await expect(run(host, { sampler: 'device' })).rejects.toThrow(
        "generate: sampler 'device' needs the logits on the device (an mlx session); this session returned them on the host",
      );
      // The same options without 'device' run (on the host).
      expect(await run(s, { repetitionPenalty: 1.2 })).toHaveLength(16);
    } finally {
      await s.release();
      await host.release();
    }
  });
});
