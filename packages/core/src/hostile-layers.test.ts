// Hostile inputs to the native LSTM primitive (lstm), the grouped channels-last convolution
// (convGemm) and the fused AdamW step (adamwStep): bad shapes, zero-size dims, huge dims,
// mismatched weights, bad parameters, NaN and infinities, strided and broadcast views. Each must give a clear error or the right result
// (checked against the same call on contiguous copies, or the composition of MLX ops on float16),
// never a crash.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';
import { expectAllClose, inputs } from '../test/numeric.js';

const std = [2, 0, 0, 1, 0, 0, 1, 0, 0];
const inf = Number.POSITIVE_INFINITY;
const z = (s: number[], dtype: mx.Dtype = 'float32') => mx.zeros(s, dtype);
const rand = (s: number[], seed: number) =>
  mx.array(
    inputs(
      s.reduce((a, b) => a * b, 1),
      -1,
      1,
      seed,
    ),
    { shape: s },
  );
const list = (a: mx.Array) => Array.from(mx.astype(a, 'float32').toTypedArray() as Float32Array);

describe('lstm, hostile inputs', () => {
  it('refuses wrong ranks, directions, lens and peephole shapes with a message', () => {
    expect(() => mx.ext.lstm(z([2, 12]), z([1, 3, 12]), z([1, 1, 3]), z([1, 1, 3]), null, null, std, inf, false, 0)).toThrow(
      /proj must be/,
    );
    expect(() => mx.ext.lstm(z([2, 1, 12]), z([3, 12]), z([1, 1, 3]), z([1, 1, 3]), null, null, std, inf, false, 0)).toThrow(
      /rt \[D, H, 4H\]/,
    );
    expect(() => mx.ext.lstm(z([2, 1, 12]), z([1, 3, 12]), z([1, 1, 3]), z([1, 1, 3]), null, null, std, inf, false, -1)).toThrow(
      /direction/,
    );
    expect(() => mx.ext.lstm(z([2, 1, 12]), z([1, 3, 12]), z([1, 1, 3]), z([1, 1, 3]), null, null, std, inf, false, 3)).toThrow(
      /direction/,
    );
    const lens2 = mx.array([1, 2], { dtype: 'int32' });
    expect(() => mx.ext.lstm(z([2, 1, 12]), z([1, 3, 12]), z([1, 1, 3]), z([1, 1, 3]), lens2, null, std, inf, false, 0)).toThrow(
      /lens must be \[B\]/,
    );
    expect(() => mx.ext.lstm(z([2, 1, 12]), z([1, 3, 12]), z([1, 1, 3]), z([1, 1, 3]), null, z([1, 9, 1]), std, inf, false, 0)).toThrow(
      /peepholes/,
    );
    expect(() => mx.ext.lstm(z([2, 1, 12]), z([1, 3, 12]), z([1, 1, 3]), z([1, 1, 3]), null, null, std.slice(0, 8), inf, false, 0)).toThrow(
      /acts/,
    );
    expect(() => mx.ext.lstm(z([2, 1, 12]), z([1, 3, 12]), z([1, 1, 3]), z([1, 1, 3]), null, null, std, Number.NaN, false, 0)).toThrow(
      /clip/,
    );
    expect(() => mx.ext.lstm(z([2, 1, 12]), z([1, 3, 12]), z([1, 1, 3]), z([1, 1, 3]), null, null, std, -1, false, 0)).toThrow(/clip/);
    expect(() =>
      mx.ext.lstm(z([2, 1, 12]), z([1, 3, 12]), z([1, 1, 3]), z([1, 1, 3]), null, null, [-1, 0, 0, 1, 0, 0, 1, 0, 0], inf, false, 0),
    ).toThrow(/activation code/);
    // Bidirectional with one direction's weights.
    expect(() =>
      mx.ext.lstm(z([2, 1, 24]), z([1, 3, 12]), z([2, 1, 3]), z([2, 1, 3]), null, null, [...std, ...std], inf, false, 2),
    ).toThrow(/rt must be/);
  });

  it('gives empty results for zero-size T, B and H', () => {
    for (const [T, B, H] of [
      [0, 2, 3],
      [4, 0, 3],
      [4, 2, 0],
      [0, 0, 0],
    ]) {
      const [y, h, c] = mx.ext.lstm(z([T, B, 4 * H]), z([1, H, 4 * H]), z([1, B, H]), z([1, B, H]), null, null, std, inf, false, 0);
      mx.evaluate([y, h, c]);
      expect(y.shape).toEqual([T, 1, B, H]);
      expect(h.shape).toEqual([1, B, H]);
      expect(c.shape).toEqual([1, B, H]);
    }
  });

  it('refuses a huge zero-size shape without allocating, or computes its empty result', () => {
    // H = 2^29 makes 4H overflow 32 bits: the shapes cannot agree, and nothing is allocated.
    const H = 2 ** 29;
    expect(() => mx.ext.lstm(z([0, 1, 1]), z([1, H, 0]), z([1, 1, H]), z([1, 1, H]), null, null, std, inf, false, 0)).toThrow();
    const [y] = mx.ext.lstm(z([2 ** 30, 0, 8]), z([1, 2, 8]), z([1, 0, 2]), z([1, 0, 2]), null, null, std, inf, false, 0);
    mx.evaluate([y]);
    expect(y.shape).toEqual([2 ** 30, 1, 0, 2]);
  });

  it('lens outside [0, T] run as T (past the end) or as 0 (negative), with no out-of-bounds read', () => {
    const [T, B, H] = [3, 4, 2];
    const proj = rand([T, B, 4 * H], 1);
    const rt = mx.multiply(rand([1, H, 4 * H], 2), mx.array(0.5));
    const h0 = rand([1, B, H], 3);
    const c0 = rand([1, B, H], 4);
    const lens = mx.array([-5, 0, 2, 1000], { dtype: 'int32' });
    const clamped = mx.array([0, 0, 2, 3], { dtype: 'int32' });
    for (const dir of [0, 1]) {
      const got = mx.ext.lstm(proj, rt, h0, c0, lens, null, std, inf, false, dir);
      const want = mx.ext.lstm(proj, rt, h0, c0, clamped, null, std, inf, false, dir);
      for (let i = 0; i < 3; i++) expectAllClose(got[i], list(want[i]), 1e-6, 1e-6);
      // The float16 composition agrees.
      const f16 = (a: mx.Array) => mx.astype(a, 'float16');
      const half = mx.ext.lstm(f16(proj), f16(rt), f16(h0), f16(c0), lens, null, std, inf, false, dir);
      for (let i = 0; i < 3; i++) expectAllClose(mx.astype(half[i], 'float32'), list(want[i]), 3e-2, 3e-2);
    }
  });

  it('reads broadcast and transposed views like their contiguous copies', () => {
    const [T, B, H] = [3, 2, 3];
    const row = rand([1, 1, 4 * H], 5);
    const proj = mx.broadcastTo(row, [T, B, 4 * H]); // strides 0 on T and B
    const rt = mx.transpose(rand([1, 4 * H, H], 6), [0, 2, 1]);
    const h0 = mx.broadcastTo(rand([1, 1, H], 7), [1, B, H]);
    const c0 = mx.broadcastTo(mx.array(0.25), [1, B, H]);
    const peep = mx.broadcastTo(rand([1, 1], 8), [1, 3 * H]);
    const lens = mx.broadcastTo(mx.array(2, { dtype: 'int32' }), [B]);
    const got = mx.ext.lstm(proj, rt, h0, c0, lens, peep, std, 1.5, true, 1);
    const c = (a: mx.Array) => mx.contiguous(mx.add(a, mx.zerosLike(a)), false);
    const want = mx.ext.lstm(c(proj), c(rt), c(h0), c(c0), c(lens), c(peep), std, 1.5, true, 1);
    for (let i = 0; i < 3; i++) expectAllClose(got[i], list(want[i]), 1e-6, 1e-6);
  });

  it('carries NaN and infinities through the gates without faulting', () => {
    const [T, B, H] = [2, 2, 2];
    const p = inputs(T * B * 4 * H, -1, 1, 9);
    p[0] = Number.NaN;
    p[5] = inf;
    p[12] = -inf;
    const proj = mx.array(p, { shape: [T, B, 4 * H] });
    const rt = rand([1, H, 4 * H], 10);
    const h0 = z([1, B, H]);
    const c0 = mx.array([Number.NaN, 0, inf, 1], { shape: [1, B, H] });
    const f32 = mx.ext.lstm(proj, rt, h0, c0, null, null, std, inf, false, 0);
    const f16 = (a: mx.Array) => mx.astype(a, 'float16');
    const half = mx.ext.lstm(f16(proj), f16(rt), f16(h0), f16(c0), null, null, std, inf, false, 0);
    for (let i = 0; i < 3; i++) {
      const a = list(f32[i]);
      const b = list(half[i]);
      expect(a.map(Number.isNaN)).toEqual(b.map(Number.isNaN));
      expectAllClose(
        mx.array(a.map((v) => (Number.isNaN(v) ? 0 : v))),
        b.map((v) => (Number.isNaN(v) ? 0 : v)),
        3e-2,
        3e-2,
      );
    }
  });

  it('takes integer and mixed dtypes through the composition or refuses them, never faulting', () => {
    const args = [z([2, 1, 12], 'int32'), z([1, 3, 12]), z([1, 1, 3]), z([1, 1, 3])] as const;
    let threw: unknown;
    try {
      mx.evaluate(mx.ext.lstm(...args, null, null, std, inf, false, 0));
    } catch (e) {
      threw = e;
    }
    if (threw) expect(String(threw)).toMatch(/lstm|type|dtype/i);
  });
});

