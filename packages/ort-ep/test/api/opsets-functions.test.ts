// The same op follows the semantics of the opset the model imports, and model-local functions
// (with attributes, defaults, nesting, and their own opset imports) are expanded into the right
// computation. Every output is checked against onnxruntime-node's CPU provider on the same model.
import { describe, expect, it } from 'vitest';
import { model, node, v } from '../helpers/build.js';
import { expectSameAsOrt, f32, plain, runOn, seeded } from '../helpers/ort.js';

const x3 = () =>
  f32(
    seeded(24, 7).map((t) => t * 3),
    [2, 3, 4],
  );

describe('opset imports select the semantics', () => {
  // Softmax before 13 flattens to 2-D at `axis` (default 1); from 13 it normalizes along `axis` (default -1).
  for (const opset of [11, 13]) {
    it(`Softmax, opset ${opset}, on a 3-D input (default axis)`, async () => {
      const bytes = model({
        opsets: { '': opset },
        inputs: [v('x', 'float32', [2, 3, 4])],
        outputs: [v('y', 'float32', [2, 3, 4])],
        nodes: [node('Softmax', ['x'], ['y'])],
      });
      const out = await expectSameAsOrt(bytes, { x: x3() });
      const y = plain(out.y);
      // Opset 11 sums to 1 over each batch's 12 values, opset 13 over each row of 4.
      const group = opset === 11 ? 12 : 4;
      for (let g = 0; g < 24 / group; g++) expect(y.slice(g * group, (g + 1) * group).reduce((a, b) => a + b, 0)).toBeCloseTo(1, 5);
    });
  }

  it('ReduceSum: axes as an attribute (opset 11) and as an input (opset 13) give the same sums', async () => {
    const at11 = model({
      opsets: { '': 11 },
      inputs: [v('x', 'float32', [2, 3, 4])],
      outputs: [v('y', 'float32', [2, 1, 4])],
      nodes: [node('ReduceSum', ['x'], ['y'], { attrs: { axes: [1], keepdims: 1 } })],
    });
    const at13 = model({
      opsets: { '': 13 },
      inputs: [v('x', 'float32', [2, 3, 4])],
      outputs: [v('y', 'float32', [2, 1, 4])],
      initializers: [{ name: 'axes', type: 'int64', dims: [1], values: [1n] }],
      nodes: [node('ReduceSum', ['x', 'axes'], ['y'], { attrs: { keepdims: 1 } })],
    });
    const a = await expectSameAsOrt(at11, { x: x3() });
    const b = await expectSameAsOrt(at13, { x: x3() });
    expect(plain(a.y)).toEqual(plain(b.y));
    expect(a.y.dims).toEqual([2, 1, 4]);
  });

  it('ReduceSum opset 13: no axes reduces everything, unless noop_with_empty_axes', async () => {
    const mk = (noop: number) =>
      model({
        opsets: { '': 13 },
        inputs: [v('x', 'float32', [2, 3, 4])],
        outputs: [v('y', 'float32')],
        nodes: [node('ReduceSum', ['x'], ['y'], { attrs: { keepdims: 0, noop_with_empty_axes: noop } })],
      });
    const all = await expectSameAsOrt(mk(0), { x: x3() });
    expect(all.y.dims).toEqual([]);
    expect(plain(all.y)[0]).toBeCloseTo(
      plain(x3()).reduce((p, q) => p + q, 0),
      5,
    );
    const noop = await expectSameAsOrt(mk(1), { x: x3() });
    expect(plain(noop.y)).toEqual(plain(x3()));
  });

  it('Unsqueeze: axes attribute (opset 11) vs axes input (opset 13)', async () => {
    const at11 = model({
      opsets: { '': 11 },
      inputs: [v('x', 'float32', [3, 4])],
      outputs: [v('y', 'float32', [1, 3, 1, 4])],
      nodes: [node('Unsqueeze', ['x'], ['y'], { attrs: { axes: [0, 2] } })],
    });
    const at13 = model({
      opsets: { '': 13 },
      inputs: [v('x', 'float32', [3, 4])],
      outputs: [v('y', 'float32', [1, 3, 1, 4])],
      initializers: [{ name: 'axes', type: 'int64', dims: [2], values: [0n, -2n] }],
      nodes: [node('Unsqueeze', ['x', 'axes'], ['y'])],
    });
    const x = f32(seeded(12), [3, 4]);
    expect((await expectSameAsOrt(at11, { x })).y.dims).toEqual([1, 3, 1, 4]);
    expect((await expectSameAsOrt(at13, { x })).y.dims).toEqual([1, 3, 1, 4]);
  });

  it('Clip: min/max attributes (opset 6) vs inputs (opset 13)', async () => {
    const at6 = model({
      opsets: { '': 6 },
      inputs: [v('x', 'float32', [6])],
      outputs: [v('y', 'float32', [6])],
      nodes: [node('Clip', ['x'], ['y'], { attrs: { min: { f: -0.5 }, max: { f: 0.25 } } })],
    });
    const at13 = model({
      opsets: { '': 13 },
      inputs: [v('x', 'float32', [6])],
      outputs: [v('y', 'float32', [6])],
      initializers: [
        { name: 'lo', type: 'float32', dims: [], values: [-0.5] },
        { name: 'hi', type: 'float32', dims: [], values: [0.25] },
      ],
      nodes: [node('Clip', ['x', 'lo', 'hi'], ['y'])],
    });
    const x = f32([-2, -0.5, -0.1, 0.1, 0.3, 5], [6]);
    const want = [-0.5, -0.5, Math.fround(-0.1), Math.fround(0.1), 0.25, 0.25];
    expect(plain((await expectSameAsOrt(at6, { x })).y)).toEqual(want);
    expect(plain((await expectSameAsOrt(at13, { x })).y)).toEqual(want);
  });
});

