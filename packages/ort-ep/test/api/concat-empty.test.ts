// Concat with an empty input whose other dims differ: onnxruntime leaves it out (transformers.js
// feeds an empty KV past of shape [0, heads, 0, dim] beside a batch of 1 when a model's batch
// dimension is not named batch_size). With symbolic dims, onnxruntime's load-time shape inference
// lets it through, so the run itself decides.
import { describe, expect, it } from 'vitest';
import { model, node, v } from '../helpers/build.js';
import { f32, mlxCpu, ort, seeded } from '../helpers/ort.js';

const bytes = model({
  opsets: { '': 18 },
  nodes: [node('Concat', ['past', 'new'], ['y'], { attrs: { axis: 2 } })],
  inputs: [v('past', 'float32', ['b', 4, 'p', 16]), v('new', 'float32', ['b2', 4, 'n', 16])],
  outputs: [v('y', 'float32', ['b', 4, 't', 16])],
});

async function run(options: object | undefined, feeds: Record<string, import('onnxruntime-node').Tensor>) {
  const s = await ort.InferenceSession.create(bytes, options as never);
  try {
    const out = await s.run(feeds);
    return { dims: out.y.dims, data: Array.from(out.y.data as Float32Array) };
  } finally {
    await s.release();
  }
}

describe('Concat with empty inputs', () => {
  it('an empty past of another batch size is left out, as onnxruntime does', async () => {
    const feeds = { past: f32([], [0, 4, 0, 16]), new: f32(seeded(4 * 4 * 16), [1, 4, 4, 16]) };
    const want = await run(undefined, feeds);
    expect(want.dims).toEqual([1, 4, 4, 16]);
    expect(await run(mlxCpu, feeds)).toEqual(want);
  });

  it('inputs of different ranks are still refused', async () => {
    const other = model({
      opsets: { '': 18 },
      nodes: [node('Concat', ['a', 'b'], ['y'], { attrs: { axis: 0 } })],
      inputs: [v('a', 'float32', ['x', 'y']), v('b', 'float32', ['z'])],
      outputs: [v('y', 'float32')],
    });
    const s = await ort.InferenceSession.create(other, mlxCpu);
    await expect(s.run({ a: f32([], [0, 3]), b: f32([1, 2], [2]) })).rejects.toThrow(/Concat: input 1 has rank 1, input 0 rank 2/);
    await s.release();
  });
});
