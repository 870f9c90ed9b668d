// Matrix products beyond the node suite: integer MatMul, Gemm's older opsets and integer types,
// MatMulInteger with inner dimensions where one float32 product would round, per-axis
// QLinearMatMul, Einsum with broadcast ellipses and Det, against onnxruntime-node.
import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { MlxSession } from '../session.js';
import type { HostTensor } from '../onnx/index.js';
import { decodeMiniFloatArray, encodeMiniFloatArray } from './helpers/minifloat.js';
import { model, node, v, type ElemName, type ValueSpec } from '../../test/helpers/build.js';
import { expectSameAsOrt, ort, plain, runOn, seeded, type Feeds } from '../../test/helpers/ort.js';

const make: Record<string, (d: number[]) => ArrayLike<number | bigint>> = {
  float32: (d) => Float32Array.from(d),
  int32: (d) => Int32Array.from(d),
  int64: (d) => BigInt64Array.from(d.map(BigInt)),
  uint8: (d) => Uint8Array.from(d),
  int8: (d) => Int8Array.from(d),
};
const t = (type: ElemName, data: number[], dims: number[]) => new ort.Tensor(type as never, make[type](data) as never, dims);
const ints = (n: number, seed: number, lo: number, hi: number) => seeded(n, seed).map((x) => Math.round(lo + ((x + 1) / 2) * (hi - lo)));

interface Input {
  name: string;
  type: ElemName;
  dims: number[];
  data: number[];
}

async function same(
  op: string,
  opset: number,
  ins: Input[],
  outs: ValueSpec[],
  attrs: Record<string, number | string | number[] | { f: number }> = {},
  tol = { rtol: 1e-5, atol: 1e-5 },
) {
  const bytes = model({
    opsets: { '': opset },
    inputs: ins.map((i) => v(i.name, i.type, i.dims)),
    outputs: outs,
    nodes: [
      node(
        op,
        ins.map((i) => i.name),
        outs.map((o) => o.name),
        { attrs },
      ),
    ],
  });
  const feeds: Feeds = {};
  for (const i of ins) feeds[i.name] = t(i.type, i.data, i.dims);
  return expectSameAsOrt(bytes, feeds, tol);
}

describe('MatMul', () => {
  it('int32 operands multiply exactly, with batch broadcasting', async () => {
    await same(
      'MatMul',
      13,
      [
        { name: 'a', type: 'int32', dims: [2, 1, 3, 4], data: ints(24, 1, -50, 50) },
        { name: 'b', type: 'int32', dims: [3, 4, 2], data: ints(24, 2, -50, 50) },
      ],
      [v('y', 'int32')],
    );
  });
  it('int64 vector times matrix', async () => {
    await same(
      'MatMul',
      13,
      [
        { name: 'a', type: 'int64', dims: [4], data: ints(4, 3, -9, 9) },
        { name: 'b', type: 'int64', dims: [4, 3], data: ints(12, 4, -9, 9) },
      ],
      [v('y', 'int64')],
    );
  });
});

describe('Gemm', () => {
  const a = { name: 'a', type: 'float32' as const, dims: [3, 5], data: seeded(15, 5) };
  const b = { name: 'b', type: 'float32' as const, dims: [4, 5], data: seeded(20, 6) };
  it('opset 9: C required, transB, alpha and beta', async () => {
    await same('Gemm', 9, [a, b, { name: 'c', type: 'float32', dims: [4], data: seeded(4, 7) }], [v('y', 'float32')], {
      transB: 1,
      alpha: { f: 0.5 },
      beta: { f: 2 },
    });
  });
  it('opset 11 without C', async () => {
    await same('Gemm', 11, [a, b], [v('y', 'float32')], { transB: 1 });
  });
  it('int32 (opset 13; onnxruntime has no integer Gemm): checked by hand, beta 0 ignores C', async () => {
    const a = ints(6, 8, -5, 5);
    const b = ints(6, 9, -5, 5);
    const bytes = model({
      opsets: { '': 13 },
      inputs: [v('a', 'int32', [2, 3]), v('b', 'int32', [3, 2]), v('c', 'int32', [2, 2])],
      outputs: [v('y', 'int32')],
      nodes: [node('Gemm', ['a', 'b', 'c'], ['y'], { attrs: { alpha: { f: 2 }, beta: { f: 0 } } })],
    });
    const out = await runOn('mlx', bytes, { a: t('int32', a, [2, 3]), b: t('int32', b, [3, 2]), c: t('int32', [9, 9, 9, 9], [2, 2]) });
    const want = [0, 1].flatMap((i) => [0, 1].map((j) => 2 * [0, 1, 2].reduce((acc, k) => acc + a[i * 3 + k] * b[k * 2 + j], 0)));
    expect(out.y.type).toBe('int32');
    expect(plain(out.y)).toEqual(want);
  });
});

