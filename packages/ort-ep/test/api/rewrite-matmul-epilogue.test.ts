// The matmul-epilogue rewrite (src/plan/rewrite/matmul-epilogue.ts): on a CPU session whose
// weights are packed (pack-matmul), an activation that alone reads a packed product's result (the
// fused Gelu of either form, Relu, Sigmoid, Tanh) and a residual Add after it (of the result's
// shape, or one that broadcasts) become the product's epilogue. Checked against
// onnxruntime-node and the rewrites without it, eager and compiled, at one row (the few-row kernel)
// and many (12-row tiles), and where it must not fire (a product whose result is also an output).
import { describe, expect, it } from 'vitest';
import { prepareModel } from '../../src/plan/prepare.js';
import { REWRITES } from '../../src/plan/rewrite/index.js';
import { model, node, v, type NodeSpec } from '../helpers/build.js';
import { expectSameAsOrt, expectSameWithRewrites, seededFeed, seededInit } from '../helpers/ort.js';

const scalar = (name: string, value: number): NodeSpec =>
  node('Constant', [], [name], { attrs: { value: { t: { name, type: 'float32', dims: [], values: [value] } } } });

/** GELU of `x` into `y` as torch exports it: erf form, or GPT-2's tanh form (names prefixed by `p`). */
function gelu(x: string, y: string, p: string, tanh: boolean): NodeSpec[] {
  if (!tanh)
    return [
      scalar(`${p}r2`, Math.SQRT2),
      node('Div', [x, `${p}r2`], [`${p}d`]),
      node('Erf', [`${p}d`], [`${p}e`]),
      scalar(`${p}one`, 1),
      node('Add', [`${p}e`, `${p}one`], [`${p}a`]),
      node('Mul', [x, `${p}a`], [`${p}m`]),
      scalar(`${p}half`, 0.5),
      node('Mul', [`${p}m`, `${p}half`], [y]),
    ];
  return [
    scalar(`${p}half`, 0.5),
    node('Mul', [x, `${p}half`], [`${p}h`]),
    scalar(`${p}three`, 3),
    node('Pow', [x, `${p}three`], [`${p}c`]),
    scalar(`${p}k1`, 0.044715),
    node('Mul', [`${p}c`, `${p}k1`], [`${p}ck`]),
    node('Add', [x, `${p}ck`], [`${p}s`]),
    scalar(`${p}k2`, Math.sqrt(2 / Math.PI)),
    node('Mul', [`${p}s`, `${p}k2`], [`${p}u`]),
    node('Tanh', [`${p}u`], [`${p}t`]),
    scalar(`${p}one`, 1),
    node('Add', [`${p}t`, `${p}one`], [`${p}a`]),
    node('Mul', [`${p}h`, `${p}a`], [y]),
  ];
}

// x [B, S, 24] -> MatMul+Add(b1) -> GELU (erf) -> MatMul -> Add(x) = h (a skip connection) ->
// MatMul -> GELU (tanh) -> MatMul -> Relu -> Add(c, a row that broadcasts) -> MatMul -> Sigmoid = s;
// x -> MatMul = p (an output) -> Tanh = t: p is read twice, so it stays a product.
const bytes = model({
  inputs: [v('x', 'float32', ['B', 'S', 24])],
  outputs: [v('s', 'float32'), v('h', 'float32'), v('p', 'float32'), v('t', 'float32')],
  initializers: [
    seededInit('W1', [24, 70], 1),
    seededInit('b1', [70], 2),
    seededInit('W2', [70, 24], 3),
    seededInit('W3', [24, 40], 4),
    seededInit('W4', [40, 36], 5),
    seededInit('c', [36], 6),
    seededInit('W5', [36, 20], 7),
    seededInit('W6', [24, 16], 8),
  ],
  nodes: [
    node('MatMul', ['x', 'W1'], ['m1']),
    node('Add', ['m1', 'b1'], ['a1']),
    ...gelu('a1', 'g1', 'e_', false),
    node('MatMul', ['g1', 'W2'], ['m2']),
    node('Add', ['x', 'm2'], ['h']),
    node('MatMul', ['h', 'W3'], ['m3']),
    ...gelu('m3', 'g3', 't_', true),
    node('MatMul', ['g3', 'W4'], ['m4']),
    node('Relu', ['m4'], ['r4']),
    node('Add', ['r4', 'c'], ['a4']),
    node('MatMul', ['a4', 'W5'], ['m5']),
    node('Sigmoid', ['m5'], ['s']),
    node('MatMul', ['x', 'W6'], ['p']),
    node('Tanh', ['p'], ['t']),
  ],
});
const WITHOUT = (Object.keys(REWRITES) as (keyof typeof REWRITES)[]).filter((n) => n !== 'matmul-epilogue');

describe('matmul-epilogue rewrite', () => {
  it('folds each activation and residual Add that alone reads a packed product into it, and no other', () => {
    const packed = prepareModel(bytes, { rewriteTarget: { packDense: true } });
    expect(packed.rewrites).toMatchObject({ gelu: 2, 'pack-matmul': 6, 'matmul-epilogue': 5 });
    const products = packed.model.graph.nodes.filter((n) => n.opType === 'MatMulPacked');
    const kinds = products.map((n) => {
      const a = n.attributes.get('activation');
      return a?.type === 'string' ? a.value : 'none';
    });
    expect(kinds).toEqual(['gelu', 'identity', 'gelu_tanh', 'relu', 'sigmoid', 'none']);
    // The first keeps its bias (from matmul-add); the skip connection and the broadcast row are
    // fourth inputs after an empty bias; the product read twice keeps its Tanh after it.
    expect(products[0].inputs).toHaveLength(3);
    expect(products[1].inputs.slice(2)).toEqual(['', 'x']);
    expect(products[1].outputs).toEqual(['h']);
    expect(products[3].inputs.slice(2)).toEqual(['', 'c']);
    expect(packed.model.graph.nodes.filter((n) => n.opType === 'Tanh' || n.opType === 'Add')).toHaveLength(1);
    // Without packing (another device) nothing is folded.
    expect(prepareModel(bytes).rewrites['matmul-epilogue']).toBeUndefined();
  });

  for (const [B, S] of [
    [1, 1],
    [2, 15],
  ])
    it(`gives onnxruntime-node's outputs and those without it, ${B * S} row(s)`, async () => {
      const feeds = { x: seededFeed([B, S, 24], 7 + S) };
      await expectSameAsOrt(bytes, feeds, { rtol: 1e-5, atol: 1e-5 });
      await expectSameWithRewrites(bytes, feeds, true, WITHOUT);
    });
});
