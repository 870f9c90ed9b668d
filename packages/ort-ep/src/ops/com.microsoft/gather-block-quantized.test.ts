// GatherBlockQuantized against onnxruntime-node's CPU kernel: packed uint8 at 2, 4 and 8 bits,
// int4/uint4 tables on other axes, asymmetric zero points, partial final blocks, negative indices.
import { describe, expect, it } from 'vitest';
import { model, node, v, type ElemName, type TensorSpec } from '../../../test/helpers/build.js';
import { expectSameAsOrt, f32, i64, ort, plain, runOn, seeded, type OrtTensor } from '../../../test/helpers/ort.js';

const MS = 'com.microsoft';

interface Case {
  feeds: Record<string, OrtTensor>;
  inits?: TensorSpec[];
  inputs: string[];
  attrs: Record<string, number>;
  outType?: ElemName;
}

function build(c: Case): Uint8Array {
  return model({
    opsets: { '': 21, [MS]: 1 },
    inputs: Object.entries(c.feeds).map(([name, t]) => v(name, t.type as ElemName, [...t.dims])),
    outputs: [v('y', c.outType ?? 'float32')],
    initializers: c.inits,
    nodes: [node('GatherBlockQuantized', c.inputs, ['y'], { domain: MS, attrs: c.attrs })],
  });
}

const count = (dims: number[]) => dims.reduce((a, b) => a * b, 1);
/** Deterministic integers in [0, n). */
const ints = (len: number, n: number, seed: number) => seeded(len, seed).map((x) => Math.floor(((x + 1) / 2) * n) % n);
const u8 = (dims: number[], seed: number) => new ort.Tensor('uint8', Uint8Array.from(ints(count(dims), 256, seed)), dims);
const scalesOf = (dims: number[], seed: number) =>
  f32(
    seeded(count(dims), seed).map((x) => 0.01 + Math.abs(x) * 0.1),
    dims,
  );
const i32 = (data: number[], dims: number[]) => new ort.Tensor('int32', Int32Array.from(data), dims);
const tol = { rtol: 1e-6, atol: 1e-7 };

describe('GatherBlockQuantized, uint8 data', () => {
  // K = 40 logical values per row in blocks of 16: two full blocks and a partial one of 8.
  const V = 10;
  const K = 40;
  it('4 bits, asymmetric packed zero points, partial final block, negative int64 indices', () =>
    expectSameAsOrt(
      build({
        feeds: { d: u8([V, K / 2], 1), i: i64([3, -1, 0, 7, -10, 3], [2, 3]), s: scalesOf([V, 3], 2), z: u8([V, 2], 3) },
        inputs: ['d', 'i', 's', 'z'],
        attrs: { block_size: 16, bits: 4, gather_axis: 0, quantize_axis: 1 },
      }),
      { d: u8([V, K / 2], 1), i: i64([3, -1, 0, 7, -10, 3], [2, 3]), s: scalesOf([V, 3], 2), z: u8([V, 2], 3) },
      tol,
    ));
  it('4 bits with the default zero point (8), int32 indices, a 3-D table and negative quantize_axis', () => {
    const feeds = { d: u8([6, 2, 16], 4), i: i32([5, 1, 1], [3]), s: scalesOf([6, 2, 2], 5) };
    return expectSameAsOrt(build({ feeds, inputs: ['d', 'i', 's'], attrs: { block_size: 16, quantize_axis: -1 } }), feeds, tol);
  });
  it('8 bits with zero points and a partial block', () => {
    const feeds = { d: u8([V, K], 6), i: i64([9, 2], [2]), s: scalesOf([V, 3], 7), z: u8([V, 3], 8) };
    return expectSameAsOrt(build({ feeds, inputs: ['d', 'i', 's', 'z'], attrs: { block_size: 16, bits: 8 } }), feeds, tol);
  });
  it('2 bits, with and without zero points (four to a byte)', async () => {
    const feeds = { d: u8([V, K / 4], 9), i: i64([4, 0, 8], [3]), s: scalesOf([V, 3], 10) };
    await expectSameAsOrt(build({ feeds, inputs: ['d', 'i', 's'], attrs: { block_size: 16, bits: 2 } }), feeds, tol);
    const withZp = { ...feeds, z: u8([V, 1], 11) };
    await expectSameAsOrt(build({ feeds: withZp, inputs: ['d', 'i', 's', 'z'], attrs: { block_size: 16, bits: 2 } }), withZp, tol);
  });
  it('float16 scales give a float16 output; block_size 128 over a whole row', () => {
    const s = new ort.Tensor('float16', Uint16Array.from(seeded(V, 12).map((x) => 0x2000 + Math.floor(Math.abs(x) * 0x800))), [V, 1]);
    const feeds = { d: u8([V, 64], 13), i: i64([1, 6], [2]), s };
    return expectSameAsOrt(build({ feeds, inputs: ['d', 'i', 's'], attrs: { block_size: 128 }, outType: 'float16' }), feeds, {
      rtol: 1e-3,
      atol: 1e-4,
    });
  });
  // onnxruntime 1.30's kernel still rejects them; the spec now says zeros. In-range rows match
  // onnxruntime on the same rows alone.
  it('indices out of range give zeros (the spec, unlike Gather)', async () => {
    const base = { d: u8([V, K / 2], 1), s: scalesOf([V, 3], 2) };
    const attrs = { block_size: 16 };
    const have = plain(
      (
        await runOn('mlx', build({ feeds: { ...base, i: i64([10, 2, -11, 1000], [4]) }, inputs: ['d', 'i', 's'], attrs }), {
          ...base,
          i: i64([10, 2, -11, 1000], [4]),
        })
      ).y,
    );
    const want = plain(
      (await runOn('cpu', build({ feeds: { ...base, i: i64([2], [1]) }, inputs: ['d', 'i', 's'], attrs }), { ...base, i: i64([2], [1]) }))
        .y,
    );
    expect(have.length).toBe(4 * K);
    expect(have.slice(K, 2 * K)).toEqual(want);
    for (const row of [0, 2, 3]) expect(have.slice(row * K, (row + 1) * K).every((x) => x === 0)).toBe(true);
  });
});

