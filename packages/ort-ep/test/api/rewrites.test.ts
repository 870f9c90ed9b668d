// Plan-time graph rewrites (src/plan/rewrite): each pattern, in the spellings exporters use, is
// replaced (counted by prepareModel) and computes what the original graph computes: against
// onnxruntime-node, and against this provider with the rewrites off. Patterns whose intermediate
// values are read elsewhere stay as they are. Then the shared models where the patterns occur.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readTestCase, type HostTensor } from '../../src/onnx/index.js';
import { hostToTensor } from '../../src/internal.js';
import { prepareModel } from '../../src/plan/prepare.js';
import { model, node, v, type NodeSpec, type TensorSpec } from '../helpers/build.js';
import { expectSameAsOrt, f32, ort, plain, runMlxWith, seeded, type Feeds } from '../helpers/ort.js';
import { sharedPath } from '../helpers/shared.js';

const scalar = (name: string, value: number): NodeSpec =>
  node('Constant', [], [name], { attrs: { value: { t: { name, type: 'float32', dims: [], values: [value] } } } });
const init = (name: string, dims: number[], seed: number, lo = -1): TensorSpec => ({
  name,
  type: 'float32',
  dims,
  values: seeded(
    dims.reduce((a, b) => a * b, 1),
    seed,
  ).map((x) => x + lo + 1),
});

function build(nodes: NodeSpec[], outputs: string[], opts: { x?: number[]; inits?: TensorSpec[]; opset?: number } = {}) {
  return model({
    inputs: [v('x', 'float32', opts.x ?? [2, 3, 16])],
    outputs: outputs.map((o) => v(o, 'float32')),
    nodes,
    initializers: opts.inits,
    opsets: { '': opts.opset ?? 17 },
  });
}

const feeds = (dims = [2, 3, 16], scale = 4): Feeds => ({
  x: f32(
    seeded(
      dims.reduce((a, b) => a * b, 1),
      11,
    ).map((x) => x * scale),
    dims,
  ),
});

const runMlx = (bytes: Uint8Array, f: Feeds, graphRewrites: boolean) => runMlxWith(bytes, f, { compiled: false, graphRewrites });

/** The pattern is rewritten as `counts` says, and matches onnxruntime and the unrewritten graph. */
async function expectRewrite(bytes: Uint8Array, counts: Record<string, number>, f = feeds(), tol = { rtol: 1e-5, atol: 1e-6 }) {
  expect(prepareModel(bytes).rewrites).toEqual(counts);
  await expectSameAsOrt(bytes, f, tol);
  const [on, off] = [await runMlx(bytes, f, true), await runMlx(bytes, f, false)];
  for (const k of Object.keys(off)) {
    const a = plain(on[k]);
    const b = plain(off[k]);
    a.forEach((x, i) => expect(Math.abs(x - b[i]), `${k}[${i}]`).toBeLessThanOrEqual(tol.atol + tol.rtol * Math.abs(b[i])));
  }
}

describe('GELU', () => {
  const erfTail = (x: string): NodeSpec[] => [
    scalar('one', 1),
    node('Add', ['e', 'one'], ['a']),
    node('Mul', [x, 'a'], ['m']),
    scalar('half', 0.5),
    node('Mul', ['m', 'half'], ['y']),
  ];
  it('erf form, x / sqrt 2 (torch)', () =>
    expectRewrite(build([scalar('r2', Math.SQRT2), node('Div', ['x', 'r2'], ['d']), node('Erf', ['d'], ['e']), ...erfTail('x')], ['y']), {
      gelu: 1,
    }));
  it('erf form, x * (1 / sqrt 2) with the half applied first, constants first', () =>
    expectRewrite(
      build(
        [
          scalar('k', Math.SQRT1_2),
          node('Mul', ['k', 'x'], ['d']),
          node('Erf', ['d'], ['e']),
          scalar('one', 1),
          node('Add', ['one', 'e'], ['a']),
          scalar('half', 0.5),
          node('Mul', ['x', 'half'], ['h']),
          node('Mul', ['h', 'a'], ['y']),
        ],
        ['y'],
      ),
      { gelu: 1 },
    ));
  it('tanh form with Pow (GPT-2) and with x * x * x', async () => {
    for (const cube of [
      [scalar('three', 3), node('Pow', ['x', 'three'], ['c'])],
      [node('Mul', ['x', 'x'], ['sq']), node('Mul', ['sq', 'x'], ['c'])],
    ]) {
      const nodes = [
        scalar('half', 0.5),
        node('Mul', ['x', 'half'], ['h']),
        ...cube,
        scalar('k1', 0.044715),
        node('Mul', ['c', 'k1'], ['ck']),
        node('Add', ['x', 'ck'], ['s']),
        scalar('k2', Math.sqrt(2 / Math.PI)),
        node('Mul', ['s', 'k2'], ['u']),
        node('Tanh', ['u'], ['t']),
        scalar('one', 1),
        node('Add', ['t', 'one'], ['a']),
        node('Mul', ['h', 'a'], ['y']),
      ];
      await expectRewrite(build(nodes, ['y']), { gelu: 1 });
    }
  });
  it('not when an intermediate is read elsewhere (a graph output), nor with other constants', async () => {
    const nodes = [scalar('r2', Math.SQRT2), node('Div', ['x', 'r2'], ['d']), node('Erf', ['d'], ['e']), ...erfTail('x')];
    await expectRewrite(build(nodes, ['y', 'e']), {});
    const other = [scalar('r2', 1.5), node('Div', ['x', 'r2'], ['d']), node('Erf', ['d'], ['e']), ...erfTail('x')];
    await expectRewrite(build(other, ['y']), {});
  });
});

