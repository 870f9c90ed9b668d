// The exact integer products with constant weights (prepared once per session, their bounds
// taken from the data) against onnxruntime-node: weights whose largest column or filter sum of
// |w - zp| just lets one float32 product stay exact, or just does not (an odd result past 2^24
// that one float32 product would round), zero points at the type's extremes, uint8 and int8
// weights, and the quantized ops that share the helper.
import { describe, it } from 'vitest';
import { model, node, v, type ElemName, type TensorSpec } from '../../../test/helpers/build.js';
import { expectSameAsOrt, ort, seeded, type Feeds, type OrtTensor, randomF32 as rand } from '../../../test/helpers/ort.js';

type Data = { type: ElemName; dims: number[]; values: number[] };
const count = (dims: number[]) => dims.reduce((a, b) => a * b, 1);
const fill = (type: ElemName, dims: number[], value: number): Data => ({ type, dims, values: new Array(count(dims)).fill(value) });
const ints = (type: ElemName, dims: number[], seed: number, lo: number, hi: number): Data => ({
  type,
  dims,
  values: seeded(count(dims), seed).map((x) => Math.round(lo + ((x + 1) / 2) * (hi - lo))),
});
const ctor: Record<string, (d: number[]) => ArrayLike<number>> = {
  uint8: (d) => Uint8Array.from(d),
  int8: (d) => Int8Array.from(d),
  float32: (d) => Float32Array.from(d),
  int32: (d) => Int32Array.from(d),
};

/** Entries k of the largest column or filter sum `l1`: `n` values of `l1 / n` or one more, all of `sign`. */
function summingTo(n: number, l1: number, sign: 1 | -1): number[] {
  const base = Math.floor(l1 / n);
  const extra = l1 - base * n;
  return Array.from({ length: n }, (_, i) => sign * (base + (i < extra ? 1 : 0)));
}

/**
 * One node whose `consts` are initializers (the session's constants, prepared once) and whose
 * `fed` are inputs, compared with onnxruntime-node exactly (or within `tol`).
 */
async function same(
  op: string,
  order: string[],
  fed: Record<string, Data | OrtTensor>,
  consts: Record<string, Data>,
  out: { type: ElemName; names?: string[] },
  opts: { domain?: string; attrs?: Record<string, number | number[] | string>; tol?: { rtol: number; atol: number } } = {},
) {
  const feeds: Feeds = {};
  for (const [name, d] of Object.entries(fed))
    feeds[name] = 'values' in d ? new ort.Tensor(d.type as never, ctor[d.type](d.values) as never, d.dims) : d;
  const initializers: TensorSpec[] = Object.entries(consts).map(([name, d]) => ({ name, type: d.type, dims: d.dims, values: d.values }));
  const names = out.names ?? ['y'];
  const bytes = model({
    opsets: { '': 17, 'com.microsoft': 1 },
    inputs: Object.entries(feeds).map(([name, t]) => v(name, t.type as ElemName, [...t.dims])),
    initializers,
    outputs: names.map((n) => v(n, out.type)),
    nodes: [node(op, order, names, { domain: opts.domain, attrs: opts.attrs })],
  });
  return expectSameAsOrt(bytes, feeds, opts.tol ?? { rtol: 0, atol: 0 });
}

// 255 * l1 < 2^24 while l1 <= 65793: one float32 product is exact.
const FITS = 65792;
const OVER = 65795; // 255 * 65795 = 16777725: odd, past 2^24

