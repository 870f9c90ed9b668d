// The grouped-query attention decode step (mlxc_gqa_step) against a float64 reference written here
// from its definition: the new rows rotated (interleaved pairs or halves, a partial rotary dimension)
// and written at each sequence's length, the rest of the caches untouched, and each query's softmax
// over the keys it sees (lengths per sequence, causal or not, a window, total_sequence_length
// below a length), with positions given or derived; and the refused arguments.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';
import { flat, inputs } from '../test/numeric.js';

const cpu = { stream: 'cpu' } as const;
const rand = (shape: number[], seed: number) =>
  mx.array(
    new Float32Array(
      inputs(
        shape.reduce((a, b) => a * b, 1),
        -1,
        1,
        seed,
      ),
    ),
    { shape },
  );

interface Case {
  B: number;
  N: number;
  G: number;
  S: number;
  H: number;
  C: number;
  lens: number[];
  rotary?: { R: number; P: number; interleaved: boolean };
  positions?: number[];
  causal?: boolean;
  window?: number;
  total?: number;
  /** A first prompt: the new rows from 0 in every sequence, which may be shorter than S (right padding). */
  fromZero?: boolean;
  /** q, k and v flat ([B, S, heads * H]) as slices of one packed projection, y flat too. */
  flat?: boolean;
  /** The packed projection itself as q, k and v null (flat). */
  packed?: boolean;
}

function reference(c: Case, q: number[], k: number[], v: number[], pk: number[], pv: number[], cos: number[], sin: number[]) {
  const { B, N, G, S, H, C, lens } = c;
  const total = c.total ?? C;
  const per = N / G;
  const half = c.rotary ? c.rotary.R / 2 : 0;
  const rot = (x: number[], p: number): number[] => {
    if (!c.rotary) return x;
    const out = x.slice();
    const row = Math.min(Math.max(p, 0), c.rotary.P - 1);
    for (let i = 0; i < half; i++) {
      const [a, b] = c.rotary.interleaved ? [2 * i, 2 * i + 1] : [i, i + half];
      const co = cos[row * half + i];
      const si = sin[row * half + i];
      out[a] = x[a] * co - x[b] * si;
      out[b] = x[b] * co + x[a] * si;
    }
    return out;
  };
  const at = (a: number[], idx: number) => a.slice(idx * H, idx * H + H);
  const presentK = pk.slice();
  const presentV = pv.slice();
  const y = new Array(B * N * S * H).fill(0);
  for (let b = 0; b < B; b++) {
    const start = c.fromZero ? 0 : lens[b] - S;
    const rpos = (i: number) => (c.positions ? c.positions[b * S + i] : start + i);
    for (let g = 0; g < G; g++)
      for (let i = 0; i < S; i++) {
        const kr = rot(at(k, (b * G + g) * S + i), rpos(i));
        const vr = at(v, (b * G + g) * S + i);
        for (let h = 0; h < H; h++) {
          presentK[((b * G + g) * C + start + i) * H + h] = kr[h];
          presentV[((b * G + g) * C + start + i) * H + h] = vr[h];
        }
      }
    for (let n = 0; n < N; n++) {
      const g = Math.floor(n / per);
      for (let i = 0; i < S; i++) {
        const qr = rot(at(q, (b * N + n) * S + i), rpos(i));
        const p = start + i;
        const keys: number[] = [];
        for (let j = 0; j < Math.min(lens[b], total); j++) {
          if ((c.causal ?? true) && j > p) continue;
          if (c.window && c.window > 0 && j <= p - c.window) continue;
          keys.push(j);
        }
        const s = keys.map((j) => {
          let d = 0;
          for (let h = 0; h < H; h++) d += qr[h] * presentK[((b * G + g) * C + j) * H + h];
          return d / Math.sqrt(H);
        });
        const m = Math.max(...s);
        const e = s.map((x) => Math.exp(x - m));
        const z = e.reduce((a, x) => a + x, 0);
        keys.forEach((j, t) => {
          for (let h = 0; h < H; h++) y[((b * N + n) * S + i) * H + h] += (e[t] / z) * presentV[((b * G + g) * C + j) * H + h];
        });
      }
    }
  }
  return { y, presentK, presentV };
}

