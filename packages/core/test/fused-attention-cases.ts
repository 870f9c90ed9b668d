// The cases of the attention kernel (mlxc_fused_attention) against a float64 reference written here
// from its definition, shared by the widest build's test and the portable build's: grouped heads,
// causal masking at several offsets (negative ones leave rows with no key), additive and boolean
// masks broadcast along different axes and narrower than the keys, fully masked rows, lengths that
// are not multiples of the kernel's blocks, NaN in a query, strided and broadcast inputs, the
// composition of MLX's ops for float64, and the refused arguments.
import { describe, expect, it } from 'vitest';
import * as mx from '../src/index.js';
import { flat, inputs } from './numeric.js';

const cpu = { stream: 'cpu' } as const;
const size = (shape: number[]) => shape.reduce((a, b) => a * b, 1);
const values = (shape: number[], seed: number) => inputs(size(shape), -1, 1, seed);

interface Case {
  what: string;
  B: number;
  Hq: number;
  Hk: number;
  Lq: number;
  Lk: number;
  D: number;
  Dv: number;
  scale?: number;
  causal?: boolean;
  offset?: number;
  /** [mb, mh, ml, W] and its kind; values from `maskValues` (default: random, some masked). */
  mask?: { shape: number[]; kind: 'bool' | 'add'; values?: (i: number) => number | boolean };
  nanQuery?: { b: number; h: number; i: number };
  /** Rows that see no key are NaN rather than zeros. */
  emptyNan?: boolean;
}

interface Data {
  q: number[];
  k: number[];
  v: number[];
  mask: (number | boolean)[] | null;
}

function data(c: Case): Data {
  const q = values([c.B, c.Hq, c.Lq, c.D], 1);
  if (c.nanQuery) q[((c.nanQuery.b * c.Hq + c.nanQuery.h) * c.Lq + c.nanQuery.i) * c.D + 2] = Number.NaN;
  let mask: (number | boolean)[] | null = null;
  if (c.mask) {
    const r = inputs(size(c.mask.shape), 0, 1, 7);
    const kind = c.mask.kind;
    mask = r.map((x, i) => (c.mask?.values ? c.mask.values(i) : kind === 'bool' ? x > 0.3 : x < 0.2 ? -Infinity : Math.fround(x * 4 - 2)));
  }
  return { q, k: values([c.B, c.Hk, c.Lk, c.D], 2), v: values([c.B, c.Hk, c.Lk, c.Dv], 3), mask };
}

/**
 * softmax(scale · q·kᵀ + masks)·v in float64; rows with no visible key are zeros. The scaled query
 * is rounded as the kernel's dtype rounds it (float32, or float64 with the ABI's float32 scale).
 */
function reference(c: Case, d: Data, f32 = true): number[] {
  const none = c.emptyNan ? Number.NaN : 0;
  const { B, Hq, Hk, Lq, Lk, D, Dv } = c;
  const G = Hq / Hk;
  const scale = f32 ? (c.scale ?? 1 / Math.sqrt(D)) : Math.fround(c.scale ?? 1 / Math.sqrt(D));
  const round = f32 ? Math.fround : (x: number) => x;
  const out = new Array<number>(B * Hq * Lq * Dv).fill(0);
  for (let b = 0; b < B; b++)
    for (let h = 0; h < Hq; h++) {
      const kh = Math.floor(h / G);
      for (let i = 0; i < Lq; i++) {
        const s: number[] = [];
        const seen: number[] = [];
        for (let j = 0; j < Lk; j++) {
          if (c.causal && j > i + (c.offset ?? 0)) continue;
          let add = 0;
          if (c.mask && d.mask) {
            const [mb, mh, ml, W] = c.mask.shape;
            if (j >= W) continue;
            const m = d.mask[(((mb === 1 ? 0 : b) * mh + (mh === 1 ? 0 : h)) * ml + (ml === 1 ? 0 : i)) * W + j];
            if (m === false) continue;
            if (typeof m === 'number') add = m;
          }
          let dot = 0;
          for (let x = 0; x < D; x++) dot += round(d.q[((b * Hq + h) * Lq + i) * D + x] * scale) * d.k[((b * Hk + kh) * Lk + j) * D + x];
          s.push(dot + add);
          seen.push(j);
        }
        const top = s.some(Number.isNaN) ? Number.NaN : Math.max(-Infinity, ...s);
        if (top === -Infinity) {
          for (let y = 0; y < Dv; y++) out[((b * Hq + h) * Lq + i) * Dv + y] = none;
          continue;
        }
        const e = s.map((x) => Math.exp(x - top));
        const total = e.reduce((a, x) => a + x, 0);
        for (let y = 0; y < Dv; y++) {
          let acc = 0;
          for (let t = 0; t < seen.length; t++) acc += (e[t] / total) * d.v[((b * Hk + kh) * Lk + seen[t]) * Dv + y];
          out[((b * Hq + h) * Lq + i) * Dv + y] = acc;
        }
      }
    }
  return out;
}

