// mx.ext.fakeQuantize (native/src/kernels/activation/fake_quantize.cpp): QuantizeLinear then
// DequantizeLinear of one scale and zero point, against a direct loop of the ops' float32 steps
// (division, round half to even, zero point, NaN to the low end, clamp, back), bit for bit: the
// kernel must give what the two ops give, rounding ties, NaN, infinities and saturation included.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';
import { inputs } from '../test/numeric.js';

const f = Math.fround;
/** Round half to even of a float32 value (the ONNX rounding). */
function roundEven(v: number): number {
  if (!Number.isFinite(v)) return v;
  const fl = Math.floor(v);
  const d = v - fl;
  if (d < 0.5) return fl;
  if (d > 0.5) return fl + 1;
  return fl % 2 === 0 ? fl : fl + 1;
}
function reference(xs: number[], s: number, zp: number, lo: number, hi: number): number[] {
  const scale = f(s);
  return xs.map((x) => {
    let r = f(roundEven(f(f(x) / scale)) + zp);
    if (Number.isNaN(r)) r = lo;
    r = Math.min(hi, Math.max(lo, r));
    return f(f(r - zp) * scale);
  });
}
const same = (got: ArrayLike<number>, want: number[]) => {
  expect(got.length).toBe(want.length);
  for (let i = 0; i < want.length; i++)
    if (!Object.is(got[i], want[i]) && !(Number.isNaN(got[i]) && Number.isNaN(want[i])))
      expect({ i, got: got[i] }).toEqual({ i, got: want[i] });
};
const run = (xs: number[], shape: number[], scale: number, zp: number, lo: number, hi: number) =>
  Array.from(mx.ext.fakeQuantize(mx.array(xs, { shape }), scale, zp, lo, hi).toTypedArray() as Float32Array);

describe('fakeQuantize', () => {
  it('uint8 and int8: ties to even, saturation, NaN to the low end, infinities clamped', () => {
    // scale 0.5: x / s lands on .5 ties (0.25 -> 0.5 -> 0, 0.75 -> 1.5 -> 2, -0.25 -> -0.5 -> -0).
    const xs = [0, 0.25, 0.75, 1.25, -0.25, -0.75, 3.1, -3.1, 1e9, -1e9, Number.NaN, Infinity, -Infinity, 63.75, 64.25, -64.25];
    for (const [zp, lo, hi] of [
      [0, 0, 255],
      [128, 0, 255],
      [3, -128, 127],
      [-7, -128, 127],
    ]) {
      same(run(xs, [xs.length], 0.5, zp, lo, hi), reference(xs, 0.5, zp, lo, hi));
      same(run(xs, [4, 4], 0.0123, zp, lo, hi), reference(xs, 0.0123, zp, lo, hi));
    }
  });

  it('a zero or negative scale as the ops compute it', () => {
    const xs = [0, 1, -1, 0.3, Number.NaN];
    for (const s of [0, -0.25]) same(run(xs, [xs.length], s, 10, 0, 255), reference(xs, s, 10, 0, 255));
  });

  it('many blocks (the thread pool) with an odd tail, and 16-bit ranges', () => {
    const xs = inputs(3 * 4096 + 5, -40, 40, 11);
    xs[4097] = Number.NaN;
    same(run(xs, [xs.length], 0.07, 17, 0, 255), reference(xs, 0.07, 17, 0, 255));
    same(run(xs, [1, 12293], 0.0007, -300, -32768, 32767), reference(xs, 0.0007, -300, -32768, 32767));
  });

  it('a transposed view is read in its logical order', () => {
    const xs = inputs(6 * 7, -3, 3, 12);
    const t = mx.transpose(mx.array(xs, { shape: [6, 7] }), [1, 0]);
    const got = Array.from(mx.ext.fakeQuantize(t, 0.05, 2, -128, 127).toTypedArray() as Float32Array);
    const logical = Array.from(mx.contiguous(t, false).toTypedArray() as Float32Array);
    same(got, reference(logical, 0.05, 2, -128, 127));
  });

  it('float16 input (MLX ops: divided in float32, the promoted type) and an empty one', () => {
    const xs = [0, 0.25, 0.75, -1.5, 2.2, 100, -100];
    const x = mx.astype(mx.array(xs, { shape: [xs.length] }), 'float16');
    const r = mx.ext.fakeQuantize(x, 0.5, 1, 0, 255);
    expect(r.dtype).toBe('float32');
    same(Array.from(r.toTypedArray() as Float32Array), reference(xs, 0.5, 1, 0, 255));
    expect(mx.ext.fakeQuantize(mx.zeros([0, 3]), 0.5, 0, 0, 255).shape).toEqual([0, 3]);
  });

  it('refuses lo above hi', () => {
    expect(() => mx.ext.fakeQuantize(mx.array([1]), 0.5, 0, 10, 0)).toThrow(/lo must not be above hi/);
  });
});