describe('MatMulInteger with a constant B', () => {
  const K = 600;
  const column = (l1: number, sign: 1 | -1) => summingTo(K, l1, sign);
  /** B [K, 2] from two columns. */
  const b2 = (type: ElemName, c0: number[], c1: number[]): Data => ({ type, dims: [K, 2], values: c0.flatMap((x, i) => [x, c1[i]]) });
  const a = fill('uint8', [3, K], 255);

  it('a largest column sum that just fits one float32 product (int8, no zero points)', () =>
    same('MatMulInteger', ['a', 'b'], { a }, { b: b2('int8', column(FITS, -1), column(FITS - 7, 1)) }, { type: 'int32' }));

  it('a largest column sum just past it (the result odd beyond 2^24)', () =>
    same('MatMulInteger', ['a', 'b'], { a }, { b: b2('int8', column(OVER, -1), column(FITS, 1)) }, { type: 'int32' }));

  it('uint8 B with per-column zero points: the sums of |b - zp| decide', () => {
    // Column 0: b = zp + 114/115 (sum OVER); column 1: b = zp - ... (sum FITS).
    const c0 = column(OVER, 1);
    const c1 = column(FITS, -1);
    const b = b2(
      'uint8',
      c0.map((x) => x + 10),
      c1.map((x) => x + 130),
    );
    return same(
      'MatMulInteger',
      ['a', 'b', '', 'bz'],
      { a },
      { b, bz: { type: 'uint8', dims: [2], values: [10, 130] } },
      { type: 'int32' },
    );
  });

  it('zero points at the extremes: int8 B at 127 with zero point -128, uint8 A 255 with zero point 0', () =>
    same(
      'MatMulInteger',
      ['a', 'b', 'az', 'bz'],
      { a, az: { type: 'uint8', dims: [], values: [0] } },
      { b: fill('int8', [K, 3], 127), bz: { type: 'int8', dims: [], values: [-128] } },
      { type: 'int32' },
    ));

  it('uint8 B at 0 with zero point 255, int8 A at -128 with zero point 127', () =>
    same(
      'MatMulInteger',
      ['a', 'b', 'az', 'bz'],
      { a: fill('int8', [2, K], -128), az: { type: 'int8', dims: [], values: [127] } },
      { b: fill('uint8', [K, 2], 0), bz: { type: 'uint8', dims: [], values: [255] } },
      { type: 'int32' },
    ));

  it('a contraction so long that B is split too (K = 4999 at the extremes)', () =>
    same(
      'MatMulInteger',
      ['a', 'b', '', 'bz'],
      { a: fill('uint8', [2, 4999], 255) },
      { b: fill('uint8', [4999, 3], 0), bz: { type: 'uint8', dims: [], values: [255] } },
      { type: 'int32' },
    ));

  it('random operands, batched A, a vector B', async () => {
    await same(
      'MatMulInteger',
      ['a', 'b'],
      { a: ints('uint8', [2, 3, 64], 3, 0, 255) },
      { b: ints('int8', [64, 5], 4, -128, 127) },
      { type: 'int32' },
    );
    await same(
      'MatMulInteger',
      ['a', 'b'],
      { a: ints('int8', [4, 64], 5, -128, 127) },
      { b: ints('int8', [64], 6, -128, 127) },
      { type: 'int32' },
    );
  });
});

describe('ConvInteger and QLinearConv with a constant weight', () => {
  // 64 channels x 3 x 3 = 576 terms per window; pads 1 (border windows sum fewer).
  const wOf = (type: ElemName, l1: number, sign: 1 | -1, offset = 0): Data => ({
    type,
    dims: [2, 64, 3, 3],
    values: [...summingTo(576, l1, sign), ...summingTo(576, FITS - 100, sign)].map((x) => x + offset),
  });
  const x = fill('uint8', [1, 64, 5, 5], 255);
  const attrs = { pads: [1, 1, 1, 1] };

  it('a largest filter sum that just fits one float32 convolution', () =>
    same('ConvInteger', ['x', 'w'], { x }, { w: wOf('uint8', FITS, 1) }, { type: 'int32' }, { attrs }));

  it('a largest filter sum just past it', () =>
    same('ConvInteger', ['x', 'w'], { x }, { w: wOf('uint8', OVER, 1) }, { type: 'int32' }, { attrs }));

  it('weight zero point at the extreme (uint8 weight 0, zero point 255) and an input zero point', () =>
    same(
      'ConvInteger',
      ['x', 'w', 'xz', 'wz'],
      { x: ints('uint8', [1, 64, 6, 6], 8, 0, 255), xz: { type: 'uint8', dims: [], values: [0] } },
      { w: fill('uint8', [3, 64, 3, 3], 0), wz: { type: 'uint8', dims: [], values: [255] } },
      { type: 'int32' },
      { attrs: { pads: [1, 1, 1, 1], strides: [2, 2] } },
    ));

  it('grouped, padded, with an input zero point (padding holds it)', () =>
    same(
      'ConvInteger',
      ['x', 'w', 'xz'],
      { x: ints('uint8', [2, 6, 7, 7], 9, 0, 255), xz: { type: 'uint8', dims: [], values: [17] } },
      { w: ints('uint8', [4, 3, 3, 3], 10, 0, 255) },
      { type: 'int32' },
      { attrs: { pads: [1, 2, 1, 0], group: 2 } },
    ));

  it('QLinearConv int8 with per-channel weight zero points and a filter sum past the bound', () =>
    same(
      'QLinearConv',
      ['x', 'xs', 'xz', 'w', 'ws', 'wz', 'ys', 'yz'],
      { x: fill('uint8', [1, 64, 4, 4], 255) },
      {
        xs: { type: 'float32', dims: [], values: [0.5] },
        xz: { type: 'uint8', dims: [], values: [0] },
        w: wOf('int8', OVER, -1),
        ws: { type: 'float32', dims: [2], values: [2 ** -16, 2 ** -15] },
        wz: { type: 'int8', dims: [2], values: [0, 0] },
        ys: { type: 'float32', dims: [], values: [1] },
        yz: { type: 'uint8', dims: [], values: [200] },
      },
      { type: 'uint8' },
      { attrs },
    ));
});

