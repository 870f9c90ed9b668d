// Wrong results the fuzz harness found (seed 1903) where onnxruntime-node is the reference: each
// case runs on both providers, or onnxruntime refuses it and mlx must too.
import { describe, expect, it } from 'vitest';
import { NodeExecutionError } from '../../src/index.js';
import { model, node, v, type ElemName, type ModelSpec } from '../helpers/build.js';
import { expectSameAsOrt, f32, i64, ort, seeded, type Feeds, mlxCpu as mlx, outcome } from '../helpers/ort.js';

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

describe('int flags read as onnxruntime reads them', () => {
  // onnxruntime's kernels read some flags as `!= 0`, some as `== 1`, and refuse values other than
  // 0 and 1 for others; mlx read several the other way (align_corners 2 was false, interleaved 2 true).
  const t = f32(seeded(16, 12), [4, 4]);
  const x4 = f32(seeded(25, 7), [1, 1, 5, 5]);
  const i64s = (name: string, values: bigint[], dims = [values.length]) => ({
    name,
    type: 'int64' as const,
    dims,
    values: BigInt64Array.from(values),
  });
  const cases: { label: string; spec: (a: number) => ModelSpec; feeds: Feeds; refused?: boolean }[] = [
    {
      label: 'GridSample align_corners',
      spec: (a) => ({
        opsets: { '': 20 },
        inputs: [v('x', 'float32', [1, 1, 3, 4]), v('g', 'float32', [1, 2, 2, 2])],
        outputs: [v('y', 'float32')],
        nodes: [node('GridSample', ['x', 'g'], ['y'], { attrs: { align_corners: a } })],
      }),
      feeds: {
        x: f32(seeded(12, 2), [1, 1, 3, 4]),
        g: f32(
          seeded(8, 3).map((g) => g * 0.9),
          [1, 2, 2, 2],
        ),
      },
    },
    {
      label: 'AffineGrid align_corners',
      spec: (a) => ({
        opsets: { '': 20 },
        inputs: [v('t', 'float32', [1, 2, 3])],
        outputs: [v('y', 'float32')],
        initializers: [i64s('s', [1n, 1n, 3n, 4n])],
        nodes: [node('AffineGrid', ['t', 's'], ['y'], { attrs: { align_corners: a } })],
      }),
      feeds: { t: f32(seeded(6, 4), [1, 2, 3]) },
    },
    ...['HannWindow', 'HammingWindow', 'BlackmanWindow'].map((w) => ({
      label: `${w} periodic`,
      spec: (a: number): ModelSpec => ({
        opsets: { '': 17 },
        inputs: [],
        outputs: [v('y', 'float32')],
        initializers: [i64s('n', [5n], [])],
        nodes: [node(w, ['n'], ['y'], { attrs: { periodic: a } })],
      }),
      feeds: {},
    })),
    ...['inverse', 'onesided'].map((flag) => ({
      label: `DFT ${flag}`,
      spec: (a: number): ModelSpec => ({
        opsets: { '': 17 },
        inputs: [v('x', 'float32', [1, 8, 1])],
        outputs: [v('y', 'float32')],
        nodes: [node('DFT', ['x'], ['y'], { attrs: { [flag]: a } })],
      }),
      feeds: { x: f32(seeded(8, 5), [1, 8, 1]) },
    })),
    {
      label: 'STFT onesided',
      spec: (a) => ({
        opsets: { '': 17 },
        inputs: [v('x', 'float32', [1, 16, 1])],
        outputs: [v('y', 'float32')],
        initializers: [i64s('st', [4n], []), i64s('fl', [8n], [])],
        nodes: [node('STFT', ['x', 'st', '', 'fl'], ['y'], { attrs: { onesided: a } })],
      }),
      feeds: { x: f32(seeded(16, 6), [1, 16, 1]) },
    },
    {
      label: 'RotaryEmbedding (opset 23) interleaved',
      spec: (a) => ({
        opsets: { '': 23 },
        irVersion: 11,
        inputs: [v('x', 'float32', [1, 2, 8]), v('c', 'float32', [2, 2]), v('s', 'float32', [2, 2]), v('p', 'int64', [1, 2])],
        outputs: [v('y', 'float32')],
        nodes: [node('RotaryEmbedding', ['x', 'c', 's', 'p'], ['y'], { attrs: { interleaved: a, num_heads: 2 } })],
      }),
      feeds: { x: f32(seeded(16, 9), [1, 2, 8]), c: f32(seeded(4, 10), [2, 2]), s: f32(seeded(4, 11), [2, 2]), p: i64([0, 1], [1, 2]) },
    },
    {
      label: 'com.microsoft RotaryEmbedding interleaved',
      spec: (a) => ({
        opsets: { '': 17, 'com.microsoft': 1 },
        inputs: [v('x', 'float32', [1, 2, 8]), v('p', 'int64', [1, 2]), v('c', 'float32', [2, 2]), v('s', 'float32', [2, 2])],
        outputs: [v('y', 'float32')],
        nodes: [node('RotaryEmbedding', ['x', 'p', 'c', 's'], ['y'], { domain: 'com.microsoft', attrs: { interleaved: a, num_heads: 2 } })],
      }),
      feeds: { x: f32(seeded(16, 9), [1, 2, 8]), c: f32(seeded(4, 10), [2, 2]), s: f32(seeded(4, 11), [2, 2]), p: i64([0, 1], [1, 2]) },
    },
    {
      label: 'TopK largest',
      spec: (a) => ({
        opsets: { '': 11 },
        inputs: [v('x', 'float32', [4, 4])],
        outputs: [v('y', 'float32'), v('i', 'int64')],
        initializers: [i64s('k', [2n])],
        nodes: [node('TopK', ['x', 'k'], ['y', 'i'], { attrs: { largest: a } })],
      }),
      feeds: { x: t },
    },
    {
      label: 'Unique sorted',
      spec: (a) => ({
        opsets: { '': 11 },
        inputs: [v('x', 'float32', [8])],
        outputs: [v('y', 'float32')],
        nodes: [node('Unique', ['x'], ['y'], { attrs: { sorted: a } })],
      }),
      feeds: { x: f32([3, 1, 3, 2, 1, 5, 5, 0], [8]) },
    },
    {
      label: 'MaxPool ceil_mode',
      spec: (a) => ({
        opsets: { '': 11 },
        inputs: [v('x', 'float32', [1, 1, 5, 5])],
        outputs: [v('y', 'float32')],
        nodes: [node('MaxPool', ['x'], ['y'], { attrs: { kernel_shape: [2, 2], strides: [2, 2], ceil_mode: a } })],
      }),
      feeds: { x: x4 },
    },
    {
      label: 'Attention (opset 23) is_causal',
      spec: (a) => ({
        opsets: { '': 23 },
        irVersion: 11,
        inputs: [v('q', 'float32', [1, 2, 3, 4])],
        outputs: [v('y', 'float32')],
        nodes: [node('Attention', ['q', 'q', 'q'], ['y'], { attrs: { is_causal: a } })],
      }),
      feeds: { q: f32(seeded(24, 3), [1, 2, 3, 4]) },
    },
    {
      label: 'com.microsoft MultiHeadAttention unidirectional',
      spec: (a) => ({
        opsets: { '': 17, 'com.microsoft': 1 },
        inputs: [v('q', 'float32', [1, 3, 8])],
        outputs: [v('y', 'float32')],
        nodes: [
          node('MultiHeadAttention', ['q', 'q', 'q'], ['y'], { domain: 'com.microsoft', attrs: { num_heads: 2, unidirectional: a } }),
        ],
      }),
      feeds: { q: f32(seeded(24, 3), [1, 3, 8]) },
    },
    {
      label: 'MaxPool storage_order',
      refused: true,
      spec: (a) => ({
        opsets: { '': 12 },
        inputs: [v('x', 'float32', [1, 1, 5, 5])],
        outputs: [v('i', 'int64')],
        nodes: [node('MaxPool', ['x'], ['y', 'i'], { attrs: { kernel_shape: [2, 2], storage_order: a } })],
      }),
      feeds: { x: x4 },
    },
    {
      label: 'NonMaxSuppression center_point_box',
      refused: true,
      spec: (a) => ({
        opsets: { '': 11 },
        inputs: [v('b', 'float32', [1, 2, 4]), v('s', 'float32', [1, 1, 2])],
        outputs: [v('y', 'int64')],
        nodes: [node('NonMaxSuppression', ['b', 's'], ['y'], { attrs: { center_point_box: a } })],
      }),
      feeds: { b: f32([0, 0, 1, 1, 0, 0.1, 1, 1.1], [1, 2, 4]), s: f32([0.9, 0.8], [1, 1, 2]) },
    },
    ...['exclusive', 'reverse'].map((flag) => ({
      label: `CumSum ${flag}`,
      refused: true,
      spec: (a: number): ModelSpec => ({
        opsets: { '': 14 },
        inputs: [v('x', 'float32', [6])],
        outputs: [v('y', 'float32')],
        initializers: [i64s('ax', [0n], [])],
        nodes: [node('CumSum', ['x', 'ax'], ['y'], { attrs: { [flag]: a } })],
      }),
      feeds: { x: f32(seeded(6, 13), [6]) },
    })),
    {
      label: 'Mod fmod',
      refused: true,
      spec: (a) => ({
        opsets: { '': 13 },
        inputs: [v('a', 'float32', [4]), v('b', 'float32', [4])],
        outputs: [v('y', 'float32')],
        nodes: [node('Mod', ['a', 'b'], ['y'], { attrs: { fmod: a } })],
      }),
      feeds: { a: f32([5, -5, 7.5, -7.5], [4]), b: f32([3, 3, -2, 2], [4]) },
    },
  ];
  for (const c of cases)
    it(`${c.label} of 2 and -1${c.refused ? ' is refused' : ''}`, async () => {
      for (const a of [2, -1]) {
        const bytes = model(c.spec(a));
        if (!c.refused) await expectSameAsOrt(bytes, c.feeds, { rtol: 1e-4, atol: 1e-5 });
        else {
          expect(await outcome(bytes, c.feeds)).toBeInstanceOf(Error);
          const e = await outcome(bytes, c.feeds, { executionProviders: [{ name: 'mlx', device: 'cpu', fallback: 'none' }] } as never);
          expect(e).toBeInstanceOf(Error);
          expect(String((e as Error).message)).toMatch(new RegExp(`is ${a}, expected 0 or 1`));
        }
      }
    });
});

