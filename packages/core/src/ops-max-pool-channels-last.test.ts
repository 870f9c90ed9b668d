// maxPoolChannelsLast (native/src/kernels/pool/pool.*) against a float64 max pool in JS: channels-last
// 1-D and 2-D windows with strides, asymmetric pads (padding never wins), dilations, odd channel
// counts, batches; NaN propagates as maximum's does; float16 takes the composition of MLX ops
// (pad, strided slices, maximum) and gives the same.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';
import { expectAllClose, inputs } from '../test/numeric.js';

interface Case {
  n: number;
  sp: number[];
  c: number;
  k: number[];
  s: number[];
  pb: number[];
  pe: number[];
  d: number[];
}

const outSpatial = (t: Case) => t.sp.map((x, i) => Math.floor((x + t.pb[i] + t.pe[i] - (t.k[i] - 1) * t.d[i] - 1) / t.s[i]) + 1);
const LOWEST = -3.4028234663852886e38;

function reference(t: Case, x: number[]): number[] {
  const two = t.sp.length === 2;
  const [ih, iw] = two ? t.sp : [1, t.sp[0]];
  const [kh, kw] = two ? t.k : [1, t.k[0]];
  const [sh, sw] = two ? t.s : [1, t.s[0]];
  const [ph, pw] = two ? t.pb : [0, t.pb[0]];
  const [dh, dw] = two ? t.d : [1, t.d[0]];
  const os = outSpatial(t);
  const [oh, ow] = two ? os : [1, os[0]];
  const out: number[] = [];
  for (let b = 0; b < t.n; b++)
    for (let oy = 0; oy < oh; oy++)
      for (let ox = 0; ox < ow; ox++)
        for (let ci = 0; ci < t.c; ci++) {
          let m = LOWEST;
          for (let ky = 0; ky < kh; ky++)
            for (let kx = 0; kx < kw; kx++) {
              const iy = oy * sh - ph + ky * dh;
              const ix = ox * sw - pw + kx * dw;
              if (iy < 0 || iy >= ih || ix < 0 || ix >= iw) continue;
              const v = x[((b * ih + iy) * iw + ix) * t.c + ci];
              if (Number.isNaN(v) || v > m) m = v;
              if (Number.isNaN(m)) break;
            }
          out.push(m);
        }
  return out;
}

const cases: [string, Case][] = [
  ['3x3 s2 p1 (ResNet stem), 64 channels', { n: 1, sp: [16, 16], c: 64, k: [3, 3], s: [2, 2], pb: [1, 1], pe: [1, 1], d: [1, 1] }],
  [
    '3x2 s(1, 3), asymmetric pads, 7 channels, batch 2',
    { n: 2, sp: [9, 13], c: 7, k: [3, 2], s: [1, 3], pb: [0, 1], pe: [2, 0], d: [1, 1] },
  ],
  ['2x3 dilation (2, 3), 5 channels', { n: 1, sp: [11, 12], c: 5, k: [2, 3], s: [2, 1], pb: [1, 2], pe: [1, 2], d: [2, 3] }],
  ['1-D k3 s2 p1, 17 channels', { n: 3, sp: [10], c: 17, k: [3], s: [2], pb: [1], pe: [2], d: [1] }],
  ['1x1, one channel', { n: 1, sp: [3, 4], c: 1, k: [1, 1], s: [1, 1], pb: [0, 0], pe: [0, 0], d: [1, 1] }],
  // Channels go 16 at a time: one partial block, two whole ones and a tail.
  [
    '2x2 s2, 8 channels at 28x28, batch 2 (small-cnn)',
    { n: 2, sp: [28, 28], c: 8, k: [2, 2], s: [2, 2], pb: [0, 0], pe: [0, 0], d: [1, 1] },
  ],
  ['3x3 s1 p1, 35 channels', { n: 1, sp: [5, 6], c: 35, k: [3, 3], s: [1, 1], pb: [1, 1], pe: [1, 1], d: [1, 1] }],
  // Rows of ~32k taps or more go over the threads (smaller pools run on the calling thread).
  [
    '3x3 s1 p1, 32 channels at 40x40 (on the threads)',
    { n: 1, sp: [40, 40], c: 32, k: [3, 3], s: [1, 1], pb: [1, 1], pe: [1, 1], d: [1, 1] },
  ],
  // One channel (ONNX MaxPool's channels-first planes): one lane at a time.
  ['2x2 s2, one channel, 16 images', { n: 16, sp: [9, 10], c: 1, k: [2, 2], s: [2, 2], pb: [0, 0], pe: [1, 0], d: [1, 1] }],
];