function check(c: Case, seed: number): void {
  const { B, N, G, S, H, C } = c;
  const q = rand([B, N, S, H], seed);
  const k = rand([B, G, S, H], seed + 1);
  const v = rand([B, G, S, H], seed + 2);
  const pk = rand([B, G, C, H], seed + 3);
  const pv = rand([B, G, C, H], seed + 4);
  const half = c.rotary ? c.rotary.R / 2 : 1;
  const P = c.rotary?.P ?? 1;
  const cosv = Array.from({ length: P * half }, (_, i) => Math.cos(i * 0.37));
  const sinv = Array.from({ length: P * half }, (_, i) => Math.sin(i * 0.37));
  const cos = c.rotary ? mx.array(new Float32Array(cosv), { shape: [P, half] }) : null;
  const sin = c.rotary ? mx.array(new Float32Array(sinv), { shape: [P, half] }) : null;
  const len = mx.array(Int32Array.from(c.lens), { shape: [B] });
  const positions = c.positions ? mx.array(Int32Array.from(c.positions), { shape: [B, S] }) : null;
  // Flat: q, k and v as the slices of one packed [B, S, (N + 2G) * H] projection (strided views),
  // made from the same values; y comes back [B, S, N * H] and is compared in the heads' order.
  const packed =
    c.flat || c.packed
      ? mx.concatenate(
          [q, k, v].map((a, i) => mx.reshape(mx.transpose(a, [0, 2, 1, 3]), [B, S, (i === 0 ? N : G) * H])),
          2,
        )
      : undefined;
  const [qf, kf, vf] = c.packed ? [packed!, null, null] : packed ? mx.splitSections(packed, [N * H, (N + G) * H], 2) : [q, k, v];
  const [out, presentK, presentV] = mx.ext.gqaStep(
    qf,
    kf,
    vf,
    pk,
    pv,
    len,
    positions,
    cos,
    sin,
    c.rotary?.interleaved ?? false,
    c.causal ?? true,
    c.window ?? -1,
    c.total ?? C,
    1 / Math.sqrt(H),
    c.fromZero ?? false,
    cpu,
  );
  expect(out.shape).toEqual(c.flat || c.packed ? [B, S, N * H] : [B, N, S, H]);
  const y = c.flat || c.packed ? mx.transpose(mx.reshape(out, [B, S, N, H]), [0, 2, 1, 3]) : out;
  const ref = reference(c, flat(q), flat(k), flat(v), flat(pk), flat(pv), cosv.map(Math.fround), sinv.map(Math.fround));
  const close = (got: mx.Array, want: number[], what: string) => {
    const g = flat(got);
    expect(g.length, what).toBe(want.length);
    for (let i = 0; i < want.length; i++) expect(Math.abs(g[i] - want[i]), `${what}[${i}]`).toBeLessThan(2e-5);
  };
  close(presentK, ref.presentK, 'present_k');
  close(presentV, ref.presentV, 'present_v');
  close(y, ref.y, 'y');
}

