// What the rewrite tests of constant-weight products share: seeded float32 initializers and
// inputs, and one model whose products the weight-layout rewrites (pack-matmul, transpose-matmul)
// take or leave: x [B, S, 24] -> Linear(24, 40) + bias -> MatMul(40, 7); v [24] by the same first
// weight; ids gathered from an embedding that a MatMul also reads (a tied head: kept beside its
// derived layout); a MatMul by a graph input stays as written.
import { model, node, v, type TensorSpec } from './build.js';
import { f32, type OrtTensor, seeded } from './ort.js';

const size = (dims: number[]) => dims.reduce((a, b) => a * b, 1);

/** A float32 initializer of seeded values in [-1.5, 0.5). */
export const seededInit = (name: string, dims: number[], seed: number): TensorSpec => ({
  name,
  type: 'float32',
  dims,
  values: seeded(size(dims), seed).map((x) => x - 0.5),
});

/** A float32 input of seeded values in [-3, 1). */
export const seededInput = (dims: number[], seed: number): OrtTensor =>
  f32(
    seeded(size(dims), seed).map((x) => (x - 0.5) * 2),
    dims,
  );

export const weightProducts = model({
  inputs: [v('x', 'float32', ['B', 'S', 24]), v('v', 'float32', [24]), v('ids', 'int64', [3]), v('wi', 'float32', [7, 5])],
  outputs: ['y', 'u', 'e', 'h', 'z'].map((n) => v(n, 'float32')),
  nodes: [
    node('MatMul', ['x', 'W1'], ['p']),
    node('Add', ['p', 'b1'], ['a']),
    node('MatMul', ['a', 'W2'], ['y']),
    node('MatMul', ['v', 'W1'], ['u']),
    node('Gather', ['E', 'ids'], ['e']),
    node('MatMul', ['x', 'E'], ['h']),
    node('MatMul', ['y', 'wi'], ['z']),
  ],
  initializers: [seededInit('W1', [24, 40], 1), seededInit('b1', [40], 2), seededInit('W2', [40, 7], 3), seededInit('E', [24, 33], 4)],
  opsets: { '': 17 },
});
