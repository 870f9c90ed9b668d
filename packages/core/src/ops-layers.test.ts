// The CPU layer kernels (native/src/layers: depthwiseConv2d, lstm, hardSigmoid) against direct
// float64 loops in JS, through both paths: float32 on the CPU runs the native primitive, float16
// the composition of MLX ops the front end builds elsewhere.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';
import { inputs, expectAllClose } from '../test/numeric.js';

interface Conv {
  n: number;
  c: number;
  h: number;
  w: number;
  m: number;
  kh: number;
  kw: number;
  s: [number, number];
  p: [number, number, number, number];
  d: [number, number];
}

/** Channels-first depthwise convolution, float64: output channel o reads input channel o / m. */
function depthwiseRef(x: readonly number[], k: readonly number[], b: readonly number[] | null, g: Conv): { y: number[]; shape: number[] } {
  const o = g.c * g.m;
  const oh = Math.floor((g.h + g.p[0] + g.p[2] - g.d[0] * (g.kh - 1) - 1) / g.s[0]) + 1;
  const ow = Math.floor((g.w + g.p[1] + g.p[3] - g.d[1] * (g.kw - 1) - 1) / g.s[1]) + 1;
  const y: number[] = [];
  for (let n = 0; n < g.n; n++)
    for (let oc = 0; oc < o; oc++)
      for (let yy = 0; yy < oh; yy++)
        for (let xx = 0; xx < ow; xx++) {
          let acc = b ? b[oc] : 0;
          for (let ky = 0; ky < g.kh; ky++)
            for (let kx = 0; kx < g.kw; kx++) {
              const iy = yy * g.s[0] - g.p[0] + ky * g.d[0];
              const ix = xx * g.s[1] - g.p[1] + kx * g.d[1];
              if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
              acc += k[(oc * g.kh + ky) * g.kw + kx] * x[((n * g.c + Math.floor(oc / g.m)) * g.h + iy) * g.w + ix];
            }
          y.push(acc);
        }
  return { y, shape: [g.n, o, oh, ow] };
}

describe('depthwiseConv2d', () => {
  const cases: Conv[] = [
    { n: 2, c: 3, h: 9, w: 11, m: 1, kh: 3, kw: 3, s: [1, 1], p: [1, 1, 1, 1], d: [1, 1] },
    { n: 1, c: 2, h: 8, w: 7, m: 3, kh: 3, kw: 2, s: [2, 3], p: [0, 2, 1, 0], d: [2, 1] },
    { n: 1, c: 4, h: 2, w: 3, m: 1, kh: 5, kw: 5, s: [1, 1], p: [2, 2, 2, 2], d: [1, 1] },
    // The 3-wide stride-1 row pass: no left pad with two on the right, and the narrowest row.
    { n: 1, c: 3, h: 6, w: 5, m: 2, kh: 3, kw: 3, s: [1, 1], p: [0, 0, 1, 2], d: [1, 1] },
    { n: 2, c: 2, h: 4, w: 3, m: 1, kh: 3, kw: 3, s: [1, 1], p: [1, 1, 1, 1], d: [1, 1] },
  ];
  for (const [i, g] of cases.entries()) {
    for (const dtype of ['float32', 'float16'] as const) {
      it(`case ${i}, ${dtype}${dtype === 'float32' ? ' (native)' : ' (composed)'}`, () => {
        const x = inputs(g.n * g.c * g.h * g.w, -1, 1, 10 + i);
        const k = inputs(g.c * g.m * g.kh * g.kw, -1, 1, 20 + i);
        const b = i === 1 ? null : inputs(g.c * g.m, -1, 1, 30 + i);
        const ref = depthwiseRef(x, k, b, g);
        const r = mx.depthwiseConv2d(
          mx.astype(mx.array(x, { shape: [g.n, g.c, g.h, g.w] }), dtype),
          mx.astype(mx.array(k, { shape: [g.c * g.m, 1, g.kh, g.kw] }), dtype),
          b && mx.astype(mx.array(b), dtype),
          ...g.s,
          ...g.p,
          ...g.d,
        );
        expect(r.shape).toEqual(ref.shape);
        const tol = dtype === 'float32' ? 1e-5 : 2e-2;
        expectAllClose(mx.astype(r, 'float32'), ref.y, tol, tol);
      });
    }
  }
  it('a transposed (non-contiguous) input', () => {
    const g = cases[0];
    const x = inputs(g.n * g.c * g.h * g.w, -1, 1, 40);
    const k = inputs(g.c * g.kh * g.kw, -1, 1, 41);
    // [N, H, W, C] data viewed as [N, C, H, W].
    const xt = mx.transpose(mx.array(x, { shape: [g.n, g.h, g.w, g.c] }), [0, 3, 1, 2]);
    const xs = Array.from(mx.contiguous(xt, false).toTypedArray() as Float32Array);
    const r = mx.depthwiseConv2d(xt, mx.array(k, { shape: [g.c, 1, g.kh, g.kw] }), null, ...g.s, ...g.p, ...g.d);
    expectAllClose(r, depthwiseRef(xs, k, null, g).y, 1e-5, 1e-5);
  });
  it('refuses a weight that is not [C*M, 1, kh, kw], and a kernel larger than the padded input', () => {
    const x = mx.zeros([1, 4, 5, 5]);
    expect(() => mx.depthwiseConv2d(x, mx.zeros([4, 2, 3, 3]), null, 1, 1, 0, 0, 0, 0, 1, 1)).toThrow(/w must be \[C\*M, 1, KH, KW\]/);
    expect(() => mx.depthwiseConv2d(x, mx.zeros([6, 1, 3, 3]), null, 1, 1, 0, 0, 0, 0, 1, 1)).toThrow(/w must be/);
    expect(() => mx.depthwiseConv2d(x, mx.zeros([4, 1, 7, 7]), null, 1, 1, 0, 0, 0, 0, 1, 1)).toThrow(/larger than the padded input/);
    expect(() => mx.depthwiseConv2d(x, mx.zeros([4, 1, 3, 3]), mx.zeros([3]), 1, 1, 0, 0, 0, 0, 1, 1)).toThrow(/bias must be \[4\]/);
  });
});

