// DynamicQuantizeMatMul and MatMulIntegerToFloat against onnxruntime-node's CPU kernels: uint8
// and int8 weights, per-tensor and per-column scales and zero points, bias, batched activations.
import { describe, it } from 'vitest';
import { model, node, v, type ElemName } from '../../../test/helpers/build.js';
import { expectSameAsOrt, f32, ort, seeded, type Feeds, type OrtTensor, randomF32 as rand } from '../../../test/helpers/ort.js';

const MS = 'com.microsoft';
const count = (dims: number[]) => dims.reduce((a, b) => a * b, 1);
const q8 = (type: 'int8' | 'uint8', dims: number[], seed: number) => {
  const vals = seeded(count(dims), seed).map((x) => Math.floor(((x + 1) / 2) * 256) % 256);
  return type === 'uint8'
    ? new ort.Tensor('uint8', Uint8Array.from(vals), dims)
    : new ort.Tensor('int8', Int8Array.from(vals.map((x) => x - 128)), dims);
};

function run(op: string, feeds: Record<string, OrtTensor | undefined>, order: string[]) {
  const given = Object.fromEntries(Object.entries(feeds).filter(([, t]) => t)) as Feeds;
  const inputs = order.map((n) => (given[n] ? n : ''));
  while (inputs.at(-1) === '') inputs.pop();
  const bytes = model({
    opsets: { '': 17, [MS]: 1 },
    inputs: Object.entries(given).map(([name, t]) => v(name, t.type as ElemName, [...t.dims])),
    outputs: [v('y', 'float32')],
    nodes: [node(op, inputs, ['y'], { domain: MS })],
  });
  return expectSameAsOrt(bytes, given, { rtol: 1e-5, atol: 1e-5 });
}

describe('DynamicQuantizeMatMul', () => {
  const K = 24;
  const N = 6;
  const order = ['a', 'b', 's', 'z', 'bias'];
  it('uint8 weights, per-tensor scale and zero point, bias, batched A', () =>
    run(
      'DynamicQuantizeMatMul',
      { a: rand([2, 3, K], 1, 3), b: q8('uint8', [K, N], 2), s: f32([0.02], []), z: q8('uint8', [], 3), bias: rand([N], 4) },
      order,
    ));
  it('int8 weights, per-column scales and zero points', () =>
    run('DynamicQuantizeMatMul', { a: rand([4, K], 5), b: q8('int8', [K, N], 6), s: rand([N], 7, 0.05), z: q8('int8', [N], 8) }, order));
  it('a non-negative A (zero point 0) and no zero point for B', () =>
    run(
      'DynamicQuantizeMatMul',
      {
        a: f32(
          seeded(4 * K, 9).map((x) => x + 1),
          [4, K],
        ),
        b: q8('int8', [K, N], 10),
        s: f32([0.01], []),
      },
      order,
    ));
  it('an all-zero A', () =>
    run('DynamicQuantizeMatMul', { a: f32(new Array(2 * K).fill(0), [2, K]), b: q8('uint8', [K, N], 11), s: f32([0.1], []) }, order));
  it('a long contraction (the integer product split to stay exact)', () =>
    run(
      'DynamicQuantizeMatMul',
      { a: rand([2, 512], 12, 4), b: q8('uint8', [512, N], 13), s: f32([0.003], []), z: q8('uint8', [], 14) },
      order,
    ));
});

describe('MatMulIntegerToFloat', () => {
  const K = 16;
  const N = 5;
  const order = ['a', 'b', 'as', 'bs', 'az', 'bz', 'bias'];
  it('uint8 × int8 with zero points and bias', () =>
    run(
      'MatMulIntegerToFloat',
      {
        a: q8('uint8', [3, K], 20),
        b: q8('int8', [K, N], 21),
        as: f32([0.05], []),
        bs: rand([N], 22, 0.1),
        az: q8('uint8', [], 23),
        bz: q8('int8', [N], 24),
        bias: rand([N], 25),
      },
      order,
    ));
  it('int8 × int8 without zero points, batched A', () =>
    run(
      'MatMulIntegerToFloat',
      { a: q8('int8', [2, 2, K], 26), b: q8('int8', [K, N], 27), as: f32([0.5], []), bs: f32([0.25], []) },
      order,
    ));
});
