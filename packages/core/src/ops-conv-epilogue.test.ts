// convEpilogue (native/src/kernels/conv/epilogue.cpp) against a float64 loop in JS: float32 on the CPU runs
// the native pass (both layouts, with and without bias and residual, odd sizes that leave partial
// tiles), float16 and a broadcasting residual the composition of MLX ops; NaN passes through the
// clamp and ±Inf clamp like any value.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';
import { expectAllClose, inputs } from '../test/numeric.js';

/** y [n, ...sp, c] (channelsLast) or [n, c, ...sp] -> clamp(y' + b + r) as [n, c, ...sp], in float64. */
function reference(
  y: number[],
  n: number,
  c: number,
  sp: number,
  last: boolean,
  b: number[] | null,
  r: number[] | null,
  lo: number,
  hi: number,
) {
  const out: number[] = [];
  for (let i = 0; i < n; i++)
    for (let ch = 0; ch < c; ch++)
      for (let s = 0; s < sp; s++) {
        const at = last ? (i * sp + s) * c + ch : (i * c + ch) * sp + s;
        const v = y[at] + (b ? b[ch] : 0) + (r ? r[(i * c + ch) * sp + s] : 0);
        // Math.max/min keep NaN, as Relu and Clip do.
        out.push(Math.min(hi, Math.max(lo, v)));
      }
  return out;
}