describe('model-local functions', () => {
  // custom.ScaledAdd(a, b) = a + alpha * b, alpha defaulting to 0.5.
  const scaledAdd = {
    name: 'ScaledAdd',
    domain: 'custom',
    inputs: ['a', 'b'],
    outputs: ['c'],
    attributeDefaults: { alpha: { f: 0.5 } },
    opsets: { '': 13 },
    nodes: [
      node('Constant', [], ['k'], { attrs: { value_float: { ref: 'alpha', type: 'float' } } }),
      node('Mul', ['b', 'k'], ['bk']),
      node('Add', ['a', 'bk'], ['c']),
    ],
  };
  // custom.Outer(a, b) = Relu(ScaledAdd(a, b; alpha = beta)) - a: a function calling a function.
  const outer = {
    name: 'Outer',
    domain: 'custom',
    inputs: ['a', 'b'],
    outputs: ['out'],
    attributes: ['beta'],
    opsets: { '': 13, custom: 1 },
    nodes: [
      node('ScaledAdd', ['a', 'b'], ['s'], { domain: 'custom', attrs: { alpha: { ref: 'beta', type: 'float' } } }),
      node('Relu', ['s'], ['r']),
      node('Sub', ['r', 'a'], ['out']),
    ],
  };
  const feeds = () => ({ x: f32(seeded(6, 3), [2, 3]), y: f32(seeded(6, 4), [2, 3]) });

  it('an attribute set by the caller and one left to its default', async () => {
    const bytes = model({
      opsets: { '': 13, custom: 1 },
      functions: [scaledAdd],
      inputs: [v('x', 'float32', [2, 3]), v('y', 'float32', [2, 3])],
      outputs: [v('p', 'float32', [2, 3]), v('q', 'float32', [2, 3])],
      nodes: [
        node('ScaledAdd', ['x', 'y'], ['p'], { domain: 'custom', attrs: { alpha: { f: 3 } } }),
        node('ScaledAdd', ['x', 'y'], ['q'], { domain: 'custom' }),
      ],
    });
    const f = feeds();
    const out = await expectSameAsOrt(bytes, f);
    const [x, y] = [plain(f.x), plain(f.y)];
    plain(out.p).forEach((p, i) => expect(p).toBeCloseTo(x[i] + 3 * y[i], 5));
    plain(out.q).forEach((q, i) => expect(q).toBeCloseTo(x[i] + 0.5 * y[i], 5));
  });

  it('a function calling another function, the attribute passed through', async () => {
    const bytes = model({
      opsets: { '': 13, custom: 1 },
      functions: [scaledAdd, outer],
      inputs: [v('x', 'float32', [2, 3]), v('y', 'float32', [2, 3])],
      outputs: [v('z', 'float32', [2, 3])],
      nodes: [node('Outer', ['x', 'y'], ['z'], { domain: 'custom', name: 'call', attrs: { beta: { f: -2 } } })],
    });
    const f = feeds();
    const out = await expectSameAsOrt(bytes, f);
    const [x, y] = [plain(f.x), plain(f.y)];
    plain(out.z).forEach((z, i) => expect(z).toBeCloseTo(Math.max(0, x[i] - 2 * y[i]) - x[i], 5));
  });

  // onnxruntime-node refuses such a model (it reads the body under the model's opset 13, where
  // ReduceSum has no axes attribute); the loader keeps the function's version (opsetOverride).
  it('a function body follows its own opset import (ReduceSum with axes attribute inside an opset-13 model)', async () => {
    const rowSum = {
      name: 'RowSum',
      domain: 'custom',
      inputs: ['a'],
      outputs: ['s'],
      opsets: { '': 11 },
      nodes: [node('ReduceSum', ['a'], ['s'], { attrs: { axes: [1], keepdims: 0 } })],
    };
    const bytes = model({
      opsets: { '': 13, custom: 1 },
      functions: [rowSum],
      inputs: [v('x', 'float32', [2, 3])],
      outputs: [v('z', 'float32', [2])],
      nodes: [node('RowSum', ['x'], ['z'], { domain: 'custom' })],
    });
    const out = await runOn('mlx', bytes, { x: f32([1, 2, 3, 4, 5, 6], [2, 3]) });
    expect(out.z.dims).toEqual([2]);
    expect(plain(out.z)).toEqual([6, 15]);
  });

  it('two calls of one function do not share intermediate values', async () => {
    const bytes = model({
      opsets: { '': 13, custom: 1 },
      functions: [scaledAdd],
      inputs: [v('x', 'float32', [2, 3]), v('y', 'float32', [2, 3])],
      outputs: [v('z', 'float32', [2, 3])],
      nodes: [
        node('ScaledAdd', ['x', 'y'], ['t'], { domain: 'custom', attrs: { alpha: { f: 2 } } }),
        node('ScaledAdd', ['t', 'x'], ['z'], { domain: 'custom', attrs: { alpha: { f: -1 } } }),
      ],
    });
    const f = feeds();
    const out = await expectSameAsOrt(bytes, f);
    const y = plain(f.y);
    plain(out.z).forEach((z, i) => expect(z).toBeCloseTo(2 * y[i], 5)); // (x + 2y) - x
  });
});
