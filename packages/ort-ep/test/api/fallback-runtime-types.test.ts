// Nodes whose input element types only the running graph reveals (an If's untyped output, a value
// a subgraph reads from the enclosing scope) and whose check refuses them: the first run meets
// the refusal, the session re-plans the node (or its enclosing If/Loop) onto onnxruntime and runs
// again, and later runs use the new plan. Every result is compared with onnxruntime-node.
import { describe, expect, it } from 'vitest';
import { MlxSession } from '../../src/session.js';
import { model, node, v, type GraphSpec, type ModelSpec } from '../helpers/build.js';
import { bool, expectSameOutputs, f32, ort, runOn, seeded, type Feeds, type OrtTensor } from '../helpers/ort.js';

const strings = (values: string[]) => new ort.Tensor('string', values, [values.length]);

/** An If whose branches make string constants; its output `out` has no declared type. */
const stringIf = (cond: string, out: string, a: string[], b: string[]) =>
  node('If', [cond], [out], {
    attrs: {
      then_branch: branch(`${out}_then`, a),
      else_branch: branch(`${out}_else`, b),
    },
  });
const branch = (name: string, values: string[]): { g: GraphSpec } => ({
  g: {
    name,
    inputs: [],
    outputs: [v(`${name}_o`, 'string', [values.length])],
    nodes: [node('Constant', [], [`${name}_o`], { attrs: { value_strings: values } })],
  },
});

async function viaMlx(bytes: Uint8Array, feeds: Feeds[], compiled: boolean): Promise<Record<string, OrtTensor>[]> {
  const s = await ort.InferenceSession.create(bytes, {
    executionProviders: [{ name: 'mlx', device: 'cpu', fallback: 'cpu', compiled } as never],
  });
  try {
    const out: Record<string, OrtTensor>[] = [];
    for (const f of feeds) for (let r = 0; r < (compiled ? 3 : 1); r++) out.push(await s.run(f));
    return out;
  } finally {
    await s.release();
  }
}

async function expectSame(bytes: Uint8Array, feeds: Feeds[]): Promise<void> {
  for (const compiled of [true, false]) {
    const have = await viaMlx(bytes, feeds, compiled);
    let k = 0;
    for (const f of feeds) {
      const want = await runOn('cpu', bytes, f);
      for (let r = 0; r < (compiled ? 3 : 1); r++) {
        const got = have[k++];
        // expectSameOutputs compares numbers; string tensors compare as they are.
        for (const [name, t] of Object.entries(want))
          if (t.type === 'string') {
            expect(got[name].type).toBe('string');
            expect(got[name].dims).toEqual(t.dims);
            expect(Array.from(got[name].data as string[])).toEqual(Array.from(t.data as string[]));
          }
        expectSameOutputs(
          Object.fromEntries(Object.entries(got).filter(([, t]) => t.type !== 'string')),
          Object.fromEntries(Object.entries(want).filter(([, t]) => t.type !== 'string')),
        );
      }
    }
  }
}