function expectClose(got: number[], want: number[], what: string, tol = 2e-5): void {
  expect(got.length, what).toBe(want.length);
  for (let i = 0; i < want.length; i++) {
    if (Number.isNaN(want[i])) expect(got[i], `${what}[${i}]`).toBeNaN();
    else expect(Math.abs(got[i] - want[i]), `${what}[${i}]: got ${got[i]}, expected ${want[i]}`).toBeLessThanOrEqual(tol);
  }
}

function run(
  c: Case,
  d: Data,
  dtype: 'float32' | 'float64' = 'float32',
  opts: { stridedQ?: boolean; stridedK?: boolean; stridedV?: boolean; broadcastMask?: boolean } = {},
): number[] {
  return mx.scope(() => {
    const typed = (x: number[], shape: number[]) => mx.astype(mx.array(new Float64Array(x), { shape }), dtype, cpu);
    let q = typed(d.q, [c.B, c.Hq, c.Lq, c.D]);
    if (opts.stridedQ) {
      // The heads of a [B, L, H, D] projection: a transposed view, read through its strides.
      const blhd = mx.transpose(q, [0, 2, 1, 3], cpu);
      mx.evaluate(blhd);
      q = mx.transpose(blhd, [0, 2, 1, 3], cpu);
    }
    let k = typed(d.k, [c.B, c.Hk, c.Lk, c.D]);
    if (opts.stridedK) {
      // K as a Kᵀ [B, Hk, D, Lk] laid out in rows, swapped back: its head axis is not contiguous.
      const kt = mx.contiguous(mx.swapaxes(k, -1, -2, cpu), false, cpu);
      mx.evaluate(kt);
      k = mx.swapaxes(kt, -1, -2, cpu);
    }
    let v = typed(d.v, [c.B, c.Hk, c.Lk, c.Dv]);
    if (opts.stridedV) {
      // The heads of a [B, L, H, Dv] projection, as q's: its rows Hk * Dv floats apart (a block of
      // many rows copies them side by side first).
      const blhd = mx.transpose(v, [0, 2, 1, 3], cpu);
      mx.evaluate(blhd);
      v = mx.transpose(blhd, [0, 2, 1, 3], cpu);
    }
    let mask: mx.Array | null = null;
    if (c.mask && d.mask) {
      const m =
        c.mask.kind === 'bool'
          ? mx.array(
              Uint8Array.from(d.mask, (x) => (x ? 1 : 0)),
              { shape: c.mask.shape, dtype: 'bool' },
            )
          : typed(d.mask as number[], c.mask.shape);
      mask = opts.broadcastMask ? mx.broadcastTo(m, [c.B, c.Hq, c.Lq, c.mask.shape[3]], cpu) : m;
    }
    const y = mx.ext.fusedAttention(
      q,
      k,
      v,
      mask,
      c.scale ?? 1 / Math.sqrt(c.D),
      c.causal ?? false,
      c.offset ?? 0,
      c.emptyNan ?? false,
      cpu,
    );
    expect(y.shape).toEqual([c.B, c.Hq, c.Lq, c.Dv]);
    return flat(mx.astype(y, 'float64', cpu));
  });
}

