// generateSpeculative(): a draft decoder proposes tokens, the target verifies them in one run and
// rolls its in-place cache back over the rejected ones. Greedy output equals plain greedy decoding
// (onnxruntime-node and mlx alike, k of 1, 3 and 5, stop tokens, maxNewTokens and kvCapacity at
// their bounds); sampling is seeded and draws the target's distribution.
import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { generate, generateSpeculative, InvalidFeedError, transferStats } from '../../src/index.js';
import { drawFrom, pickToken, samplingDistribution, speculativeAccept } from '../../src/internal.js';
import { buildDecoder, type DecoderConfig, quantizeColumns } from '../helpers/decoder.js';
import { mlxCpu, ort } from '../helpers/ort.js';

type OrtSession = import('onnxruntime-node').InferenceSession;
type Opts = Partial<Parameters<typeof generateSpeculative>[1]>;

// A target whose layers past the first add little, and the draft made by truncating it to that
// first layer (the same embeddings, norms and lm_head): they agree on most tokens.
const target: DecoderConfig = {
  kind: 'llama',
  layers: 4,
  hidden: 64,
  heads: 4,
  kvHeads: 2,
  ffn: 128,
  vocab: 256,
  maxPositions: 256,
  seed: 21,
  quietFrom: 1,
  quietScale: 0.05,
};
const truncated: DecoderConfig = { ...target, keepLayers: 1 };
// A draft of its own weights: it agrees less often, so rollbacks are frequent.
const unrelated: DecoderConfig = { ...target, layers: 1, quietFrom: undefined, seed: 5 };
const prompt = [3, 17, 42, 99, 7, 128, 5, 77];

async function collect(it: AsyncGenerator<number, void, void>): Promise<number[]> {
  const out: number[] = [];
  for await (const t of it) out.push(t);
  return out;
}

const plain = (s: OrtSession, opts: Partial<Parameters<typeof generate>[1]>) =>
  collect(generate(s as never, { inputIds: prompt, maxNewTokens: 32, kvCapacity: 64, Tensor: ort.Tensor as never, ...opts }));

function speculative(s: OrtSession, d: OrtSession, tokens: number, opts: Opts = {}, stats?: { proposed: number; accepted: number }) {
  return collect(
    generateSpeculative(s as never, {
      inputIds: prompt,
      maxNewTokens: 32,
      kvCapacity: 64,
      Tensor: ort.Tensor as never,
      ...opts,
      draft: {
        session: d as never,
        tokens,
        onVerify: (p, a) => {
          if (stats) {
            stats.proposed += p;
            stats.accepted += a;
          }
        },
        ...opts.draft,
      },
    }),
  );
}

const engines: [string, object][] = [
  ['onnxruntime-node', {}],
  ['mlx', mlxCpu],
  // Device outputs: the caches never leave the device (the first run's present is bound from then on).
  ['mlx, gpu-buffer outputs', { ...mlxCpu, preferredOutputLocation: 'gpu-buffer' }],
];

