// The CPU layer kernels (native/src/kernels: conv/depthwise (test/depthwise-cases.ts), rnn/lstm, activation/hard_sigmoid) against direct
// float64 loops in JS, through both paths: float32 on the CPU runs the native primitive, float16
// the composition of MLX ops the front end builds elsewhere.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';
import { inputs, expectAllClose } from '../test/numeric.js';
import { depthwiseSuite } from '../test/depthwise-cases.js';

depthwiseSuite('the widest build');

const sig = (v: number) => 1 / (1 + Math.exp(-v));

const f32bits = (x: number) => new Int32Array(Float32Array.of(x).buffer)[0];
type RefAct = (v: number) => number;

/**
 * One LSTM layer, float64, every direction; gates i, o, f, c; lens masks as ONNX's sequence_lens;
 * peepholes [D, 3H] (i, o, f), clip, input_forget; acts per direction (f, g, h).
 */
function lstmRef(
  proj: number[],
  rT: number[],
  h0: number[],
  c0: number[],
  [T, B, H, D]: number[],
  o: { lens?: number[]; reverse?: boolean; peep?: number[]; clip?: number; inputForget?: boolean; acts?: RefAct[] },
) {
  const G = 4 * H;
  const y = new Array<number>(T * D * B * H).fill(0);
  const h = [...h0];
  const c = [...c0];
  const cl = (v: number) => (o.clip === undefined ? v : Math.min(o.clip, Math.max(-o.clip, v)));
  for (let d = 0; d < D; d++) {
    const [f, g, ha] = o.acts?.slice(3 * d, 3 * d + 3) ?? [sig, Math.tanh, Math.tanh];
    const p = (k: number, j: number) => (o.peep ? o.peep[d * 3 * H + k * H + j] : 0);
    for (let k = 0; k < T; k++) {
      const t = d === 1 || o.reverse ? T - 1 - k : k;
      for (let b = 0; b < B; b++) {
        if (o.lens && t >= o.lens[b]) continue;
        const s = (d * B + b) * H;
        const gt = proj.slice((t * B + b) * D * G + d * G, (t * B + b) * D * G + (d + 1) * G);
        for (let i = 0; i < H; i++) for (let j = 0; j < G; j++) gt[j] += h[s + i] * rT[(d * H + i) * G + j];
        for (let j = 0; j < H; j++) {
          const cv = c[s + j];
          const ig = f(cl(gt[j] + p(0, j) * cv));
          const fg = o.inputForget ? 1 - ig : f(cl(gt[2 * H + j] + p(2, j) * cv));
          const cn = fg * cv + ig * g(cl(gt[3 * H + j]));
          const og = f(cl(gt[H + j] + p(1, j) * cn));
          c[s + j] = cn;
          h[s + j] = og * ha(cn);
          y[((t * D + d) * B + b) * H + j] = h[s + j];
        }
      }
    }
  }
  return { y, h, c };
}

