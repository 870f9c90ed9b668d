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

describe('LayerNormalization statistics follow stash_type', () => {
  const f64 = (data: number[], dims: number[]) => new ort.Tensor('float64', Float64Array.from(data), dims);
  const ln = (
    op: string,
    opset: number,
    type: 'float64' | 'float32',
    outs: string[],
    attrs: Record<string, number> = {},
    domain = '',
  ): ModelSpec => ({
    opsets: { '': opset, ...(domain && { [domain]: 1 }) },
    inputs: [v('x', type, [2, 3, 4]), v('s', type, [4])],
    outputs: outs.map((o) => v(o, o === 'y' ? type : 'float32')),
    nodes: [node(op, ['x', 's'], outs, { name: 'n', domain, attrs: { axis: -1, ...attrs } })],
  });
  const feeds = { x: f64(seeded(24, 5), [2, 3, 4]), s: f64(seeded(4, 6), [4]) };

  // The default stash_type 1: float32 Mean and InvStdDev for a float64 X (mlx returned float64).
  it('a float64 X gives float32 Mean and InvStdDev (opset 17, and onnxruntime opset-1 registration)', async () => {
    for (const opset of [17, 16]) {
      const have = await expectSameAsOrt(model(ln('LayerNormalization', opset, 'float64', ['y', 'mean', 'inv'])), feeds);
      expect([have.mean.type, have.inv.type]).toEqual(['float32', 'float32']);
    }
    const have = await expectSameAsOrt(model(ln('SimplifiedLayerNormalization', 17, 'float64', ['y', 'inv'])), feeds);
    expect(have.inv.type).toBe('float32');
  });

  it('a stash_type that is not a float type is refused', async () => {
    const spec = ln('LayerNormalization', 17, 'float64', ['y', 'mean', 'inv'], { stash_type: 2 });
    const e = await outcome(model(spec), feeds, mlx);
    expect(await outcome(model(spec), feeds)).toBeInstanceOf(Error);
    expect(e).toBeInstanceOf(Error);
    expect((e as Error).message).toMatch(/stash_type 2/);
  });
});
