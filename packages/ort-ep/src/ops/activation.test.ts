// Activations beyond the node suite (which tests the latest opsets on float32): the 2-D coercion
// of Softmax/LogSoftmax/Hardmax before opset 13, old opsets, float16 and integer inputs, and
// Dropout's mask and refusals, against onnxruntime-node's CPU provider or the spec.
import { describe, expect, it } from 'vitest';
import { model, node, v, type ElemName, type NodeSpec, type TensorSpec } from '../../test/helpers/build.js';
import { expectSameAsOrt, f32, ort, plain, runOn, seeded, type Feeds } from '../../test/helpers/ort.js';

function one(
  op: string,
  opset: number,
  feeds: Feeds,
  attrs: NodeSpec['attrs'] = {},
  outs: [string, ElemName][] = [['y', 'float32']],
  inputs?: string[],
  inits?: TensorSpec[],
): Uint8Array {
  return model({
    opsets: { '': opset },
    inputs: Object.entries(feeds).map(([name, t]) => v(name, t.type as ElemName, [...t.dims])),
    outputs: outs.map(([name, type]) => v(name, type)),
    initializers: inits,
    nodes: [
      node(
        op,
        inputs ?? Object.keys(feeds),
        outs.map(([n]) => n),
        { attrs },
      ),
    ],
  });
}

const x4 = f32(
  seeded(2 * 3 * 4 * 5, 1).map((t) => t * 4),
  [2, 3, 4, 5],
);
const tol = { rtol: 1e-5, atol: 1e-6 };

describe('Softmax, LogSoftmax, Hardmax before opset 13 coerce to 2-D', () => {
  for (const op of ['Softmax', 'LogSoftmax', 'Hardmax']) {
    for (const opset of [1, 11]) {
      it(`${op}-${opset}: default axis 1 normalises over the flattened trailing dims`, () =>
        expectSameAsOrt(one(op, opset, { x: x4 }), { x: x4 }, tol));
      it(`${op}-${opset}: axis 2`, () => expectSameAsOrt(one(op, opset, { x: x4 }, { axis: 2 }), { x: x4 }, tol));
    }
    it(`${op}-11: negative axis`, () => expectSameAsOrt(one(op, 11, { x: x4 }, { axis: -1 }), { x: x4 }, tol));
    it(`${op}-13: axis 1 is one axis only`, () => expectSameAsOrt(one(op, 13, { x: x4 }, { axis: 1 }), { x: x4 }, tol));
  }
  it('Hardmax picks the first of equal maxima', async () => {
    const x = f32([1, 3, 3, 0, 2, 2], [2, 3]);
    expect(plain((await runOn('mlx', one('Hardmax', 13, { x }), { x })).y)).toEqual([0, 1, 0, 0, 1, 0]);
  });
});

describe('activations at older opsets and other types', () => {
  const x = f32(
    seeded(24, 2).map((t) => t * 3),
    [2, 3, 4],
  );
  const cases: [string, number, NodeSpec['attrs']][] = [
    ['LeakyRelu', 6, { alpha: 0.2 }],
    ['Elu', 6, {}],
    ['Selu', 6, { alpha: 1.5, gamma: { f: 2 } }],
    ['HardSigmoid', 6, {}],
    ['Softplus', 1, {}],
    ['Softsign', 1, {}],
    ['ThresholdedRelu', 10, { alpha: 0.5 }],
    ['Celu', 12, { alpha: 0.7 }],
    ['HardSwish', 14, {}],
    ['Mish', 18, {}],
    ['Shrink', 9, { lambd: 0.8, bias: 0.3 }],
    ['Gelu', 20, { approximate: 'tanh' }],
  ];
  for (const [op, opset, attrs] of cases) it(`${op}-${opset}`, () => expectSameAsOrt(one(op, opset, { x }, attrs), { x }, tol));

  // HardSigmoid/HardSwish run one native pass in float32: the knees, values far outside, alpha and
  // beta, and a transposed (non-contiguous) input.
  const knees = f32([-1e30, -4, -3, -2.5, -0.5, 0, 0.5, 2.5, 3, 4, 1e30, -1e-30], [3, 4]);
  it('HardSigmoid at its knees with alpha and beta', () =>
    expectSameAsOrt(one('HardSigmoid', 6, { x: knees }, { alpha: 0.4, beta: 0.6 }), { x: knees }, tol));
  it('HardSwish at its knees', () => expectSameAsOrt(one('HardSwish', 14, { x: knees }), { x: knees }, tol));
  it('HardSwish of a transposed input', () => {
    const bytes = model({
      opsets: { '': 14 },
      inputs: [v('x', 'float32', [2, 3, 4])],
      outputs: [v('y', 'float32')],
      nodes: [node('Transpose', ['x'], ['t'], { attrs: { perm: [2, 0, 1] } }), node('HardSwish', ['t'], ['y'])],
    });
    return expectSameAsOrt(bytes, { x }, tol);
  });
  it('PRelu with a slope broadcast over the channel axis', () => {
    const slope = f32([0.1, 0.2, 0.3, 0.4], [4]);
    return expectSameAsOrt(one('PRelu', 9, { x, slope }), { x, slope }, tol);
  });
  it('float16 Softmax and LeakyRelu keep float16', async () => {
    const h = new ort.Tensor('float16', Uint16Array.from([0x3c00, 0xbc00, 0x4000, 0x0000, 0x4200, 0xc200]), [2, 3]);
    await expectSameAsOrt(one('Softmax', 13, { h }, {}, [['y', 'float16']]), { h }, { rtol: 2e-3, atol: 1e-3 });
    await expectSameAsOrt(one('LeakyRelu', 16, { h }, {}, [['y', 'float16']]), { h }, { rtol: 2e-3, atol: 1e-3 });
  });
  it('Shrink on int32 keeps the integer type', () => {
    const n = new ort.Tensor('int32', Int32Array.from([-5, -2, -1, 0, 1, 2, 5]), [7]);
    return expectSameAsOrt(one('Shrink', 9, { n }, { lambd: 1.5, bias: { f: 1 } }, [['y', 'int32']]), { n }, tol);
  });
});