describe('speculative decoding, greedy', () => {
  const bytes = buildDecoder(target);
  for (const [name, options] of engines) {
    it(`${name}: equals plain greedy decoding for k = 1, 3, 5, at the bounds`, async () => {
      const s = await ort.InferenceSession.create(bytes, options as never);
      const drafts = await Promise.all([truncated, unrelated].map((c) => ort.InferenceSession.create(buildDecoder(c), options as never)));
      try {
        const ref = await plain(s, {});
        expect(ref.length).toBe(32);
        for (const [di, d] of drafts.entries())
          for (const k of [1, 3, 5]) {
            const why = `draft ${di}, k = ${k}`;
            const stats = { proposed: 0, accepted: 0 };
            let runs = 0;
            expect(await speculative(s, d, k, { onStep: () => void runs++ }, stats), why).toEqual(ref);
            expect(stats.proposed, why).toBeGreaterThan(0);
            if (di === 0) expect(runs, why).toBeLessThan(32);
            // maxNewTokens at and around a verification's length.
            for (const n of [1, 2, k, k + 1, k + 2])
              expect(await speculative(s, d, k, { maxNewTokens: n }), `${why}, maxNewTokens ${n}`).toEqual(ref.slice(0, n));
            // A stop token: yielded, then the stream ends (even inside a run of accepted tokens).
            const stop = ref[9];
            expect(await speculative(s, d, k, { stopTokens: [stop] }), why).toEqual(ref.slice(0, ref.indexOf(stop) + 1));
            // A stop sequence.
            const seq = ref.slice(5, 7);
            const at = ref.findIndex((_, i) => i >= 1 && ref[i - 1] === seq[0] && ref[i] === seq[1]);
            expect(await speculative(s, d, k, { stopSequences: [seq] }), why).toEqual(ref.slice(0, at + 1));
            // The target's capacity exactly prompt + new tokens; the draft's smaller, so it stops proposing.
            expect(await speculative(s, d, k, { kvCapacity: prompt.length + 32 }), why).toEqual(ref);
            expect(await speculative(s, d, k, { draft: { kvCapacity: prompt.length + 6 } as never }), why).toEqual(ref);
          }
      } finally {
        await s.release();
        for (const d of drafts) await d.release();
      }
    });
  }

  it('mlx, gpu-buffer outputs: the device caches are freed at the end and on a break', async () => {
    const options = { ...mlxCpu, preferredOutputLocation: 'gpu-buffer' };
    const s = await ort.InferenceSession.create(bytes, options as never);
    const d = await ort.InferenceSession.create(buildDecoder(truncated), options as never);
    try {
      // Two warm-up runs: the first ones keep a little (compiled programs for new shapes), once.
      await speculative(s, d, 3);
      await speculative(s, d, 3);
      mx.memory.clearCache();
      const before = mx.memory.active();
      await speculative(s, d, 3);
      for await (const _ of generateSpeculative(s as never, {
        inputIds: prompt,
        maxNewTokens: 32,
        kvCapacity: 64,
        Tensor: ort.Tensor as never,
        draft: { session: d as never, tokens: 3 },
      }))
        break;
      mx.memory.clearCache();
      expect(mx.memory.active()).toBe(before);
    } finally {
      await s.release();
      await d.release();
    }
  });

  it('mlx, gpu-buffer outputs: greedy tokens are chosen on the device, only their ids come back', async () => {
    const options = { ...mlxCpu, preferredOutputLocation: 'gpu-buffer' };
    const s = await ort.InferenceSession.create(bytes, options as never);
    const d = await ort.InferenceSession.create(buildDecoder(truncated), options as never);
    try {
      const ref = await plain(s, {});
      let runs = 0;
      const before = transferStats();
      const got = await speculative(s, d, 3, { onStep: () => void runs++ });
      const after = transferStats();
      expect(got).toEqual(ref);
      // Each draft run and each verification downloads its ids (4 bytes a row): less in all than
      // one row of logits (256 floats) where every run brought its rows to the host before.
      const downloaded = after.downloadedBytes - before.downloadedBytes;
      expect(runs).toBeGreaterThan(3);
      expect(downloaded).toBeGreaterThan(0);
      expect(downloaded).toBeLessThan(target.vocab * 4);
    } finally {
      await s.release();
      await d.release();
    }
  });

  it('a draft made by truncating the target is accepted most of the time', async () => {
    const s = await ort.InferenceSession.create(bytes);
    const d = await ort.InferenceSession.create(buildDecoder(truncated));
    try {
      const stats = { proposed: 0, accepted: 0 };
      let runs = 0;
      const out = await speculative(s, d, 4, { maxNewTokens: 48, kvCapacity: 96, onStep: () => void runs++ }, stats);
      expect(out).toEqual(await plain(s, { maxNewTokens: 48, kvCapacity: 96 }));
      expect(stats.accepted / stats.proposed).toBeGreaterThanOrEqual(0.7);
      expect(runs).toBeLessThan(48 / 2);
    } finally {
      await s.release();
      await d.release();
    }
  });
});

