// GroupQueryAttention with a float8e4m3fn KV cache (PER_TENSOR and PER_CHANNEL scales). The cache
// crosses the graph boundary as float32 through Casts (onnxruntime-common has no float8 tensors):
// past_f --Cast(float8e4m3fn)--> GQA --Cast(float)--> present_f, so the present caches are
// compared value for value. onnxruntime-node 1.30's CPU provider has no kernel for a float8 cache
// ("Could not find an implementation"), so the check is against a float64 reference written here
// from the spec (onnxruntime-node is still tried first, should a later version run it). The rows are
// e4m3fn(x / scale) rounded to nearest even, saturating at ±448, read back as code · scale).
import { describe, expect, it } from 'vitest';
import { model, node, v, type NodeSpec } from '../../../test/helpers/build.js';
import { f32, i32, randomF32 as rand, runOn, type Feeds, type OrtTensor } from '../../../test/helpers/ort.js';
import { cacheScales, clearRowsFrom } from '../../../test/helpers/kv-cache.js';
import { UnsupportedOperatorError } from '../../errors.js';
import { MlxSession } from '../../session.js';

const MS = 'com.microsoft';
const N = 4,
  Nkv = 2,
  H = 16;

interface C {
  quant: 'PER_TENSOR' | 'PER_CHANNEL';
  B: number;
  S: number;
  past: number;
  lens: number[];
  attrs?: NodeSpec['attrs'];
  /** Scale of the new K/V values (large ones saturate the cache at 448 · scale). */
  amp?: number;
}

function caseOf(c: C): [Uint8Array, Feeds] {
  const total = Math.max(...c.lens);
  const scales = (seed: number) => cacheScales(c.quant, Nkv, H, seed, 0.01);
  const past = (seed: number) => {
    const t = rand([c.B, Nkv, c.past, H], seed);
    clearRowsFrom(
      t.data as Float32Array,
      t.dims,
      c.lens.map((l) => l - c.S),
    );
    return t;
  };
  const amp = c.amp ?? 1;
  const scaled = (t: OrtTensor) =>
    f32(
      Array.from(t.data as Float32Array, (x) => x * amp),
      [...t.dims],
    );
  const feeds: Feeds = {
    q: rand([c.B, c.S, N * H], 11),
    k: scaled(rand([c.B, c.S, Nkv * H], 12)),
    val: scaled(rand([c.B, c.S, Nkv * H], 13)),
    pkf: past(14),
    pvf: past(15),
    sl: i32(c.lens.map((l) => l - 1)),
    tl: i32([total], []),
    ks: scales(16),
    vs: scales(17),
  };
  const bytes = model({
    opsets: { '': 21, [MS]: 1 },
    inputs: Object.entries(feeds).map(([name, t]) => v(name, t.type as 'float32' | 'int32', [...t.dims])),
    outputs: [v('y', 'float32'), v('present_kf', 'float32'), v('present_vf', 'float32')],
    nodes: [
      node('Cast', ['pkf'], ['pk'], { attrs: { to: 17 } }),
      node('Cast', ['pvf'], ['pv'], { attrs: { to: 17 } }),
      node(
        'GroupQueryAttention',
        ['q', 'k', 'val', 'pk', 'pv', 'sl', 'tl', '', '', '', '', '', 'ks', 'vs'],
        ['y', 'present_k', 'present_v'],
        {
          domain: MS,
          attrs: { num_heads: N, kv_num_heads: Nkv, k_quant_type: c.quant, v_quant_type: c.quant, kv_cache_bit_width: 8, ...c.attrs },
        },
      ),
      node('Cast', ['present_k'], ['present_kf'], { attrs: { to: 1 } }),
      node('Cast', ['present_v'], ['present_vf'], { attrs: { to: 1 } }),
    ],
  });
  return [bytes, feeds];
}

/** x rounded to e4m3fn (nearest even, saturating at ±448), in float64. */
function e4m3(x: number): number {
  if (Number.isNaN(x)) return x;
  const a = Math.min(Math.abs(x), 448);
  if (a === 0) return 0;
  const e = Math.max(Math.floor(Math.log2(a)), -6);
  const step = 2 ** (e - 3);
  const q = a / step;
  let r = Math.round(q);
  if (Math.abs(q - Math.trunc(q) - 0.5) < 1e-12) r = Math.trunc(q) % 2 === 0 ? Math.trunc(q) : Math.trunc(q) + 1;
  return Math.sign(x) * Math.min(r * step, 448);
}