describe('Dropout (inference)', () => {
  const x = f32(seeded(12, 3), [3, 4]);
  it('opset 7: identity and a mask of ones typed like the input', async () => {
    const out = await runOn(
      'mlx',
      one('Dropout', 7, { x }, { ratio: 0.3 }, [
        ['y', 'float32'],
        ['mask', 'float32'],
      ]),
      { x },
    );
    expect(plain(out.y)).toEqual(plain(x));
    expect(out.mask.type).toBe('float32');
    expect(plain(out.mask).every((m) => m === 1)).toBe(true);
  });
  it('opset 13 with ratio and a constant training_mode false: identity and a mask of trues', async () => {
    const inits: TensorSpec[] = [
      { name: 'r', type: 'float32', dims: [], values: [0.4] },
      { name: 't', type: 'bool', dims: [], values: [0] },
    ];
    const out = await runOn(
      'mlx',
      one(
        'Dropout',
        13,
        { x },
        {},
        [
          ['y', 'float32'],
          ['mask', 'bool'],
        ],
        ['x', 'r', 't'],
        inits,
      ),
      { x },
    );
    expect(plain(out.y)).toEqual(plain(x));
    expect(out.mask.type).toBe('bool');
    expect(plain(out.mask).every((m) => m === 1)).toBe(true);
  });
  it('a constant training_mode true with ratio 0 is the identity', async () => {
    const inits: TensorSpec[] = [
      { name: 'r', type: 'float32', dims: [], values: [0] },
      { name: 't', type: 'bool', dims: [], values: [1] },
    ];
    const out = await runOn('mlx', one('Dropout', 13, { x }, {}, [['y', 'float32']], ['x', 'r', 't'], inits), { x });
    expect(plain(out.y)).toEqual(plain(x));
  });
  it('training_mode and ratio fed at run time: true with ratio 0 is the identity (as onnxruntime), else an error', async () => {
    const t = new ort.Tensor('bool', Uint8Array.from([1]), []);
    const outs: [string, ElemName][] = [
      ['y', 'float32'],
      ['mask', 'bool'],
    ];
    await expectSameAsOrt(one('Dropout', 22, { x, r: f32([0], []), t }, {}, outs), { x, r: f32([0], []), t });
    const off = new ort.Tensor('bool', Uint8Array.from([0]), []);
    await expectSameAsOrt(one('Dropout', 22, { x, r: f32([0.4], []), t: off }, {}, outs), { x, r: f32([0.4], []), t: off });
    await expect(runOn('mlx', one('Dropout', 22, { x, r: f32([0.4], []), t }, {}, outs), { x, r: f32([0.4], []), t })).rejects.toThrow(
      /training_mode=true is random.*\(ratio 0\.4/,
    );
    // A constant true with a fed ratio is checked at run time too.
    const tInit: TensorSpec[] = [{ name: 't', type: 'bool', dims: [], values: [1] }];
    await expect(
      runOn('mlx', one('Dropout', 22, { x, r: f32([0.4], []) }, {}, outs, ['x', 'r', 't'], tInit), { x, r: f32([0.4], []) }),
    ).rejects.toThrow(/\(ratio 0\.4/);
  });
  it('refuses training mode, and is_test=0 before opset 7', async () => {
    const inits: TensorSpec[] = [{ name: 't', type: 'bool', dims: [], values: [1] }];
    await expect(runOn('mlx', one('Dropout', 13, { x }, {}, [['y', 'float32']], ['x', '', 't'], inits), { x })).rejects.toThrow(
      /training_mode=true/,
    );
    await expect(runOn('mlx', one('Dropout', 6, { x }, {}, [['y', 'float32']]), { x })).rejects.toThrow(/is_test=0/);
    expect(plain((await runOn('mlx', one('Dropout', 6, { x }, { is_test: 1 }), { x })).y)).toEqual(plain(x));
  });
});
