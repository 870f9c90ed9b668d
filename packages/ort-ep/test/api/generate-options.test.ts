// generate()'s breadth: penalties, minNewTokens, stopSequences, a logits processor, and sampling
// that never sorts the vocabulary (the same distribution as a full sort), on a real decoder through both
// engines.
import { describe, expect, it } from 'vitest';
import { generate } from '../../src/index.js';
import { applyPenalties, lookupDraft, pickToken, samplingDistribution } from '../../src/internal.js';
import { buildDecoder, type DecoderConfig, tinyLlama } from '../helpers/decoder.js';
import { mlxCpu, ort } from '../helpers/ort.js';

const llama = tinyLlama({ maxPositions: 256, seed: 21 });
const prompt = [3, 17, 42, 99, 7, 128, 5, 77];
type Opts = Partial<Parameters<typeof generate>[1]>;

async function run(session: import('onnxruntime-node').InferenceSession, opts: Opts): Promise<number[]> {
  const out: number[] = [];
  for await (const t of generate(session, { inputIds: prompt, maxNewTokens: 24, Tensor: ort.Tensor as never, ...opts })) out.push(t);
  return out;
}

/**
 * The earlier sampler's rule, a full sort of the vocabulary: the reference for top-k and top-p, as
 * the probability of each token (the sampler draws from the same distribution, though not in
 * sorted order, so one random number need not give the same token).
 */
function fullSort(logits: ArrayLike<number>, s: { temperature?: number; topK?: number; topP?: number }): Float64Array {
  const t = s.temperature ?? 1;
  const ids = Array.from({ length: logits.length }, (_, i) => i).sort((a, b) => logits[b] - logits[a] || a - b);
  const k = s.topK && s.topK > 0 ? Math.min(s.topK, ids.length) : ids.length;
  const top = ids.slice(0, k);
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
  const p = new Float64Array(logits.length);
  for (let j = 0; j < keep; j++) p[top[j]] = w[j] / total;
  return p;
}

