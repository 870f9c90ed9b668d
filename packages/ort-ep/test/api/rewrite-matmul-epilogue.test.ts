// The matmul-epilogue rewrite (src/plan/rewrite/matmul-epilogue.ts): on a CPU session whose
// weights are packed (pack-matmul), an activation that alone reads a packed product's result (the
// fused Gelu of either form, Relu, Sigmoid, Tanh) and a residual Add after it (of the result's
// shape, or one that broadcasts) become the product's epilogue. Checked against
// onnxruntime-node and the rewrites without it, eager and compiled, at one row (the few-row kernel)
// and many (12-row tiles), and where it must not fire (a product whose result is also an output).
// torch's Gemm exports (GPT-2's Conv1D) put a Reshape of a target computed from Shape at run time
// between the product and its epilogue: that Reshape folds in too.
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

/** The model prepared for a CPU session with packed weights, its packed products and their activations ('none': not folded). */
function packedProducts(model: Uint8Array) {
  const packed = prepareModel(model, { rewriteTarget: { packDense: true } });
  const products = packed.model.graph.nodes.filter((n) => n.opType === 'MatMulPacked');
  const kinds = products.map((n) => {
    const a = n.attributes.get('activation');
    return a?.type === 'string' ? a.value : 'none';
  });
  return { packed, products, kinds };
}

describe('matmul-epilogue rewrite', () => {
  it('folds each activation and residual Add that alone reads a packed product into it, and no other', () => {
    const { packed, products, kinds } = packedProducts(bytes);
    expect(packed.rewrites).toMatchObject({ gelu: 2, 'pack-matmul': 6, 'matmul-epilogue': 5 });
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

// torch's Gemm export of a GPT-2 block's MLP: x [B, S, 24] -> Reshape [-1, 24] -> Gemm(W1, b1) ->
// Reshape [B, S, 40] (the target from Shape(x) at run time) -> GELU (tanh) = g -> Reshape [-1, 40]
// -> Gemm(W2, b2) -> Reshape [B, S, 24] -> Add(x) = h (the skip connection); then h -> Reshape ->
// Gemm(W3, b3) -> Reshape [B, S, 16] -> Relu -> Add(c [16], a row that broadcasts) = r; and a Reshape
// that is not the result's shape: r -> Reshape -> Gemm(W4, b4) [B*S, 12] -> Reshape [B, S*12] -> Add(d [B, S*12]) = q.
const target = (p: string, n: number): NodeSpec[] => [
  node('Shape', ['x'], [`${p}sh`]),
  node('Slice', [`${p}sh`, 'i0', 'i2'], [`${p}bs`]),
  node('Constant', [], [`${p}n`], { attrs: { value: { t: { name: `${p}n`, type: 'int64', dims: [1], values: [n] } } } }),
  node('Concat', [`${p}bs`, `${p}n`], [`${p}t`], { attrs: { axis: 0 } }),
];
const gemmExport = model({
  inputs: [v('x', 'float32', ['B', 'S', 24]), v('d', 'float32', ['B', 'T'])],
  outputs: [v('h', 'float32'), v('r', 'float32'), v('q', 'float32')],
  initializers: [
    seededInit('W1', [24, 40], 11),
    seededInit('b1', [40], 12),
    seededInit('W2', [40, 24], 13),
    seededInit('b2', [24], 14),
    seededInit('W3', [24, 16], 15),
    seededInit('b3', [16], 18),
    seededInit('c', [16], 16),
    seededInit('W4', [16, 12], 17),
    seededInit('b4', [12], 19),
    { name: 'i0', type: 'int64', dims: [1], values: [0] },
    { name: 'i2', type: 'int64', dims: [1], values: [2] },
    { name: 'k24', type: 'int64', dims: [2], values: [-1, 24] },
    { name: 'k40', type: 'int64', dims: [2], values: [-1, 40] },
    { name: 'k16', type: 'int64', dims: [2], values: [-1, 16] },
    { name: 'flat', type: 'int64', dims: [2], values: [0, -1] },
  ],
  nodes: [
    node('Reshape', ['x', 'k24'], ['x2']),
    node('Gemm', ['x2', 'W1', 'b1'], ['y1']),
    ...target('a_', 40),
    node('Reshape', ['y1', 'a_t'], ['y1r']),
    ...gelu('y1r', 'g', 'g_', true),
    node('Reshape', ['g', 'k40'], ['g2']),
    node('Gemm', ['g2', 'W2', 'b2'], ['y2']),
    ...target('b_', 24),
    node('Reshape', ['y2', 'b_t'], ['y2r']),
    node('Add', ['y2r', 'x'], ['h']),
    node('Reshape', ['h', 'k24'], ['h2']),
    node('Gemm', ['h2', 'W3', 'b3'], ['y3']),
    ...target('c_', 16),
    node('Reshape', ['y3', 'c_t'], ['y3r']),
    node('Relu', ['y3r'], ['r3']),
    node('Add', ['r3', 'c'], ['r']),
    node('Reshape', ['r', 'k16'], ['r2']),
    node('Gemm', ['r2', 'W4', 'b4'], ['y4']),
    ...target('d_', 12),
    node('Reshape', ['y4', 'd_t'], ['y4r']),
    node('Reshape', ['y4r', 'flat'], ['y4f']),
    node('Add', ['y4f', 'd'], ['q']),
  ],
});

describe('matmul-epilogue rewrite of Gemm exports', () => {
  it('folds the Reshape between a product and its epilogue', () => {
    const { packed, products, kinds } = packedProducts(gemmExport);
    expect(packed.rewrites).toMatchObject({ gelu: 1, 'pack-matmul': 4, 'matmul-epilogue': 3 });
    expect(kinds).toEqual(['gelu_tanh', 'identity', 'relu', 'none']);
    // The Reshape's target is the fifth input (after an empty residual where there is none).
    expect(products[0].inputs.slice(3)).toEqual(['', 'a_t']);
    expect(products[1].inputs.slice(3)).toEqual(['x', 'b_t']);
    expect(products[1].outputs).toEqual(['h']);
    expect(products[2].inputs.slice(3)).toEqual(['c', 'c_t']);
    // The last product's Reshape is read by another Reshape, not an epilogue: it stays.
    expect(products[3].inputs).toHaveLength(3);
    expect(packed.model.graph.nodes.filter((n) => n.opType === 'Reshape')).toHaveLength(6);
  });

  for (const [B, S] of [
    [1, 1],
    [2, 15],
  ])
    it(`gives onnxruntime-node's outputs and those without it, ${B * S} row(s)`, async () => {
      const feeds = { x: seededFeed([B, S, 24], 3 + S), d: seededFeed([B, S * 12], 5 + S) };
      await expectSameAsOrt(gemmExport, feeds, { rtol: 1e-5, atol: 1e-5 });
      await expectSameWithRewrites(gemmExport, feeds, true, WITHOUT);
    });
});
