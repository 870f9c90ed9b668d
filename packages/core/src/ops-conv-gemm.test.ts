// convGemm and convPackWeight (native/src/kernels/conv/conv_gemm.*) against a float64 direct convolution
// in JS: channels-last 1-D and 2-D windows with strides, asymmetric pads, dilations, output
// channels that leave a partial panel, more K than one pass (partial sums stored between passes),
// more rows than one block, bias, residual and clamp; a 1x1 window with unit strides (rows read
// in place within one pass over K, packed past it); grouped, each group its own panels; few
// channels a group (the direct kernel); 3x3 windows by Winograd's F(2x2, 3x3), and infinities there;
// the composition of MLX ops on float16 and with the kernels off gives the same.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';
import { CORE_INDEX, runScript } from '../test/child.js';
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
  /** Groups (default 1): c / g input and o / g output channels each. */
  g?: number;
}

const outSpatial = (t: Case) => t.sp.map((x, i) => Math.floor((x + t.pb[i] + t.pe[i] - (t.k[i] - 1) * t.d[i] - 1) / t.s[i]) + 1);

/** x [n, ...sp, c], w [o, ...k, c] -> clamp(conv + b + r) [n, ...out, o], float64; 1-D as height 1. */
function reference(t: Case, x: number[], w: number[], b: number[] | null, r: number[] | null, lo: number, hi: number): number[] {
  const two = t.sp.length === 2;
  const [ih, iw] = two ? t.sp : [1, t.sp[0]];
  const [kh, kw] = two ? t.k : [1, t.k[0]];
  const [sh, sw] = two ? t.s : [1, t.s[0]];
  const [ph, pw] = two ? t.pb : [0, t.pb[0]];
  const [dh, dw] = two ? t.d : [1, t.d[0]];
  const os = outSpatial(t);
  const [oh, ow] = two ? os : [1, os[0]];
  const g = t.g ?? 1;
  const cg = t.c / g;
  const og = t.o / g;
  const out: number[] = [];
  for (let bi = 0; bi < t.n; bi++)
    for (let oy = 0; oy < oh; oy++)
      for (let ox = 0; ox < ow; ox++)
        for (let oc = 0; oc < t.o; oc++) {
          let acc = 0;
          for (let ky = 0; ky < kh; ky++)
            for (let kx = 0; kx < kw; kx++) {
              const iy = oy * sh - ph + ky * dh;
              const ix = ox * sw - pw + kx * dw;
              if (iy < 0 || iy >= ih || ix < 0 || ix >= iw) continue;
              const c0 = Math.floor(oc / og) * cg;
              for (let ci = 0; ci < cg; ci++)
                acc += x[((bi * ih + iy) * iw + ix) * t.c + c0 + ci] * w[((oc * kh + ky) * kw + kx) * cg + ci];
            }
          const at = out.length;
          const v = acc + (b ? b[oc] : 0) + (r ? r[at] : 0);
          out.push(Math.min(hi, Math.max(lo, v)));
        }
  return out;
}