describe('speculative decoding with a quantized head', () => {
  // The truncated draft with its lm_head as MatMulNBits quantized from the target's own weights:
  // a quarter (8 bits) or an eighth (4 bits) of the head's bytes a token (the head is most of a
  // small draft's reads).
  it('quantizeColumns: each weight within half a step of its block, at 4 bits (two a byte) and 8', () => {
    const K = 64;
    const N = 3;
    const w = Float32Array.from({ length: K * N }, (_, i) => Math.sin(i * 1.7) * (1 + (i % 5)));
    for (const bits of [4, 8] as const) {
      const { q, scales } = quantizeColumns(w, K, N, bits);
      expect(q.length).toBe((N * K * bits) / 8);
      for (let n = 0; n < N; n++)
        for (let k = 0; k < K; k++) {
          const b = Math.floor(k / 32);
          const at = (n * 2 + b) * 4 * bits;
          const v = bits === 8 ? q[at + (k % 32)] : (q[at + ((k % 32) >> 1)] >> (k % 2 ? 4 : 0)) & 15;
          const scale = scales[n * 2 + b];
          expect(Math.abs((v - 2 ** (bits - 1)) * scale - w[k * N + n]), `${bits} bits, n ${n} k ${k}`).toBeLessThanOrEqual(
            scale / 2 + 1e-6,
          );
        }
    }
  });

  // Acceptance measured at this size (a 64-wide head, two blocks a column): 8 bits as the float32
  // head's (~0.8), 4 bits 0.62.
  for (const [bits, least] of [
    [8, 0.7],
    [4, 0.55],
  ] as const)
    for (const [name, options] of engines.slice(0, 2))
      it(`${name}, ${bits}-bit head: equals plain greedy decoding, accepted at least ${least * 100}% of the time`, async () => {
        const s = await ort.InferenceSession.create(buildDecoder(target), options as never);
        const d = await ort.InferenceSession.create(buildDecoder({ ...truncated, headBits: bits }), options as never);
        try {
          const stats = { proposed: 0, accepted: 0 };
          const out = await speculative(s, d, 4, { maxNewTokens: 48, kvCapacity: 96 }, stats);
          expect(out).toEqual(await plain(s, { maxNewTokens: 48, kvCapacity: 96 }));
          expect(stats.accepted / stats.proposed).toBeGreaterThanOrEqual(least);
        } finally {
          await s.release();
          await d.release();
        }
      });
});

