// avgPoolChannelsLast (native/src/kernels/pool/pool.*) against a float64 average pool in JS written
// from ONNX AveragePool's definition: channels-last 1-D and 2-D windows with strides, asymmetric
// pads counted or not (count_include_pad), ceil_mode (the last window dropped when it would start
// in the end padding; its overhang neither summed nor counted), dilations, odd channel counts,
// batches; float16 takes the composition of MLX ops (pad, strided slices, add, divide) and gives
// the same.
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
  ceil: boolean;
  include: boolean;
}

function outSpatial(t: Case): number[] {
  return t.sp.map((x, i) => {
    const room = x + t.pb[i] + t.pe[i] - (t.k[i] - 1) * t.d[i] - 1;
    let o = (t.ceil ? Math.ceil(room / t.s[i]) : Math.floor(room / t.s[i])) + 1;
    if (t.ceil && (o - 1) * t.s[i] >= x + t.pb[i]) o--;
    return o;
  });
}

function reference(t: Case, x: number[]): number[] {
  const two = t.sp.length === 2;
  const pick = (v: number[], one: number) => (two ? v : [one, v[0]]);
  const [ih, iw] = pick(t.sp, 1);
  const [kh, kw] = pick(t.k, 1);
  const [sh, sw] = pick(t.s, 1);
  const [ph, pw] = pick(t.pb, 0);
  const [peh, pew] = pick(t.pe, 0);
  const [dh, dw] = pick(t.d, 1);
  const [oh, ow] = pick(outSpatial(t), 1);
  const out: number[] = [];
  for (let b = 0; b < t.n; b++)
    for (let oy = 0; oy < oh; oy++)
      for (let ox = 0; ox < ow; ox++)
        for (let ci = 0; ci < t.c; ci++) {
          let sum = 0;
          let count = 0;
          for (let ky = 0; ky < kh; ky++)
            for (let kx = 0; kx < kw; kx++) {
              const iy = oy * sh - ph + ky * dh;
              const ix = ox * sw - pw + kx * dw;
              const inside = iy >= 0 && iy < ih && ix >= 0 && ix < iw;
              const inPads = iy >= -ph && iy < ih + peh && ix >= -pw && ix < iw + pew;
              if (inside) sum += x[((b * ih + iy) * iw + ix) * t.c + ci];
              if (t.include ? inPads : inside) count++;
            }
          out.push(sum / count);
        }
  return out;
}

const base = { ceil: false, include: false };
const cases: [string, Case][] = [
  ['2x2 s2, 16 channels (small-cnn)', { ...base, n: 2, sp: [6, 6], c: 16, k: [2, 2], s: [2, 2], pb: [0, 0], pe: [0, 0], d: [1, 1] }],
  [
    '3x3 s2 p1 counting the pads, 7 channels',
    { ...base, include: true, n: 1, sp: [9, 8], c: 7, k: [3, 3], s: [2, 2], pb: [1, 1], pe: [1, 1], d: [1, 1] },
  ],
  [
    '3x2 asymmetric pads not counted, batch 3',
    { ...base, n: 3, sp: [7, 10], c: 5, k: [3, 2], s: [1, 3], pb: [0, 1], pe: [2, 0], d: [1, 1] },
  ],
  [
    'ceil_mode with the pads counted (the overhang is not)',
    { ...base, ceil: true, include: true, n: 1, sp: [10, 11], c: 3, k: [3, 3], s: [2, 2], pb: [1, 0], pe: [0, 1], d: [1, 1] },
  ],
  [
    'ceil_mode dropping a window that would start in the end padding',
    { ...base, ceil: true, n: 1, sp: [5, 6], c: 4, k: [2, 2], s: [3, 3], pb: [1, 1], pe: [1, 1], d: [1, 1] },
  ],
  [
    '2x3 dilations (2, 3) with pads counted',
    { ...base, include: true, n: 1, sp: [11, 12], c: 5, k: [2, 3], s: [2, 1], pb: [1, 2], pe: [1, 2], d: [2, 3] },
  ],
  ['1-D k3 s2 ceil, 17 channels', { ...base, ceil: true, n: 2, sp: [10], c: 17, k: [3], s: [2], pb: [1], pe: [0], d: [1] }],
  ['1x1, one channel', { ...base, n: 1, sp: [3, 4], c: 1, k: [1, 1], s: [1, 1], pb: [0, 0], pe: [0, 0], d: [1, 1] }],
  // Rows of ~32k taps or more go over the threads (smaller pools run on the calling thread).
  [
    '3x3 s1 p1, 32 channels at 40x40 (on the threads)',
    { ...base, n: 1, sp: [40, 40], c: 32, k: [3, 3], s: [1, 1], pb: [1, 1], pe: [1, 1], d: [1, 1] },
  ],
];

describe('avgPoolChannelsLast', () => {
  for (const [name, t] of cases)
    it(name, () => {
      const xd = [t.n, ...t.sp, t.c];
      const x = inputs(
        xd.reduce((a, b) => a * b, 1),
        -4,
        4,
        11,
      );
      const yd = [t.n, ...outSpatial(t), t.c];
      const run = (dtype: 'float32' | 'float16') =>
        mx.astype(mx.ext.avgPoolChannelsLast(mx.array(x, { shape: xd, dtype }), t.k, t.s, t.pb, t.pe, t.d, t.ceil, t.include), 'float32');
      const ref = reference(t, Array.from(new Float32Array(x)));
      const y = run('float32');
      expect(y.shape).toEqual(yd);
      expectAllClose(y, ref, 1e-6, 1e-6);
      const h = run('float16');
      expect(h.shape).toEqual(yd);
      expectAllClose(h, ref, 1e-2, 1e-2);
    });

  it('reads a transposed (strided) input as its values', () => {
    const xd = [1, 3, 6, 5];
    const x = mx.array(inputs(90, -1, 1, 3), { shape: xd });
    const view = mx.transpose(x, [0, 2, 3, 1]);
    const y = mx.ext.avgPoolChannelsLast(view, [2, 2], [2, 2], [0, 0], [1, 0], [1, 1], true, false);
    const ref = mx.ext.avgPoolChannelsLast(mx.contiguous(view, false), [2, 2], [2, 2], [0, 0], [1, 0], [1, 1], true, false);
    expectAllClose(y, mx.reshape(ref, [-1]).toList() as number[], 0, 0);
  });

  it('refuses a window larger than the padded input, per-axis lists of the wrong length, integer input', () => {
    const x = mx.zeros([1, 4, 4, 3], 'float32');
    const pool = (a: mx.Array, k: number[], s: number[]) => mx.ext.avgPoolChannelsLast(a, k, s, [0, 0], [0, 0], [1, 1], false, false);
    expect(() => pool(x, [5, 5], [1, 1])).toThrow(/larger than the padded input/);
    expect(() => pool(x, [3], [1, 1])).toThrow(/kernel needs 2 values/);
    expect(() => pool(x, [3, 3], [0, 1])).toThrow(/strides must be at least 1/);
    expect(() => pool(mx.zeros([1, 4, 4, 3], 'int32'), [2, 2], [1, 1])).toThrow(/floating point/);
  });
});
