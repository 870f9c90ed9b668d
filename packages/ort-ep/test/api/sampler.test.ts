// generate()'s sampler (src/sampler.ts, through pickToken and samplingDistribution): the kept set
// against a full sort of the vocabulary, the frequencies of its draws against the exact
// probabilities computed here in float64 (chi-square, with a check that a wrong temperature or a
// nucleus one token off fails it), seeded reproducibility, and the edge cases. No timings: those
// are bench/sampler.ts's.
import { describe, expect, it } from 'vitest';
import { OrtMlxError } from '../../src/errors.js';
import { seeded } from '../../src/generate.js';
import { pickToken, samplingDistribution } from '../../src/internal.js';
import { expNeg } from '../../src/sampler.js';
import { chi999, chiSquare } from '../helpers/chi-square.js';

type Settings = { temperature?: number; topK?: number; topP?: number };

/** The spec, by a full sort: softmax(logits / T) over the top-k, then the smallest prefix reaching p, renormalized. */
function reference(logits: ArrayLike<number>, s: Settings): Float64Array {
  const V = logits.length;
  const t = s.temperature ?? 1;
  const order = Array.from({ length: V }, (_, i) => i).sort((a, b) => {
    const d = logits[b] - logits[a];
    return d > 0 ? 1 : d < 0 ? -1 : a - b; // -Infinity - -Infinity is NaN: a tie
  });
  const top = s.topK && s.topK > 0 ? order.slice(0, Math.min(s.topK, V)) : order;
  const max = logits[top[0]];
  const w = top.map((i) => Math.exp((logits[i] - max) / t));
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

/** The kept set (tokens of positive probability), and the largest relative gap to the reference's probabilities. */
function compare(got: Float64Array, want: Float64Array): { kept: number[]; wantKept: number[]; gap: number } {
  const kept: number[] = [];
  const wantKept: number[] = [];
  let gap = 0;
  for (let i = 0; i < want.length; i++) {
    if (got[i] > 0) kept.push(i);
    if (want[i] > 0) wantKept.push(i);
    if (want[i] > 0) gap = Math.max(gap, Math.abs(got[i] - want[i]) / want[i]);
  }
  return { kept, wantKept, gap };
}

const normal = (r: () => number) => Math.sqrt(-2 * Math.log(1 - r())) * Math.cos(2 * Math.PI * r());

/** Logits of a kind: random (uniform), flat (N(0, 1)), peaked (a few far above), tied (a handful of values), masked (some -Infinity). */
function logitsOf(kind: string, V: number, r: () => number): Float32Array {
  switch (kind) {
    case 'random':
      return Float32Array.from({ length: V }, () => (r() - 0.5) * 20);
    case 'flat':
      return Float32Array.from({ length: V }, () => normal(r));
    case 'peaked': {
      const l = Float32Array.from({ length: V }, () => normal(r) * 2);
      for (let j = 0; j < 4; j++) l[Math.floor(r() * V)] = 16 - 3 * j;
      return l;
    }
    case 'tied':
      return Float32Array.from({ length: V }, () => Math.floor(r() * 6) / 2);
    case 'masked':
      return Float32Array.from({ length: V }, () => (r() < 0.3 ? Number.NEGATIVE_INFINITY : normal(r) * 3));
    default:
      throw new Error(kind);
  }
}

const MODES: Settings[] = [
  { temperature: 0.7 },
  { topK: 5 },
  { topK: 40, temperature: 1.3 },
  { topP: 0.9 },
  { topP: 0.3 }, // a nucleus of little mass: the sampler's direct path, not its rejection one
  { topK: 20, topP: 0.8, temperature: 0.8 },
];

describe('the kept set is the full sort’s', () => {
  it('random, flat, peaked, tied and masked logits, every mode', () => {
    const r = seeded(11);
    for (let trial = 0; trial < 400; trial++) {
      const kind = ['random', 'flat', 'peaked', 'tied', 'masked'][trial % 5];
      const V = 2 + Math.floor(r() * 3000);
      const logits = logitsOf(kind, V, r);
      const s: Settings = [
        { topK: 1 + Math.floor(r() * 80) },
        { topP: 0.02 + 0.97 * r() },
        { topK: 1 + Math.floor(r() * 500), topP: 0.02 + 0.97 * r(), temperature: 0.2 + 2 * r() },
        { temperature: 0.1 + 2 * r() },
        { topP: 0.02 + 0.97 * r(), temperature: 0.05 + r() },
      ][trial % 5 === 4 ? Math.floor(r() * 5) : Math.floor(trial / 5) % 5];
      const { kept, wantKept, gap } = compare(samplingDistribution(logits, s), reference(logits, s));
      const what = JSON.stringify({ trial, kind, V, s });
      expect(kept, what).toEqual(wantKept);
      expect(gap, what).toBeLessThan(1e-9);
    }
  });

  it('at 128,256 tokens, flat and peaked', () => {
    const r = seeded(5);
    for (const kind of ['flat', 'peaked']) {
      const logits = logitsOf(kind, 128256, r);
      for (const s of [{ topK: 50 }, { topP: 0.9 }, { topP: 0.5, temperature: 0.6 }, { topK: 2000, topP: 0.95 }, { temperature: 0.8 }]) {
        const { kept, wantKept, gap } = compare(samplingDistribution(logits, s), reference(logits, s));
        expect(kept.length, JSON.stringify({ kind, s })).toBe(wantKept.length);
        expect(kept).toEqual(wantKept);
        expect(gap).toBeLessThan(1e-9);
      }
    }
  });

  it('a tie at the cut goes to the lower ids', () => {
    // Six tokens at 1, the rest lower: top-3 keeps the first three of the six.
    const logits = Float32Array.from({ length: 5000 }, (_, i) => (i % 700 === 3 ? 1 : -((i * 7919) % 97) / 10 - 1));
    const ids = Array.from({ length: 5000 }, (_, i) => i).filter((i) => i % 700 === 3);
    const p = samplingDistribution(logits, { topK: 3 });
    expect([...p.keys()].filter((i) => p[i] > 0)).toEqual(ids.slice(0, 3));
    // All equal: top-p 0.5 keeps the first half in id order.
    const flat = new Float32Array(4096);
    const q = samplingDistribution(flat, { topP: 0.5 });
    expect([...q.keys()].filter((i) => q[i] > 0)).toEqual(Array.from({ length: 2048 }, (_, i) => i));
    expect(pickToken(flat, { topK: 1 }, seeded(1))).toBe(0);
  });

  it('plain number arrays are read as they are, not as float32', () => {
    // 1 and 1 + 1e-12 are one float32, two numbers: top-1 keeps the larger.
    expect(pickToken([1, 1 + 1e-12, 0], { topK: 1 }, seeded(1))).toBe(1);
    expect(pickToken([1, 1 + 1e-12, 0], { topP: 0.01 }, seeded(1))).toBe(1);
  });
});

describe('the draws follow the exact probabilities', () => {
  const draws = 60000;
  for (const kind of ['flat', 'peaked', 'tied']) {
    for (const s of MODES) {
      it(`${kind} logits, ${JSON.stringify(s)}`, () => {
        const r = seeded(kind.length * 31 + (s.topK ?? 0) + Math.round((s.topP ?? 0) * 100));
        // A small vocabulary so that each kept token is drawn often; a scale that gives a nucleus of several tokens.
        const V = 300;
        const logits = logitsOf(kind, V, r).map((x) => x * (kind === 'flat' ? 1.5 : 0.6));
        const want = reference(logits, s);
        const counts = new Float64Array(V);
        for (let i = 0; i < draws; i++) counts[pickToken(logits, s, r)]++;
        for (let i = 0; i < V; i++) if (want[i] === 0) expect(counts[i], `token ${i} is outside the kept set`).toBe(0);
        const { stat, df } = chiSquare(counts, want, draws);
        if (df === 0) return; // one token kept: every draw was it (above)
        expect(stat, `chi-square ${stat.toFixed(1)} on ${df}`).toBeLessThan(chi999(df));
        // The test has the power to see a wrong temperature or a nucleus one token off (over
        // tied logits a top-k set may be one value, which no temperature changes).
        if (kind === 'tied') return;
        const hotter = reference(logits, { ...s, temperature: (s.temperature ?? 1) * 1.15 });
        expect(chiSquare(counts, hotter, draws).stat).toBeGreaterThan(chi999(df));
        if (s.topP) {
          const kept = want.filter((x) => x > 0).length;
          const wider = reference(logits, { ...s, topP: 1, topK: Math.min(s.topK ?? V, kept + 1) });
          expect(chiSquare(counts, wider, draws).stat).toBeGreaterThan(chi999(df));
        }
      });
    }
  }

  it('temperature alone at 128,256 tokens: the top tokens’ frequencies', () => {
    const r = seeded(3);
    const logits = logitsOf('peaked', 128256, r);
    const s = { temperature: 1.5 };
    const want = reference(logits, s);
    const counts = new Float64Array(logits.length);
    const n = 20000;
    for (let i = 0; i < n; i++) counts[pickToken(logits, s, r)]++;
    const { stat, df } = chiSquare(counts, want, n);
    expect(stat).toBeLessThan(chi999(df));
  });
});

describe('seeds', () => {
  it('one seed, one sequence of tokens, in every mode', () => {
    const logits = logitsOf('flat', 128256, seeded(9));
    for (const s of [...MODES, { topK: 1000, topP: 0.95 }]) {
      const run = (seed: number) => {
        const r = seeded(seed);
        return Array.from({ length: 50 }, () => pickToken(logits, s, r));
      };
      expect(run(4), JSON.stringify(s)).toEqual(run(4));
      expect(run(5)).not.toEqual(run(4));
    }
  });
});

describe('edge cases', () => {
  const logits = Float32Array.of(0.5, 2, -1, 2, 0, 1.25, -3, 0.75);

  it('top-k ≥ V is temperature alone, top-p = 1 is no cut', () => {
    const all = samplingDistribution(logits, { temperature: 0.9 });
    expect(samplingDistribution(logits, { temperature: 0.9, topK: 8 })).toEqual(all);
    expect(samplingDistribution(logits, { temperature: 0.9, topK: 100 })).toEqual(all);
    expect(samplingDistribution(logits, { temperature: 0.9, topP: 1 })).toEqual(all);
    const { gap } = compare(all, reference(logits, { temperature: 0.9 }));
    expect(gap).toBeLessThan(1e-12);
    // Top-k = V - 1 drops exactly the worst token.
    expect([...samplingDistribution(logits, { topK: 7 })].map((x) => x > 0)).toEqual([true, true, true, true, true, true, false, true]);
  });

  it('one token holding all the mass is always drawn', () => {
    const l = Float32Array.from({ length: 1000 }, (_, i) => (i === 617 ? 0 : -1000));
    const r = seeded(2);
    for (const s of MODES) for (let i = 0; i < 50; i++) expect(pickToken(l, s, r)).toBe(617);
    // A mass rounding to 1 at p = 0.999...: the one token, not the tail.
    expect([...samplingDistribution(l, { topP: 1 - 1e-12 })].filter((x) => x > 0)).toEqual([1]);
  });

  it('-Infinity logits are never drawn, even when k or p would reach them', () => {
    const l = Float32Array.of(Number.NEGATIVE_INFINITY, 1, Number.NEGATIVE_INFINITY, 0, Number.NEGATIVE_INFINITY);
    const r = seeded(6);
    for (const s of [{ temperature: 2 }, { topK: 4 }, { topP: 0.999999 }, { topK: 4, topP: 0.9999 }])
      for (let i = 0; i < 200; i++) expect([1, 3]).toContain(pickToken(l, s, r));
    expect(Array.from(samplingDistribution(l, { topK: 4 }))).toEqual(
      [0, 1 / (1 + Math.exp(-1)), 0, Math.exp(-1) / (1 + Math.exp(-1)), 0].map((x) => expect.closeTo(x, 12)),
    );
  });

  it('+Infinity logits share all the mass', () => {
    const l = Float32Array.of(3, Number.POSITIVE_INFINITY, 1e30, Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY);
    expect(Array.from(samplingDistribution(l, {}))).toEqual([0, 1 / 3, 0, 1 / 3, 1 / 3]);
    expect(Array.from(samplingDistribution(l, { topK: 2 }))).toEqual([0, 0.5, 0, 0.5, 0]);
    expect(Array.from(samplingDistribution(l, { topP: 0.5 }))).toEqual([0, 0.5, 0, 0.5, 0]);
    const r = seeded(1);
    for (let i = 0; i < 100; i++) expect([1, 3, 4]).toContain(pickToken(l, { topP: 0.9 }, r));
  });

  it('NaN, all -Infinity and empty logits are errors naming the problem', () => {
    const nan = Float32Array.of(0, 1, Number.NaN, 2);
    for (const s of MODES) {
      expect(() => pickToken(nan, s, seeded(1))).toThrow(OrtMlxError);
      expect(() => pickToken(nan, s, seeded(1))).toThrow('generate: logits[2] is NaN (of 4): sampling needs a probability for every token');
    }
    const none = new Float32Array(3).fill(Number.NEGATIVE_INFINITY);
    for (const s of MODES)
      expect(() => pickToken(none, s, seeded(1))).toThrow('generate: every one of the 3 logits is -Infinity: no token can be sampled');
    expect(() => pickToken([], { topK: 2 }, seeded(1))).toThrow('generate: the logits are empty: no token to sample');
    // Greedy keeps its argmax, which never picks a NaN.
    expect(pickToken(nan, 'greedy')).toBe(3);
  });

  it('the exponential is Math.exp’s to a few ulps', () => {
    let worst = 0;
    for (let x = 0; x < 700; x += 0.0137) worst = Math.max(worst, Math.abs(expNeg(x) / Math.exp(-x) - 1));
    expect(worst).toBeLessThan(4e-15);
    expect(expNeg(0)).toBe(1);
    expect(expNeg(Number.POSITIVE_INFINITY)).toBe(0);
    expect(expNeg(746)).toBe(0);
  });
});