/** A seeded generator (xorshift32) of floats in [0, 1). */
function xorshift(seed: number): () => number {
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

/** Pearson's chi-square of counts against probabilities, bins of expected count < 5 pooled. */
function chiSquare(counts: number[], p: ArrayLike<number>, n: number): { stat: number; df: number } {
  let stat = 0;
  let df = -1;
  let poolO = 0;
  let poolE = 0;
  counts.forEach((o, i) => {
    const e = p[i] * n;
    if (e < 5) {
      poolO += o;
      poolE += e;
      return;
    }
    stat += (o - e) ** 2 / e;
    df++;
  });
  if (poolE > 0) {
    stat += (poolO - poolE) ** 2 / poolE;
    df++;
  }
  return { stat, df };
}
// Chi-square's 0.999 quantiles by degrees of freedom.
const CHI_999 = [0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59];

describe('speculative decoding, sampling', () => {
  it('the acceptance rule draws the target distribution whatever the draft proposes', () => {
    const p = [0.5, 0.3, 0.15, 0.05, 0];
    const q = [0.1, 0.1, 0.2, 0.3, 0.3];
    const rand = xorshift(11);
    const counts = [0, 0, 0, 0, 0];
    const n = 60000;
    for (let i = 0; i < n; i++) {
      const x = drawFrom(q, rand);
      counts[speculativeAccept([x], [q], [p, p], rand)[0]]++;
    }
    expect(counts[4]).toBe(0);
    const { stat, df } = chiSquare(counts, p, n);
    expect(stat).toBeLessThan(CHI_999[df]);
  });

  it('the distribution is pickToken’s: temperature, top-k and top-p', () => {
    const logits = Float32Array.of(1, 3, 2, 2, -1, 0.5);
    const d = samplingDistribution(logits, { temperature: 0.8, topK: 4, topP: 0.9 });
    const n = 40000;
    const counts = [0, 0, 0, 0, 0, 0];
    const rand = xorshift(5);
    for (let i = 0; i < n; i++) counts[pickToken(logits, { temperature: 0.8, topK: 4, topP: 0.9 }, rand)]++;
    expect(d[4]).toBe(0);
    expect(d.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 12);
    const { stat, df } = chiSquare(counts, d, n);
    expect(stat).toBeLessThan(CHI_999[df]);
  });

  const tinyTarget: DecoderConfig = {
    kind: 'llama',
    layers: 2,
    hidden: 32,
    heads: 2,
    kvHeads: 1,
    ffn: 64,
    vocab: 8,
    maxPositions: 64,
    seed: 3,
  };
  const tinyDraft: DecoderConfig = { ...tinyTarget, layers: 1, seed: 9 };
  const settings = { temperature: 3 };

  it('onnxruntime-node: the first token over many seeds follows the target distribution', async () => {
    const s = await ort.InferenceSession.create(buildDecoder(tinyTarget));
    const d = await ort.InferenceSession.create(buildDecoder(tinyDraft));
    try {
      let logits: Float32Array | undefined;
      await collect(
        generate(s as never, {
          inputIds: prompt.map((t) => t % 8),
          maxNewTokens: 1,
          Tensor: ort.Tensor as never,
          logitsProcessor: (l) => void (logits = Float32Array.from(l)),
        }),
      );
      const p = samplingDistribution(logits!, settings);
      const n = 1500;
      const counts = new Array(8).fill(0);
      const kept = new Set<number>();
      for (let seed = 0; seed < n; seed++) {
        for await (const t of generateSpeculative(s as never, {
          inputIds: prompt.map((t) => t % 8),
          maxNewTokens: 4,
          kvCapacity: 16,
          sampling: { ...settings, seed },
          Tensor: ort.Tensor as never,
          draft: { session: d as never, tokens: 3, onVerify: (_, a) => void kept.add(Math.min(a, 1)) },
        })) {
          counts[t]++;
          break;
        }
      }
      // Both branches of the rule ran: rejections at the first token and acceptances.
      expect([...kept].sort()).toEqual([0, 1]);
      const { stat, df } = chiSquare(counts, p, n);
      expect(stat, JSON.stringify({ counts, p: Array.from(p, (x) => x * n) })).toBeLessThan(CHI_999[df]);
    } finally {
      await s.release();
      await d.release();
    }
  });

  for (const [name, options] of engines)
    it(`${name}: one seed, one sequence`, async () => {
      const s = await ort.InferenceSession.create(buildDecoder(target), options as never);
      const d = await ort.InferenceSession.create(buildDecoder(truncated), options as never);
      try {
        const sampling = { temperature: 1.5, topK: 50, seed: 7 };
        const a = await speculative(s, d, 3, { sampling });
        expect(a.length).toBe(32);
        expect(await speculative(s, d, 3, { sampling })).toEqual(a);
        expect(await speculative(s, d, 3, { sampling: { ...sampling, seed: 8 } })).not.toEqual(a);
      } finally {
        await s.release();
        await d.release();
      }
    });
});

describe('speculative decoding, bad options', () => {
  it('are refused, naming them', async () => {
    const s = await ort.InferenceSession.create(buildDecoder(target), mlxCpu);
    const d = await ort.InferenceSession.create(buildDecoder(truncated), mlxCpu);
    const other = await ort.InferenceSession.create(buildDecoder({ ...truncated, vocab: 128 }), mlxCpu);
    try {
      await expect(speculative(s, other, 3)).rejects.toThrow(InvalidFeedError);
      await expect(speculative(s, other, 3)).rejects.toThrow(
        /^generateSpeculative: the draft model's vocabulary \(128 logits\) differs from the target's \(256\)/,
      );
      // A draft whose logits shape is not declared: found at its first run.
      const undeclared = {
        inputNames: other.inputNames,
        outputNames: other.outputNames,
        inputMetadata: other.inputMetadata,
        run: other.run.bind(other),
      };
      await expect(speculative(s, undeclared as never, 3, { inputIds: [3, 17, 42] })).rejects.toThrow(
        /^generateSpeculative: the draft model's vocabulary \(128 logits\) differs from the target's \(256\)/,
      );
      const bad: [Opts, ErrorConstructor, RegExp][] = [
        [{ draft: { tokens: 0 } as never }, RangeError, /draft\.tokens must be an integer ≥ 1, got 0/],
        [{ draft: { tokens: 1.5 } as never }, RangeError, /draft\.tokens must be an integer ≥ 1, got 1\.5/],
        [{ draft: { session: {} } as never }, TypeError, /draft\.session must be an InferenceSession/],
        [{ draft: { kvCapacity: 0 } as never }, RangeError, /draft\.kvCapacity must be a positive integer, got 0/],
        [{ draft: { k: 3 } as never }, TypeError, /draft has an unknown option 'k'/],
        [{ kvCapacity: undefined }, TypeError, /a draft model needs kvCapacity/],
        [{ repetitionPenalty: 1.2 }, TypeError, /a draft model does not take penalties/],
        [{ promptLookup: {} } as never, TypeError, /promptLookup and a draft model are two ways/],
        [{ kvCapacity: 20 }, RangeError, /8 prompt tokens \+ 32 new ones do not fit kvCapacity 20/],
        [{ sampling: 'greedy ' as never }, TypeError, /^generateSpeculative: sampling must be 'greedy' or an object/],
      ];
      for (const [o, E, re] of bad) {
        const e = await speculative(s, d, 3, o).catch((x: unknown) => x);
        expect(e, String(re)).toBeInstanceOf(E);
        expect((e as Error).message).toMatch(re);
      }
      await expect(
        collect(generate(s as never, { inputIds: prompt, maxNewTokens: 2, draft: { session: d, tokens: 3 } } as never)),
      ).rejects.toThrow(/^generate: a draft model decodes with generateSpeculative/);
    } finally {
      await s.release();
      await d.release();
      await other.release();
    }
  });
});
