// Reductions beyond the node suite (which tests only the latest opsets, float inputs): the
// attribute form of axes, integer inputs, empty reductions and the host path of shape math,
// each against onnxruntime-node's CPU provider.
import { describe, expect, it } from 'vitest';
import { model, node, v, type ElemName } from '../../test/helpers/build.js';
import { expectSameAsOrt, ort, plain, runOn, seeded } from '../../test/helpers/ort.js';

const typed: Record<string, (d: number[]) => ArrayLike<number | bigint>> = {
  float32: (d) => Float32Array.from(d),
  int32: (d) => Int32Array.from(d),
  int64: (d) => BigInt64Array.from(d.map(BigInt)),
  uint8: (d) => Uint8Array.from(d),
  int8: (d) => Int8Array.from(d),
  bool: (d) => Uint8Array.from(d),
};
const tensor = (type: ElemName, data: number[], dims: number[]) => new ort.Tensor(type as never, typed[type](data) as never, dims);

async function reduceCase(
  op: string,
  opset: number,
  type: ElemName,
  dims: number[],
  data: number[],
  outType: ElemName,
  attrs: Record<string, number | number[]>,
) {
  const bytes = model({
    opsets: { '': opset },
    inputs: [v('x', type, dims)],
    outputs: [v('y', outType)],
    nodes: [node(op, ['x'], ['y'], { attrs })],
  });
  return expectSameAsOrt(bytes, { x: tensor(type, data, dims) }, { rtol: 1e-5, atol: 1e-5 });
}

const reductions = [
  'ReduceSum',
  'ReduceMean',
  'ReduceMax',
  'ReduceMin',
  'ReduceProd',
  'ReduceL1',
  'ReduceL2',
  'ReduceLogSum',
  'ReduceLogSumExp',
  'ReduceSumSquare',
];
const positive = seeded(24, 3).map((t) => t + 1.5);

describe('reductions with axes as an attribute (opset 11)', () => {
  for (const op of reductions) {
    it(`${op}: axes [0, -1], keepdims 0`, async () => {
      await reduceCase(op, 11, 'float32', [2, 3, 4], positive, 'float32', { axes: [0, -1], keepdims: 0 });
    });
    it(`${op}: no axes reduces everything`, async () => {
      await reduceCase(op, 11, 'float32', [2, 3, 4], positive, 'float32', {});
    });
  }
});

describe('integer reductions keep the integer type', () => {
  const ints = seeded(24, 5).map((t) => Math.round(t * 20));
  for (const op of ['ReduceSum', 'ReduceMax', 'ReduceMin', 'ReduceProd', 'ReduceL1', 'ReduceSumSquare', 'ReduceMean']) {
    for (const type of ['int32', 'int64'] as const) {
      it(`${op} of ${type}`, async () => {
        await reduceCase(op, 12, type, [2, 3, 4], ints, type, { axes: [1], keepdims: 1 });
      });
    }
  }
  it('ReduceMax of uint8 and int8', async () => {
    await reduceCase('ReduceMax', 12, 'uint8', [2, 3], [1, 200, 3, 255, 0, 7], 'uint8', { axes: [1] });
    await reduceCase('ReduceMin', 12, 'int8', [2, 3], [1, -100, 3, 127, -128, 7], 'int8', { axes: [0] });
  });
});

describe('empty reductions', () => {
  it('ReduceMax/ReduceMin of an empty int32 axis give the type limits; ReduceSum 0, ReduceProd 1', async () => {
    const bytes = (op: string) =>
      model({
        opsets: { '': 20 },
        inputs: [v('x', 'int32', [2, 0, 3])],
        outputs: [v('y', 'int32')],
        initializers: [{ name: 'axes', type: 'int64', dims: [1], values: [1n] }],
        nodes: [node(op, ['x', 'axes'], ['y'], { attrs: { keepdims: 0 } })],
      });
    const x = tensor('int32', [], [2, 0, 3]);
    expect(plain((await runOn('mlx', bytes('ReduceMax'), { x })).y)).toEqual(new Array(6).fill(-2147483648));
    expect(plain((await runOn('mlx', bytes('ReduceMin'), { x })).y)).toEqual(new Array(6).fill(2147483647));
    expect(plain((await runOn('mlx', bytes('ReduceSum'), { x })).y)).toEqual(new Array(6).fill(0));
    expect(plain((await runOn('mlx', bytes('ReduceProd'), { x })).y)).toEqual(new Array(6).fill(1));
  });
});

describe('shape math on the host', () => {
  it('ReduceProd of a Shape feeds a Reshape (the product stays a host value)', async () => {
    const bytes = model({
      opsets: { '': 13 },
      inputs: [v('x', 'float32', [2, 3, 4])],
      outputs: [v('y', 'float32', [24])],
      nodes: [
        node('Shape', ['x'], ['s']),
        node('ReduceProd', ['s'], ['n'], { attrs: { keepdims: 1 } }),
        node('Reshape', ['x', 'n'], ['y']),
      ],
    });
    await expectSameAsOrt(bytes, { x: tensor('float32', positive, [2, 3, 4]) });
  });
});

describe('ArgMax / ArgMin', () => {
  const ties = [1, 3, 3, 2, 5, 5, 0, 5, -1, -1, 4, -1];
  for (const op of ['ArgMax', 'ArgMin']) {
    for (const last of [0, 1]) {
      it(`${op} with ties, select_last_index ${last}, axis -1 of int32`, async () => {
        await reduceCase(op, 12, 'int32', [3, 4], ties, 'int64', { axis: -1, keepdims: 0, select_last_index: last });
      });
    }
    it(`${op} at opset 11 (no select_last_index), axis 0`, async () => {
      await reduceCase(op, 11, 'float32', [3, 4], ties, 'int64', { axis: 0 });
    });
  }
});

