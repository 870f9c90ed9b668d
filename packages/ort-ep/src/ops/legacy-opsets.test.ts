// Old opsets that PyTorch's early exporter emitted (the onnx wheel's pytorch-converted and
// pytorch-operator cases): Max/Min/Sum/Mean-6 without broadcasting, PRelu-6's per-channel slope,
// and grouped 3-D convolutions, which MLX groups only in 1-D and 2-D.
import { describe, expect, it } from 'vitest';
import { model, node, v, type ElemName } from '../../test/helpers/build.js';
import { expectSameAsOrt, plain, randomF32, runOn, type Feeds } from '../../test/helpers/ort.js';

function one(op: string, opset: number, feeds: Feeds, attrs = {}): Uint8Array {
  return model({
    opsets: { '': opset },
    inputs: Object.entries(feeds).map(([name, t]) => v(name, t.type as ElemName, [...t.dims])),
    outputs: [v('y', 'float32')],
    nodes: [node(op, Object.keys(feeds), ['y'], { attrs })],
  });
}

describe('opset 6 variadic ops', () => {
  const feeds = { a: randomF32([2, 3], 1), b: randomF32([2, 3], 2), c: randomF32([2, 3], 3) };
  for (const op of ['Max', 'Min', 'Sum', 'Mean'])
    it(`${op}-6 of three inputs of one shape`, () => expectSameAsOrt(one(op, 6, feeds), feeds));
  it('Max-6 refuses inputs of two shapes (no broadcasting before opset 8), as onnxruntime does', async () => {
    const odd = { a: randomF32([2, 3], 1), b: randomF32([3], 2) };
    await expect(runOn('cpu', one('Max', 6, odd), odd)).rejects.toThrow();
    await expect(runOn('mlx', one('Max', 6, odd), odd)).rejects.toThrow(/no broadcasting/);
  });
});

describe('PRelu-6', () => {
  // onnxruntime has no PRelu kernel before opset 7: the reference is the spec's formula in float64.
  it('a 1-D slope of one value per channel (axis 1)', async () => {
    const x = randomF32([2, 3, 4, 5], 4);
    const slope = randomF32([3], 5);
    const got = plain((await runOn('mlx', one('PRelu', 6, { x, slope }), { x, slope })).y);
    const xs = plain(x);
    const s = plain(slope);
    const want = xs.map((t, i) => (t < 0 ? t * s[Math.floor(i / 20) % 3] : t));
    got.forEach((g, i) => expect(Math.abs(g - want[i]), `y[${i}]`).toBeLessThan(1e-6));
  });
});

describe('grouped 3-D convolution', () => {
  it('group 2 (and depthwise) against onnxruntime', async () => {
    const x = randomF32([2, 4, 5, 6, 4], 6);
    for (const [group, w] of [
      [2, randomF32([6, 2, 3, 3, 3], 7)],
      [4, randomF32([4, 1, 2, 3, 2], 8)],
    ] as const) {
      const bytes = one('Conv', 11, { x, w }, { group, pads: [1, 0, 1, 1, 0, 1], strides: [1, 2, 1] });
      await expectSameAsOrt(bytes, { x, w }, { rtol: 1e-4, atol: 1e-5 });
    }
  });
});
