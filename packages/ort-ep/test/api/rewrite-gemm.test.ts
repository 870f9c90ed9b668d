// The Gemm rewrite (src/plan/rewrite/matmul-add.ts): a Gemm of a 2-D input by a constant float32 B
// with a constant bias row at unit alpha and beta becomes mlx.fused::MatMulAdd, B transposed once at
// plan time for transB. Checked against onnxruntime-node and the rewrites without it, eager and compiled.
import * as ort from 'onnxruntime-node';
import { describe, expect, it } from 'vitest';
import { prepareModel } from '../../src/plan/prepare.js';
import { REWRITES } from '../../src/plan/rewrite/index.js';
import { model, node, v } from '../helpers/build.js';
import { seededInit as init, seededInput as input } from '../helpers/rewrite-products.js';
import { expectSameAsOrt, expectSameWithRewrites, i64, runOn, type Feeds } from '../helpers/ort.js';

const WITHOUT = (Object.keys(REWRITES) as (keyof typeof REWRITES)[]).filter((n) => n !== 'gemm');
async function expectSame(bytes: Uint8Array, f: Feeds, tol = { rtol: 1e-5, atol: 1e-5 }) {
  await expectSameAsOrt(bytes, f, tol);
  await expectSameWithRewrites(bytes, f, true, WITHOUT, tol);
}