const cases: Case[] = [
  { what: 'grouped heads, no mask', B: 2, Hq: 4, Hk: 2, Lq: 7, Lk: 11, D: 8, Dv: 5 },
  { what: 'causal, one head per key head, several blocks', B: 1, Hq: 3, Hk: 3, Lq: 37, Lk: 37, D: 16, Dv: 16, causal: true },
  { what: 'causal after a past of 4 keys', B: 1, Hq: 6, Hk: 2, Lq: 9, Lk: 13, D: 12, Dv: 7, causal: true, offset: 4 },
  { what: 'causal at a negative offset (empty first rows)', B: 2, Hq: 2, Hk: 1, Lq: 10, Lk: 10, D: 8, Dv: 8, causal: true, offset: -3 },
  {
    what: 'additive padding mask [B, 1, 1, Lk], one sequence fully masked',
    B: 2,
    Hq: 4,
    Hk: 4,
    Lq: 19,
    Lk: 19,
    D: 8,
    Dv: 8,
    mask: { shape: [2, 1, 1, 19], kind: 'add', values: (i) => (i >= 19 ? -Infinity : i % 5 === 4 ? -Infinity : 0.25 * (i % 3)) },
  },
  {
    what: 'additive mask [1, Hq, Lq, W < Lk], random -inf',
    B: 2,
    Hq: 4,
    Hk: 2,
    Lq: 13,
    Lk: 21,
    D: 8,
    Dv: 6,
    mask: { shape: [1, 4, 13, 17], kind: 'add' },
  },
  {
    what: 'boolean mask [B, 1, Lq, Lk], rows with no key',
    B: 2,
    Hq: 4,
    Hk: 1,
    Lq: 11,
    Lk: 11,
    D: 4,
    Dv: 4,
    mask: { shape: [2, 1, 11, 11], kind: 'bool' },
  },
  {
    what: 'boolean mask [1, 1, 1, W] and causal',
    B: 1,
    Hq: 2,
    Hk: 2,
    Lq: 12,
    Lk: 12,
    D: 8,
    Dv: 8,
    causal: true,
    mask: { shape: [1, 1, 1, 10], kind: 'bool' },
  },
  {
    what: 'emptyNan: rows that see no key are NaN (a negative causal offset, a fully masked sequence)',
    B: 2,
    Hq: 2,
    Hk: 1,
    Lq: 10,
    Lk: 10,
    D: 8,
    Dv: 8,
    causal: true,
    offset: -3,
    emptyNan: true,
    mask: { shape: [2, 1, 1, 10], kind: 'add', values: (i) => (i >= 10 ? -Infinity : 0.1 * (i % 4)) },
  },
  { what: 'NaN in one query row', B: 1, Hq: 4, Hk: 2, Lq: 9, Lk: 9, D: 8, Dv: 8, nanQuery: { b: 0, h: 1, i: 3 } },
  {
    // 128 queries of a head in one task (K gathered once), keys past a multiple of 4, a padding mask.
    what: 'an encoder layer: one head per key head, 130 queries, an additive padding mask [B, 1, 1, Lk]',
    B: 1,
    Hq: 12,
    Hk: 12,
    Lq: 130,
    Lk: 130,
    D: 16,
    Dv: 16,
    mask: { shape: [1, 1, 1, 130], kind: 'add', values: (i) => (i >= 121 ? -1e9 : 0.1 * (i % 7)) },
  },
  { what: 'long, grouped and causal (many tasks)', B: 1, Hq: 8, Hk: 2, Lq: 130, Lk: 130, D: 64, Dv: 64, causal: true, scale: 0.1 },
  {
    what: 'a long context (a Kᵀ block past the kept buffers)',
    B: 1,
    Hq: 2,
    Hk: 1,
    Lq: 4,
    Lk: 17000,
    D: 64,
    Dv: 4,
    causal: true,
    offset: 16990,
  },
  {
    what: 'a short query (K read in place), causal after a past, boolean mask',
    B: 2,
    Hq: 2,
    Hk: 2,
    Lq: 3,
    Lk: 40,
    D: 20,
    Dv: 9,
    causal: true,
    offset: 37,
    mask: { shape: [2, 1, 1, 40], kind: 'bool' },
  },
  { what: 'head size not a multiple of the vectors', B: 1, Hq: 2, Hk: 1, Lq: 5, Lk: 70, D: 13, Dv: 3 },
  // Up to 4 rows (a query of a group's heads) take the few-rows product: keys 8 at a time, a head
  // size and a key count that leave tails.
  { what: 'one query of three heads, head size 13, 21 keys', B: 1, Hq: 3, Hk: 1, Lq: 1, Lk: 21, D: 13, Dv: 5 },
  { what: 'one query of four heads, head size 40, 67 keys', B: 2, Hq: 8, Hk: 2, Lq: 1, Lk: 67, D: 40, Dv: 16 },
  // Causal masks given as data, as exports compute them: the keys past a block's rows are skipped.
  {
    what: 'a causal mask as data (additive, float32 min as torch exports write it), several blocks',
    B: 1,
    Hq: 4,
    Hk: 2,
    Lq: 70,
    Lk: 70,
    D: 16,
    Dv: 8,
    mask: { shape: [1, 1, 70, 70], kind: 'add', values: (i) => (i % 70 <= Math.floor(i / 70) ? 0.1 * (i % 3) : -3.4028234663852886e38) },
  },
  {
    what: 'a causal boolean mask as data, with a row that sees no key (its block keeps every key)',
    B: 2,
    Hq: 2,
    Hk: 2,
    Lq: 40,
    Lk: 40,
    D: 8,
    Dv: 8,
    mask: { shape: [2, 1, 40, 40], kind: 'bool', values: (i) => i % 40 <= Math.floor(i / 40) % 40 && Math.floor(i / 40) !== 45 },
  },
  {
    what: 'a mask per head, finite and hidden values mixed (some rows see only masked-by-finite keys)',
    B: 1,
    Hq: 3,
    Hk: 1,
    Lq: 33,
    Lk: 33,
    D: 8,
    Dv: 4,
    mask: {
      shape: [1, 3, 33, 33],
      kind: 'add',
      values: (i) => {
        const [h, r, j] = [Math.floor(i / (33 * 33)), Math.floor(i / 33) % 33, i % 33];
        if (j <= r - h) return 0;
        return h === 2 && r < 2 ? -100 : -Infinity;
      },
    },
  },
];