describe('convEpilogue', () => {
  const shapes: [number, number, number, number][] = [
    [1, 64, 7, 7],
    [2, 70, 5, 9],
    [1, 3, 1, 33],
    [3, 129, 2, 17],
  ];
  for (const [n, c, h, w] of shapes)
    for (const last of [true, false])
      for (const [hasB, hasR, lo, hi] of [
        [true, true, 0, Number.POSITIVE_INFINITY],
        [false, true, Number.NEGATIVE_INFINITY, Number.POSITIVE_INFINITY],
        [true, false, 0, 6],
      ] as const)
        it(`[${n}, ${c}, ${h}, ${w}] ${last ? 'channels-last' : 'channels-first'}, bias ${hasB}, residual ${hasR}, clamp [${lo}, ${hi}]`, () => {
          const sp = h * w;
          const y = inputs(n * c * sp, -4, 4, c + h);
          const b = hasB ? inputs(c, -1, 1, 3) : null;
          const r = hasR ? inputs(n * c * sp, -2, 2, 5) : null;
          const ya = mx.array(y, { shape: last ? [n, h, w, c] : [n, c, h, w] });
          const out = mx.ext.convEpilogue(ya, b && mx.array(b), r && mx.array(r, { shape: [n, c, h, w] }), lo, hi, last);
          expect(out.shape).toEqual([n, c, h, w]);
          expectAllClose(out, reference(y, n, c, sp, last, b, r, lo, hi), 1e-6, 1e-6);
        });

  // Rank 2 with channelsLast: rows [m, c] of channels that stay as they are (the layout pass's
  // channels-last convolutions flatten [N, ...spatial, C] to these).
  for (const [m, c] of [
    [49, 64],
    [3, 7],
    [1, 1000],
    [300, 17],
  ])
    for (const [hasB, hasR, lo, hi] of [
      [true, true, 0, Number.POSITIVE_INFINITY],
      [false, true, Number.NEGATIVE_INFINITY, Number.POSITIVE_INFINITY],
      [true, false, 0, 6],
      [false, false, -0.5, 0.5],
    ] as const)
      it(`rows [${m}, ${c}] channels-last (layout stays), bias ${hasB}, residual ${hasR}, clamp [${lo}, ${hi}]`, () => {
        const y = inputs(m * c, -4, 4, c + m);
        const b = hasB ? inputs(c, -1, 1, 3) : null;
        const r = hasR ? inputs(m * c, -2, 2, 5) : null;
        const out = mx.ext.convEpilogue(
          mx.array(y, { shape: [m, c] }),
          b && mx.array(b),
          r && mx.array(r, { shape: [m, c] }),
          lo,
          hi,
          true,
        );
        expect(out.shape).toEqual([m, c]);
        // [m, c] rows are the channels-first reference with n = m and one position each.
        expectAllClose(out, reference(y, m, c, 1, false, b, r, lo, hi), 1e-6, 1e-6);
      });

  it('rows [m, c] channels-last in float16 take the composition, with the same layout', () => {
    const [m, c] = [6, 5];
    const y = inputs(m * c, -3, 3, 21);
    const b = inputs(c, -1, 1, 22);
    const r = inputs(m * c, -1, 1, 23);
    const h = (a: number[], shape: number[]) => mx.astype(mx.array(a, { shape }), 'float16');
    const out = mx.ext.convEpilogue(h(y, [m, c]), h(b, [c]), h(r, [m, c]), 0, 2, true);
    expect(out.shape).toEqual([m, c]);
    expectAllClose(mx.astype(out, 'float32'), reference(y, m, c, 1, false, b, r, 0, 2), 1e-2, 1e-2);
  });

  it('NaN passes through, ±Inf clamp, in both layouts', () => {
    const y = [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, -1, 0.5, 7, 1e-40, -0];
    for (const last of [true, false]) {
      const out = mx.ext.convEpilogue(mx.array(y, { shape: [1, 2, 4] }), null, null, 0, 6, last);
      const [c, sp] = last ? [4, 2] : [2, 4];
      const ref = reference(y, 1, c, sp, last, null, null, 0, 6);
      const got = Array.from(out.toTypedArray() as Float32Array);
      got.forEach((v, i) => (Number.isNaN(ref[i]) ? expect(v).toBeNaN() : expect(v).toBeCloseTo(ref[i], 6)));
    }
  });

  it('float16 and a broadcasting residual take the composition; empty arrays; bad bias is refused', () => {
    const [n, c, h, w] = [2, 5, 3, 4];
    const y = inputs(n * c * h * w, -3, 3, 8);
    const b = inputs(c, -1, 1, 9);
    const r1 = inputs(c, -1, 1, 10);
    const r = Array.from({ length: n * c * h * w }, (_, i) => r1[Math.floor(i / (h * w)) % c]);
    const ya = mx.array(y, { shape: [n, h, w, c] });
    const ref = reference(y, n, c, h * w, true, b, r, 0, Number.POSITIVE_INFINITY);
    const broad = mx.ext.convEpilogue(ya, mx.array(b), mx.array(r1, { shape: [1, c, 1, 1] }), 0, Number.POSITIVE_INFINITY, true);
    expectAllClose(broad, ref, 1e-6, 1e-6);
    const half = mx.ext.convEpilogue(mx.astype(ya, 'float16'), mx.astype(mx.array(b), 'float16'), null, 0, 6, true);
    expectAllClose(mx.astype(half, 'float32'), reference(y, n, c, h * w, true, b, null, 0, 6), 1e-2, 1e-2);
    expect(mx.ext.convEpilogue(mx.zeros([0, 3, 2, 2]), null, null, 0, 1, false).shape).toEqual([0, 3, 2, 2]);
    expect(() => mx.ext.convEpilogue(ya, mx.zeros([c + 1]), null, 0, 1, true)).toThrow(/bias must be a vector of 5 channels/);
  });

  it('differentiates through the composition', () => {
    const y = mx.array([-1, 2, 3, -4], { shape: [1, 2, 2] });
    const [, [g]] = mx.vjp((a: mx.Array) => mx.ext.convEpilogue(a, mx.array([0.5, 0.5]), null, 0, 3, false), [y], [mx.onesLike(y)]);
    expect(Array.from(g.toTypedArray() as Float32Array)).toEqual([0, 1, 0, 0]);
  });
});