describe('inputs onnxruntime refuses, refused (the fuzz ran them: "ran where onnxruntime refused")', () => {
  const x23 = f32(seeded(6, 1), [2, 3]);
  const one = (
    op: string,
    opset: number,
    ins: [string, ElemName][],
    outs: ElemName[] = ['float32'],
    attrs = {},
    domain = '',
  ): ModelSpec => ({
    opsets: { '': opset, ...(domain && { [domain]: 1 }) },
    inputs: ins.map(([n, t]) => v(n, t)),
    outputs: outs.map((t, i) => v(`y${i}`, t)),
    nodes: [
      node(
        op,
        ins.map(([n]) => n),
        outs.map((_, i) => `y${i}`),
        { name: 'n', domain, attrs },
      ),
    ],
  });
  const strs = (a: string[], d: number[]) => new ort.Tensor('string', a, d);
  const cases: [string, ModelSpec, Feeds, RegExp][] = [
    [
      'Mod of floats with fmod 0',
      one('Mod', 13, [
        ['a', 'float32'],
        ['b', 'float32'],
      ]),
      { a: x23, b: x23 },
      /Mod of float32 inputs needs fmod=1/,
    ],
    [
      'Slice with 0-D starts and ends',
      one('Slice', 13, [
        ['x', 'float32'],
        ['s', 'int64'],
        ['e', 'int64'],
      ]),
      { x: x23, s: i64([0], []), e: i64([1], []) },
      /Slice: starts must be a 1-D list, got shape \[\]/,
    ],
    [
      'Slice with ends longer than starts',
      one('Slice', 13, [
        ['x', 'float32'],
        ['s', 'int64'],
        ['e', 'int64'],
      ]),
      { x: x23, s: i64([0], [1]), e: i64([1, 2], [2]) },
      /Slice: ends has 2 entries, starts 1/,
    ],
    [
      'Slice of a scalar',
      one('Slice', 13, [
        ['x', 'float32'],
        ['s', 'int64'],
        ['e', 'int64'],
      ]),
      { x: f32([1], []), s: i64([], [0]), e: i64([], [0]) },
      /Slice: cannot slice a scalar/,
    ],
    [
      'Slice with duplicate axes',
      one('Slice', 13, [
        ['x', 'float32'],
        ['s', 'int64'],
        ['e', 'int64'],
        ['a', 'int64'],
      ]),
      { x: x23, s: i64([0, 0], [2]), e: i64([1, 1], [2]), a: i64([1, -1], [2]) },
      /Slice: axes \[1, -1\] has duplicates/,
    ],
    [
      'CumSum with an axis of two elements',
      one('CumSum', 14, [
        ['x', 'float32'],
        ['a', 'int64'],
      ]),
      { x: x23, a: i64([1, 0], [2]) },
      /CumSum: axis must be a scalar or a 1-D tensor of one element, got shape \[2\]/,
    ],
    [
      'TopK with a 0-D K',
      one(
        'TopK',
        11,
        [
          ['x', 'float32'],
          ['k', 'int64'],
        ],
        ['float32', 'int64'],
      ),
      { x: x23, k: i64([2], []) },
      /TopK: K must be a 1-D tensor of one element, got shape \[\]/,
    ],
    [
      'Trilu with a k of two elements',
      one('Trilu', 14, [
        ['x', 'float32'],
        ['k', 'int64'],
      ]),
      { x: x23, k: i64([1, 1], [2]) },
      /Trilu: k must be a scalar or a 1-D tensor of one element/,
    ],
    [
      'Trilu of a rank-1 input',
      one('Trilu', 14, [['x', 'float32']]),
      { x: f32([1, 2, 3], [3]) },
      /Trilu: the input must have rank 2 or more, got rank 1/,
    ],
    [
      'InstanceNormalization of a rank-2 input',
      one('InstanceNormalization', 6, [
        ['x', 'float32'],
        ['s', 'float32'],
        ['b', 'float32'],
      ]),
      { x: x23, s: f32([1, 2], [2]), b: f32([0, 1], [2]) },
      /InstanceNormalization: the input must have rank 3 or more/,
    ],
    [
      'InstanceNormalization with a 2-D scale',
      one('InstanceNormalization', 6, [
        ['x', 'float32'],
        ['s', 'float32'],
        ['b', 'float32'],
      ]),
      { x: f32(seeded(12, 2), [1, 2, 6]), s: f32([1, 2], [1, 2]), b: f32([0, 1], [2]) },
      /InstanceNormalization: scale must have shape \[C\] = \[2\], got \[1, 2\]/,
    ],
    ...['GlobalAveragePool', 'GlobalMaxPool', 'GlobalLpPool'].map((op): [string, ModelSpec, Feeds, RegExp] => [
      `${op} of a rank-2 input`,
      one(op, 2, [['x', 'float32']]),
      { x: x23 },
      /global pooling needs an input of rank 3 or more/,
    ]),
    ...['BiasGelu', 'FastGelu'].map((op): [string, ModelSpec, Feeds, RegExp] => [
      `${op} with a [1, C] bias`,
      one(
        op,
        1,
        [
          ['x', 'float32'],
          ['b', 'float32'],
        ],
        ['float32'],
        {},
        'com.microsoft',
      ),
      { x: x23, b: f32([1, 2, 3], [1, 3]) },
      new RegExp(`${op}: the bias must have shape \\[3\\] \\(X's last axis\\), got \\[1, 3\\]`),
    ]),
    ...['SkipLayerNormalization', 'SkipSimplifiedLayerNormalization'].map((op): [string, ModelSpec, Feeds, RegExp] => [
      `${op} with a [1, C] gamma`,
      one(
        op,
        1,
        [
          ['x', 'float32'],
          ['s', 'float32'],
          ['g', 'float32'],
        ],
        ['float32'],
        {},
        'com.microsoft',
      ),
      { x: x23, s: x23, g: f32([1, 2, 3], [1, 3]) },
      new RegExp(`${op}: gamma is expected to have shape \\[3\\]`),
    ]),
    [
      'StringNormalizer of a scalar',
      one('StringNormalizer', 10, [['x', 'string']], ['string']),
      { x: strs(['A'], []) },
      /must have shape \[C\] or \[1, C\] with C > 0, got \[\]/,
    ],
    [
      'StringNormalizer of [0]',
      one('StringNormalizer', 10, [['x', 'string']], ['string']),
      { x: strs([], [0]) },
      /must have shape \[C\] or \[1, C\] with C > 0, got \[0\]/,
    ],
  ];
  for (const [label, spec, feeds, message] of cases) it(label, () => bothRefuse(spec, feeds, message));
});