/** A seeded generator (xorshift32) of floats in [0, 1). */
function lcg(seed: number): () => number {
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

describe('sampling without sorting the vocabulary', () => {
  it('top-k and top-p choose what a full sort chooses, ties to the lower id', () => {
    const rand = lcg(7);
    for (let trial = 0; trial < 300; trial++) {
      const V = 50 + Math.floor(rand() * 2000);
      const peaked = trial % 3 === 0;
      // Repeated values make ties; a peaked distribution makes a small nucleus.
      const logits = Float32Array.from({ length: V }, () => Math.round((peaked ? 20 : 4) * rand() * 8) / 8);
      const s = [{ topK: 1 + Math.floor(rand() * 60) }, { topP: 0.05 + 0.9 * rand() }, { topK: 40, topP: 0.8, temperature: 0.7 }][
        trial % 3
      ];
      const seed = Math.floor(rand() * 1e6);
      const want = fullSort(logits, s);
      const got = samplingDistribution(logits, s);
      const what = JSON.stringify({ trial, s });
      got.forEach((p, i) => expect(p, what).toBeCloseTo(want[i], 12));
      expect(want[pickToken(logits, s, lcg(seed))], what).toBeGreaterThan(0);
    }
  });

  it('temperature alone draws over the vocabulary with the softmax probabilities', () => {
    const logits = Float32Array.of(0, 1, 2, Math.log(0.5));
    const n = [0, 0, 0, 0];
    const r = lcg(3);
    for (let i = 0; i < 40000; i++) n[pickToken(logits, { temperature: 1 }, r)]++;
    const e = [1, Math.E, Math.E ** 2, 0.5];
    const z = e.reduce((a, b) => a + b, 0);
    n.forEach((c, i) => expect(c / 40000).toBeCloseTo(e[i] / z, 2));
  });
});

describe('prompt lookup drafts', () => {
  it('take what followed the last earlier occurrence of the final n-gram, falling back to shorter ones', () => {
    expect(lookupDraft([1, 2, 3, 9, 1, 2], 2, 3)).toEqual([3, 9, 1]);
    expect(lookupDraft([1, 2, 3, 9, 4, 2], 2, 3)).toEqual([3, 9, 4]); // [4, 2] never came before; [2] did
    expect(lookupDraft([5, 7, 5, 8, 5], 1, 4)).toEqual([8, 5]); // the last occurrence wins
    expect(lookupDraft([1, 2, 3], 3, 4)).toEqual([]);
    expect(lookupDraft([4, 4, 4, 4], 2, 2)).toEqual([4]);
  });
});

describe('penalties', () => {
  it('repetition divides positive logits and multiplies negative ones; presence and frequency subtract', () => {
    const l = Float32Array.of(2, -2, 4, 1, 0.5);
    applyPenalties(l, [0, 1, 1, 3], [3, 3], { repetitionPenalty: 2, presencePenalty: 0.25, frequencyPenalty: 0.5 });
    // token 0: 2/2; token 1: -2*2; token 2: untouched; token 3: 1/2 - 0.25 - 2*0.5; token 4: untouched.
    expect(Array.from(l)).toEqual([1, -4, 4, 0.5 - 0.25 - 1, 0.5]);
  });
});

describe('generate() options on a real decoder, onnxruntime-node and mlx alike', () => {
  const bytes = buildDecoder(llama);
  const engines: [string, object][] = [
    ['onnxruntime-node', {}],
    ['mlx', mlxCpu],
  ];

  for (const [name, options] of engines) {
    it(`${name}: penalties equal a logits processor that applies them by hand`, async () => {
      const s = await ort.InferenceSession.create(bytes, options as never);
      try {
        const greedy = await run(s, {});
        // The model repeats itself greedily; the penalty must change that.
        expect(new Set(greedy).size).toBeLessThan(greedy.length);
        const penalized = await run(s, { repetitionPenalty: 1.8, presencePenalty: 0.3, frequencyPenalty: 0.2 });
        expect(penalized).not.toEqual(greedy);
        const byHand = await run(s, {
          logitsProcessor: (l, seq) => {
            const gen = seq.slice(prompt.length);
            for (const t of new Set(seq)) l[t] = l[t] > 0 ? l[t] / 1.8 : l[t] * 1.8;
            const counts = new Map<number, number>();
            for (const t of gen) counts.set(t, (counts.get(t) ?? 0) + 1);
            for (const [t, c] of counts) l[t] -= 0.3 + 0.2 * c;
          },
        });
        expect(penalized).toEqual(byHand);
      } finally {
        await s.release();
      }
    });

    it(`${name}: minNewTokens, stopSequences and a processor that bans a token`, async () => {
      const s = await ort.InferenceSession.create(bytes, options as never);
      try {
        const greedy = await run(s, {});
        // A stop token that greedy decoding would pick first is not chosen before minNewTokens.
        const first = greedy[0];
        expect(await run(s, { stopTokens: [first] })).toEqual([first]);
        const held = await run(s, { stopTokens: [first], minNewTokens: 3 });
        expect(held.length).toBeGreaterThanOrEqual(3);
        expect(held.slice(0, 3)).not.toContain(first);
        // A stop sequence: the tokens up to its end, no more.
        const seq = greedy.slice(4, 6);
        const at = greedy.findIndex((_, i) => i >= 1 && greedy[i - 1] === seq[0] && greedy[i] === seq[1]);
        expect(await run(s, { stopSequences: [[9999], seq] })).toEqual(greedy.slice(0, at + 1));
        // Banning the greedy first token changes the first step only by that ban.
        const banned = await run(s, { maxNewTokens: 1, logitsProcessor: (l) => void (l[first] = Number.NEGATIVE_INFINITY) });
        expect(banned[0]).not.toBe(first);
        const other = new Float32Array(llama.vocab);
        other[5] = 1;
        expect(await run(s, { maxNewTokens: 2, logitsProcessor: () => other })).toEqual([5, 5]);
      } finally {
        await s.release();
      }
    });
  }

  for (const [name, options] of engines) {
    it(`${name}: prompt lookup keeps greedy decoding's tokens in fewer runs`, async () => {
      const s = await ort.InferenceSession.create(bytes, options as never);
      try {
        const n = 48;
        let plainRuns = 0;
        const plain = await run(s, { maxNewTokens: n, kvCapacity: 96, onStep: () => void plainRuns++ });
        let runs = 0;
        const fed: number[] = [];
        const looked = await run(s, {
          maxNewTokens: n,
          kvCapacity: 96,
          promptLookup: { ngram: 2, maxDraft: 4 },
          onStep: (_, len) => {
            runs++;
            fed.push(len);
          },
        });
        expect(looked).toEqual(plain);
        expect(plainRuns).toBe(n);
        // The text repeats itself: drafts were fed (runs of more than one token) and kept.
        expect(fed.some((l) => l > 1 && l < prompt.length)).toBe(true);
        expect(runs).toBeLessThan(n);
        // Without kvCapacity: an mlx session has the shared buffer by default; others need it.
        const lookup = { maxNewTokens: n, promptLookup: { ngram: 2, maxDraft: 4 } };
        if (name === 'mlx') {
          let defaultRuns = 0;
          expect(await run(s, { ...lookup, onStep: () => void defaultRuns++ })).toEqual(plain);
          expect(defaultRuns).toBe(runs);
        } else
          await expect(run(s, lookup)).rejects.toThrow(
            'generate: promptLookup needs kvCapacity (the in-place cache, whose rejected positions the next step writes over)',
          );
      } finally {
        await s.release();
      }
    });
  }

  it('refuses bad options, naming them', async () => {
    const s = await ort.InferenceSession.create(bytes, mlxCpu);
    try {
      const bad: [Opts, RegExp][] = [
        [{ repetitionPenalty: 0 }, /repetitionPenalty must be a finite number > 0 \(1: none\), got 0/],
        [{ presencePenalty: Number.NaN }, /presencePenalty must be a finite number, got NaN/],
        [{ minNewTokens: -1 }, /minNewTokens must be an integer ≥ 0, got -1/],
        [{ stopSequences: [[]] }, /stopSequences\[0\] must be a non-empty array of token ids/],
        [{ stopSequences: [[1, -2]] }, /stopSequences\[0\]\[1\] = -2 is not a token id/],
        [{ logitsProcessor: 3 as never }, /logitsProcessor must be a function, got 3/],
        [
          { maxNewTokens: 1, logitsProcessor: () => new Float32Array(3) },
          /logitsProcessor returned something other than a Float32Array of 256 logits/,
        ],
      ];
      for (const [o, re] of bad) await expect(run(s, o)).rejects.toThrow(re);
    } finally {
      await s.release();
    }
  });
});