// convEpilogueAct: the same pass, then HardSigmoid (act 1) or HardSwish (act 2) on each clamped
// value (the vectorized spans of math.h over each row or tile row just written).
describe('convEpilogueAct', () => {
  /** act after the clamp, float64: h = clamp(v * alpha + beta, 0, 1) (NaN kept), v * h for HardSwish. */
  const activate = (v: number, act: number, alpha: number, beta: number) => {
    if (act === 0) return v;
    const h0 = v * alpha + beta;
    const h = Number.isNaN(h0) ? h0 : Math.min(1, Math.max(0, h0));
    return act === 1 ? h : v * h;
  };
  const shapes: [number, number, number, number][] = [
    [1, 70, 5, 9],
    [2, 3, 1, 33],
    [1, 129, 6, 7],
  ];
  for (const [n, c, h, w] of shapes)
    for (const last of [true, false])
      for (const [act, alpha, beta, hasB, hasR, lo, hi] of [
        [2, 1 / 6, 0.5, true, false, Number.NEGATIVE_INFINITY, Number.POSITIVE_INFINITY],
        [1, 0.2, 0.5, true, true, Number.NEGATIVE_INFINITY, Number.POSITIVE_INFINITY],
        [2, 1 / 6, 0.5, false, true, -1, 2.5],
        [1, 1 / 6, 0.5, false, false, 0, 6],
      ] as const)
        it(`[${n}, ${c}, ${h}, ${w}] ${last ? 'channels-last' : 'channels-first'}, act ${act}, bias ${hasB}, residual ${hasR}, clamp [${lo}, ${hi}]`, () => {
          const sp = h * w;
          const y = inputs(n * c * sp, -5, 5, c + w);
          // NaN and the infinities pass through the clamp into the activation.
          y[3] = Number.NaN;
          y[n * c * sp - 2] = Number.POSITIVE_INFINITY;
          const b = hasB ? inputs(c, -1, 1, 4) : null;
          const r = hasR ? inputs(n * c * sp, -2, 2, 6) : null;
          const ya = mx.array(y, { shape: last ? [n, h, w, c] : [n, c, h, w] });
          const out = mx.ext.convEpilogueAct(
            ya,
            b && mx.array(b),
            r && mx.array(r, { shape: [n, c, h, w] }),
            lo,
            hi,
            act,
            alpha,
            beta,
            last,
          );
          expect(out.shape).toEqual([n, c, h, w]);
          const ref = reference(y, n, c, sp, last, b, r, lo, hi).map((v) => activate(v, act, alpha, beta));
          const got = Array.from(out.toTypedArray() as Float32Array);
          got.forEach((g, i) => {
            if (!Number.isFinite(ref[i]))
              expect(Object.is(g, ref[i]) || (Number.isNaN(g) && Number.isNaN(ref[i])), `${i}: ${g} vs ${ref[i]}`).toBe(true);
          });
          expectAllClose(
            mx.array(got.map((g, i) => (Number.isFinite(ref[i]) ? g : 0))),
            ref.map((v) => (Number.isFinite(v) ? v : 0)),
            1e-6,
            1e-6,
          );
        });

  it('rows [m, c] that stay channels-last, float16 (MLX ops), and an act it does not know', () => {
    const [m, c] = [37, 19];
    const y = inputs(m * c, -5, 5, 8);
    const b = inputs(c, -1, 1, 9);
    const ref = y.map((v, i) => activate(v + b[i % c], 2, 1 / 6, 0.5));
    expectAllClose(
      mx.ext.convEpilogueAct(mx.array(y, { shape: [m, c] }), mx.array(b), null, -Infinity, Infinity, 2, 1 / 6, 0.5, true),
      ref,
      1e-6,
      1e-6,
    );
    const half = mx.ext.convEpilogueAct(
      mx.astype(mx.array(y, { shape: [1, c, m] }), 'float16'),
      mx.astype(mx.array(b), 'float16'),
      null,
      -Infinity,
      Infinity,
      1,
      0.2,
      0.5,
      false,
    );
    const refHalf = y.map((_, i) => {
      const ch = Math.floor(i / m);
      return activate(y[i] + b[ch], 1, 0.2, 0.5);
    });
    expectAllClose(mx.astype(half, 'float32'), refHalf, 1e-2, 1e-2);
    expect(() => mx.ext.convEpilogueAct(mx.zeros([1, 2, 3]), null, null, 0, 1, 3, 1, 0, false)).toThrow(
      /act must be 0 \(none\), 1 \(HardSigmoid\) or 2 \(HardSwish\), got 3/,
    );
  });
});
