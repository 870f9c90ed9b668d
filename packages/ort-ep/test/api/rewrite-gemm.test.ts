// The Gemm rewrite (src/plan/rewrite/matmul-add.ts): a Gemm of a 2-D input by a constant float32 B
// with a constant bias row at unit alpha and beta becomes mlx.fused::MatMulAdd, B transposed once at
// plan time for transB. Checked against onnxruntime-node and the rewrites without it, eager and compiled.
import { describe, expect, it } from 'vitest';
import { prepareModel } from '../../src/plan/prepare.js';
import { REWRITES } from '../../src/plan/rewrite/index.js';
import { model, node, v, type TensorSpec } from '../helpers/build.js';
import { expectSameAsOrt, f32, expectSameWithRewrites, seeded, type Feeds } from '../helpers/ort.js';

const WITHOUT = (Object.keys(REWRITES) as (keyof typeof REWRITES)[]).filter((n) => n !== 'gemm');
const size = (dims: number[]) => dims.reduce((a, b) => a * b, 1);
const init = (name: string, dims: number[], seed: number): TensorSpec => ({
  name,
  type: 'float32',
  dims,
  values: seeded(size(dims), seed).map((x) => x - 0.5),
});
const input = (dims: number[], seed: number) =>
  f32(
    seeded(size(dims), seed).map((x) => (x - 0.5) * 2),
    dims,
  );

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
});