describe('Pow, MatMul + bias, norms', () => {
  it('Pow(x, 2) and Pow(x, 3) become multiplies; Pow(x, 2.5) stays', () =>
    expectRewrite(
      build(
        [
          scalar('two', 2),
          scalar('three', 3),
          scalar('odd', 2.5),
          node('Pow', ['x', 'two'], ['p2']),
          node('Pow', ['x', 'three'], ['p3']),
          node('Abs', ['x'], ['ax']),
          node('Pow', ['ax', 'odd'], ['p5']),
        ],
        ['p2', 'p3', 'p5'],
      ),
      { pow: 2 },
    ));
  it('MatMul with a constant weight + a constant bias, 3-D and 2-D inputs, bias first or second', async () => {
    const inits = [init('W', [16, 24], 3), init('b', [24], 4)];
    await expectRewrite(build([node('MatMul', ['x', 'W'], ['m']), node('Add', ['b', 'm'], ['y'])], ['y'], { inits }), { 'matmul-add': 1 });
    await expectRewrite(
      build([node('MatMul', ['x', 'W'], ['m']), node('Add', ['m', 'b'], ['y'])], ['y'], { inits, x: [5, 16] }),
      { 'matmul-add': 1 },
      feeds([5, 16]),
    );
    // a bias that is not a [N] vector stays an Add
    const b2 = [init('W', [16, 24], 3), init('b', [3, 24], 4)];
    await expectRewrite(build([node('MatMul', ['x', 'W'], ['m']), node('Add', ['m', 'b'], ['y'])], ['y'], { inits: b2 }), {});
  });
  it('sibling MatMuls of one input join into one product and a split (Q/K/V, with and without biases)', async () => {
    const inits = [init('Wq', [16, 24], 5), init('Wk', [16, 8], 6), init('Wv', [16, 8], 7), init('W2', [16, 12], 8)];
    // q is read (and a graph output) before k and v are computed: the joined product goes first.
    const qkv = [
      node('MatMul', ['x', 'Wq'], ['q']),
      node('Relu', ['q'], ['rq']),
      node('MatMul', ['x', 'Wk'], ['k']),
      node('MatMul', ['x', 'Wv'], ['val']),
      node('Mul', ['k', 'val'], ['kv']),
    ];
    await expectRewrite(build(qkv, ['q', 'rq', 'kv'], { inits }), { 'sibling-matmul': 1 });
    await expectRewrite(build(qkv, ['q', 'rq', 'kv'], { inits, x: [5, 16] }), { 'sibling-matmul': 1 }, feeds([5, 16]));
    // A weight that something else reads keeps its MatMul (no weight held twice); the other two still join.
    const shared = [...qkv, node('Transpose', ['Wk'], ['wkt'])];
    await expectRewrite(build(shared, ['q', 'rq', 'kv', 'wkt'], { inits }), { 'sibling-matmul': 1 });
    expect(
      prepareModel(build(shared, ['q', 'rq', 'kv', 'wkt'], { inits })).plan.graph.nodes.filter((n) => n.opType === 'MatMul').length,
    ).toBe(2);
    // Biased projections (MatMul + Add, after the matmul-add rewrite) join with their biases; a
    // product of another K or another kind does not join.
    const biases = [init('bq', [24], 9), init('bk', [8], 10), init('bv', [8], 11)];
    const biased = [
      node('MatMul', ['x', 'Wq'], ['q0']),
      node('Add', ['q0', 'bq'], ['q']),
      node('MatMul', ['x', 'Wk'], ['k0']),
      node('Add', ['bk', 'k0'], ['k']),
      node('MatMul', ['x', 'Wv'], ['v0']),
      node('Add', ['v0', 'bv'], ['val']),
      node('MatMul', ['x', 'W2'], ['other']),
    ];
    await expectRewrite(build(biased, ['q', 'k', 'val', 'other'], { inits: [...inits, ...biases] }), {
      'matmul-add': 3,
      'sibling-matmul': 1,
    });
  });
  it('sibling MatMulNBits (4 bits, packed zero points, bias, a partial last block) join into one', async () => {
    const K = 40;
    const block = 16;
    const kb = Math.ceil(K / block);
    const quant = (name: string, N: number, seed: number): TensorSpec[] => {
      const raw = Uint8Array.from(seeded(N * kb * 8, seed), (r) => Math.floor((r + 1) * 127.5) & 0xff);
      const rowBytes = Math.ceil((kb * 4) / 8);
      const zp = Uint8Array.from(seeded(N * rowBytes, seed + 1), (r) => Math.floor((r + 1) * 127.5) & 0xff);
      return [
        { name: `${name}.b`, type: 'uint8', dims: [N, kb, 8], raw },
        { name: `${name}.s`, type: 'float32', dims: [N * kb], values: seeded(N * kb, seed + 2).map((r) => 0.02 + 0.05 * Math.abs(r)) },
        { name: `${name}.zp`, type: 'uint8', dims: [N * rowBytes], raw: zp },
        { name: `${name}.bias`, type: 'float32', dims: [N], values: seeded(N, seed + 3) },
      ];
    };
    const proj = (name: string, N: number, out: string): NodeSpec =>
      node('MatMulNBits', ['x', `${name}.b`, `${name}.s`, `${name}.zp`, '', `${name}.bias`], [out], {
        domain: 'com.microsoft',
        attrs: { K, N, bits: 4, block_size: block },
      });
    const bytes = model({
      inputs: [v('x', 'float32', [1, 3, K])],
      outputs: ['g', 'u', 'y'].map((o) => v(o, 'float32')),
      nodes: [
        proj('gate', 24, 'g'),
        proj('up', 24, 'u'),
        proj('third', 8, 't'),
        node('Mul', ['g', 'u'], ['gu']),
        node('Relu', ['t'], ['y']),
      ],
      initializers: [...quant('gate', 24, 20), ...quant('up', 24, 30), ...quant('third', 8, 40)],
      opsets: { '': 17, 'com.microsoft': 1 },
    });
    await expectRewrite(bytes, { 'sibling-matmul': 1 }, feeds([1, 3, K]), { rtol: 1e-4, atol: 1e-4 });
    const joined = prepareModel(bytes).plan.graph.nodes.filter((n) => n.opType === 'MatMulNBits');
    expect(joined.length).toBe(1);
    expect(joined[0].attributes.get('N')).toEqual({ type: 'int', value: 56 });
  });
  it('RMSNorm (Llama: Pow, ReduceMean, 1 / Sqrt, Cast, weight) and x / Sqrt(...) without weight', async () => {
    const rms = (final: NodeSpec[]): NodeSpec[] => [
      node('Cast', ['x'], ['xc'], { attrs: { to: 1 } }),
      scalar('two', 2),
      node('Pow', ['xc', 'two'], ['p']),
      node('ReduceMean', ['p'], ['ms'], { attrs: { axes: [-1], keepdims: 1 } }),
      scalar('eps', 1e-6),
      node('Add', ['ms', 'eps'], ['mse']),
      node('Sqrt', ['mse'], ['r']),
      ...final,
    ];
    const weighted = rms([
      scalar('one', 1),
      node('Div', ['one', 'r'], ['inv']),
      node('Mul', ['xc', 'inv'], ['n']),
      node('Cast', ['n'], ['nc'], { attrs: { to: 1 } }),
      node('Mul', ['w', 'nc'], ['y']),
    ]);
    await expectRewrite(build(weighted, ['y'], { inits: [init('w', [16], 5, 0)] }), { 'rms-norm': 1 });
    await expectRewrite(build(rms([node('Div', ['xc', 'r'], ['y'])]), ['y']), { 'rms-norm': 1 });
  });
  it('LayerNorm decomposed (opset 13 exports), with weight and bias, ReduceMean axes as an input (opset 18)', async () => {
    const ln = (axes: (input: string, out: string) => NodeSpec): NodeSpec[] => [
      axes('x', 'mean'),
      node('Sub', ['x', 'mean'], ['d']),
      scalar('two', 2),
      node('Pow', ['d', 'two'], ['d2']),
      axes('d2', 'var'),
      scalar('eps', 1e-5),
      node('Add', ['var', 'eps'], ['ve']),
      node('Sqrt', ['ve'], ['s']),
      node('Div', ['d', 's'], ['n']),
      node('Mul', ['n', 'w'], ['nw']),
      node('Add', ['nw', 'b'], ['y']),
    ];
    const inits = [init('w', [16], 6, 0), init('b', [16], 7)];
    const attrAxes = (i: string, o: string) => node('ReduceMean', [i], [o], { attrs: { axes: [-1] } });
    await expectRewrite(build(ln(attrAxes), ['y'], { inits, opset: 13 }), { 'layer-norm': 1 }, feeds(), { rtol: 1e-4, atol: 1e-5 });
    const inputAxes = (i: string, o: string) => node('ReduceMean', [i, 'axes'], [o]);
    const inits18 = [...inits, { name: 'axes', type: 'int64' as const, dims: [1], values: [-1n] }];
    await expectRewrite(build(ln(inputAxes), ['y'], { inits: inits18, opset: 18 }), { 'layer-norm': 1 }, feeds(), {
      rtol: 1e-4,
      atol: 1e-5,
    });
  });
  it('MLX_ORT_REWRITES and the option select rewrites; unknown names are refused', () => {
    const bytes = build([scalar('two', 2), node('Pow', ['x', 'two'], ['y'])], ['y']);
    expect(prepareModel(bytes, { rewrites: false }).rewrites).toEqual({});
    expect(prepareModel(bytes, { rewrites: ['gelu'] }).rewrites).toEqual({});
    expect(prepareModel(bytes, { rewrites: ['pow'] }).rewrites).toEqual({ pow: 1 });
    expect(() => prepareModel(bytes, { rewrites: ['fuse-all' as never] })).toThrow(/unknown graph rewrite 'fuse-all'/);
    const saved = process.env.MLX_ORT_REWRITES;
    try {
      process.env.MLX_ORT_REWRITES = '0';
      expect(prepareModel(bytes).rewrites).toEqual({});
      process.env.MLX_ORT_REWRITES = 'pow,gelu';
      expect(prepareModel(bytes).rewrites).toEqual({ pow: 1 });
    } finally {
      if (saved === undefined) delete process.env.MLX_ORT_REWRITES;
      else process.env.MLX_ORT_REWRITES = saved;
    }
  });
});