describe('the com.microsoft quantized products with constant weights', () => {
  it('DynamicQuantizeMatMul, int8 B with per-column zero points at the extremes', () =>
    same(
      'DynamicQuantizeMatMul',
      ['a', 'b', 's', 'z', 'bias'],
      { a: rand([3, 600], 11, 4) },
      {
        b: { type: 'int8', dims: [600, 2], values: Array.from({ length: 1200 }, (_, i) => (i % 2 ? -128 : 127)) },
        s: { type: 'float32', dims: [2], values: [0.01, 0.02] },
        z: { type: 'int8', dims: [2], values: [-128, 127] },
        bias: { type: 'float32', dims: [2], values: [0.5, -1] },
      },
      { type: 'float32' },
      { domain: 'com.microsoft', tol: { rtol: 1e-6, atol: 1e-6 } },
    ));

  it('MatMulIntegerToFloat, uint8 B with a column sum past the bound', () => {
    const col = summingTo(600, OVER, 1);
    return same(
      'MatMulIntegerToFloat',
      ['a', 'b', 'as', 'bs', 'az'],
      { a: fill('uint8', [2, 600], 255) },
      {
        b: { type: 'uint8', dims: [600, 2], values: col.flatMap((x) => [x, 255 - x]) },
        as: { type: 'float32', dims: [], values: [1] },
        bs: { type: 'float32', dims: [], values: [1] },
        az: { type: 'uint8', dims: [], values: [0] },
      },
      { type: 'float32' },
      { domain: 'com.microsoft' },
    );
  });

  it('DynamicQuantizeLSTM, bidirectional, constant int8 and uint8 weights', async () => {
    const [S, I, H] = [5, 40, 24];
    for (const type of ['int8', 'uint8'] as const) {
      const [lo, hi, z] = type === 'int8' ? [-128, 127, 0] : [0, 255, 128];
      await same(
        'DynamicQuantizeLSTM',
        ['x', 'w', 'r', '', '', '', '', '', 'ws', 'wz', 'rs', 'rz'],
        { x: rand([S, 1, I], 12, 2) },
        {
          w: ints(type, [2, I, 4 * H], 13, lo, hi),
          r: ints(type, [2, H, 4 * H], 14, lo, hi),
          ws: { type: 'float32', dims: [2], values: [0.004, 0.003] },
          wz: { type, dims: [2], values: [z, type === 'int8' ? -3 : 120] },
          rs: { type: 'float32', dims: [2, 4 * H], values: seeded(8 * H, 15).map((s) => 0.002 + 0.001 * Math.abs(s)) },
          rz: { type, dims: [2, 4 * H], values: new Array(8 * H).fill(z) },
        },
        { type: 'float32', names: ['y', 'yh', 'yc'] },
        { domain: 'com.microsoft', attrs: { hidden_size: H, direction: 'bidirectional' }, tol: { rtol: 1e-4, atol: 1e-5 } },
      );
    }
  });
});
