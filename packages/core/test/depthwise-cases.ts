// The depthwise convolution kernel (native/src/kernels/conv/depthwise*.cpp) against a direct float64
// loop: the vector builds' masked chunks (rows narrower than a vector, widths that are not a
// multiple of it, padding on each side, strides 1 and 2 with odd widths, dilation, channel
// multipliers, kernels up to 16 wide) and the portable loop's own cases (stride 3, wider kernels).
// Shared by the test of the widest build this CPU has (ops-layers.test.ts), of the AVX2 build and
// of the portable one (MLXC_CPU_KERNELS=avx2 / generic, each file in its own process).
import { describe, expect, it } from 'vitest';
import * as mx from '../src/index.js';
import { inputs, expectAllClose } from './numeric.js';

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

export function depthwiseSuite(build: string): void {
  describe(`depthwiseConv2d (${build})`, () => {
    const cases: Conv[] = [
      { n: 2, c: 3, h: 9, w: 11, m: 1, kh: 3, kw: 3, s: [1, 1], p: [1, 1, 1, 1], d: [1, 1] },
      { n: 1, c: 2, h: 8, w: 7, m: 3, kh: 3, kw: 2, s: [2, 3], p: [0, 2, 1, 0], d: [2, 1] },
      { n: 1, c: 4, h: 2, w: 3, m: 1, kh: 5, kw: 5, s: [1, 1], p: [2, 2, 2, 2], d: [1, 1] },
      // The 3-wide stride-1 row pass: no left pad with two on the right, and the narrowest row.
      { n: 1, c: 3, h: 6, w: 5, m: 2, kh: 3, kw: 3, s: [1, 1], p: [0, 0, 1, 2], d: [1, 1] },
      { n: 2, c: 2, h: 4, w: 3, m: 1, kh: 3, kw: 3, s: [1, 1], p: [1, 1, 1, 1], d: [1, 1] },
      // Planes enough to be split across the thread pool (batches, channel multiplier, stride 2, 5x5).
      { n: 2, c: 5, h: 41, w: 37, m: 2, kh: 3, kw: 3, s: [1, 1], p: [1, 1, 1, 1], d: [1, 1] },
      { n: 3, c: 7, h: 48, w: 45, m: 1, kh: 5, kw: 5, s: [2, 2], p: [2, 2, 1, 2], d: [1, 1] },
      // The vector loops' chunks: widths past one and two vectors (8 and 16 lanes) by a few, at
      // stride 1 and 2, with padding on one side only, on each side, and wider than the kernel.
      { n: 1, c: 3, h: 7, w: 17, m: 1, kh: 3, kw: 3, s: [1, 1], p: [1, 1, 1, 1], d: [1, 1] },
      { n: 1, c: 3, h: 9, w: 33, m: 1, kh: 3, kw: 3, s: [2, 2], p: [1, 1, 1, 1], d: [1, 1] },
      { n: 1, c: 2, h: 8, w: 34, m: 1, kh: 3, kw: 3, s: [2, 2], p: [0, 0, 1, 1], d: [1, 1] },
      { n: 1, c: 2, h: 6, w: 31, m: 2, kh: 3, kw: 3, s: [1, 2], p: [0, 3, 2, 0], d: [1, 1] },
      { n: 1, c: 2, h: 5, w: 9, m: 1, kh: 2, kw: 4, s: [1, 1], p: [0, 0, 0, 0], d: [1, 1] },
      // Dilation along the row (stride 1 and 2), padding wider than the dilated reach.
      { n: 1, c: 2, h: 9, w: 23, m: 1, kh: 3, kw: 3, s: [1, 1], p: [2, 2, 2, 2], d: [2, 2] },
      { n: 1, c: 2, h: 11, w: 40, m: 1, kh: 3, kw: 5, s: [2, 2], p: [1, 5, 0, 3], d: [1, 3] },
      // The mobilenet shapes: 48, 24 and 12 wide, stride 1 and 2, 3x3 and 5x5.
      { n: 1, c: 4, h: 48, w: 48, m: 1, kh: 3, kw: 3, s: [2, 2], p: [1, 1, 1, 1], d: [1, 1] },
      { n: 1, c: 4, h: 24, w: 24, m: 1, kh: 5, kw: 5, s: [1, 1], p: [2, 2, 2, 2], d: [1, 1] },
      { n: 1, c: 4, h: 12, w: 12, m: 1, kh: 3, kw: 3, s: [1, 1], p: [1, 1, 1, 1], d: [1, 1] },
      // A row of one output, and 16 taps wide (the vector loops' widest) against 17 (the portable loop's).
      { n: 1, c: 2, h: 3, w: 3, m: 1, kh: 3, kw: 3, s: [2, 2], p: [0, 0, 0, 0], d: [1, 1] },
      { n: 1, c: 2, h: 4, w: 20, m: 1, kh: 2, kw: 16, s: [1, 1], p: [0, 1, 0, 2], d: [1, 1] },
      { n: 1, c: 2, h: 4, w: 20, m: 1, kh: 2, kw: 17, s: [1, 2], p: [0, 1, 0, 2], d: [1, 1] },
      // Stride 3 along the row: the portable loop on every build.
      { n: 1, c: 2, h: 10, w: 29, m: 1, kh: 3, kw: 3, s: [3, 3], p: [1, 1, 1, 1], d: [1, 1] },
    ];
    for (const [i, g] of cases.entries()) {
      for (const dtype of ['float32', 'float16'] as const) {
        it(`case ${i}, ${dtype}${dtype === 'float32' ? ' (native)' : ' (composed)'}`, () => {
          const x = inputs(g.n * g.c * g.h * g.w, -1, 1, 10 + i);
          const k = inputs(g.c * g.m * g.kh * g.kw, -1, 1, 20 + i);
          const b = i === 1 ? null : inputs(g.c * g.m, -1, 1, 30 + i);
          const ref = depthwiseRef(x, k, b, g);
          const r = mx.ext.depthwiseConv2d(
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
    // depthwiseConv2dAct: clamp and HardSigmoid/HardSwish in the kernel's store (vector chunks,
    // masked tails, the four-row path and the portable loop's stride 3), NaN kept.
    for (const [i, [g, lo, hi, act]] of (
      [
        [cases[5], Number.NEGATIVE_INFINITY, Number.POSITIVE_INFINITY, 2],
        [cases[8], -0.5, 1.5, 1],
        [cases[14], 0, 6, 0],
        [cases[17], -1, 2, 2],
        [cases[cases.length - 1], Number.NEGATIVE_INFINITY, 0.75, 2],
      ] as const
    ).entries())
      it(`with the epilogue ${i}: clamp [${lo}, ${hi}], act ${act}`, () => {
        const x = inputs(g.n * g.c * g.h * g.w, -3, 3, 50 + i);
        x[2] = Number.NaN;
        const k = inputs(g.c * g.m * g.kh * g.kw, -1, 1, 60 + i);
        const b = inputs(g.c * g.m, -1, 1, 70 + i);
        const alpha = act === 1 ? 0.2 : 1 / 6;
        const ref = depthwiseRef(x, k, b, g).y.map((v) => {
          const c = Math.min(hi, Math.max(lo, v));
          if (act === 0) return c;
          const h = Math.min(1, Math.max(0, c * alpha + 0.5));
          return act === 1 ? h : c * h;
        });
        const r = mx.ext.depthwiseConv2dAct(
          mx.array(x, { shape: [g.n, g.c, g.h, g.w] }),
          mx.array(k, { shape: [g.c * g.m, 1, g.kh, g.kw] }),
          mx.array(b),
          ...g.s,
          ...g.p,
          ...g.d,
          lo,
          hi,
          act,
          alpha,
          0.5,
        );
        const got = Array.from(r.toTypedArray() as Float32Array);
        got.forEach((v, j) => {
          if (Number.isNaN(ref[j])) expect(Number.isNaN(v), `${j}`).toBe(true);
        });
        expectAllClose(
          mx.array(got.map((v, j) => (Number.isNaN(ref[j]) ? 0 : v))),
          ref.map((v) => (Number.isNaN(v) ? 0 : v)),
          1e-5,
          1e-5,
        );
      });
    it('with the epilogue in float16 (MLX ops), and an act it does not know', () => {
      const g = cases[0];
      const x = inputs(g.n * g.c * g.h * g.w, -3, 3, 80);
      const k = inputs(g.c * g.kh * g.kw, -1, 1, 81);
      const ref = depthwiseRef(x, k, null, g).y.map((v) => v * Math.min(1, Math.max(0, v / 6 + 0.5)));
      const r = mx.ext.depthwiseConv2dAct(
        mx.astype(mx.array(x, { shape: [g.n, g.c, g.h, g.w] }), 'float16'),
        mx.astype(mx.array(k, { shape: [g.c, 1, g.kh, g.kw] }), 'float16'),
        null,
        ...g.s,
        ...g.p,
        ...g.d,
        Number.NEGATIVE_INFINITY,
        Number.POSITIVE_INFINITY,
        2,
        1 / 6,
        0.5,
      );
      expectAllClose(mx.astype(r, 'float32'), ref, 2e-2, 2e-2);
      expect(() =>
        mx.ext.depthwiseConv2dAct(mx.zeros([1, 2, 4, 4]), mx.zeros([2, 1, 3, 3]), null, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 3, 1, 0),
      ).toThrow(/act must be 0 \(none\), 1 \(HardSigmoid\) or 2 \(HardSwish\), got 3/);
    });
    it('a transposed (non-contiguous) input', () => {
      const g = cases[0];
      const x = inputs(g.n * g.c * g.h * g.w, -1, 1, 40);
      const k = inputs(g.c * g.kh * g.kw, -1, 1, 41);
      // [N, H, W, C] data viewed as [N, C, H, W].
      const xt = mx.transpose(mx.array(x, { shape: [g.n, g.h, g.w, g.c] }), [0, 3, 1, 2]);
      const xs = Array.from(mx.contiguous(xt, false).toTypedArray() as Float32Array);
      const r = mx.ext.depthwiseConv2d(xt, mx.array(k, { shape: [g.c, 1, g.kh, g.kw] }), null, ...g.s, ...g.p, ...g.d);
      expectAllClose(r, depthwiseRef(xs, k, null, g).y, 1e-5, 1e-5);
    });
    it('refuses a weight that is not [C*M, 1, kh, kw], and a kernel larger than the padded input', () => {
      const x = mx.zeros([1, 4, 5, 5]);
      expect(() => mx.ext.depthwiseConv2d(x, mx.zeros([4, 2, 3, 3]), null, 1, 1, 0, 0, 0, 0, 1, 1)).toThrow(
        /w must be \[C\*M, 1, KH, KW\]/,
      );
      expect(() => mx.ext.depthwiseConv2d(x, mx.zeros([6, 1, 3, 3]), null, 1, 1, 0, 0, 0, 0, 1, 1)).toThrow(/w must be/);
      expect(() => mx.ext.depthwiseConv2d(x, mx.zeros([4, 1, 7, 7]), null, 1, 1, 0, 0, 0, 0, 1, 1)).toThrow(/larger than the padded input/);
      expect(() => mx.ext.depthwiseConv2d(x, mx.zeros([4, 1, 3, 3]), mx.zeros([3]), 1, 1, 0, 0, 0, 0, 1, 1)).toThrow(/bias must be \[4\]/);
    });
  });
}
