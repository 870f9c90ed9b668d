// Nodes onnxruntime-node runs that MLX refuses only for their input types, or that sit in a Loop
// body: they must fall back at create() rather than fail on the first run. The plan knows element
// types before any run from declared types (graph inputs, value infos, outputs), initializers, and
// what follows from them (Cast, Constant, shape and elementwise ops keep or set the type).
// Every result is compared with onnxruntime-node running the whole model.
import { describe, expect, it } from 'vitest';
import { prepareModel } from '../../src/plan/prepare.js';
import { summarizePartitions } from '../../src/plan/partition.js';
import { model, node, v, type GraphSpec, type ModelSpec } from '../helpers/build.js';
import { bool, expectSameOutputs, f32, i64, ort, runOn, type Feeds, type OrtTensor } from '../helpers/ort.js';

process.env.MLX_ORT_FUSION = '0';

async function viaMlx(bytes: Uint8Array, feeds: Feeds, disabledOps: string[], compiled: boolean): Promise<Record<string, OrtTensor>[]> {
  const s = await ort.InferenceSession.create(bytes, {
    executionProviders: [{ name: 'mlx', device: 'cpu', fallback: 'cpu', compiled, disabledOps } as never],
  });
  try {
    const out: Record<string, OrtTensor>[] = [];
    for (let r = 0; r < (compiled ? 3 : 1); r++) out.push(await s.run(feeds));
    return out;
  } finally {
    await s.release();
  }
}

async function expectSame(bytes: Uint8Array, feeds: Feeds, disabledOps: string[] = []): Promise<void> {
  const want = await runOn('cpu', bytes, feeds);
  for (const compiled of [true, false]) for (const have of await viaMlx(bytes, feeds, disabledOps, compiled)) expectSameOutputs(have, want);
}

const fallbackNodes = (bytes: Uint8Array, disabledOps: string[] = []) =>
  summarizePartitions(prepareModel(bytes, { disabledOps }).plan).fallbackNodes.map((n) => [n.op, n.reason]);

const strings = (values: string[]) => new ort.Tensor('string', values, [values.length]);

describe('a node MLX refuses for an input type known before any run falls back', () => {
  it('Cast from a string graph input', async () => {
    const bytes = model({
      opsets: { '': 21 },
      inputs: [v('s', 'string', [3]), v('x', 'float32', [3])],
      outputs: [v('y', 'float32')],
      nodes: [node('Cast', ['s'], ['f'], { attrs: { to: 1 } }), node('Add', ['f', 'x'], ['y'])],
    });
    expect(fallbackNodes(bytes)).toEqual([['Cast', 'cast from element type 8 is not supported on MLX']]);
    await expectSame(bytes, { s: strings(['1.5', '-2', '3e2']), x: f32([1, 2, 3], [3]) });
  });

  it('Cast from a string that reaches it through shape ops (types follow Identity, Reshape, Concat)', async () => {
    const bytes = model({
      opsets: { '': 21 },
      inputs: [v('s', 'string', [4]), v('x', 'float32', [2, 2])],
      outputs: [v('y', 'float32')],
      initializers: [{ name: 'shape', type: 'int64', dims: [2], values: [2n, 2n] }],
      nodes: [
        node('Identity', ['s'], ['s1']),
        node('Reshape', ['s1', 'shape'], ['s2']),
        node('Cast', ['s2'], ['f'], { attrs: { to: 1 } }),
        node('Mul', ['f', 'x'], ['y']),
      ],
    });
    expect(fallbackNodes(bytes).map(([op]) => op)).toEqual(['Cast']);
    await expectSame(bytes, { s: strings(['0.25', '8', '-1', '1e-3']), x: f32([1, 2, 3, 4], [2, 2]) });
  });
});

describe('a Loop whose body holds a node that falls back falls back whole', () => {
  const body = (nodes: GraphSpec['nodes'], extraOut: GraphSpec['outputs'] = []): { g: GraphSpec } => ({
    g: {
      name: 'body',
      inputs: [v('i', 'int64', []), v('c', 'bool', []), v('xin', 'float32')],
      outputs: [v('co', 'bool', []), v('xo', 'float32'), ...extraOut],
      nodes: [...nodes, node('Identity', ['c'], ['co'])],
    },
  });
  const spec = (loop: ModelSpec['nodes'][number], outputs = [v('y', 'float32')]): Uint8Array =>
    model({
      opsets: { '': 21 },
      inputs: [v('x', 'float32', [2, 3]), v('n', 'int64', []), v('b', 'bool', [])],
      outputs,
      nodes: [node('Relu', ['x'], ['r']), loop],
    });
  const feeds = (b: number) => ({ x: f32([1, -2, 3, -4, 5, -6], [2, 3]), n: i64([3], []), b: bool([b], []) });

  it('a disabled op in the body, reading an outer value, with a scan output', async () => {
    const bytes = spec(
      node('Loop', ['n', '', 'x'], ['y', 'so'], {
        name: 'loop',
        attrs: {
          body: body([node('Softmax', ['xin'], ['s']), node('Add', ['s', 'r'], ['xo']), node('Neg', ['s'], ['sc'])], [v('sc', 'float32')]),
        },
      }),
      [v('y', 'float32'), v('so', 'float32')],
    );
    expect(fallbackNodes(bytes, ['Softmax'])).toEqual([
      ['Loop', expect.stringMatching(/subgraph 'body' holds node .*Softmax.*disabledOps/)],
    ]);
    await expectSame(bytes, feeds(1), ['Softmax']);
  });

  it('a disabled op in an If branch inside the body', async () => {
    const branch = (op: string): { g: GraphSpec } => ({
      g: { name: `${op}_branch`, inputs: [], outputs: [v(`${op}_out`, 'float32')], nodes: [node(op, ['xin'], [`${op}_out`])] },
    });
    const bytes = spec(
      node('Loop', ['n', '', 'x'], ['y'], {
        attrs: { body: body([node('If', ['b'], ['xo'], { attrs: { then_branch: branch('Softmax'), else_branch: branch('Neg') } })]) },
      }),
    );
    expect(fallbackNodes(bytes, ['Softmax']).map(([op]) => op)).toEqual(['Loop']);
    for (const b of [1, 0]) await expectSame(bytes, feeds(b), ['Softmax']);
  });
});