describe('shared models where the patterns occur', () => {
  const cases: [string, Record<string, number>][] = [
    ['bert-tiny', { gelu: 2, 'matmul-add': 12, gemm: 1, attention: 2, 'sibling-matmul': 2 }],
    ['gpt2-tiny', { gelu: 2, gemm: 8, attention: 2 }],
    ['llama-tiny', { 'rms-norm': 5, attention: 2, 'sibling-matmul': 4, 'gated-activation': 2 }],
  ];
  for (const [name, counts] of cases) {
    const dir = sharedPath(join('models', name));
    it.skipIf(!existsSync(dir))(
      `${name}: ${Object.keys(counts).join(', ')} fire, and the outputs match the rewrites off and the reference`,
      async () => {
        const bytes = readFileSync(join(dir, 'model.onnx'));
        expect(prepareModel(bytes).rewrites).toEqual(counts);
        // Each rewrite alone fires too (Pow alone takes the GELU's x^3 and the norms' x^2).
        expect(prepareModel(bytes, { rewrites: ['pow'] }).rewrites.pow ?? 0).toBeGreaterThan(name === 'bert-tiny' ? -1 : 0);
        const meta = JSON.parse(readFileSync(join(dir, 'meta.json'), 'utf8')) as { rtol?: number; atol?: number };
        const tc = readTestCase(dir);
        const ds = tc.datasets[0];
        const session = await ort.InferenceSession.create(bytes, {
          executionProviders: [{ name: 'mlx', device: 'cpu', compiled: false }],
        } as never);
        const f: Feeds = {};
        (ds.inputs as HostTensor[]).forEach((t, i) => (f[session.inputNames[i]] = hostToTensor(ort as never, t) as never));
        const on = await session.run(f);
        await session.release();
        const off = await runMlx(bytes, f, false);
        (ds.outputs as HostTensor[]).forEach((want, i) => {
          const k = Object.keys(off)[i];
          const a = plain(on[k]);
          const b = plain(off[k]);
          const r = Array.from(want.data as ArrayLike<number>, Number);
          a.forEach((x, j) => {
            expect(Math.abs(x - b[j]), `${k}[${j}] vs rewrites off`).toBeLessThanOrEqual(1e-5 + 1e-4 * Math.abs(b[j]));
            expect(Math.abs(x - r[j]), `${k}[${j}] vs reference`).toBeLessThanOrEqual(
              (meta.atol ?? 1e-4) + (meta.rtol ?? 1e-3) * Math.abs(r[j]),
            );
          });
        });
      },
    );
  }
});
