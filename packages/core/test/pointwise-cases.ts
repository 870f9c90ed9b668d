// The 1x1 convolution kernel (native/src/kernels/conv/pointwise*.cpp) and the trailing-axes mean
// (native/src/kernels/pool/mean.cpp) against direct float64 loops: the vector builds' tiles
// (output channels past a whole register tile by one and more, positions past one and two vectors,
// one position), the epilogue (bias, residual, clamp, HardSigmoid/HardSwish, NaN and infinities kept),
// batches, a residual that broadcasts and float16 (MLX's ops). Shared by the test of the widest build
// this CPU has, of the AVX2 build and of the portable one (MLXC_CPU_KERNELS=avx2 / generic, each
// file in its own process).
import { describe, expect, it } from 'vitest';
import * as mx from '../src/index.js';
import { expectAllClose, inputs } from './numeric.js';

/** act after the clamp, float64 (Math.max/min keep NaN, as the kernel's ordered compares do). */
function finish(v: number, lo: number, hi: number, act: number, alpha: number, beta: number): number {
  const c = Math.min(hi, Math.max(lo, v));
  if (act === 0) return c;
  const h0 = c * alpha + beta;
  const h = Math.min(1, Math.max(0, h0));
  return act === 1 ? h : c * h;
}

/** Element-wise check: non-finite values exactly (NaN as NaN), finite ones within tol. */
function expectValues(out: mx.Array, ref: number[], tol: number): void {
  const got = Array.from(out.toTypedArray() as Float32Array);
  got.forEach((g, i) => {
    if (!Number.isFinite(ref[i]))
      expect(Object.is(g, ref[i]) || (Number.isNaN(g) && Number.isNaN(ref[i])), `${i}: ${g} vs ${ref[i]}`).toBe(true);
  });
  expectAllClose(
    mx.array(got.map((g, i) => (Number.isFinite(ref[i]) ? g : 0))),
    ref.map((v) => (Number.isFinite(v) ? v : 0)),
    tol,
    tol,
  );
}

interface Case {
  n: number;
  c: number;
  o: number;
  sp: number[];
  bias: boolean;
  res: boolean;
  lo: number;
  hi: number;
  act: number;
}