describe('MatMulInteger', () => {
  // With K = 600 and values near the extremes, one float32 dot product exceeds 2^24 and would round.
  it('uint8 x int8 with zero points, K = 600, exactly', async () => {
    await same(
      'MatMulInteger',
      10,
      [
        { name: 'a', type: 'uint8', dims: [3, 600], data: ints(1800, 11, 200, 255) },
        { name: 'b', type: 'int8', dims: [600, 2], data: ints(1200, 12, -128, -100) },
        { name: 'az', type: 'uint8', dims: [], data: [3] },
        { name: 'bz', type: 'int8', dims: [2], data: [5, -7] },
      ],
      [v('y', 'int32')],
      {},
      { rtol: 0, atol: 0 },
    );
  });
  it('per-row zero point of A (the spec allows it; onnxruntime does not): checked by hand', async () => {
    const a = ints(12, 13, -128, 127);
    const b = ints(8, 14, -128, 127);
    const az = [1, -2, 3];
    const bytes = model({
      opsets: { '': 10 },
      inputs: [v('a', 'int8', [3, 4]), v('b', 'int8', [4, 2]), v('az', 'int8', [3])],
      outputs: [v('y', 'int32')],
      nodes: [node('MatMulInteger', ['a', 'b', 'az'], ['y'])],
    });
    const out = await runOn('mlx', bytes, { a: t('int8', a, [3, 4]), b: t('int8', b, [4, 2]), az: t('int8', az, [3]) });
    const want = [0, 1, 2].flatMap((i) =>
      [0, 1].map((j) => [0, 1, 2, 3].reduce((acc, k) => acc + (a[i * 4 + k] - az[i]) * b[k * 2 + j], 0)),
    );
    expect(plain(out.y)).toEqual(want);
  });
});

describe('QLinearMatMul', () => {
  it('uint8, per-column scale and zero point of B (opset 21)', async () => {
    await same(
      'QLinearMatMul',
      21,
      [
        { name: 'a', type: 'uint8', dims: [2, 4], data: ints(8, 15, 0, 255) },
        { name: 'as', type: 'float32', dims: [], data: [0.02] },
        { name: 'az', type: 'uint8', dims: [], data: [120] },
        { name: 'b', type: 'uint8', dims: [4, 3], data: ints(12, 16, 0, 255) },
        { name: 'bs', type: 'float32', dims: [3], data: [0.01, 0.03, 0.005] },
        { name: 'bz', type: 'uint8', dims: [3], data: [128, 100, 140] },
        { name: 'ys', type: 'float32', dims: [], data: [0.05] },
        { name: 'yz', type: 'uint8', dims: [], data: [128] },
      ],
      [v('y', 'uint8')],
      {},
      { rtol: 0, atol: 0 },
    );
  });
});