describe('Gemm rewrite', () => {
  it('transB and not, [N] and [1, N] biases, a shared B; alpha != 1, transA and a graph-input B stay as written', async () => {
    const X = [3, 2, 4, 3];
    const bytes = model({
      inputs: [v('x', 'float32', X), v('a2', 'float32', [3, 24]), v('bf', 'float32', [24, 7])],
      outputs: ['y1', 'y2', 'y3', 'y4', 'y5', 'y6'].map((n) => v(n, 'float32')),
      nodes: [
        node('Flatten', ['x'], ['f']),
        node('Gemm', ['f', 'Bt', 'C'], ['y1'], { attrs: { transB: { i: 1 } } }),
        node('Gemm', ['a2', 'Bt', 'Crow'], ['y2'], { attrs: { transB: { i: 1 } } }),
        node('Gemm', ['f', 'B', 'C7'], ['y3']),
        node('Gemm', ['f', 'B', 'C7'], ['y4'], { attrs: { alpha: { f: 0.5 } } }),
        node('Gemm', ['fT', 'B', 'C7'], ['y5'], { attrs: { transA: { i: 1 } } }),
        node('Transpose', ['f'], ['fT']),
        node('Gemm', ['a2', 'bf', 'C7'], ['y6']),
      ],
      initializers: [init('Bt', [5, 24], 1), init('C', [5], 2), init('Crow', [1, 5], 3), init('B', [24, 7], 4), init('C7', [7], 5)],
      opsets: { '': 13 },
    });
    const prepared = prepareModel(bytes);
    expect(prepared.rewrites).toMatchObject({ gemm: 3 });
    // Bt is read only by rewritten Gemms: held transposed only.
    expect(prepared.model.graph.initializers.has('Bt')).toBe(false);
    expect(prepared.model.graph.initializers.get('Bt/t')?.dims).toEqual([24, 5]);
    await expectSame(bytes, { x: input(X, 6), a2: input([3, 24], 7), bf: input([24, 7], 8) });
  });

  // A Linear layer as GPT-2's export writes it: x [B, S, K] -> Reshape to [-1, K] (the shape made by
  // a Concat, so the Gemm's input rank is declared nowhere) -> Gemm -> Reshape back.
  const linear = (declared: boolean) =>
    model({
      inputs: [v('x', 'float32', ['B', 'S', 24]), v('k', 'int64', [1])],
      outputs: [v('y', 'float32')],
      nodes: [
        node('Concat', ['minus1', 'k'], ['shape'], { attrs: { axis: { i: 0 } } }),
        node('Reshape', ['x', 'shape'], ['x2']),
        node('Gemm', ['x2', 'W', 'b'], ['g']),
        node('Shape', ['x'], ['xs']),
        node('Slice', ['xs', 'zero', 'two'], ['bs']),
        node('Concat', ['bs', 'n'], ['yshape'], { attrs: { axis: { i: 0 } } }),
        node('Reshape', ['g', 'yshape'], ['y']),
      ],
      initializers: [
        init('W', [24, 40], 9),
        init('b', [40], 10),
        { name: 'minus1', type: 'int64', dims: [1], values: [-1] },
        { name: 'zero', type: 'int64', dims: [1], values: [0] },
        { name: 'two', type: 'int64', dims: [1], values: [2] },
        { name: 'n', type: 'int64', dims: [1], values: [40] },
      ],
      valueInfo: declared ? [v('x2', 'float32', ['M', 24])] : [],
      opsets: { '': 17 },
    });

  it('takes a Gemm whose input rank is declared nowhere (Reshape by a computed shape), checking it at run time', async () => {
    const bytes = linear(false);
    expect(prepareModel(bytes).rewrites).toMatchObject({ gemm: 1 });
    const gemm = prepareModel(bytes).model.graph.nodes.find((n) => n.opType === 'MatMulAdd' || n.opType === 'MatMulPacked');
    expect(gemm?.attributes.get('a_rank')).toEqual({ type: 'int', value: 2 });
    expect(prepareModel(linear(true)).model.graph.nodes.some((n) => n.attributes.has('a_rank'))).toBe(false);
    for (const S of [1, 5]) await expectSame(bytes, { x: input([2, S, 24], 11 + S), k: i64([24], [1]) });
  });

  it('refuses an A of another rank, as onnxruntime does, with the rewrite and without', async () => {
    // k = 8 reshapes x [2, 3, 24] into [18, 8]: still 2-D, but K 8 against B's 24 rows.
    const bytes = linear(false);
    const feeds = { x: input([2, 3, 24], 12), k: i64([8], [1]) };
    await expect(runOn('cpu', bytes, feeds)).rejects.toThrow();
    await expect(runOn('mlx', bytes, feeds)).rejects.toThrow();
    // A 3-D A fed straight to a Gemm (rank declared nowhere): onnxruntime refuses it; so does mlx,
    // whether the rewrite took the Gemm (MatMulAdd's check) or not (the Gemm op's).
    const direct = model({
      inputs: [v('a', 'float32')],
      outputs: [v('y', 'float32')],
      nodes: [node('Gemm', ['a', 'W', 'b'], ['y'])],
      initializers: [init('W', [24, 40], 9), init('b', [40], 10)],
      opsets: { '': 17 },
    });
    const a3 = { a: input([2, 3, 24], 13) };
    await expect(runOn('cpu', direct, a3)).rejects.toThrow(/Gemm/);
    for (const graphRewrites of [true, false]) {
      const s = await ort.InferenceSession.create(direct, { executionProviders: [{ name: 'mlx', device: 'cpu', graphRewrites }] } as never);
      try {
        await expect(s.run(a3)).rejects.toThrow(/Gemm: input A must have rank 2, got rank 3/);
        // The session stays usable: a 2-D A runs.
        const ok = await s.run({ a: input([3, 24], 14) });
        expect(ok.y.dims).toEqual([3, 40]);
      } finally {
        await s.release();
      }
    }
  });
  it('two Gemms of one undeclared-rank A joined by sibling-matmul keep the rank check', async () => {
    // The joined product must check A as each Gemm would: a 3-D A is refused, not multiplied as a batch.
    const bytes = model({
      inputs: [v('a', 'float32')],
      outputs: [v('y1', 'float32'), v('y2', 'float32')],
      nodes: [node('Gemm', ['a', 'W1', 'b1'], ['y1']), node('Gemm', ['a', 'W2', 'b2'], ['y2'])],
      initializers: [init('W1', [24, 40], 15), init('b1', [40], 16), init('W2', [24, 8], 17), init('b2', [8], 18)],
      opsets: { '': 17 },
    });
    const prepared = prepareModel(bytes);
    expect(prepared.rewrites).toMatchObject({ gemm: 2, 'sibling-matmul': 1 });
    const joined = prepared.model.graph.nodes.filter((n) => n.opType === 'MatMulAdd' || n.opType === 'MatMulPacked');
    expect(joined).toHaveLength(1);
    expect(joined[0].attributes.get('a_rank')).toEqual({ type: 'int', value: 2 });
    await expectSame(bytes, { a: input([5, 24], 19) });
    const s = await ort.InferenceSession.create(bytes, { executionProviders: [{ name: 'mlx', device: 'cpu' }] } as never);
    try {
      await expect(s.run({ a: input([2, 3, 24], 20) })).rejects.toThrow(/Gemm: input A must have rank 2, got rank 3/);
    } finally {
      await s.release();
    }
  });
});
