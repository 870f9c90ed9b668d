// Wrong results the fuzz harness found (seed 1903) where onnxruntime-node is the reference: each
// case runs on both providers, or onnxruntime refuses it and mlx must too.
import { describe, expect, it } from 'vitest';
import { NodeExecutionError } from '../../src/index.js';
import { model, node, v, type ModelSpec } from '../helpers/build.js';
import { expectSameAsOrt, f32, i64, ort, seeded, type Feeds } from '../helpers/ort.js';

const mlx = {
  executionProviders: [{ name: 'mlx', device: 'cpu' }],
} as unknown as import('onnxruntime-node').InferenceSession.SessionOptions;

async function outcome(
  bytes: Uint8Array,
  feeds: Feeds,
  options?: import('onnxruntime-node').InferenceSession.SessionOptions,
): Promise<unknown> {
  try {
    const s = await ort.InferenceSession.create(bytes, options);
    try {
      await s.run(feeds);
      return 'ran';
    } finally {
      await s.release();
    }
  } catch (e) {
    return e;
  }
}

/** onnxruntime refuses the case; mlx refuses it with a NodeExecutionError whose message matches. */
async function bothRefuse(spec: ModelSpec, feeds: Feeds, message: RegExp): Promise<void> {
  const bytes = model(spec);
  expect(await outcome(bytes, feeds)).toBeInstanceOf(Error);
  const e = await outcome(bytes, feeds, mlx);
  expect(e).toBeInstanceOf(NodeExecutionError);
  expect((e as Error).message).toMatch(message);
}

describe('MaxUnpool with output_shape', () => {
  const unpool = (attrs: Record<string, number[]>): ModelSpec => ({
    opsets: { '': 11 },
    inputs: [v('x', 'float32'), v('i', 'int64'), v('s', 'int64', [4])],
    outputs: [v('y', 'float32')],
    nodes: [node('MaxUnpool', ['x', 'i', 's'], ['y'], { name: 'u', attrs })],
  });

  it('places the indices in the requested shape (the ONNX test data), as onnxruntime does', () =>
    expectSameAsOrt(model(unpool({ kernel_shape: [2, 2], strides: [2, 2] })), {
      x: f32([5, 6, 7, 8], [1, 1, 2, 2]),
      i: i64([5, 7, 13, 15], [1, 1, 2, 2]),
      s: i64([1, 1, 5, 5], [4]),
    }));

  it('inverts MaxPool of an odd-sized input: the maxima go back where they were', async () => {
    const x = f32(seeded(2 * 3 * 5 * 7, 4), [2, 3, 5, 7]);
    const bytes = model({
      opsets: { '': 11 },
      inputs: [v('x', 'float32', [2, 3, 5, 7])],
      outputs: [v('y', 'float32')],
      initializers: [{ name: 's', type: 'int64', dims: [4], values: BigInt64Array.from([2n, 3n, 5n, 7n]) }],
      nodes: [
        node('MaxPool', ['x'], ['p', 'pi'], { attrs: { kernel_shape: [2, 2], strides: [2, 2] } }),
        node('MaxUnpool', ['p', 'pi', 's'], ['y'], { attrs: { kernel_shape: [2, 2], strides: [2, 2] } }),
      ],
    });
    const have = await expectSameAsOrt(bytes, { x });
    // Independently: every nonzero of y is x's value at the same position.
    const [a, b] = [Array.from(have.y.data as Float32Array), Array.from(x.data as Float32Array)];
    expect(a.filter((y, k) => y !== 0 && y !== b[k])).toEqual([]);
    expect(a.filter((y) => y !== 0).length).toBe(2 * 3 * 2 * 3);
  });

  it('refuses an output_shape whose batch or channels differ from X, and attributes of the wrong length', async () => {
    const feeds = { x: f32([5, 6, 7, 8], [1, 1, 2, 2]), i: i64([5, 7, 13, 15], [1, 1, 2, 2]), s: i64([2, 1, 5, 5], [4]) };
    await bothRefuse(unpool({ kernel_shape: [2, 2], strides: [2, 2] }), feeds, /MaxUnpool: output_shape \[2,1,5,5\] must be/);
    const ok = { ...feeds, s: i64([1, 1, 5, 5], [4]) };
    await bothRefuse(unpool({ kernel_shape: [2, 2], strides: [2] }), ok, /strides \[2\] has 1 entries for 2 spatial axes/);
    await bothRefuse(unpool({ kernel_shape: [2, 2], pads: [0, 0] }), ok, /pads \[0,0\] has 2 entries, expected 4/);
    await bothRefuse(unpool({ kernel_shape: [2] }), ok, /kernel_shape \[2\] has 1 entries for an input of rank 4/);
  });
});
