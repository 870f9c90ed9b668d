// smallConv (native/src/kernels/conv/small_conv.*) against a float64 direct convolution in JS:
// channels-first 1-D and 2-D windows of few output positions with strides, asymmetric pads,
// dilations, batch 1 and more, channel counts off multiples of 8 and 16, a partial last block of 4
// positions, depth past the AVX-512 short-depth kernel (256), output channels split over the
// thread pool (a product of more than 2^20 multiply-adds), bias and clamp; the composition of MLX
// ops (float16) gives the same.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';
import { expectAllClose, inputs } from '../test/numeric.js';

interface Case {
  n: number;
  sp: number[]; // input spatial
  c: number;
  o: number;
  k: number[];
  s: number[];
  pb: number[];
  pe: number[];
  d: number[];
}

const outSpatial = (t: Case) => t.sp.map((x, i) => Math.floor((x + t.pb[i] + t.pe[i] - (t.k[i] - 1) * t.d[i] - 1) / t.s[i]) + 1);

/** x [n, c, ...sp], w [o, c, ...k] -> clamp(conv + b) [n, o, ...out], float64; 1-D as height 1. */
function reference(t: Case, x: number[], w: number[], b: number[] | null, lo: number, hi: number): number[] {
  const two = t.sp.length === 2;
  const [ih, iw] = two ? t.sp : [1, t.sp[0]];
  const [kh, kw] = two ? t.k : [1, t.k[0]];
  const [sh, sw] = two ? t.s : [1, t.s[0]];
  const [ph, pw] = two ? t.pb : [0, t.pb[0]];
  const [dh, dw] = two ? t.d : [1, t.d[0]];
  const os = outSpatial(t);
  const [oh, ow] = two ? os : [1, os[0]];
  const out: number[] = [];
  for (let bi = 0; bi < t.n; bi++)
    for (let oc = 0; oc < t.o; oc++)
      for (let oy = 0; oy < oh; oy++)
        for (let ox = 0; ox < ow; ox++) {
          let acc = 0;
          for (let ci = 0; ci < t.c; ci++)
            for (let ky = 0; ky < kh; ky++)
              for (let kx = 0; kx < kw; kx++) {
                const iy = oy * sh - ph + ky * dh;
                const ix = ox * sw - pw + kx * dw;
                if (iy < 0 || iy >= ih || ix < 0 || ix >= iw) continue;
                acc += x[((bi * t.c + ci) * ih + iy) * iw + ix] * w[((oc * t.c + ci) * kh + ky) * kw + kx];
              }
          out.push(Math.min(hi, Math.max(lo, acc + (b ? b[oc] : 0))));
        }
  return out;
}

const cases: [string, Case][] = [
  // Silero VAD's STFT: one channel, a 256-tap window at stride 128, 258 output channels, 4 positions.
  ['1-D k256 s128, 1 -> 258 (the STFT)', { n: 1, sp: [640], c: 1, o: 258, k: [256], s: [128], pb: [0], pe: [0], d: [1] }],
  ['1-D k3 p1, 129 -> 128 over 4 positions', { n: 1, sp: [4], c: 129, o: 128, k: [3], s: [1], pb: [1], pe: [1], d: [1] }],
  ['1-D k3 s2 p1, 128 -> 64, batch 3', { n: 3, sp: [4], c: 128, o: 64, k: [3], s: [2], pb: [1], pe: [1], d: [1] }],
  ['1-D k3 p1, 64 -> 65 over one position', { n: 2, sp: [1], c: 64, o: 65, k: [3], s: [1], pb: [1], pe: [1], d: [1] }],
  ['1-D k5 s2 dilation 2, pads 3 / 0, 7 -> 5, 7 positions', { n: 2, sp: [19], c: 7, o: 5, k: [5], s: [2], pb: [3], pe: [0], d: [2] }],
  ['1-D k4 dilation 3, pads 0 / 5, 3 -> 17, 10 positions', { n: 1, sp: [14], c: 3, o: 17, k: [4], s: [1], pb: [0], pe: [5], d: [3] }],
  ['1-D k1, 5 -> 3, one position', { n: 1, sp: [1], c: 5, o: 3, k: [1], s: [1], pb: [0], pe: [0], d: [1] }],
  ['2-D 3x3 s2 p1, 9 -> 33 over 3x3', { n: 2, sp: [5, 6], c: 9, o: 33, k: [3, 3], s: [2, 2], pb: [1, 1], pe: [1, 0], d: [1, 1] }],
  [
    '2-D 3x2 dilation (2, 1), pads 2,0 / 0,1, 6 -> 19 over 2x4',
    { n: 1, sp: [4, 4], c: 6, o: 19, k: [3, 2], s: [1, 1], pb: [2, 0], pe: [0, 1], d: [2, 1] },
  ],
  // 2^20 and more multiply-adds: output channels in bands over the pool.
  ['1-D k3 p1, 300 -> 700 over 5 positions (threads)', { n: 1, sp: [5], c: 300, o: 700, k: [3], s: [1], pb: [1], pe: [1], d: [1] }],
  [
    '2-D 2x2, 31 -> 47 over 4x4, a window past the input',
    { n: 1, sp: [4, 4], c: 31, o: 47, k: [2, 2], s: [1, 1], pb: [1, 1], pe: [0, 0], d: [1, 1] },
  ],
];