describe('edge cases as onnxruntime has them', () => {
  const ax = (a: number[]) => [{ name: 'axes', type: 'int64' as const, dims: [a.length], values: a.map(BigInt) }];
  async function edge(
    op: string,
    opset: number,
    type: ElemName,
    dims: number[],
    data: number[] | bigint[],
    attrs: Record<string, number | number[]>,
    axes?: number[],
  ) {
    const bytes = model({
      opsets: { '': opset },
      inputs: [v('x', type, dims)],
      outputs: [v('y', type)],
      initializers: axes ? ax(axes) : [],
      nodes: [node(op, axes ? ['x', 'axes'] : ['x'], ['y'], { attrs })],
    });
    const x = new ort.Tensor(
      type as never,
      (type === 'int64' ? BigInt64Array.from(data as bigint[]) : typed[type](data as number[])) as never,
      dims,
    );
    // Exact equality (infinities included).
    const [want, have] = [(await runOn('cpu', bytes, { x })).y, (await runOn('mlx', bytes, { x })).y];
    expect({ type: have.type, dims: have.dims, data: plain(have) }).toEqual({ type: want.type, dims: want.dims, data: plain(want) });
  }
  it('an empty input: a negative axis reduces nothing (onnxruntime matches axes before normalising them)', async () => {
    for (const op of ['ReduceSumSquare', 'ReduceMax', 'ReduceMean', 'ReduceSum'])
      for (const keepdims of [0, 1]) {
        await edge(op, 11, 'float32', [2, 0, 5], [], { axes: [-2, 0], keepdims });
        await edge(op, 11, 'int32', [2, 0, 5], [], { axes: [-1], keepdims });
        await edge(op, 18, 'float32', [2, 0, 5], [], { keepdims }, [-2]);
        await edge(op, 18, 'float32', [2, 0, 5], [], { keepdims }, [1]);
      }
  });
  it('the mean of nothing is 0; the log-sum of nothing in int32 the lowest int32', async () => {
    await edge('ReduceMean', 13, 'float32', [2, 0, 5], [], {});
    await edge('ReduceMean', 18, 'float32', [2, 0, 5], [], { keepdims: 0 }, [1]);
    await edge('ReduceLogSum', 18, 'int32', [3, 0, 2], [], { keepdims: 0 });
    await edge('ReduceLogSumExp', 18, 'int32', [3, 0, 2], [], {}, [1]);
  });
  it('integer sums, squares, norms and products saturate at the type limits', async () => {
    const big = [3, 65536, 46341, -46341, 2 ** 30, 2 ** 30, -(2 ** 31), -5];
    for (const op of ['ReduceSum', 'ReduceSumSquare', 'ReduceL1', 'ReduceProd', 'ReduceMean']) {
      await edge(op, 11, 'int32', [8], big, { keepdims: 0 });
      await edge(op, 11, 'int32', [2, 4], big, { axes: [0] });
      await edge(op, 11, 'int32', [2, 4], big, { axes: [1] });
    }
    // L2 saturates too (its precision below the limit is float32's here, double's in onnxruntime).
    await edge('ReduceL2', 11, 'int32', [3], [-(2 ** 31), 0, 0], { keepdims: 0 });
    // (Sums past 2^53 that stay in range round in onnxruntime's double: not compared.)
    const big64 = [-1n, 3n, -2n, 2n ** 32n, 2n ** 62n, 2n ** 62n, -(2n ** 62n), 2n ** 62n];
    for (const op of ['ReduceSum', 'ReduceSumSquare', 'ReduceProd']) {
      await edge(op, 11, 'int64', [2, 4], big64, { axes: [1] });
      await edge(op, 11, 'int64', [8], big64, { keepdims: 0 });
    }
  });
});

describe('ReduceMean over the trailing axes (the native mean of @mlx/sys)', () => {
  // Rows shorter and longer than the kernel's 16 lanes, not a multiple of them, one axis or more,
  // keepdims on and off, the attribute (opset 17) and input (opset 18) forms of axes, negative axes.
  const cases: [number[], number[], number][] = [
    [[2, 48, 7, 9], [2, 3], 1],
    [[1, 5, 33], [-1], 0],
    [[3, 4, 2, 5], [1, 2, 3], 1],
    [[1, 120, 12, 12], [-2, -1], 0],
    [[6, 3], [1], 1],
  ];
  for (const [dims, axes, keepdims] of cases)
    for (const opset of [17, 18])
      it(`[${dims}] axes [${axes}] keepdims ${keepdims}, opset ${opset}`, async () => {
        const n = dims.reduce((a, b) => a * b, 1);
        const x = seeded(n, dims.length + axes.length).map((u) => (u - 0.5) * 8);
        const bytes = model({
          opsets: { '': opset },
          inputs: [v('x', 'float32', dims)],
          outputs: [v('y', 'float32')],
          nodes:
            opset >= 18
              ? [node('ReduceMean', ['x', 'axes'], ['y'], { attrs: { keepdims } })]
              : [node('ReduceMean', ['x'], ['y'], { attrs: { axes, keepdims } })],
          initializers: opset >= 18 ? [{ name: 'axes', type: 'int64', dims: [axes.length], values: axes }] : [],
        });
        await expectSameAsOrt(bytes, { x: tensor('float32', x, dims) }, { rtol: 1e-5, atol: 1e-6 });
      });
});