describe('a node refused for element types known only at run time falls back then', () => {
  const castAfterIf = model({
    opsets: { '': 21 },
    inputs: [v('b', 'bool', []), v('x', 'float32', [3])],
    outputs: [v('y', 'float32')],
    nodes: [
      stringIf('b', 's', ['1.5', '-2', '3e2'], ['4', '0.25', '-6']),
      node('Cast', ['s'], ['f'], { attrs: { to: 1 } }),
      node('Add', ['f', 'x'], ['y']),
    ],
  });
  const feeds = (b: number) => ({ b: bool([b], []), x: f32([1, 2, 3], [3]) });

  it('Cast of an If output that turns out to be a string', async () => {
    await expectSame(castAfterIf, [feeds(1), feeds(0), feeds(1)]);
  });

  it('re-plans once: the Cast runs on onnxruntime from then on', async () => {
    const s = await MlxSession.create(castAfterIf, { device: 'cpu', fallback: 'cpu' });
    try {
      expect(s.fallbackStats).toEqual([]);
      const want = await runOn('cpu', castAfterIf, feeds(0));
      for (let r = 0; r < 3; r++) {
        const out = await s.run({
          b: { dtype: 9, dims: [], data: Uint8Array.of(0) },
          x: { dtype: 1, dims: [3], data: Float32Array.of(1, 2, 3) },
        });
        expect(Array.from((out.y as { data: Float32Array }).data)).toEqual(Array.from(want.y.data as Float32Array));
      }
      const stats = s.fallbackStats;
      expect(stats.map((p) => p.ops)).toEqual([['Cast']]);
      expect(stats[0].runs).toBeGreaterThan(0);
    } finally {
      s.release();
    }
  });

  it('without a fallback the run fails naming the node and the type', async () => {
    const s = await MlxSession.create(castAfterIf, { device: 'cpu', fallback: 'none' });
    try {
      await expect(
        s.run({ b: { dtype: 9, dims: [], data: Uint8Array.of(1) }, x: { dtype: 1, dims: [3], data: Float32Array.of(1, 2, 3) } }),
      ).rejects.toThrow(/node 'Cast#1' \(Cast\): cast from element type 8 is not supported on MLX \(inputs: string\)/);
    } finally {
      s.release();
    }
  });

  it('inside an If branch reading the string from the enclosing graph: the If falls back whole', async () => {
    const inner = (name: string, op: string): { g: GraphSpec } => ({
      g: {
        name,
        inputs: [],
        outputs: [v(`${name}_o`, 'float32')],
        nodes: [node('Cast', ['s'], [`${name}_f`], { attrs: { to: 1 } }), node(op, [`${name}_f`], [`${name}_o`])],
      },
    });
    const bytes = model({
      opsets: { '': 21 },
      inputs: [v('b', 'bool', []), v('c', 'bool', []), v('x', 'float32', [3])],
      outputs: [v('y', 'float32')],
      nodes: [
        stringIf('b', 's', ['7', '-0.5', '2'], ['1e-3', '9', '-4']),
        node('If', ['c'], ['g'], { attrs: { then_branch: inner('neg', 'Neg'), else_branch: inner('abs', 'Abs') } }),
        node('Mul', ['g', 'x'], ['y']),
      ],
    });
    const f = (b: number, c: number) => ({ b: bool([b], []), c: bool([c], []), x: f32([1, 2, 3], [3]) });
    await expectSame(bytes, [f(1, 1), f(0, 1), f(1, 0)]);
  });

  // Ops without a check that would refuse strings: their kernel's upload refuses them.
  const idx = (name: string, values: bigint[]) => ({ name, type: 'int64' as const, dims: [values.length], values });
  const kernels: [string, ModelSpec['nodes'], ModelSpec['initializers']][] = [
    ['Compress', [node('Compress', ['s', 'm'], ['y'], { attrs: { axis: 0 } })], []],
    ['Where', [node('Where', ['m', 's', 't'], ['y'])], []],
    ['GatherElements', [node('GatherElements', ['s', 'i'], ['y'])], [idx('i', [2n, 0n, 3n])]],
    ['ScatterElements', [node('ScatterElements', ['s', 'i', 'u'], ['y'])], [idx('i', [3n, 0n])]],
    [
      'ReverseSequence',
      [node('Reshape', ['s', 'sh'], ['r']), node('ReverseSequence', ['r', 'sl'], ['y'], { attrs: { batch_axis: 1, time_axis: 0 } })],
      [idx('sh', [2n, 2n]), idx('sl', [2n, 1n])],
    ],
  ];
  for (const [op, nodes, initializers] of kernels)
    it(`${op} on strings from an If`, async () => {
      const bytes = model({
        opsets: { '': 21 },
        inputs: [v('b', 'bool', []), v('m', 'bool', [4])],
        outputs: [v('y', 'string')],
        initializers,
        nodes: [
          stringIf('b', 's', ['a', 'bb', 'c', 'd'], ['w', 'x', 'yy', 'z']),
          stringIf('b', 't', ['1', '2', '3', '4'], ['5', '6', '7', '8']),
          stringIf('b', 'u', ['p', 'q'], ['r', 's']),
          ...nodes,
        ],
      });
      const f = (b: number) => ({ b: bool([b], []), m: bool([1, 0, 0, 1], [4]) });
      await expectSame(bytes, [f(1), f(0)]);
    });

  it('with weights MLX holds (read back for the new plan)', async () => {
    const n = 128;
    const w = seeded(n * n, 3).map((x) => x - 0.5);
    const bytes = model({
      opsets: { '': 21 },
      inputs: [v('b', 'bool', []), v('x', 'float32', [2, n])],
      outputs: [v('y', 'float32')],
      initializers: [{ name: 'w', type: 'float32', dims: [n, n], values: w }],
      nodes: [
        node('MatMul', ['x', 'w'], ['h']),
        stringIf('b', 's', ['2'], ['-3']),
        node('Cast', ['s'], ['k'], { attrs: { to: 1 } }),
        node('Mul', ['h', 'k'], ['h2']),
        node('MatMul', ['h2', 'w'], ['y']),
      ],
    });
    const x = f32(seeded(2 * n, 4), [2, n]);
    await expectSame(bytes, [
      { b: bool([1], []), x },
      { b: bool([0], []), x },
    ]);
  });
});