export function pointwiseSuite(build: string): void {
  describe(`pointwiseConv (${build})`, () => {
    const inf = Number.POSITIVE_INFINITY;
    const cases: Case[] = [
      // Output channels: one short of, at, and past the AVX-512 (8) and AVX2 (6) tiles; positions
      // one vector, two, and past them by a few.
      { n: 1, c: 16, o: 48, sp: [48, 48], bias: true, res: false, lo: -inf, hi: inf, act: 2 },
      { n: 2, c: 3, o: 7, sp: [5, 7], bias: true, res: true, lo: 0, hi: inf, act: 0 },
      { n: 1, c: 40, o: 9, sp: [33], bias: false, res: true, lo: -1, hi: 1.5, act: 1 },
      { n: 1, c: 13, o: 13, sp: [2, 16], bias: true, res: false, lo: 0, hi: 6, act: 0 },
      { n: 3, c: 1, o: 6, sp: [17], bias: true, res: true, lo: -inf, hi: inf, act: 2 },
      { n: 1, c: 72, o: 24, sp: [12, 12], bias: true, res: true, lo: -inf, hi: inf, act: 0 },
      // One position (a squeeze-excite gate) and a 3-D spatial input.
      { n: 2, c: 12, o: 48, sp: [1, 1], bias: true, res: false, lo: 0, hi: inf, act: 0 },
      { n: 1, c: 5, o: 17, sp: [3, 2, 5], bias: false, res: false, lo: -inf, hi: inf, act: 1 },
    ];
    for (const [i, g] of cases.entries())
      it(`[${g.n}, ${g.c}, ${g.sp}] -> ${g.o}, bias ${g.bias}, residual ${g.res}, clamp [${g.lo}, ${g.hi}], act ${g.act}`, () => {
        const s = g.sp.reduce((a, b) => a * b, 1);
        const x = inputs(g.n * g.c * s, -3, 3, 60 + i);
        const w = inputs(g.o * g.c, -1, 1, 70 + i);
        const b = g.bias ? inputs(g.o, -1, 1, 80 + i) : null;
        const r = g.res ? inputs(g.n * g.o * s, -2, 2, 90 + i) : null;
        // NaN and an infinity in x reach the products of every output channel at their position.
        x[1] = Number.NaN;
        if (s > 4) x[g.c * s - 3] = Number.POSITIVE_INFINITY;
        const alpha = g.act === 1 ? 0.2 : 1 / 6;
        const ref: number[] = [];
        for (let n = 0; n < g.n; n++)
          for (let o = 0; o < g.o; o++)
            for (let p = 0; p < s; p++) {
              let acc = 0;
              for (let k = 0; k < g.c; k++) acc += w[o * g.c + k] * x[(n * g.c + k) * s + p];
              const v = acc + (b ? b[o] : 0) + (r ? r[(n * g.o + o) * s + p] : 0);
              ref.push(finish(v, g.lo, g.hi, g.act, alpha, 0.5));
            }
        const out = mx.ext.pointwiseConv(
          mx.array(x, { shape: [g.n, g.c, ...g.sp] }),
          mx.array(w, { shape: [g.o, g.c] }),
          b && mx.array(b),
          r && mx.array(r, { shape: [g.n, g.o, ...g.sp] }),
          g.lo,
          g.hi,
          g.act,
          alpha,
          0.5,
        );
        expect(out.shape).toEqual([g.n, g.o, ...g.sp]);
        expectValues(out, ref, 1e-5);
      });

    it('a residual that broadcasts, float16 (MLX ops), and refusals', () => {
      const [c, o, s] = [4, 5, 6];
      const x = inputs(c * s, -2, 2, 1);
      const w = inputs(o * c, -1, 1, 2);
      const r = inputs(o, -1, 1, 3);
      const ref: number[] = [];
      for (let oc = 0; oc < o; oc++)
        for (let p = 0; p < s; p++) {
          let acc = r[oc];
          for (let k = 0; k < c; k++) acc += w[oc * c + k] * x[k * s + p];
          ref.push(finish(acc, 0, Number.POSITIVE_INFINITY, 2, 1 / 6, 0.5));
        }
      const xa = mx.array(x, { shape: [1, c, s] });
      const wa = mx.array(w, { shape: [o, c] });
      const ra = mx.array(r, { shape: [1, o, 1] });
      expectValues(mx.ext.pointwiseConv(xa, wa, null, ra, 0, Number.POSITIVE_INFINITY, 2, 1 / 6, 0.5), ref, 1e-5);
      const half = mx.ext.pointwiseConv(
        mx.astype(xa, 'float16'),
        mx.astype(wa, 'float16'),
        null,
        mx.astype(ra, 'float16'),
        0,
        Number.POSITIVE_INFINITY,
        2,
        1 / 6,
        0.5,
      );
      expect(half.dtype).toBe('float16');
      expectAllClose(mx.astype(half, 'float32'), ref, 2e-2, 2e-2);
      expect(() => mx.ext.pointwiseConv(xa, mx.zeros([o, c + 1]), null, null, 0, 1, 0, 1, 0)).toThrow(/w must be \[O, 4\]/);
      expect(() => mx.ext.pointwiseConv(xa, wa, mx.zeros([o + 1]), null, 0, 1, 0, 1, 0)).toThrow(/bias must be \[5\]/);
      expect(() => mx.ext.pointwiseConv(mx.zeros([1, c]), wa, null, null, 0, 1, 0, 1, 0)).toThrow(/x must be \[N, C, \.\.\.spatial\]/);
      expect(() => mx.ext.pointwiseConv(xa, wa, null, null, 0, 1, 4, 1, 0)).toThrow(
        /act must be 0 \(none\), 1 \(HardSigmoid\) or 2 \(HardSwish\), got 4/,
      );
    });
  });

  describe(`meanTrailing (${build})`, () => {
    const cases: [number[], number, boolean][] = [
      [[2, 48, 7, 9], 2, true],
      [[1, 5, 33], 1, false],
      [[3, 4, 2, 5], 3, true],
      [[7], 1, false],
      [[2, 3, 16], 1, true],
    ];
    for (const [dims, axes, keepdims] of cases)
      it(`[${dims}] over the last ${axes}, keepdims ${keepdims}`, () => {
        const size = dims.reduce((a, b) => a * b, 1);
        const x = inputs(size, -4, 4, size);
        const n = dims.slice(dims.length - axes).reduce((a, b) => a * b, 1);
        x[2] = Number.NaN;
        const ref = Array.from({ length: size / n }, (_, r) => x.slice(r * n, (r + 1) * n).reduce((a, b) => a + b, 0) / n);
        const out = mx.ext.meanTrailing(mx.array(x, { shape: dims }), axes, keepdims);
        const shape = [...dims.slice(0, dims.length - axes), ...(keepdims ? Array(axes).fill(1) : [])];
        expect(out.shape).toEqual(shape);
        expectValues(out, ref, 1e-5);
      });
    it('a transposed view, float16 (MLX mean), and axes out of range', () => {
      const x = inputs(24, -1, 1, 5);
      const t = mx.transpose(mx.array(x, { shape: [4, 6] }), [1, 0]); // [6, 4]
      const ref = Array.from({ length: 6 }, (_, j) => (x[j] + x[6 + j] + x[12 + j] + x[18 + j]) / 4);
      expectAllClose(mx.ext.meanTrailing(t, 1, false), ref, 1e-6, 1e-6);
      expectAllClose(mx.astype(mx.ext.meanTrailing(mx.astype(t, 'float16'), 1, false), 'float32'), ref, 1e-2, 1e-2);
      expect(() => mx.ext.meanTrailing(t, 3, false)).toThrow(/axes must be in \[1, 2\] for an array of rank 2, got 3/);
    });
  });
}
