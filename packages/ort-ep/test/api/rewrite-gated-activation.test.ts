// The gated-activation rewrite (src/plan/rewrite/gated-activation.ts): a SwiGLU (Mul(Mul(g,
// Sigmoid(g)), u), any operand order) or GeGLU (GELU(g) * u) becomes one GatedActivation node;
// over the joined gate and up product of sibling-matmul (its SplitLast's two equal halves, read by
// nothing else) it takes the product itself. Checked against onnxruntime-node and the rewrites
// without it at one row and many, and where it must not fire (an intermediate that is an output,
// a gate read elsewhere keeps the split).
import { describe, expect, it } from 'vitest';
import { prepareModel } from '../../src/plan/prepare.js';
import { REWRITES } from '../../src/plan/rewrite/index.js';
import { model, node, v } from '../helpers/build.js';
import { expectSameAsOrt, expectSameWithRewrites, seededFeed, seededInit } from '../helpers/ort.js';

// x [B, S, 16]: a Llama feed-forward (gate and up projections of x, SwiGLU, down) = y; a second
// SwiGLU with its operands the other way round over two inputs' own values = z; a GeGLU (erf
// GELU spelled out) = w; and a SwiGLU whose silu is also an output (not rewritten) = q.
const half = (name: string, value: number) =>
  node('Constant', [], [name], { attrs: { value: { t: { name, type: 'float32', dims: [], values: [value] } } } });
const bytes = model({
  inputs: [v('x', 'float32', ['B', 'S', 16]), v('a', 'float32', ['B', 'S', 8]), v('b', 'float32', ['B', 'S', 8])],
  outputs: [v('y', 'float32'), v('z', 'float32'), v('w', 'float32'), v('q', 'float32'), v('qs', 'float32')],
  initializers: [seededInit('Wg', [16, 40], 1), seededInit('Wu', [16, 40], 2), seededInit('Wd', [40, 16], 3)],
  nodes: [
    node('MatMul', ['x', 'Wg'], ['gate']),
    node('MatMul', ['x', 'Wu'], ['up']),
    node('Sigmoid', ['gate'], ['sg']),
    node('Mul', ['gate', 'sg'], ['silu']),
    node('Mul', ['silu', 'up'], ['act']),
    node('MatMul', ['act', 'Wd'], ['y']),
    node('Sigmoid', ['a'], ['sa']),
    node('Mul', ['sa', 'a'], ['silu_a']),
    node('Mul', ['b', 'silu_a'], ['z']),
    half('r2', Math.SQRT2),
    node('Div', ['a', 'r2'], ['ad']),
    node('Erf', ['ad'], ['ae']),
    half('one', 1),
    node('Add', ['ae', 'one'], ['aa']),
    node('Mul', ['a', 'aa'], ['am']),
    half('h', 0.5),
    node('Mul', ['am', 'h'], ['ga']),
    node('Mul', ['ga', 'b'], ['w']),
    node('Sigmoid', ['b'], ['sb']),
    node('Mul', ['b', 'sb'], ['qs']),
    node('Mul', ['qs', 'a'], ['q']),
  ],
});
const WITHOUT = (Object.keys(REWRITES) as (keyof typeof REWRITES)[]).filter((n) => n !== 'gated-activation');

describe('gated-activation rewrite', () => {
  it('takes SwiGLU and GeGLU chains, the joined product where the split is its own', () => {
    const cpu = prepareModel(bytes, { rewriteTarget: { packDense: true } });
    expect(cpu.rewrites).toMatchObject({ 'sibling-matmul': 1, 'gated-activation': 3 });
    const nodes = cpu.model.graph.nodes;
    const gated = nodes.filter((n) => n.opType === 'GatedActivation');
    const kinds = gated.map((n) => {
      const k = n.attributes.get('kind');
      return k?.type === 'string' ? k.value : '';
    });
    expect(kinds.sort()).toEqual(['gelu', 'silu', 'silu']);
    // The feed-forward's takes the joined product (one input) and the split is gone.
    const ff = gated.find((n) => n.outputs[0] === 'act')!;
    expect(ff.inputs).toHaveLength(1);
    expect(nodes.some((n) => n.opType === 'SplitLast')).toBe(false);
    expect(gated.find((n) => n.outputs[0] === 'z')!.inputs).toEqual(['a', 'b']);
    // q's silu is an output: its chain stays.
    expect(nodes.filter((n) => n.opType === 'Sigmoid')).toHaveLength(1);
  });

  it('keeps the split when the gate is read elsewhere', () => {
    const also = model({
      inputs: [v('x', 'float32', [2, 16])],
      outputs: [v('y', 'float32'), v('gate', 'float32')],
      initializers: [seededInit('Wg', [16, 8], 1), seededInit('Wu', [16, 8], 2)],
      nodes: [
        node('MatMul', ['x', 'Wg'], ['gate']),
        node('MatMul', ['x', 'Wu'], ['up']),
        node('Sigmoid', ['gate'], ['sg']),
        node('Mul', ['gate', 'sg'], ['silu']),
        node('Mul', ['silu', 'up'], ['y']),
      ],
    });
    const p = prepareModel(also, { rewriteTarget: { packDense: true } });
    expect(p.rewrites['gated-activation']).toBe(1);
    expect(p.model.graph.nodes.find((n) => n.opType === 'GatedActivation')!.inputs).toEqual(['gate', 'up']);
    expect(p.model.graph.nodes.some((n) => n.opType === 'SplitLast')).toBe(true);
  });

  for (const [B, S] of [
    [1, 1],
    [2, 13],
  ])
    it(`gives onnxruntime-node's outputs and those without it, ${B * S} row(s)`, async () => {
      const feeds = { x: seededFeed([B, S, 16], 3 + S), a: seededFeed([B, S, 8], 4 + S), b: seededFeed([B, S, 8], 5 + S) };
      await expectSameAsOrt(bytes, feeds, { rtol: 1e-5, atol: 1e-5 });
      await expectSameWithRewrites(bytes, feeds, true, WITHOUT);
    });
});