describe('maxPoolChannelsLast', () => {
  for (const [name, t] of cases)
    it(name, () => {
      const xd = [t.n, ...t.sp, t.c];
      const x = inputs(
        xd.reduce((a, b) => a * b, 1),
        -4,
        4,
        13,
      );
      const yd = [t.n, ...outSpatial(t), t.c];
      const y = mx.ext.maxPoolChannelsLast(mx.array(x, { shape: xd }), t.k, t.s, t.pb, t.pe, t.d);
      expect(y.shape).toEqual(yd);
      const ref = reference(t, Array.from(new Float32Array(x)));
      expectAllClose(y, ref, 0, 0);
      const h = mx.astype(mx.ext.maxPoolChannelsLast(mx.array(x, { shape: xd, dtype: 'float16' }), t.k, t.s, t.pb, t.pe, t.d), 'float32');
      expect(h.shape).toEqual(yd);
      expectAllClose(h, ref, 1e-2, 1e-2);
    });

  it('propagates NaN, keeps +Inf, gives the lowest float for -Inf (as onnxruntime does), never the padding', () => {
    // [1, 2, 3, 1]: rows [NaN, 1, -Inf], [2, +Inf, -Inf]; 2x2 windows, stride 1, padded on the right by one.
    const nan = Number.NaN;
    const inf = Number.POSITIVE_INFINITY;
    const x = mx.array([nan, 1, -inf, 2, inf, -inf], { shape: [1, 2, 3, 1] });
    const y = mx.ext.maxPoolChannelsLast(x, [2, 2], [1, 1], [0, 0], [0, 1], [1, 1]);
    const got = (y.toList() as unknown as number[][][][])[0].map((r) => r.map((v) => v[0]));
    expect(Number.isNaN(got[0][0])).toBe(true);
    expect(got[0][1]).toBe(inf);
    expect(got[0][2]).toBe(LOWEST);
    const onlyNegInf = mx.ext.maxPoolChannelsLast(mx.array([-1, -2], { shape: [1, 1, 2, 1] }), [1, 2], [1, 1], [0, 0], [0, 1], [1, 1]);
    expect((onlyNegInf.toList() as unknown as number[][][][])[0][0].map((v) => v[0])).toEqual([-1, -2]);
  });

  it('a NaN past the first 16 channels stays in its own channel', () => {
    const x = new Array<number>(2 * 20).fill(0).map((_, i) => i);
    x[20 + 18] = Number.NaN;
    const y = Array.from(
      mx.ext
        .maxPoolChannelsLast(mx.array(x, { shape: [1, 1, 2, 20] }), [1, 2], [1, 1], [0, 0], [0, 0], [1, 1])
        .toTypedArray() as Float32Array,
    );
    expect(y.map((v, i) => (Number.isNaN(v) ? -1 : v - i))).toEqual(x.slice(0, 20).map((_, i) => (i === 18 ? -1 : 20)));
  });

  it('bit for bit, over whole vectors of channels and a tail: ties keep the first tap (-0 before +0), a NaN the last one seen', () => {
    // 3x3 windows, stride 2, padding 1, 44 channels (the AVX2 loop's 32 + 8 and the portable loop's
    // 4), values drawn from a few: signed zeros, NaNs of two payloads, the infinities.
    const [h, w, c] = [7, 9, 44];
    const bits = new Uint32Array(h * w * c);
    const pool = [0x80000000, 0x00000000, 0x7fc00001, 0x7fc00002, 0xff800000, 0x7f800000, 0x3f800000, 0xbf800000, 0x40000000];
    let seed = 7;
    for (let i = 0; i < bits.length; i++) {
      seed = (seed * 1103515245 + 12345) >>> 0;
      bits[i] = pool[(seed >>> 8) % pool.length];
    }
    const xs = new Float32Array(bits.buffer);
    const y = mx.ext.maxPoolChannelsLast(mx.array(xs, { shape: [1, h, w, c] }), [3, 3], [2, 2], [1, 1], [1, 1], [1, 1]);
    const [oh, ow] = [4, 5];
    expect(y.shape).toEqual([1, oh, ow, c]);
    const got = new Uint32Array((y.toTypedArray() as Float32Array).slice().buffer);
    const want = new Uint32Array(oh * ow * c);
    const f = new Float32Array(1);
    const u = new Uint32Array(f.buffer);
    for (let oy = 0; oy < oh; oy++)
      for (let ox = 0; ox < ow; ox++)
        for (let ch = 0; ch < c; ch++) {
          let acc = -3.4028234663852886e38;
          let accBits = 0xff7fffff;
          for (let ky = 0; ky < 3; ky++)
            for (let kx = 0; kx < 3; kx++) {
              const iy = oy * 2 + ky - 1;
              const ix = ox * 2 + kx - 1;
              if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
              const k = (iy * w + ix) * c + ch;
              if (xs[k] > acc || Number.isNaN(xs[k])) {
                acc = xs[k];
                accBits = bits[k];
              }
            }
          f[0] = acc;
          want[(oy * ow + ox) * c + ch] = Number.isNaN(acc) ? accBits : u[0];
        }
    expect(Array.from(got).map((b) => b.toString(16))).toEqual(Array.from(want).map((b) => b.toString(16)));
  });

  it('refuses a window larger than the padded input and per-axis lists of the wrong length', () => {
    const x = mx.zeros([1, 4, 4, 3], 'float32');
    expect(() => mx.ext.maxPoolChannelsLast(x, [5, 5], [1, 1], [0, 0], [0, 0], [1, 1])).toThrow(/larger than the padded input/);
    expect(() => mx.ext.maxPoolChannelsLast(x, [3], [1, 1], [0, 0], [0, 0], [1, 1])).toThrow(/kernel needs 2 values/);
    expect(() => mx.ext.maxPoolChannelsLast(x, [3, 3], [0, 1], [0, 0], [0, 0], [1, 1])).toThrow(/strides must be at least 1/);
  });
});