const cases: [string, Case][] = [
  // 3x3 windows with unit strides and dilations, one group, 16+ channels in and out and 32+ tiles
  // of 2x2 outputs go by Winograd's F(2x2, 3x3) (conv_winograd.cpp): odd output sizes (a last tile
  // half outside), asymmetric and no pads, a batch, channels off the vector width, several chunks
  // of tiles, and rows of 1024 channels (their stride kept off 4 KiB multiples).
  [
    'winograd: 3x3 pads 0 / 2 and 2 / 1, 20 -> 40, batch 2',
    { n: 2, sp: [9, 11], c: 20, o: 40, k: [3, 3], s: [1, 1], pb: [0, 2], pe: [2, 1], d: [1, 1] },
  ],
  [
    'winograd: 3x3 no pads, 24 -> 33 over 14x14',
    { n: 1, sp: [14, 14], c: 24, o: 33, k: [3, 3], s: [1, 1], pb: [0, 0], pe: [0, 0], d: [1, 1] },
  ],
  [
    'winograd: 3x3 p1, 16 -> 16 over 47x45 (two chunks of tiles)',
    { n: 1, sp: [47, 45], c: 16, o: 16, k: [3, 3], s: [1, 1], pb: [1, 1], pe: [1, 1], d: [1, 1] },
  ],
  ['winograd: 3x3 p1, 1024 -> 24, batch 4', { n: 4, sp: [6, 6], c: 1024, o: 24, k: [3, 3], s: [1, 1], pb: [1, 1], pe: [1, 1], d: [1, 1] }],
  ['3x3 s1 p1, 8 -> 40 (a partial panel)', { n: 1, sp: [9, 11], c: 8, o: 40, k: [3, 3], s: [1, 1], pb: [1, 1], pe: [1, 1], d: [1, 1] }],
  ['7x7 s2 p3, 3 -> 16, batch 2 (the stem)', { n: 2, sp: [20, 17], c: 3, o: 16, k: [7, 7], s: [2, 2], pb: [3, 3], pe: [3, 3], d: [1, 1] }],
  [
    '1x1 s1, 300 -> 70: K over one pass, rows in place',
    { n: 1, sp: [10, 13], c: 300, o: 70, k: [1, 1], s: [1, 1], pb: [0, 0], pe: [0, 0], d: [1, 1] },
  ],
  ['1x1 s1, 64 -> 40: rows read in place', { n: 2, sp: [7, 15], c: 64, o: 40, k: [1, 1], s: [1, 1], pb: [0, 0], pe: [0, 0], d: [1, 1] }],
  ['1x1 s2, 33 -> 64', { n: 2, sp: [9, 9], c: 33, o: 64, k: [1, 1], s: [2, 2], pb: [0, 0], pe: [0, 0], d: [1, 1] }],
  [
    '3x3 s2, asymmetric pads, dilation 2, 40 -> 33',
    { n: 1, sp: [13, 12], c: 40, o: 33, k: [3, 3], s: [2, 1], pb: [0, 2], pe: [2, 1], d: [2, 2] },
  ],
  [
    '3x3 over 260 rows (3 blocks), 64 -> 96, K 576',
    { n: 1, sp: [13, 20], c: 64, o: 96, k: [3, 3], s: [1, 1], pb: [1, 1], pe: [1, 1], d: [1, 1] },
  ],
  [
    '3x3 dilation (2, 3), asymmetric pads, 5 -> 9: whole rows in one pass',
    { n: 1, sp: [11, 13], c: 5, o: 9, k: [3, 3], s: [1, 2], pb: [2, 3], pe: [1, 2], d: [2, 3] },
  ],
  ['1-D k5 s2 p2, 7 -> 5', { n: 3, sp: [31], c: 7, o: 5, k: [5], s: [2], pb: [2], pe: [2], d: [1] }],
  // One channel per tap: the rows pack a kernel row at a time (a stem over a grey image).
  [
    '3x3 s1 p1, 1 -> 8, batch 2, over 230 rows',
    { n: 2, sp: [11, 10], c: 1, o: 8, k: [3, 3], s: [1, 1], pb: [1, 1], pe: [1, 1], d: [1, 1] },
  ],
  // Whole rows of one group, undilated along x, go by spans of an output row: the columns whose
  // window is inside the input along x are fixed-size copies (kernel-row widths 3, 6, 21, 30 and 5
  // are and are not in the kernel's list), the edges per position; row blocks of 96 start mid-row
  // and cross images.
  [
    "3x3 s1 p1, 1 -> 8 at 28x28, batch 2 (small-cnn's stem)",
    { n: 2, sp: [28, 28], c: 1, o: 8, k: [3, 3], s: [1, 1], pb: [1, 1], pe: [1, 1], d: [1, 1] },
  ],
  ['3x3 s2, pads 3 and 0 / 0 and 2, 2 -> 7', { n: 1, sp: [12, 15], c: 2, o: 7, k: [3, 3], s: [2, 3], pb: [3, 0], pe: [0, 2], d: [1, 1] }],
  ['7x3 s1, dilated along y only, 7 -> 4', { n: 1, sp: [16, 9], c: 7, o: 4, k: [7, 3], s: [1, 1], pb: [2, 1], pe: [2, 1], d: [2, 1] }],
  [
    '3x3 s1 p1, 10 -> 12 (a width off the list)',
    { n: 1, sp: [6, 10], c: 10, o: 12, k: [3, 3], s: [1, 1], pb: [1, 1], pe: [1, 1], d: [1, 1] },
  ],
  ['1-D k5 p2 over 2 positions (no inside column), 1 -> 3', { n: 3, sp: [2], c: 1, o: 3, k: [5], s: [1], pb: [2], pe: [2], d: [1] }],
  ['1-D k3 s2 pads 0 / 1, 2 -> 3', { n: 2, sp: [9], c: 2, o: 3, k: [3], s: [2], pb: [0], pe: [1], d: [1] }],
  // K 363: the portable build's second depth pass starts inside a kernel row and inside a tap (column 256: tap 85, channel 1).
  ['11x11 s3 p2, 3 -> 20, K over one pass', { n: 1, sp: [23, 19], c: 3, o: 20, k: [11, 11], s: [3, 3], pb: [2, 2], pe: [2, 2], d: [1, 1] }],
  // The AVX2 and AVX-512 builds' passes are up to 1152 deep, split evenly: K 1170 in two of 585
  // (the second starting inside a tap), the residual added only in the second's store.
  [
    '3x3 s1 p1, 130 -> 40, K 1170 over two AVX2 passes',
    { n: 1, sp: [7, 9], c: 130, o: 40, k: [3, 3], s: [1, 1], pb: [1, 1], pe: [1, 1], d: [1, 1] },
  ],
  [
    '1x1 s1, 1200 -> 20: K over one AVX2 pass, rows packed',
    { n: 1, sp: [4, 5], c: 1200, o: 20, k: [1, 1], s: [1, 1], pb: [0, 0], pe: [0, 0], d: [1, 1] },
  ],
  ['1-D k1, 2 -> 1, one row', { n: 1, sp: [1], c: 2, o: 1, k: [1], s: [1], pb: [0], pe: [0], d: [1] }],
  // Grouped: each group's rows from its own channels, its own panels.
  ['g2 3x3 s2 p1, 8 -> 16', { n: 1, sp: [14, 14], c: 8, o: 16, k: [3, 3], s: [2, 2], pb: [1, 1], pe: [1, 1], d: [1, 1], g: 2 }],
  [
    'g3 3x3 dilation 2, 6 -> 120 (two panels a group)',
    { n: 2, sp: [9, 8], c: 6, o: 120, k: [3, 3], s: [1, 2], pb: [2, 0], pe: [1, 2], d: [2, 2], g: 3 },
  ],
  ['g2 3x3, 64 -> 16, K over one pass', { n: 1, sp: [6, 7], c: 64, o: 16, k: [3, 3], s: [1, 1], pb: [1, 1], pe: [1, 1], d: [1, 1], g: 2 }],
  [
    'g4 1x1, 16 -> 8, rows in place, batch 3',
    { n: 3, sp: [7, 9], c: 16, o: 8, k: [1, 1], s: [1, 1], pb: [0, 0], pe: [0, 0], d: [1, 1], g: 4 },
  ],
  ['g = c, 1-D k5 s2, 6 -> 6', { n: 2, sp: [40], c: 6, o: 6, k: [5], s: [2], pb: [3], pe: [1], d: [1], g: 6 }],
  [
    'g2 5x5 p2, 40 -> 10, 20 channels a group, 130 rows',
    { n: 1, sp: [10, 13], c: 40, o: 10, k: [5, 5], s: [1, 1], pb: [2, 2], pe: [2, 2], d: [1, 1], g: 2 },
  ],
  // At most 16 channels a group take the direct kernel on AVX2 (conv_direct_impl.h): blocks of 8
  // positions (6 for 9-16 channels) inside the row, the last few by 4, 2 and 1, the padded
  // columns one at a time; past 1 M multiply-adds its rows are split over the threads.
  [
    '3x3 s1 p1, 4 -> 16 over 48x49 (direct, on the threads)',
    { n: 1, sp: [48, 49], c: 4, o: 16, k: [3, 3], s: [1, 1], pb: [1, 1], pe: [1, 1], d: [1, 1] },
  ],
  [
    '3x3 s1, pads 2 / 0, 3 -> 13, rows of 15 (direct: 8 + 4 + 2 + 1 inside)',
    { n: 2, sp: [6, 17], c: 3, o: 13, k: [3, 3], s: [1, 1], pb: [2, 2], pe: [0, 0], d: [1, 1] },
  ],
  [
    'g2 3x2 s(1, 2) dilation (1, 3), 6 -> 10, pads past the window (direct, per tap)',
    { n: 1, sp: [5, 23], c: 6, o: 10, k: [3, 2], s: [1, 2], pb: [3, 4], pe: [3, 5], d: [1, 3], g: 2 },
  ],
];