describe('gqa_step', () => {
  it('one token, no rotary, one sequence', () => check({ B: 1, N: 4, G: 2, S: 1, H: 8, C: 12, lens: [7] }, 1));
  it('rotary by halves, partial rotary dimension, two sequences of their own lengths', () =>
    check({ B: 2, N: 6, G: 2, S: 1, H: 16, C: 20, lens: [3, 18], rotary: { R: 8, P: 32, interleaved: false } }, 2));
  it('interleaved rotary, three new tokens a sequence, causal among them', () =>
    check({ B: 2, N: 4, G: 1, S: 3, H: 8, C: 10, lens: [5, 10], rotary: { R: 8, P: 16, interleaved: true } }, 3));
  it('given positions (left padding) for the rotary, the mask at the lengths', () =>
    check({ B: 2, N: 2, G: 2, S: 2, H: 8, C: 9, lens: [4, 9], rotary: { R: 8, P: 12, interleaved: false }, positions: [1, 2, 7, 8] }, 4));
  it('a window, not causal, total_sequence_length below a length', () => {
    check({ B: 1, N: 4, G: 2, S: 2, H: 8, C: 16, lens: [14], window: 5 }, 5);
    check({ B: 1, N: 2, G: 1, S: 1, H: 8, C: 16, lens: [14], causal: false, total: 9 }, 6);
  });
  it('flat q, k and v (slices of a packed projection, read in place), one token and several', () => {
    check({ B: 2, N: 6, G: 2, S: 1, H: 16, C: 20, lens: [3, 18], rotary: { R: 8, P: 32, interleaved: false }, flat: true }, 11);
    check({ B: 2, N: 4, G: 1, S: 3, H: 8, C: 10, lens: [5, 10], rotary: { R: 8, P: 16, interleaved: true }, flat: true }, 12);
    check({ B: 1, N: 4, G: 2, S: 2, H: 8, C: 16, lens: [14], window: 5, flat: true }, 13);
  });
  it("one packed QKV (k and v null), read at each part's columns", () => {
    check({ B: 2, N: 6, G: 2, S: 1, H: 16, C: 20, lens: [3, 18], rotary: { R: 8, P: 32, interleaved: false }, packed: true }, 17);
    check({ B: 1, N: 4, G: 1, S: 3, H: 8, C: 10, lens: [10], rotary: { R: 8, P: 16, interleaved: true }, packed: true }, 18);
    check({ B: 2, N: 4, G: 2, S: 4, H: 8, C: 9, lens: [2, 4], total: 4, fromZero: true, packed: true }, 19);
  });
  it("enough work for the thread pool (at least 64K multiply-adds a product): each task's heads, several sequences", () => {
    check({ B: 2, N: 8, G: 2, S: 3, H: 32, C: 140, lens: [100, 137], rotary: { R: 32, P: 140, interleaved: false } }, 21);
    check({ B: 2, N: 8, G: 4, S: 1, H: 64, C: 160, lens: [90, 157], packed: true, window: 60 }, 22);
  });
  it('a first prompt from zero: right-padded sequences shorter than the step, rows and queries past them', () => {
    check({ B: 2, N: 4, G: 2, S: 4, H: 8, C: 9, lens: [2, 4], total: 4, rotary: { R: 8, P: 16, interleaved: false }, fromZero: true }, 14);
    check({ B: 3, N: 2, G: 1, S: 3, H: 8, C: 3, lens: [1, 3, 2], total: 3, fromZero: true, flat: true }, 15);
    check({ B: 1, N: 4, G: 2, S: 5, H: 8, C: 12, lens: [5], total: 5, window: 2, fromZero: true, flat: true }, 16);
  });
  it('positions past the tables are clamped to their last row, lengths into [S, C]', () => {
    check({ B: 1, N: 2, G: 1, S: 1, H: 8, C: 6, lens: [6], rotary: { R: 4, P: 3, interleaved: false } }, 7);
  });
  it('refuses what it does not take', () => {
    const q = rand([1, 4, 1, 8], 8);
    const k = rand([1, 2, 1, 8], 9);
    const p = rand([1, 2, 6, 8], 10);
    const len = mx.array(Int32Array.from([3]), { shape: [1] });
    const step = (o: Partial<Record<'q' | 'k' | 'p' | 'len', mx.Array>>) =>
      mx.ext.gqaStep(o.q ?? q, o.k ?? k, o.k ?? k, o.p ?? p, o.p ?? p, o.len ?? len, null, null, null, false, true, -1, 6, 0.3, false, cpu);
    expect(() => step({ q: rand([1, 3, 1, 8], 11) })).toThrow(/3 query heads do not split over 2 key\/value heads/);
    expect(() => step({ p: rand([1, 2, 6, 4], 12) })).toThrow(/the pasts must be \[B, Nkv, C, H\]/);
    expect(() => step({ len: mx.array(Float32Array.from([3]), { shape: [1] }) })).toThrow(/len must be int32 \[B\]/);
    expect(() => step({ q: mx.astype(q, 'float16') })).toThrow(/float32 only/);
    // Flat: all three flat, q's width a multiple of the pasts' head size, k and v of the pasts' heads.
    expect(() => step({ q: rand([1, 1, 32], 13) })).toThrow(/all 3-D/);
    expect(() => step({ q: rand([1, 1, 30], 14), k: rand([1, 1, 16], 15) })).toThrow(/not a multiple of the head size 8/);
    expect(() => step({ q: rand([1, 1, 32], 16), k: rand([1, 1, 8], 17) })).toThrow(/k and v must be \[B, S, Nkv \* H\]/);
    // Packed: k and v both null, q 3-D and wider than the keys' and values' columns.
    const packedStep = (qq: mx.Array, kk: mx.Array | null, vv: mx.Array | null) =>
      mx.ext.gqaStep(qq, kk, vv, p, p, len, null, null, null, false, true, -1, 6, 0.3, false, cpu);
    expect(() => packedStep(rand([1, 1, 64], 18), null, k)).toThrow(/k and v come together/);
    expect(() => packedStep(q, null, null)).toThrow(/a packed QKV \(k and v null\) must be 3-D/);
    expect(() => packedStep(rand([1, 1, 32], 19), null, null)).toThrow(/must hold \(N \+ 2 \* 2\) heads of 8, N at least 1/);
  });
});