/** A weight w [o, ...k, c/g], each group's outputs padded to whole panels of 32, packed. */
function pack(w: mx.Array, g: number): mx.Array {
  const [o, ...rest] = w.shape;
  const og = o / g;
  const padded = Math.ceil(og / 32) * 32;
  const parts: mx.Array[] = [];
  for (let i = 0; i < g; i++) {
    parts.push(mx.slice(w, [i * og, ...rest.map(() => 0)], [(i + 1) * og, ...rest], [1, ...rest.map(() => 1)]));
    if (padded > og) parts.push(mx.zeros([padded - og, ...rest], 'float32'));
  }
  return mx.ext.convPackWeight(mx.concatenate(parts, 0));
}

describe('convGemm, hostile inputs', () => {
  const one = [1, 1];
  const zero = [0, 0];
  it('refuses bad strides, dilations, pads and parameter lengths with a message', () => {
    const x = z([1, 5, 5, 4]);
    const wp = pack(z([4, 3, 3, 2]), 2);
    const run = (s: number[], pb: number[], pe: number[], d: number[]) => () =>
      mx.ext.convGemm(x, wp, 4, null, null, s, pb, pe, d, -inf, inf);
    for (const f of [
      run([0, 1], zero, zero, one),
      run([-1, 1], zero, zero, one),
      run(one, zero, zero, [0, 1]),
      run(one, [-1, 0], zero, one),
      run(one, zero, [0, -3], one),
      run([1], zero, zero, one),
      run(one, [0], zero, one),
      run(one, zero, zero, [1, 1, 1]),
    ])
      expect(f).toThrow(/convGemm|conv_gemm|stride|dilation|pad/i);
  });

  it('refuses mismatched groups, channels, bias and residual', () => {
    const x = z([1, 5, 5, 6]);
    const w = pack(z([6, 3, 3, 3]), 2);
    // 6 channels over 4 a group.
    expect(() => mx.ext.convGemm(x, pack(z([4, 1, 1, 4]), 1), 4, null, null, one, zero, zero, one, -inf, inf)).toThrow(/channels|groups/);
    // 7 channels over 3 a group.
    expect(() => mx.ext.convGemm(z([1, 5, 5, 7]), w, 6, null, null, one, zero, zero, one, -inf, inf)).toThrow(/channels|groups/);
    // Output channels 0 and negative.
    expect(() => mx.ext.convGemm(x, w, 0, null, null, one, zero, zero, one, -inf, inf)).toThrow(/output channels/);
    expect(() => mx.ext.convGemm(x, w, -2, null, null, one, zero, zero, one, -inf, inf)).toThrow(/output channels/);
    expect(() => mx.ext.convGemm(x, w, 6, z([5]), null, one, zero, zero, one, -inf, inf)).toThrow(/bias/);
    expect(() => mx.ext.convGemm(x, w, 6, null, z([1, 3, 3, 5]), one, zero, zero, one, -inf, inf)).toThrow(/residual/);
    // Rank: a 3-D weight against a 2-D input, and a 5-D input.
    expect(() => mx.ext.convGemm(x, pack(z([6, 3, 3]), 2), 6, null, null, one, zero, zero, one, -inf, inf)).toThrow(
      /convGemm|conv_gemm|rank|dims/i,
    );
    expect(() => mx.ext.convGemm(z([1, 2, 5, 5, 6]), w, 6, null, null, [1, 1, 1], [0, 0, 0], [0, 0, 0], [1, 1, 1], -inf, inf)).toThrow();
  });

  it('refuses integer inputs or computes them, never faulting', () => {
    let threw: unknown;
    try {
      mx.evaluate([mx.ext.convGemm(z([1, 4, 4, 2], 'int32'), pack(z([2, 1, 1, 1]), 2), 2, null, null, one, zero, zero, one, -inf, inf)]);
    } catch (e) {
      threw = e;
    }
    if (threw) expect(String(threw)).toMatch(/conv|type|dtype|float/i);
  });

  it('gives empty results for zero batch and zero spatial output, and refuses zero channels', () => {
    const wp = pack(rand([4, 2, 2, 1], 1), 4);
    const y = mx.ext.convGemm(z([0, 5, 5, 4]), wp, 4, null, null, one, zero, zero, one, -inf, inf);
    mx.evaluate([y]);
    expect(y.shape).toEqual([0, 4, 4, 4]);
    // 1-D with zero batch.
    const y1 = mx.ext.convGemm(z([0, 7, 4]), pack(rand([4, 3, 2], 2), 2), 4, null, null, [2], [0], [0], [1], -inf, inf);
    mx.evaluate([y1]);
    expect(y1.shape).toEqual([0, 3, 4]);
    let threw: unknown;
    try {
      mx.evaluate([mx.ext.convGemm(z([1, 5, 5, 0]), pack(z([4, 2, 2, 0]), 1), 4, null, null, one, zero, zero, one, -inf, inf)]);
    } catch (e) {
      threw = e;
    }
    if (threw) expect(String(threw)).toMatch(/channel|group|empty|zero/i);
    // No input channels against a weight of 2 a group: no group count (once a division by zero).
    expect(() => mx.ext.convGemm(z([1, 5, 5, 0]), pack(z([4, 2, 2, 2]), 1), 4, null, null, one, zero, zero, one, -inf, inf)).toThrow(
      /the input has 0 channels/,
    );
  });

  it('refuses huge pads and strides that overflow the output size, allocating nothing', () => {
    const wp = pack(z([4, 3, 3, 2]), 2);
    const big = 2 ** 30;
    let threw: unknown;
    let y: mx.Array | undefined;
    try {
      y = mx.ext.convGemm(z([0, 5, 5, 4]), wp, 4, null, null, one, [big, big], [big, big], one, -inf, inf);
      mx.evaluate([y]);
    } catch (e) {
      threw = e;
    }
    if (threw) expect(String(threw)).toMatch(/pad|size|overflow|large|convGemm|conv_gemm/i);
    else expect(y!.shape[0]).toBe(0);
    expect(() => mx.ext.convGemm(z([1, 5, 5, 4]), wp, 4, null, null, [2 ** 31 - 1, 1], zero, zero, one, -inf, inf)).not.toThrow(/^$/);
    expect(() => mx.ext.convGemm(z([1, 5, 5, 4]), wp, 4, null, null, one, zero, zero, [2 ** 30, 1], -inf, inf)).toThrow(
      /larger|dilation|size/i,
    );
  });

  it('matches contiguous copies for strided inputs, per group, with NaN/inf carried per group', () => {
    const g = 3;
    const x0 = rand([1, 4, 5, 6], 3);
    const xt = mx.transpose(mx.contiguous(mx.transpose(x0, [0, 3, 1, 2]), false), [0, 2, 3, 1]); // channels-last view of NCHW
    const w = rand([6, 2, 2, 2], 4);
    const wp = pack(w, g);
    const want = mx.ext.convGemm(x0, wp, 6, null, null, one, [1, 0], [0, 1], one, -inf, inf);
    const got = mx.ext.convGemm(xt, wp, 6, null, null, one, [1, 0], [0, 1], one, -inf, inf);
    expectAllClose(got, list(want), 1e-6, 1e-6);
    // A NaN in group 0's input channels leaves the other groups' outputs finite.
    const nan = mx.where(mx.equal(mx.reshape(mx.arange(6), [1, 1, 1, 6]), mx.array(0)), mx.full([1, 4, 5, 6], Number.NaN, 'float32'), x0);
    const y = list(mx.ext.convGemm(nan, wp, 6, null, null, one, zero, zero, one, -inf, inf));
    for (let i = 0; i < y.length; i++) expect(Number.isNaN(y[i])).toBe(i % 6 < 2);
    // Clamp NaN bounds: refused or applied as no bound, never a fault.
    let threw: unknown;
    try {
      mx.evaluate([mx.ext.convGemm(x0, wp, 6, null, null, one, zero, zero, one, Number.NaN, Number.NaN)]);
    } catch (e) {
      threw = e;
    }
    if (threw) expect(String(threw)).toMatch(/lo|hi|clamp|bound/i);
  });
});