const sig = (v: number) => 1 / (1 + Math.exp(-v));

/** One LSTM direction, float64; gates i, o, f, c; lens masks as ONNX's sequence_lens. */
function lstmRef(
  proj: number[],
  rT: number[],
  h0: number[],
  c0: number[],
  T: number,
  B: number,
  H: number,
  lens: number[] | null,
  reverse: boolean,
) {
  const G = 4 * H;
  const y = new Array<number>(T * B * H).fill(0);
  const h = [...h0];
  const c = [...c0];
  for (let k = 0; k < T; k++) {
    const t = reverse ? T - 1 - k : k;
    for (let b = 0; b < B; b++) {
      if (lens && t >= lens[b]) continue;
      const g = proj.slice((t * B + b) * G, (t * B + b + 1) * G);
      for (let i = 0; i < H; i++) for (let j = 0; j < G; j++) g[j] += h[b * H + i] * rT[i * G + j];
      for (let j = 0; j < H; j++) {
        const cn = sig(g[2 * H + j]) * c[b * H + j] + sig(g[j]) * Math.tanh(g[3 * H + j]);
        c[b * H + j] = cn;
        h[b * H + j] = sig(g[H + j]) * Math.tanh(cn);
        y[(t * B + b) * H + j] = h[b * H + j];
      }
    }
  }
  return { y, h, c };
}

describe('lstm', () => {
  const [T, B, H] = [7, 3, 5];
  const proj = inputs(T * B * 4 * H, -2, 2, 50);
  const rT = inputs(H * 4 * H, -0.5, 0.5, 51);
  const h0 = inputs(B * H, -1, 1, 52);
  const c0 = inputs(B * H, -1, 1, 53);
  for (const [lens, reverse] of [
    [null, false],
    [[7, 2, 5], true],
    [[1, 7, 4], false],
  ] as const) {
    for (const dtype of ['float32', 'float16'] as const) {
      it(`lens ${lens ? `[${lens.join(', ')}]` : 'none'}, ${reverse ? 'reverse' : 'forward'}, ${dtype}`, () => {
        const ref = lstmRef(proj, rT, h0, c0, T, B, H, lens ? [...lens] : null, reverse);
        const a = (d: number[], shape: number[]) => mx.astype(mx.array(d, { shape }), dtype);
        const [y, h, c] = mx.lstm(
          a(proj, [T, B, 4 * H]),
          mx.transpose(a(rT, [H, 4 * H])), // r [4H, H], a strided view
          a(h0, [B, H]),
          a(c0, [B, H]),
          lens && mx.array([...lens], { dtype: 'int32' }),
          reverse,
        );
        expect(y.shape).toEqual([T, B, H]);
        const tol = dtype === 'float32' ? 1e-5 : 2e-2;
        expectAllClose(mx.astype(y, 'float32'), ref.y, tol, tol);
        expectAllClose(mx.astype(h, 'float32'), ref.h, tol, tol);
        expectAllClose(mx.astype(c, 'float32'), ref.c, tol, tol);
      });
    }
  }
  it('refuses mismatched shapes', () => {
    expect(() => mx.lstm(mx.zeros([2, 1, 8]), mx.zeros([12, 3]), mx.zeros([1, 3]), mx.zeros([1, 3]), null, false)).toThrow(/4H = 12/);
    expect(() => mx.lstm(mx.zeros([2, 1, 12]), mx.zeros([12, 3]), mx.zeros([2, 3]), mx.zeros([1, 3]), null, false)).toThrow(/h0 and c0/);
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
        const r = mx.hardSigmoid(mx.astype(mx.array(xs, { shape: [xs.length] }), dtype), a, b, swish);
        const tol = dtype === 'float32' ? 1e-6 : 1e-2;
        expectAllClose(mx.astype(r, 'float32'), ref, tol, tol);
      });
    }
  }
});