describe('lstm', () => {
  const [T, B, H] = [7, 3, 5];
  const std = [2, 0, 0, 1, 0, 0, 1, 0, 0];
  const cases: {
    name: string;
    D: number;
    dir: number;
    lens?: number[];
    peep?: boolean;
    clip?: number;
    inputForget?: boolean;
    acts?: number[];
    ref?: RefAct[];
  }[] = [
    { name: 'forward', D: 1, dir: 0 },
    { name: 'reverse, lens [7, 2, 5]', D: 1, dir: 1, lens: [7, 2, 5] },
    { name: 'bidirectional, lens [1, 7, 4]', D: 2, dir: 2, lens: [1, 7, 4] },
    { name: 'bidirectional, peepholes, clip 0.7, input_forget', D: 2, dir: 2, peep: true, clip: 0.7, inputForget: true },
    {
      name: 'activations HardSigmoid(0.3, 0.4), ScaledTanh(0.9, 1.1), Elu(1.2) per direction',
      D: 2,
      dir: 2,
      lens: [3, 7, 1],
      acts: [7, f32bits(0.3), f32bits(0.4), 6, f32bits(0.9), f32bits(1.1), 8, f32bits(1.2), 0, ...std],
      ref: [
        (v) => Math.min(1, Math.max(0, Math.fround(0.3) * v + Math.fround(0.4))),
        (v) => Math.fround(0.9) * Math.tanh(Math.fround(1.1) * v),
        (v) => (v < 0 ? Math.fround(1.2) * Math.expm1(v) : v),
        sig,
        Math.tanh,
        Math.tanh,
      ],
    },
  ];
  for (const k of cases) {
    for (const dtype of ['float32', 'float16'] as const) {
      it(`${k.name}, ${dtype}`, () => {
        const D = k.D;
        const proj = inputs(T * B * D * 4 * H, -2, 2, 50);
        const rT = inputs(D * H * 4 * H, -0.5, 0.5, 51);
        const h0 = inputs(D * B * H, -1, 1, 52);
        const c0 = inputs(D * B * H, -1, 1, 53);
        const peep = k.peep ? inputs(D * 3 * H, -1, 1, 54) : undefined;
        const ref = lstmRef(proj, rT, h0, c0, [T, B, H, D], { ...k, reverse: k.dir === 1, peep, acts: k.ref });
        const a = (d: number[], shape: number[]) => mx.astype(mx.array(d, { shape }), dtype);
        // rt contiguous (read in place) or, for peepholes and lens cases, a strided view (laid out).
        const rt = a(rT, [D, H, 4 * H]);
        const rtStrided = k.peep || k.lens ? mx.transpose(mx.contiguous(mx.transpose(rt, [0, 2, 1]), false), [0, 2, 1]) : rt;
        const [y, h, c] = mx.ext.lstm(
          a(proj, [T, B, D * 4 * H]),
          rtStrided,
          a(h0, [D, B, H]),
          a(c0, [D, B, H]),
          k.lens ? mx.array([...k.lens], { dtype: 'int32' }) : null,
          peep ? a(peep, [D, 3 * H]) : null,
          k.acts ?? [...std, ...std].slice(0, 9 * D),
          k.clip ?? Number.POSITIVE_INFINITY,
          !!k.inputForget,
          k.dir,
        );
        expect(y.shape).toEqual([T, D, B, H]);
        const tol = dtype === 'float32' ? 1e-5 : 3e-2;
        expectAllClose(mx.astype(y, 'float32'), ref.y, tol, tol);
        expectAllClose(mx.astype(h, 'float32'), ref.h, tol, tol);
        expectAllClose(mx.astype(c, 'float32'), ref.c, tol, tol);
      });
    }
  }
  it('refuses mismatched shapes and bad parameters', () => {
    const acts = [2, 0, 0, 1, 0, 0, 1, 0, 0];
    const z = (s: number[]) => mx.zeros(s);
    const inf = Number.POSITIVE_INFINITY;
    expect(() => mx.ext.lstm(z([2, 1, 8]), z([1, 3, 12]), z([1, 1, 3]), z([1, 1, 3]), null, null, acts, inf, false, 0)).toThrow(
      /D\*4H = 12/,
    );
    expect(() => mx.ext.lstm(z([2, 1, 12]), z([1, 3, 12]), z([1, 2, 3]), z([1, 1, 3]), null, null, acts, inf, false, 0)).toThrow(
      /h0 and c0/,
    );
    expect(() => mx.ext.lstm(z([2, 1, 12]), z([1, 3, 12]), z([1, 1, 3]), z([1, 1, 3]), null, null, acts, inf, false, 2)).toThrow(
      /rt must be/,
    );
    expect(() => mx.ext.lstm(z([2, 1, 12]), z([1, 3, 12]), z([1, 1, 3]), z([1, 1, 3]), null, null, acts, 0, false, 0)).toThrow(/clip/);
    expect(() =>
      mx.ext.lstm(z([2, 1, 12]), z([1, 3, 12]), z([1, 1, 3]), z([1, 1, 3]), null, null, [99, 0, 0, ...acts.slice(3)], inf, false, 0),
    ).toThrow(/activation code/);
  });
});

describe('hardSigmoid', () => {
  const x = [-1e30, -4, -3, -2.5, -0.5, 0, 0.5, 2.5, 3, 4, 1e30, 7.25];
  const hs = (v: number, a: number, b: number) => Math.min(1, Math.max(0, a * v + b));
  for (const swish of [false, true]) {
    for (const dtype of ['float32', 'float16'] as const) {
      it(`${swish ? 'HardSwish' : 'HardSigmoid'}, ${dtype}`, () => {
        const [a, b] = swish ? [1 / 6, 0.5] : [0.3, 0.4];
        const xs = dtype === 'float16' ? x.filter((v) => Math.abs(v) < 1e4) : x;
        const ref = xs.map((v) => (swish ? v * hs(v, a, b) : hs(v, a, b)));
        const r = mx.ext.hardSigmoid(mx.astype(mx.array(xs, { shape: [xs.length] }), dtype), a, b, swish);
        const tol = dtype === 'float32' ? 1e-6 : 1e-2;
        expectAllClose(mx.astype(r, 'float32'), ref, tol, tol);
      });
    }
    it(`${swish ? 'HardSwish' : 'HardSigmoid'}, float32, many blocks and an odd tail, NaN and infinities kept`, () => {
      const [a, b] = swish ? [1 / 6, 0.5] : [0.2, 0.5];
      // Over the kernel's 4096-element blocks (several threads) and not a multiple of the vector width.
      const xs = inputs(3 * 4096 + 7, -6, 6, 50);
      xs[5] = Number.NaN;
      xs[4099] = Number.POSITIVE_INFINITY;
      xs[8200] = Number.NEGATIVE_INFINITY;
      xs[xs.length - 1] = Number.NaN;
      const ref = xs.map((v) => {
        const h = a * v + b;
        // ONNX: max(0, min(1, h)) keeps a NaN; HardSwish is x times it.
        const c = Number.isNaN(h) ? h : Math.min(1, Math.max(0, h));
        return swish ? v * c : c;
      });
      const got = Array.from(mx.ext.hardSigmoid(mx.array(xs, { shape: [xs.length] }), a, b, swish).toTypedArray() as Float32Array);
      for (const i of [5, 4099, 8200, xs.length - 1])
        expect(Object.is(got[i], Math.fround(ref[i])) || (Number.isNaN(got[i]) && Number.isNaN(ref[i]))).toBe(true);
      expectAllClose(
        mx.array(got.map((v, i) => (Number.isFinite(ref[i]) ? v : 0))),
        ref.map((v) => (Number.isFinite(v) ? v : 0)),
        1e-6,
        1e-6,
      );
    });
  }
});