describe('adamwStep, hostile inputs', () => {
  const h = [0.01, 0.9, 0.999, 1e-8, 0.01] as const;
  it('carries NaN and infinities of a gradient into its own elements alone', () => {
    const p = mx.array([1, 2, 3, 4]);
    const g = mx.array([Number.NaN, inf, -inf, 0.5]);
    const [p1, m1, v1] = mx.ext.adamwStep(p, g, null, null, ...h, 1);
    const [pp, mm, vv] = [list(p1), list(m1), list(v1)];
    expect(Number.isNaN(pp[0]) && Number.isNaN(mm[0]) && Number.isNaN(vv[0])).toBe(true);
    // inf / sqrt(inf) is NaN, as in torch.
    expect([Number.isNaN(pp[1]), mm[1], vv[1]]).toEqual([true, inf, inf]);
    // The finite element: the first step moves it by lr against the gradient's sign.
    expectAllClose([pp[3]], [4 * (1 - 0.01 * 0.01) - 0.01], 1e-6, 1e-6);
    mx.dispose([p, g, p1, m1, v1]);
  });

  it('gives empty results for a huge zero-size shape, allocating nothing', () => {
    const e = z([0, 2 ** 30]);
    const out = mx.ext.adamwStep(e, e, e, e, ...h, 3);
    expect(out.map((a) => a.shape)).toEqual([
      [0, 2 ** 30],
      [0, 2 ** 30],
      [0, 2 ** 30],
    ]);
    mx.dispose([e, out]);
  });

  it('computes integer and mixed dtypes through the composition, never faulting', () => {
    const want = mx.ext.adamwStep(mx.array([1, 2, 3]), mx.array([0.5, -1, 2]), null, null, ...h, 1)[0];
    const ints = mx.ext.adamwStep(mx.array(new Int32Array([1, 2, 3])), mx.array(new Int32Array([1, -1, 2])), null, null, ...h, 1)[0];
    expect(ints.dtype).toBe('float32');
    expectAllClose(list(ints), [1 - 0.0001 - 0.01, 2 - 0.0002 + 0.01, 3 - 0.0003 - 0.01], 1e-6, 1e-6);
    const mixed = mx.ext.adamwStep(mx.array([1, 2, 3]), mx.array([0.5, -1, 2], { dtype: 'float16' }), null, null, ...h, 1)[0];
    expect(mixed.dtype).toBe('float32');
    expectAllClose(list(mixed), list(want), 1e-6, 1e-6);
    mx.dispose([want, ints, mixed]);
  });
});