describe('GatherBlockQuantized, int4/uint4 tables (initializers)', () => {
  const table = (type: 'int4' | 'uint4', dims: number[], seed: number): TensorSpec => ({
    name: 'd',
    type,
    dims,
    values: ints(count(dims), 16, seed).map((x) => (type === 'int4' ? x - 8 : x)),
  });
  const zps = (type: 'int4' | 'uint4', dims: number[], seed: number): TensorSpec => ({ ...table(type, dims, seed), name: 'z' });
  const scaleInit = (dims: number[], seed: number): TensorSpec => ({
    name: 's',
    type: 'float32',
    dims,
    values: seeded(count(dims), seed).map((x) => 0.01 + Math.abs(x) * 0.1),
  });
  it('uint4, gather_axis 0, quantize_axis 1, zero points, partial block', () =>
    expectSameAsOrt(
      build({
        feeds: { i: i64([2, -3, 0], [3]) },
        inits: [table('uint4', [7, 20], 20), scaleInit([7, 2], 21), zps('uint4', [7, 2], 22)],
        inputs: ['d', 'i', 's', 'z'],
        attrs: { block_size: 16 },
      }),
      { i: i64([2, -3, 0], [3]) },
      tol,
    ));
  it('int4, gather_axis 1, quantize_axis 0 (blocks across rows), no zero points', () =>
    expectSameAsOrt(
      build({
        feeds: { i: i64([4, 0, 4, 1], [2, 2]) },
        inits: [table('int4', [33, 5], 23), scaleInit([3, 5], 24)],
        inputs: ['d', 'i', 's'],
        attrs: { block_size: 16, gather_axis: 1, quantize_axis: 0 },
      }),
      { i: i64([4, 0, 4, 1], [2, 2]) },
      tol,
    ));
  it('int4, gathering along the quantized axis itself, with zero points', () =>
    expectSameAsOrt(
      build({
        feeds: { i: i64([0, 17, 31, 16], [4]) },
        inits: [table('int4', [3, 40], 25), scaleInit([3, 3], 26), zps('int4', [3, 3], 27)],
        inputs: ['d', 'i', 's', 'z'],
        attrs: { block_size: 16, gather_axis: 1, quantize_axis: 1 },
      }),
      { i: i64([0, 17, 31, 16], [4]) },
      tol,
    ));
});