/** w [o, ...k, c / g] -> each group's channels padded to whole panels, then packed. */
function packGrouped(w: number[], t: Case): mx.Array {
  const g = t.g ?? 1;
  const cg = t.c / g;
  const og = t.o / g;
  const per = t.k.reduce((a, b) => a * b, 1) * cg;
  const padded = Math.ceil(og / 32) * 32;
  const wide = new Array<number>(g * padded * per).fill(0);
  for (let oc = 0; oc < t.o; oc++) {
    const at = (Math.floor(oc / og) * padded + (oc % og)) * per;
    for (let i = 0; i < per; i++) wide[at + i] = w[oc * per + i];
  }
  return mx.ext.convPackWeight(mx.array(wide, { shape: [g * padded, ...t.k, cg] }));
}

describe('convGemm', () => {
  for (const [name, t] of cases)
    for (const [hasB, hasR, lo, hi] of [
      [true, true, 0, Number.POSITIVE_INFINITY],
      [false, false, Number.NEGATIVE_INFINITY, Number.POSITIVE_INFINITY],
      [true, false, -0.5, 0.5],
    ] as const)
      it(`${name}, bias ${hasB}, residual ${hasR}, clamp [${lo}, ${hi}]`, () => {
        const size = (d: number[]) => d.reduce((a, b) => a * b, 1);
        const os = outSpatial(t);
        const xd = [t.n, ...t.sp, t.c];
        const g = t.g ?? 1;
        const wd = [t.o, ...t.k, t.c / g];
        const yd = [t.n, ...os, t.o];
        const x = inputs(size(xd), -1, 1, 7);
        const w = inputs(size(wd), -0.5, 0.5, 11);
        const b = hasB ? inputs(t.o, -1, 1, 3) : null;
        const r = hasR ? inputs(size(yd), -1, 1, 5) : null;
        const wp = packGrouped(w, t);
        expect(wp.shape).toEqual([g * Math.ceil(t.o / g / 32), ...t.k, t.c / g, 32]);
        const run = () =>
          mx.ext.convGemm(
            mx.array(x, { shape: xd }),
            wp,
            t.o,
            b && mx.array(b),
            r && mx.array(r, { shape: yd }),
            t.s,
            t.pb,
            t.pe,
            t.d,
            lo,
            hi,
          );
        const y = run();
        expect(y.shape).toEqual(yd);
        const ref = reference(t, x, w, b, r, lo, hi);
        if (name.startsWith('winograd')) {
          // Winograd's rounding grows with the transformed sums, a few times the direct product's
          // (long sums such as 9 x 1024 terms leave 1e-5 relative): bounded by the sum of the
          // terms' magnitudes, |x|·|w| + |b| + |r|, as a float32 sum of them is.
          const abs = (v: number[] | null) => v && v.map(Math.abs);
          const mag = reference(t, abs(x)!, abs(w)!, abs(b), abs(r), -Infinity, Infinity);
          const got = Array.from(y.toTypedArray() as Float32Array);
          for (let i = 0; i < ref.length; i++)
            expect(Math.abs(got[i] - ref[i]), `element ${i}: got ${got[i]}, expected ${ref[i]}`).toBeLessThanOrEqual(
              1e-5 + 1e-5 * Math.abs(ref[i]) + 2e-7 * mag[i],
            );
        } else expectAllClose(y, ref, 1e-5, 1e-5);
        // MLX's conv_general on the unpacked weight (float16 takes the composition).
        const h = mx.astype(
          mx.ext.convGemm(
            mx.array(x, { shape: xd, dtype: 'float16' }),
            mx.astype(wp, 'float16'),
            t.o,
            b && mx.array(b, { dtype: 'float16' }),
            r && mx.array(r, { shape: yd, dtype: 'float16' }),
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
        expectAllClose(h, ref, 2e-2, 5e-2);
      });

  it('packs 40 channels of a 3x2 window over 3 channels into two panels, halves apart where the build splits them', () => {
    const [o, kh, kw, c] = [40, 3, 2, 3];
    const depth = kh * kw * c;
    const w = inputs(o * depth, -1, 1, 13);
    const p = mx.ext.convPackWeight(mx.array(w, { shape: [o, kh, kw, c] }));
    expect(p.shape).toEqual([2, kh, kw, c, 32]);
    const got = Array.from(p.toTypedArray() as Float32Array);
    // Channel q * 32 + j at depth index d (ky, kx, channel): [q][d][j], or [q][j / 16][d][j % 16] split.
    const split = mx.convPanelsSplit();
    expect(split).toBe(mx.cpuKernelsUseAvx2() && !mx.cpuKernelsUseAvx512());
    const want = new Array<number>(2 * depth * 32).fill(0);
    for (let ch = 0; ch < o; ch++)
      for (let d = 0; d < depth; d++) {
        const q = Math.floor(ch / 32);
        const j = ch % 32;
        const at = split ? q * depth * 32 + Math.floor(j / 16) * depth * 16 + d * 16 + (j % 16) : q * depth * 32 + d * 32 + j;
        want[at] = w[ch * depth + d];
      }
    expect(got).toEqual(want);
  });

  it('keeps NaN and clamps ±Inf like any value', () => {
    const x = mx.array([Number.NaN, 1, Number.POSITIVE_INFINITY, 1, 2, 5, Number.NEGATIVE_INFINITY, 1], { shape: [1, 4, 1, 2] });
    const wp = mx.ext.convPackWeight(mx.array([1, 0], { shape: [1, 1, 1, 2] }));
    const y = mx.ext.convGemm(x, wp, 1, null, null, [1, 1], [0, 0], [0, 0], [1, 1], 0, 6);
    const got = y.toList() as unknown as number[][][][];
    expect(Number.isNaN(got[0][0][0][0])).toBe(true);
    expect(got[0][1][0][0]).toBe(6);
    expect(got[0][2][0][0]).toBe(2);
    expect(got[0][3][0][0]).toBe(0);
  });

  it("gives the direct product's infinities where a 3x3 window that Winograd takes meets one (input or weight)", () => {
    // 16 -> 16 over 12x12, pads 1: 36 tiles. The transforms' sums of a patch or a window would give
    // Inf - Inf where the direct product gives ±Inf: the result matches the reference's non-finite
    // values exactly (and its others within rounding). Returns how many are infinite.
    const t: Case = { n: 1, sp: [12, 12], c: 16, o: 16, k: [3, 3], s: [1, 1], pb: [1, 1], pe: [1, 1], d: [1, 1] };
    const check = (x: number[], w: number[]): number => {
      const y = mx.ext.convGemm(
        mx.array(x, { shape: [1, 12, 12, 16] }),
        packGrouped(w, t),
        16,
        null,
        null,
        [1, 1],
        [1, 1],
        [1, 1],
        [1, 1],
        -Infinity,
        Infinity,
      );
      const ref = reference(t, x, w, null, null, -Infinity, Infinity);
      const got = Array.from(y.toTypedArray() as Float32Array);
      let infinite = 0;
      for (let i = 0; i < ref.length; i++) {
        if (Number.isFinite(ref[i])) expect(Math.abs(got[i] - ref[i]), `element ${i}`).toBeLessThanOrEqual(1e-5 + 1e-5 * Math.abs(ref[i]));
        else {
          expect(got[i], `element ${i}`).toBe(ref[i]);
          infinite++;
        }
      }
      return infinite;
    };
    // One +Inf in the input, the weights all positive or all negative per output channel: every
    // output whose window holds it is ±Inf, none NaN.
    const x = inputs(12 * 12 * 16, -1, 1, 21);
    x[(5 * 12 + 6) * 16 + 3] = Number.POSITIVE_INFINITY;
    const w = inputs(16 * 9 * 16, 0.1, 0.5, 23).map((v, i) => (Math.floor(i / 144) % 2 ? -v : v));
    expect(check(x, w)).toBe(9 * 16);
    // An infinite weight: its output channel is ±Inf (or NaN) everywhere the reference's is.
    const w2 = inputs(16 * 9 * 16, -0.5, 0.5, 25);
    w2[4 * 144 + 4 * 16 + 2] = Number.POSITIVE_INFINITY;
    expect(check(inputs(12 * 12 * 16, 0.1, 1, 27), w2)).toBeGreaterThan(0);
  });

  it("takes Winograd for few tiles only from a weight's second evaluation (a compiled replay), the direct product first", () => {
    // 32 -> 32 over 7x7, pads 1: 16 tiles, under the 32 a first evaluation needs.
    const t: Case = { n: 1, sp: [7, 7], c: 32, o: 32, k: [3, 3], s: [1, 1], pb: [1, 1], pe: [1, 1], d: [1, 1] };
    const x = inputs(7 * 7 * 32, -1, 1, 31);
    const w = inputs(32 * 9 * 32, -0.5, 0.5, 33);
    const xa = mx.array(x, { shape: [1, 7, 7, 32] });
    const wp = packGrouped(w, t);
    const conv = (a: mx.Array) => mx.ext.convGemm(a, wp, 32, null, null, [1, 1], [1, 1], [1, 1], [1, 1], -Infinity, Infinity);
    const ref = reference(t, x, w, null, null, -Infinity, Infinity);
    const direct = Array.from(conv(xa).toTypedArray() as Float32Array);
    expectAllClose(direct, ref, 1e-5, 1e-5);
    const f = mx.compile(conv);
    const runs = [0, 1, 2].map(() => Array.from((f(xa) as mx.Array).toTypedArray() as Float32Array));
    for (const r of runs) expectAllClose(r, ref, 2e-5, 2e-5);
    // The later replays transform the weight and differ from the direct product in last bits.
    expect(runs[2].filter((v, i) => v !== direct[i]).length).toBeGreaterThan(direct.length / 4);
    expect(runs[2]).toEqual(runs[1]);
  });

  it('gives the epilogue alone for a window of no taps (a kernel of height 0): bias and residual, clamped', () => {
    const x = mx.ones([1, 4, 5, 2], 'float32');
    const wp = mx.ext.convPackWeight(mx.ones([3, 0, 3, 2], 'float32'));
    const r = Array.from({ length: 5 * 3 * 3 }, (_, i) => (i % 7) / 4 - 0.5);
    const y = mx.ext.convGemm(
      x,
      wp,
      3,
      mx.array([1, -2, 0.5]),
      mx.array(r, { shape: [1, 5, 3, 3] }),
      [1, 1],
      [0, 0],
      [0, 0],
      [1, 1],
      -1,
      2,
    );
    expect(y.shape).toEqual([1, 5, 3, 3]);
    const want = r.map((v, i) => Math.min(2, Math.max(-1, v + [1, -2, 0.5][i % 3])));
    expect(Array.from(y.toTypedArray() as Float32Array)).toEqual(want.map(Math.fround));
  });

  it('refuses a weight that is not packed, a channel mismatch and a window larger than the input', () => {
    const x = mx.zeros([1, 4, 4, 3], 'float32');
    const w = mx.zeros([5, 3, 3, 3], 'float32');
    expect(() => mx.ext.convGemm(x, w, 5, null, null, [1, 1], [0, 0], [0, 0], [1, 1], 0, 1)).toThrow(/packed weight/);
    const wp = mx.ext.convPackWeight(mx.zeros([5, 3, 3, 2], 'float32'));
    expect(() => mx.ext.convGemm(x, wp, 5, null, null, [1, 1], [0, 0], [0, 0], [1, 1], 0, 1)).toThrow(/3 channels, the weight 2/);
    const big = mx.ext.convPackWeight(mx.zeros([5, 5, 5, 3], 'float32'));
    expect(() => mx.ext.convGemm(x, big, 5, null, null, [1, 1], [0, 0], [0, 0], [1, 1], 0, 1)).toThrow(/larger than the padded input/);
    const w3 = mx.ext.convPackWeight(mx.zeros([5, 3, 3, 3], 'float32'));
    expect(() => mx.ext.convGemm(x, w3, 40, null, null, [1, 1], [0, 0], [0, 0], [1, 1], 0, 1)).toThrow(/output channels/);
    // Groups: 6 channels over a weight of 3 a group are 2 groups; 5 outputs do not split in 2, and
    // 2 groups of 3 outputs need a panel each.
    const x6 = mx.zeros([1, 4, 4, 6], 'float32');
    expect(() => mx.ext.convGemm(x6, w3, 5, null, null, [1, 1], [0, 0], [0, 0], [1, 1], 0, 1)).toThrow(/do not split into 2 groups/);
    expect(() => mx.ext.convGemm(x6, w3, 6, null, null, [1, 1], [0, 0], [0, 0], [1, 1], 0, 1)).toThrow(/in 2 groups do not fill 1 panels/);
  });
});

describe('Winograd F(2x2, 3x3) (MLXC_WINOGRAD, read once per process: a child process each)', () => {
  it('takes a 3x3 window that fits it by default, and MLXC_WINOGRAD=0 the direct product: the same within rounding', () => {
    const script = `
      import * as mx from ${CORE_INDEX};
      const x = mx.random.normal([1, 20, 20, 32], 'float32', 0, 1, mx.random.key(1));
      const w = mx.ext.convPackWeight(mx.random.normal([48, 3, 3, 32], 'float32', 0, 0.2, mx.random.key(2)));
      const y = mx.ext.convGemm(x, w, 48, null, null, [1, 1], [1, 1], [1, 1], [1, 1], -Infinity, Infinity);
      console.log(JSON.stringify(Array.from(y.toTypedArray())));`;
    const out = (winograd: string) => {
      const r = runScript(script, { MLXC_WINOGRAD: winograd });
      expect(r.status, r.stderr).toBe(0);
      return JSON.parse(r.stdout.trim().split('\n').at(-1)!) as number[];
    };
    const wino = out('1');
    const direct = out('0');
    expect(wino).toHaveLength(20 * 20 * 48);
    // The same sums computed otherwise (equal in exact arithmetic): most results differ in their last bits, none by more
    // than rounding.
    let differ = 0;
    for (let i = 0; i < wino.length; i++) {
      if (wino[i] !== direct[i]) differ++;
      expect(Math.abs(wino[i] - direct[i]), `element ${i}`).toBeLessThan(1e-4 * (1 + Math.abs(direct[i])));
    }
    expect(differ).toBeGreaterThan(wino.length / 4);
  });
});