export function fusedAttentionSuite(build: string): void {
  describe(`ext.fusedAttention (${build} build)`, () => {
    for (const c of cases)
      it(c.what, () => {
        const d = data(c);
        expectClose(run(c, d), reference(c, d), c.what);
      });

    it('reads strided query, key and value views and a broadcast mask', () => {
      const c = cases[5];
      const d = data(c);
      expectClose(run(c, d, 'float32', { stridedQ: true, stridedK: true, broadcastMask: true }), reference(c, d), 'strided');
      const g = cases[10];
      const dg = data(g);
      expectClose(run(g, dg, 'float32', { stridedK: true }), reference(g, dg), 'strided K, causal');
      // V strided under blocks of many rows (copied) and of few (read in place), K's head size not
      // a multiple of 4 (the transposed gather's tail).
      const few: Case = { what: 'one query of two heads', B: 1, Hq: 2, Hk: 1, Lq: 1, Lk: 20, D: 8, Dv: 8 };
      for (const w of [cases.find((x) => x.what.startsWith('an encoder layer'))!, cases.find((x) => x.D % 4 !== 0 && x.Lk >= 8)!, few]) {
        const dw = data(w);
        expectClose(run(w, dw, 'float32', { stridedQ: true, stridedV: true }), reference(w, dw), `strided V: ${w.what}`);
      }
    });

    it('float64 takes the composition of MLX ops, with the same semantics', () => {
      for (const c of [cases[3], cases[6], cases[8], cases[9]]) {
        const d = data(c);
        expectClose(run(c, d, 'float64'), reference(c, d, false), c.what, 1e-6); // MLX's float64 softmax on the CPU is float32-accurate
      }
    });

    it('gives zeros without keys or queries', () => {
      const z = mx.ext.fusedAttention(
        mx.zeros([1, 2, 3, 4]),
        mx.zeros([1, 1, 0, 4]),
        mx.zeros([1, 1, 0, 5]),
        null,
        0.5,
        false,
        0,
        false,
        cpu,
      );
      expect(z.shape).toEqual([1, 2, 3, 5]);
      expect(flat(z).every((x) => x === 0)).toBe(true);
      const nan = mx.ext.fusedAttention(
        mx.zeros([1, 2, 3, 4]),
        mx.zeros([1, 1, 0, 4]),
        mx.zeros([1, 1, 0, 5]),
        null,
        0.5,
        false,
        0,
        true,
        cpu,
      );
      expect(flat(nan).every(Number.isNaN)).toBe(true);
      expect(
        mx.ext.fusedAttention(mx.zeros([1, 2, 0, 4]), mx.zeros([1, 1, 3, 4]), mx.zeros([1, 1, 3, 5]), null, 0.5, true, 0, false, cpu).shape,
      ).toEqual([1, 2, 0, 5]);
    });

    it('takes causal offsets at the ends of int32 on both paths: every key, or none', () => {
      const c = cases[0];
      const d = data(c);
      const all = reference(c, d);
      for (const dtype of ['float32', 'float64'] as const) {
        expectClose(run({ ...c, causal: true, offset: 2147483647 }, d, dtype), all, `${dtype} offset 2^31 - 1`, 1e-5);
        expect(
          run({ ...c, causal: true, offset: -2147483648 }, d, dtype).every((x) => x === 0),
          `${dtype} offset -2^31`,
        ).toBe(true);
      }
    });

    it('refuses shapes and dtypes it cannot take, with the reason', () => {
      const q = mx.zeros([1, 3, 4, 8]);
      const k = mx.zeros([1, 2, 5, 8]);
      const attend = (o: { q?: mx.Array; k?: mx.Array; v?: mx.Array; mask?: mx.Array | null; scale?: number }) =>
        mx.ext.fusedAttention(o.q ?? mx.zeros([1, 4, 4, 8]), o.k ?? k, o.v ?? k, o.mask ?? null, o.scale ?? 1, false, 0, false, cpu);
      expect(() => attend({ q })).toThrow(/3 query heads do not split over 2 key\/value heads/);
      expect(() => attend({ q: mx.zeros([4, 4, 8]) })).toThrow(/must be 4-D/);
      expect(() => attend({ v: mx.zeros([1, 2, 4, 8]) })).toThrow(/v must have k's heads and length/);
      expect(() => attend({ k: mx.zeros([1, 2, 5, 7]), v: mx.zeros([1, 2, 5, 7]) })).toThrow(/same head size/);
      expect(() => attend({ mask: mx.zeros([4, 5]) })).toThrow(/the mask must be \[B \| 1, Hq \| 1, Lq \| 1, W\]/);
      expect(() => attend({ mask: mx.zeros([1, 1, 1, 6]) })).toThrow(/the mask must be/);
      expect(() => attend({ mask: mx.zeros([1, 1, 1, 5], 'int32') })).toThrow(/boolean \(true: attend\) or floating-point/);
      expect(() =>
        attend({ q: mx.zeros([1, 4, 4, 8], 'int32'), k: mx.zeros([1, 2, 5, 8], 'int32'), v: mx.zeros([1, 2, 5, 8], 'int32') }),
      ).toThrow(/floating-point/);
      expect(() => attend({ scale: Number.NaN })).toThrow(/scale must be finite/);
    });
  });
}