// onnxruntime 1.30 has no float8/float4 GatherBlockQuantized: a float64 reference from the
// formats' definitions (E4M3FN: bias 7, 3 mantissa bits; E2M1: bias 1, 1 mantissa bit).
describe('GatherBlockQuantized, float8/float4 tables (float64 reference)', () => {
  const e4m3 = (c: number) => {
    const e = (c >> 3) & 15;
    const m = c & 7;
    return (c & 0x80 ? -1 : 1) * (e === 0 ? (m / 8) * 2 ** -6 : (1 + m / 8) * 2 ** (e - 7));
  };
  const e2m1 = (c: number) => {
    const e = (c >> 1) & 3;
    return (c & 8 ? -1 : 1) * (e === 0 ? (c & 1) * 0.5 : (1 + (c & 1) / 2) * 2 ** (e - 1));
  };
  const run = async (inits: TensorSpec[], idx: number[], attrs: Record<string, number>) =>
    plain(
      (
        await runOn('mlx', build({ feeds: { i: i64(idx, [idx.length]) }, inits, inputs: ['d', 'i', 's'], attrs }), {
          i: i64(idx, [idx.length]),
        })
      ).y,
    );
  const close = (have: number[], want: number[]) => {
    expect(have.length).toBe(want.length);
    const bad = have.findIndex((x, i) => !(Math.abs(x - want[i]) <= 1e-6 * Math.max(1, Math.abs(want[i]))));
    expect(bad === -1 ? 'ok' : `y[${bad}]: mlx ${have[bad]} vs reference ${want[bad]}`).toBe('ok');
  };
  const rows = 6;
  const K = 40;
  const codes = ints(rows * K, 0x77, 30)
    .map((c, i) => (c & 0x7f) | (i % 5 === 0 ? 0x80 : 0))
    .map((c) => ((c & 0x7f) === 0x7f ? 0x7e : c));
  const scales = seeded(rows * 3, 31).map((x) => Math.fround(0.01 + Math.abs(x) * 0.1));
  const f8 = (extra: TensorSpec[]): TensorSpec[] => [{ name: 'd', type: 17, dims: [rows, K], raw: Uint8Array.from(codes) }, ...extra];
  it('float8e4m3fn rows in blocks of 16 (a partial last block), negative and out-of-range indices', async () => {
    const idx = [4, -1, 9, 0];
    const have = await run(f8([{ name: 's', type: 'float32', dims: [rows, 3], values: scales }]), idx, { block_size: 16 });
    const want = idx.flatMap((r) =>
      r < -rows || r >= rows
        ? new Array(K).fill(0)
        : Array.from(
            { length: K },
            (_, k) => e4m3(codes[((r + rows) % rows) * K + k]) * scales[((r + rows) % rows) * 3 + Math.floor(k / 16)],
          ),
    );
    close(have, want);
  });
  it('float8e4m3fn with block_size 0 and one scale for the whole table (broadcast)', async () => {
    const have = await run(f8([{ name: 's', type: 'float32', dims: [1, 1], values: [0.5] }]), [2, 3], { block_size: 0 });
    close(
      have,
      [2, 3].flatMap((r) => Array.from({ length: K }, (_, k) => e4m3(codes[r * K + k]) * 0.5)),
    );
  });
  it('float4e2m1, gathering columns (gather_axis 1) with blocks down the rows', async () => {
    const R = 32;
    const C = 3;
    const nib = ints(R * C, 16, 32);
    const raw = Uint8Array.from({ length: (R * C) / 2 }, (_, i) => nib[2 * i] | (nib[2 * i + 1] << 4));
    const sc = seeded(2 * C, 33).map((x) => Math.fround(0.1 + Math.abs(x)));
    const inits: TensorSpec[] = [
      { name: 'd', type: 23, dims: [R, C], raw },
      { name: 's', type: 'float32', dims: [2, C], values: sc },
    ];
    const idx = [2, 0];
    const have = await run(inits, idx, { block_size: 16, gather_axis: 1, quantize_axis: 0 });
    const want: number[] = [];
    for (let r = 0; r < R; r++) for (const c of idx) want.push(e2m1(nib[r * C + c]) * sc[Math.floor(r / 16) * C + c]);
    close(have, want);
  });
});