describe('Einsum', () => {
  it('ellipsis batch matmul', async () => {
    await same(
      'Einsum',
      12,
      [
        { name: 'x', type: 'float32', dims: [2, 3, 4], data: seeded(24, 17) },
        { name: 'y', type: 'float32', dims: [2, 4, 2], data: seeded(16, 18) },
      ],
      [v('z', 'float32')],
      { equation: '...ij,...jk->...ik' },
    );
  });
  it('implicit output, outer product', async () => {
    await same(
      'Einsum',
      12,
      [
        { name: 'x', type: 'float32', dims: [3], data: seeded(3, 19) },
        { name: 'y', type: 'float32', dims: [4], data: seeded(4, 20) },
      ],
      [v('z', 'float32')],
      { equation: 'i,j' },
    );
  });
  it('int32 contraction', async () => {
    await same(
      'Einsum',
      12,
      [
        { name: 'x', type: 'int32', dims: [2, 3], data: ints(6, 21, -9, 9) },
        { name: 'y', type: 'int32', dims: [3, 2], data: ints(6, 22, -9, 9) },
      ],
      [v('z', 'int32')],
      { equation: 'ij,jk->ik' },
    );
  });
});

describe('Det', () => {
  it('a batch of 3x3 matrices, one singular, one needing a row swap', async () => {
    const data = [
      ...seeded(9, 23).map((x) => x * 4),
      1,
      2,
      3,
      2,
      4,
      6,
      0,
      1,
      1, // singular
      0,
      1,
      2,
      1,
      0,
      3,
      4,
      -3,
      8, // zero pivot first
    ];
    const bytes = model({
      opsets: { '': 22 },
      inputs: [v('x', 'float32', [3, 3, 3])],
      outputs: [v('y', 'float32')],
      nodes: [node('Det', ['x'], ['y'])],
    });
    const out = await expectSameAsOrt(bytes, { x: t('float32', data, [3, 3, 3]) }, { rtol: 1e-4, atol: 1e-5 });
    expect(plain(out.y)[1]).toBeCloseTo(0, 5);
  });
  it('an empty batch', async () => {
    const bytes = model({
      opsets: { '': 22 },
      inputs: [v('x', 'float32', [0, 2, 2])],
      outputs: [v('y', 'float32')],
      nodes: [node('Det', ['x'], ['y'])],
    });
    const out = await runOn('mlx', bytes, { x: t('float32', [], [0, 2, 2]) });
    expect([...out.y.dims]).toEqual([0]);
  });
});

describe('QLinearMatMul with float8 operands (opset 21)', () => {
  it('E4M3FN a and b, float8 result', async () => {
    const E4M3 = 17;
    const codes = (xs: number[]) => encodeMiniFloatArray(mx.array(xs), E4M3, true).toTypedArray() as Uint8Array;
    const f8 = (xs: number[], dims: number[]): HostTensor => ({ dtype: E4M3, dims, data: codes(xs) });
    const f32 = (xs: number[], dims: number[]): HostTensor => ({ dtype: 1, dims, data: Float32Array.from(xs) });
    const bytes = model({
      opsets: { '': 21 },
      inputs: [
        v('a', E4M3, [2, 3]),
        v('as', 'float32', []),
        v('az', E4M3, []),
        v('b', E4M3, [3, 2]),
        v('bs', 'float32', []),
        v('bz', E4M3, []),
        v('ys', 'float32', []),
        v('yz', E4M3, []),
      ],
      outputs: [v('y', E4M3)],
      nodes: [node('QLinearMatMul', ['a', 'as', 'az', 'b', 'bs', 'bz', 'ys', 'yz'], ['y'])],
    });
    const s = MlxSession.createSync(bytes, {});
    try {
      const out = s.runSync({
        a: f8([1, 2, 0.5, -1, 4, 0.25], [2, 3]),
        as: f32([1], []),
        az: f8([0], []),
        b: f8([1, 0, 0.5, 1, 2, -1], [3, 2]),
        bs: f32([1], []),
        bz: f8([0], []),
        ys: f32([0.5], []),
        yz: f8([0], []),
      }) as Record<string, HostTensor>;
      expect(out.y.dtype).toBe(E4M3);
      const values = Array.from(
        decodeMiniFloatArray(mx.array(Array.from(out.y.data as Uint8Array), { dtype: 'uint8' }), E4M3).toTypedArray() as Float32Array,
      );
      expect(values).toEqual([6, 3, 3, 7.5]);
    } finally {
      s.release();
    }
  });
});