describe('smallConv', () => {
  for (const [name, t] of cases)
    for (const [hasB, lo, hi] of [
      [true, Number.NEGATIVE_INFINITY, Number.POSITIVE_INFINITY],
      [false, 0, Number.POSITIVE_INFINITY],
      [true, -0.5, 0.5],
    ] as const)
      it(`${name}, bias ${hasB}, clamp [${lo}, ${hi}]`, () => {
        const size = (d: number[]) => d.reduce((a, b) => a * b, 1);
        const os = outSpatial(t);
        const xd = [t.n, t.c, ...t.sp];
        const wd = [t.o, t.c, ...t.k];
        const yd = [t.n, t.o, ...os];
        const x = inputs(size(xd), -1, 1, 7);
        const w = inputs(size(wd), -0.5, 0.5, 11);
        const b = hasB ? inputs(t.o, -1, 1, 3) : null;
        const y = mx.ext.smallConv(mx.array(x, { shape: xd }), mx.array(w, { shape: wd }), b && mx.array(b), t.s, t.pb, t.pe, t.d, lo, hi);
        expect(y.shape).toEqual(yd);
        const ref = reference(t, x, w, b, lo, hi);
        expectAllClose(y, ref, 1e-5, 1e-5);
        // MLX's conv_general between the layout moves (float16 takes the composition).
        const h = mx.astype(
          mx.ext.smallConv(
            mx.array(x, { shape: xd, dtype: 'float16' }),
            mx.array(w, { shape: wd, dtype: 'float16' }),
            b && mx.array(b, { dtype: 'float16' }),
            t.s,
            t.pb,
            t.pe,
            t.d,
            lo,
            hi,
          ),
          'float32',
        );
        expect(h.shape).toEqual(yd);
        expectAllClose(h, ref, 3e-2, 1e-1);
      });

  it('reads a strided view of the input (a transposed one)', () => {
    const x = inputs(30, -1, 1, 2);
    const w = mx.array(inputs(4 * 6 * 3, -1, 1, 4), { shape: [4, 6, 3] });
    const xt = mx.transpose(mx.array(x, { shape: [1, 5, 6] }), [0, 2, 1]);
    const y = mx.ext.smallConv(xt, w, null, [1], [1], [1], [1], -Infinity, Infinity);
    const want = mx.ext.smallConv(mx.contiguous(xt, false), w, null, [1], [1], [1], [1], -Infinity, Infinity);
    expect(y.shape).toEqual([1, 4, 5]);
    expectAllClose(y, Array.from(want.toTypedArray() as Float32Array), 0, 0);
  });

  it('keeps NaN through the clamp', () => {
    const x = mx.array([Number.NaN, 1, 2, 3], { shape: [1, 1, 4] });
    const w = mx.array([1, 1], { shape: [2, 1, 1] });
    const y = Array.from(mx.ext.smallConv(x, w, null, [1], [0], [0], [1], 0, 1).toTypedArray() as Float32Array);
    expect(y[0]).toBeNaN();
    expect(y.slice(1, 4)).toEqual([1, 1, 1]);
  });

  it("gives the bias over no input channels (MLX's CPU conv divides by the channel count)", () => {
    const x = mx.zeros([2, 0, 5]);
    const w = mx.zeros([3, 0, 3]);
    const b = mx.array([1, -2, 0.25]);
    for (const dtype of ['float32', 'float16'] as const) {
      const y = mx.ext.smallConv(mx.astype(x, dtype), mx.astype(w, dtype), mx.astype(b, dtype), [2], [1], [1], [1], -1, 0.5);
      expect(y.shape).toEqual([2, 3, 3]);
      expectAllClose(
        mx.astype(y, 'float32'),
        Array.from({ length: 18 }, (_, i) => [0.5, -1, 0.25][Math.floor(i / 3) % 3]),
        0,
        0,
      );
    }
  });

  it('rejects a weight of another channel count, and bad windows, by name', () => {
    const x = mx.zeros([1, 3, 4]);
    expect(() => mx.ext.smallConv(x, mx.zeros([2, 4, 3]), null, [1], [0], [0], [1], -Infinity, Infinity)).toThrow(
      /small_conv: the weight has 4 input channels, the input 3/,
    );
    expect(() => mx.ext.smallConv(x, mx.zeros([2, 3, 9]), null, [1], [0], [0], [1], -Infinity, Infinity)).toThrow(
      /small_conv: the window \(9\) is larger than the padded input \(4\)/,
    );
    expect(() => mx.ext.smallConv(x, mx.zeros([2, 3, 3]), mx.zeros([3]), [1], [0], [0], [1], -Infinity, Infinity)).toThrow(
      /small_conv: bias must be \[2\]/,
    );
  });
});