/** The float64 reference: output and present caches (as values). */
function reference(c: C, feeds: Feeds): { y: Float64Array; pk: Float64Array; pv: Float64Array } {
  const total = Math.max(...c.lens);
  const L = Math.max(total, c.past);
  const get = (n: string) => feeds[n].data as Float32Array;
  const scaleAt = (s: Float32Array, n: number, h: number) => (c.quant === 'PER_TENSOR' ? s[0] : s[n * H + h]);
  const present = (pastF: Float32Array, newF: Float32Array, s: Float32Array) => {
    const out = new Float64Array(c.B * Nkv * L * H);
    for (let b = 0; b < c.B; b++)
      for (let n = 0; n < Nkv; n++)
        for (let r = 0; r < L; r++)
          for (let h = 0; h < H; h++) {
            const start = c.lens[b] - c.S;
            const sc = scaleAt(s, n, h);
            let val: number;
            if (r >= start && r < c.lens[b]) val = e4m3(newF[(b * c.S + (r - start)) * Nkv * H + n * H + h] / sc);
            else if (r < c.past) val = e4m3(pastF[((b * Nkv + n) * c.past + r) * H + h]);
            else val = 0;
            out[((b * Nkv + n) * L + r) * H + h] = val;
          }
    return out;
  };
  const ks = get('ks'),
    vs = get('vs');
  const pk = present(get('pkf'), get('k'), ks);
  const pv = present(get('pvf'), get('val'), vs);
  const q = get('q');
  const y = new Float64Array(c.B * c.S * N * H);
  const G = N / Nkv;
  const win = (c.attrs?.local_window_size as number | undefined) ?? -1;
  for (let b = 0; b < c.B; b++)
    for (let i = 0; i < c.S; i++) {
      const pos = c.lens[b] - c.S + i;
      for (let hd = 0; hd < N; hd++) {
        const n = Math.floor(hd / G);
        const scores: number[] = [];
        for (let t = 0; t <= pos; t++) {
          if (win > 0 && pos - t >= win) {
            scores.push(-Infinity);
            continue;
          }
          let acc = 0;
          for (let h = 0; h < H; h++)
            acc += q[(b * c.S + i) * N * H + hd * H + h] * pk[((b * Nkv + n) * L + t) * H + h] * scaleAt(ks, n, h);
          scores.push(acc / Math.sqrt(H));
        }
        const m = Math.max(...scores);
        const ex = scores.map((s) => Math.exp(s - m));
        const z = ex.reduce((a, b) => a + b, 0);
        for (let h = 0; h < H; h++) {
          let acc = 0;
          ex.forEach((w, t) => {
            acc += (w / z) * pv[((b * Nkv + n) * L + t) * H + h] * scaleAt(vs, n, h);
          });
          y[(b * c.S + i) * N * H + hd * H + h] = acc;
        }
      }
    }
  return { y, pk, pv };
}

async function check(c: C): Promise<void> {
  const [bytes, feeds] = caseOf(c);
  const s = MlxSession.createSync(bytes, { fallback: 'none' });
  let got: Record<string, Float32Array>;
  try {
    const out = s.runSync(
      Object.fromEntries(
        Object.entries(feeds).map(([k, t]) => [k, { dtype: t.type === 'int32' ? 6 : 1, dims: [...t.dims], data: t.data as Float32Array }]),
      ),
    ) as Record<string, { data: Float32Array }>;
    got = { y: out.y.data, present_kf: out.present_kf.data, present_vf: out.present_vf.data };
  } finally {
    s.release();
  }
  let want: Record<string, ArrayLike<number>>;
  try {
    const o = await runOn('cpu', bytes, feeds);
    want = { y: o.y.data as Float32Array, present_kf: o.present_kf.data as Float32Array, present_vf: o.present_vf.data as Float32Array };
  } catch (e) {
    // onnxruntime-node's CPU kernel has no float8 cache: the float64 reference stands in.
    expect(String(e)).toMatch(/Could not find an implementation for GroupQueryAttention/);
    const r = reference(c, feeds);
    want = { y: r.y, present_kf: r.pk, present_vf: r.pv };
  }
  for (const name of ['present_kf', 'present_vf']) expect(Array.from(got[name])).toEqual(Array.from(want[name], (x) => Math.fround(x)));
  expect(got.y.length).toBe(want.y.length);
  Array.from(got.y).forEach((x, i) => expect(Math.abs(x - want.y[i])).toBeLessThan(1e-4 + 1e-4 * Math.abs(want.y[i])));
}

describe('GroupQueryAttention with a float8e4m3fn KV cache', () => {
  for (const quant of ['PER_TENSOR', 'PER_CHANNEL'] as const) {
    it(`${quant}: decode step, one sequence`, () => check({ quant, B: 1, S: 1, past: 5, lens: [6] }));
    it(`${quant}: decode step, two sequences of different lengths`, () => check({ quant, B: 2, S: 1, past: 5, lens: [6, 4] }));
    it(`${quant}: first prompt, empty past`, () => check({ quant, B: 1, S: 4, past: 0, lens: [4] }));
  }
  it('new values beyond ±448 · scale saturate; a shared buffer with a local window', () =>
    check({ quant: 'PER_CHANNEL', B: 1, S: 1, past: 8, lens: [6], amp: 8, attrs: { local_window_size: 3 } }));
  it('a chunk of three new tokens after a past', () => check({ quant: 'PER_TENSOR', B: 1, S: 3, past: 4, lens: [7] }));
});

describe('GroupQueryAttention float8 cache: what is declined', () => {
  it('a float8 past with kv_cache_bit_width 4 is refused with the reason', () => {
    const [bytes] = caseOf({ quant: 'PER_TENSOR', B: 1, S: 1, past: 5, lens: [6], attrs: { kv_cache_bit_width: 4 } });
    // The past's type follows from the Cast before it, so the plan knows it: refused at create().
    expect(() => MlxSession.createSync(bytes, { fallback: 'none' })).toThrow(UnsupportedOperatorError);
    expect(() => MlxSession.createSync(bytes, { fallback: 'none' })).toThrow(
      /4-bit cache takes a uint8 \(two 4-bit values a byte\) past_key, got element type 17/,
    );
  });
});