describe('wrong results of seed 1903, against onnxruntime', () => {
  const dql: ModelSpec = {
    opsets: { '': 11 },
    inputs: [v('x', 'float32')],
    outputs: [v('y', 'uint8'), v('s', 'float32'), v('z', 'uint8')],
    nodes: [node('DynamicQuantizeLinear', ['x'], ['y', 's', 'z'])],
  };
  // max == min (all zeros, or empty): the scale is 1, not 0 (mlx returned 0).
  it('DynamicQuantizeLinear of all zeros or of nothing has scale 1', async () => {
    for (const x of [f32([0, 0, 0], [3]), f32([], [0]), f32([1e-40, 0], [2]), f32([-5, 3], [2])]) await expectSameAsOrt(model(dql), { x });
  });

  // SimplifiedLayerNormalization's Y has the scale's type (mlx returned X's).
  it('SimplifiedLayerNormalization of a float32 X with a float16 scale returns float16', () => {
    const h = (d: number[]) => new ort.Tensor('float16', Uint16Array.from([0x3c00, 0x4000, 0x4200]), d);
    return expectSameAsOrt(
      model({
        opsets: { '': 7 },
        inputs: [v('x', 'float32', [2, 3]), v('s', 'float16', [3])],
        outputs: [v('y', 'float16')],
        nodes: [node('SimplifiedLayerNormalization', ['x', 's'], ['y'])],
      }),
      { x: f32(seeded(6, 1), [2, 3]), s: h([3]) },
      { rtol: 1e-3, atol: 1e-3 },
    );
  });
});
