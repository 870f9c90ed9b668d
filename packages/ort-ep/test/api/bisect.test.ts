// mlx-ort bisect (src/bisect.ts): seeded defects. Each case runs a model with a test-only registry
// whose entry for one op type returns a slightly wrong result (one element off, a dropped bias, a
// wrong sign, a rolled axis, ...), and checks that bisect pins exactly the first node whose output
// the defect changes, and that the one-node model it writes reproduces the difference with the
// defective registry and not with the default one.
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as mx from '@mlx/core';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { BISECT_TOLERANCE, bisect, diff, formatBisect } from '../../src/bisect.js';
import { main } from '../../src/cli.js';
import { MlxSession } from '../../src/session.js';
import { OrtMlxError } from '../../src/errors.js';
import { defaultRegistry } from '../../src/ops/index.js';
import { OpRegistry } from '../../src/registry/registry.js';
import type { OpContext, OpResult } from '../../src/registry/types.js';
import { decodeModel, expandFunctions, readTestDataset, validateGraph, type HostTensor } from '../../src/onnx/index.js';
import { model, node, v, type ModelSpec, type TensorSpec } from '../helpers/build.js';
import { seeded } from '../helpers/ort.js';
import { expectShared, sharedPath } from '../helpers/shared.js';

const tmp = mkdtempSync(join(tmpdir(), 'mlx-ort-bisect-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

type Change = (out: mx.Array, ctx: OpContext) => mx.Array;
const FLOAT = new Set(['float32', 'float16', 'bfloat16', 'float64']);

/**
 * The default registry with `opType`'s entry wrapped: run()'s first output goes through `change`
 * (float outputs only, unless `ints`), and the entry has no host twin (every node of that type
 * runs run()). `touched` collects the nodes whose output it changed.
 */
function defective(opType: string, change: Change, ints = false): { registry: OpRegistry; touched: Set<string> } {
  const touched = new Set<string>();
  const registry = new OpRegistry();
  for (const e of defaultRegistry.entries()) {
    if (e.opType !== opType || e.domain !== 'ai.onnx' || !e.run) {
      registry.add(e);
      continue;
    }
    const run = e.run;
    // Without its host twin: the one-node model's inputs are small host feeds, which would take it.
    registry.add({
      ...e,
      host: undefined,
      hostSize: undefined,
      run: (ctx: OpContext): OpResult[] => {
        const out = run(ctx);
        const o = out[0];
        if (!(o instanceof mx.Array) || !(ints || FLOAT.has(o.dtype)) || o.size === 0) return out;
        touched.add(ctx.node.name);
        return [change(o, ctx), ...out.slice(1)];
      },
    });
  }
  return { registry, touched };
}

// The defects.
/** `delta` added to one element (flat index `at`). */
const bump =
  (delta: number, at = 0): Change =>
  (o) => {
    const d = new Float32Array(o.size);
    d[at] = delta;
    return mx.add(o, mx.astype(mx.reshape(mx.array(d), o.shape), o.dtype));
  };
const scale =
  (f: number): Change =>
  (o) =>
    mx.multiply(o, mx.astype(mx.array(f), o.dtype));
const negate: Change = (o) => mx.negative(o);
/** Rolled by one along `axis`: a transposed or shifted axis, an off-by-one index. */
const roll =
  (axis: number): Change =>
  (o) =>
    mx.roll(o, 1, axis);
/** Rolled by one over the flattened elements (a wrong reshape order). */
const rollFlat: Change = (o) => mx.reshape(mx.roll(mx.flatten(o), 1, 0), o.shape);
/** Relu that leaks: x < 0 gives 0.1 x. */
const leaky: Change = (o, ctx) => mx.add(o, mx.multiply(mx.minimum(ctx.input(0), 0), 0.1));
/** Gemm without its bias (C, times beta = 1 in these models). */
const gemmNoBias: Change = (o, ctx) => (ctx.has(2) ? mx.subtract(o, ctx.input(2)) : o);
/** Conv without its bias B: [C] broadcast over [N, C, spatial...]. */
const convNoBias: Change = (o, ctx) =>
  ctx.has(2) ? mx.subtract(o, mx.reshape(ctx.input(2), [1, -1, ...new Array<number>(o.ndim - 2).fill(1)])) : o;
/** An integer result off by one on its first element. */
const intPlusOne: Change = (o) => {
  const d = new Int32Array(o.size);
  d[0] = 1;
  return mx.astype(mx.add(o, mx.astype(mx.reshape(mx.array(d), o.shape), o.dtype)), o.dtype);
};

// Models built for these tests: every float value a node output, so that bisect sees each node.
const init = (name: string, dims: number[], seed: number, s = 0.5): TensorSpec => ({
  name,
  type: 'float32',
  dims,
  values: seeded(
    dims.reduce((a, b) => a * b, 1),
    seed,
  ).map((x) => x * s),
});
const f32 = (name: string, dims: number[], values: number[]): TensorSpec => ({ name, type: 'float32', dims, values });
const i64 = (name: string, dims: number[], values: number[]): TensorSpec => ({ name, type: 'int64', dims, values: values.map(BigInt) });

/** An MLP-ish chain: most element-wise, normalization, reduction and layout ops, each op type first at a known node. */
const chainSpec: ModelSpec = {
  inputs: [v('x', 'float32', [4, 8])],
  outputs: [v('y', 'float32', [4, 4])],
  initializers: [
    init('W1', [8, 8], 1),
    init('b1', [8], 2),
    init('W2', [8, 8], 3),
    init('b2', [8], 4),
    init('gamma', [8], 5, 1),
    init('beta', [8], 6),
    f32('two', [1], [2]),
    i64('shape48', [2], [4, 8]),
    i64('axis1', [1], [1]),
    init('W3', [16, 4], 7),
    f32('lo', [1], [-0.3]),
    f32('hi', [1], [0.4]),
    f32('p', [1], [2]),
  ],
  nodes: [
    node('MatMul', ['x', 'W1'], ['h1'], { name: 'mm1' }),
    node('Add', ['h1', 'b1'], ['h2'], { name: 'add1' }),
    node('Relu', ['h2'], ['h3'], { name: 'relu1' }),
    node('Gemm', ['h3', 'W2', 'b2'], ['h4'], { name: 'gemm1', attrs: { transB: 1 } }),
    node('Sigmoid', ['h4'], ['h5'], { name: 'sig1' }),
    node('Tanh', ['h4'], ['h6'], { name: 'tanh1' }),
    node('Mul', ['h5', 'h6'], ['h7'], { name: 'mul1' }),
    node('Sub', ['h7', 'x'], ['h8'], { name: 'sub1' }),
    node('LayerNormalization', ['h8', 'gamma', 'beta'], ['h9'], { name: 'ln1', attrs: { axis: -1 } }),
    node('Softmax', ['h9'], ['h10'], { name: 'sm1', attrs: { axis: -1 } }),
    node('ReduceMean', ['h9'], ['h11'], { name: 'rmean1', attrs: { axes: [1], keepdims: 1 } }),
    node('Div', ['h10', 'two'], ['h12'], { name: 'div1' }),
    node('Add', ['h12', 'h11'], ['h12b'], { name: 'add2' }),
    node('Transpose', ['h12b'], ['h13'], { name: 'tr1', attrs: { perm: [1, 0] } }),
    node('Reshape', ['h13', 'shape48'], ['h14'], { name: 'rs1' }),
    node('Concat', ['h14', 'h9'], ['h15'], { name: 'cat1', attrs: { axis: 1 } }),
    node('Clip', ['h15', 'lo', 'hi'], ['h15c'], { name: 'clip1' }),
    node('Exp', ['h15c'], ['h16'], { name: 'exp1' }),
    node('ReduceSum', ['h16', 'axis1'], ['h17'], { name: 'rsum1', attrs: { keepdims: 1 } }),
    node('Sqrt', ['h17'], ['h18'], { name: 'sqrt1' }),
    node('Pow', ['h15', 'p'], ['h18p'], { name: 'pow1' }),
    node('Add', ['h16', 'h18'], ['h19'], { name: 'add3' }),
    node('Sub', ['h19', 'h18p'], ['h19s'], { name: 'sub2' }),
    node('Erf', ['h19s'], ['h19e'], { name: 'erf1' }),
    node('MatMul', ['h19e', 'W3'], ['h20'], { name: 'mm2' }),
    node('Relu', ['h20'], ['y'], { name: 'relu2' }),
  ],
};

/** A small CNN: convolution, batch norm, pooling, and a classifier. */
const cnnSpec: ModelSpec = {
  inputs: [v('img', 'float32', [1, 3, 8, 8])],
  outputs: [v('logits', 'float32', [1, 5])],
  initializers: [
    init('cw', [4, 3, 3, 3], 11),
    init('cb', [4], 12),
    init('bn_s', [4], 13, 1),
    init('bn_b', [4], 14),
    init('bn_m', [4], 15, 0.1),
    f32('bn_v', [4], [1, 0.5, 2, 1.5]),
    init('cw2', [6, 4, 3, 3], 16),
    init('cb2', [6], 17),
    init('fw', [5, 6], 18),
    init('fb', [5], 19),
    f32('slope', [1], [0.2]),
  ],
  nodes: [
    node('Conv', ['img', 'cw', 'cb'], ['c1'], { name: 'conv1', attrs: { pads: [1, 1, 1, 1] } }),
    node('BatchNormalization', ['c1', 'bn_s', 'bn_b', 'bn_m', 'bn_v'], ['c2'], { name: 'bn1' }),
    node('LeakyRelu', ['c2'], ['c3'], { name: 'lrelu1', attrs: { alpha: 0.1 } }),
    node('MaxPool', ['c3'], ['c4'], { name: 'pool1', attrs: { kernel_shape: [2, 2], strides: [2, 2] } }),
    node('Conv', ['c4', 'cw2', 'cb2'], ['c5'], { name: 'conv2', attrs: { pads: [1, 1, 1, 1] } }),
    node('HardSigmoid', ['c5'], ['c6'], { name: 'hsig1' }),
    node('PRelu', ['c5', 'slope'], ['c6p'], { name: 'prelu1' }),
    node('Mul', ['c6', 'c6p'], ['c7'], { name: 'mul1' }),
    node('AveragePool', ['c7'], ['c8'], { name: 'apool1', attrs: { kernel_shape: [2, 2], strides: [1, 1] } }),
    node('GlobalAveragePool', ['c8'], ['c9'], { name: 'gap1' }),
    node('Flatten', ['c9'], ['c10'], { name: 'flat1' }),
    node('Gemm', ['c10', 'fw', 'fb'], ['logits'], { name: 'fc1', attrs: { transB: 1 } }),
  ],
};

/** Token ids into an embedding, with integer and boolean values on the way. */
const embedSpec: ModelSpec = {
  inputs: [v('ids', 'int64', [2, 5])],
  outputs: [v('out', 'float32', [2, 5, 6]), v('best', 'int64', [2, 5])],
  initializers: [init('E', [10, 6], 21, 1), f32('zero', [], [0]), init('bias', [6], 22), i64('unsq', [1], [0])],
  nodes: [
    node('Gather', ['E', 'ids'], ['e1'], { name: 'embed' }),
    node('Abs', ['e1'], ['e2'], { name: 'abs1' }),
    node('Neg', ['e2'], ['e3'], { name: 'neg1' }),
    node('Max', ['e1', 'e3'], ['e4'], { name: 'max1' }),
    node('Greater', ['e1', 'zero'], ['pos'], { name: 'gt1' }),
    node('Where', ['pos', 'e4', 'e3'], ['e5'], { name: 'where1' }),
    node('Unsqueeze', ['e5', 'unsq'], ['e6'], { name: 'unsq1' }),
    node('Squeeze', ['e6', 'unsq'], ['e7'], { name: 'sq1' }),
    node('Add', ['e7', 'bias'], ['out'], { name: 'add1' }),
    node('ArgMax', ['out'], ['best'], { name: 'argmax1', attrs: { axis: 2, keepdims: 0 } }),
  ],
};

const chain = model(chainSpec);
const cnn = model(cnnSpec);
const embed = model(embedSpec);
const x = { x: { dtype: 1, dims: [4, 8], data: Float32Array.from(seeded(32, 31)) } as HostTensor };
const img = { img: { dtype: 1, dims: [1, 3, 8, 8], data: Float32Array.from(seeded(192, 32)) } as HostTensor };
const ids = { ids: { dtype: 7, dims: [2, 5], data: BigInt64Array.from([1, 3, 5, 7, 9, 0, 2, 4, 6, 8].map(BigInt)) } as HostTensor };

interface Case {
  op: string;
  change: Change;
  ints?: boolean;
  /** The model: bytes built here, or a shared model's folder name. */
  model: Uint8Array | string;
  feeds?: Record<string, HostTensor>;
  dims?: Record<string, number>;
  /** The node bisect must pin (for the built models: known by construction). */
  expect?: string;
}

const cases: Case[] = [
  // the chain
  { op: 'MatMul', change: bump(0.05), model: chain, feeds: x, expect: 'mm1' },
  { op: 'Add', change: bump(0.05, 3), model: chain, feeds: x, expect: 'add1' },
  { op: 'Relu', change: leaky, model: chain, feeds: x, expect: 'relu1' },
  { op: 'Gemm', change: gemmNoBias, model: chain, feeds: x, expect: 'gemm1' },
  { op: 'Sigmoid', change: scale(1.01), model: chain, feeds: x, expect: 'sig1' },
  { op: 'Tanh', change: negate, model: chain, feeds: x, expect: 'tanh1' },
  { op: 'Mul', change: bump(-0.02, 5), model: chain, feeds: x, expect: 'mul1' },
  { op: 'Sub', change: negate, model: chain, feeds: x, expect: 'sub1' },
  { op: 'LayerNormalization', change: bump(0.01, 7), model: chain, feeds: x, expect: 'ln1' },
  { op: 'Softmax', change: roll(1), model: chain, feeds: x, expect: 'sm1' },
  { op: 'ReduceMean', change: scale(1.05), model: chain, feeds: x, expect: 'rmean1' },
  { op: 'Div', change: scale(0.99), model: chain, feeds: x, expect: 'div1' },
  { op: 'Transpose', change: roll(0), model: chain, feeds: x, expect: 'tr1' },
  { op: 'Reshape', change: rollFlat, model: chain, feeds: x, expect: 'rs1' },
  { op: 'Concat', change: roll(1), model: chain, feeds: x, expect: 'cat1' },
  { op: 'Clip', change: bump(0.1, 1), model: chain, feeds: x, expect: 'clip1' },
  { op: 'Exp', change: scale(1.002), model: chain, feeds: x, expect: 'exp1' },
  { op: 'ReduceSum', change: bump(0.5), model: chain, feeds: x, expect: 'rsum1' },
  { op: 'Sqrt', change: bump(0.01, 2), model: chain, feeds: x, expect: 'sqrt1' },
  { op: 'Pow', change: scale(1.1), model: chain, feeds: x, expect: 'pow1' },
  { op: 'Erf', change: negate, model: chain, feeds: x, expect: 'erf1' },
  // the CNN
  { op: 'Conv', change: convNoBias, model: cnn, feeds: img, expect: 'conv1' },
  { op: 'BatchNormalization', change: bump(0.05, 10), model: cnn, feeds: img, expect: 'bn1' },
  { op: 'LeakyRelu', change: scale(-1), model: cnn, feeds: img, expect: 'lrelu1' },
  { op: 'MaxPool', change: roll(3), model: cnn, feeds: img, expect: 'pool1' },
  { op: 'HardSigmoid', change: bump(0.2, 4), model: cnn, feeds: img, expect: 'hsig1' },
  { op: 'PRelu', change: negate, model: cnn, feeds: img, expect: 'prelu1' },
  { op: 'AveragePool', change: scale(1.01), model: cnn, feeds: img, expect: 'apool1' },
  { op: 'GlobalAveragePool', change: bump(0.05, 2), model: cnn, feeds: img, expect: 'gap1' },
  { op: 'Flatten', change: roll(1), model: cnn, feeds: img, expect: 'flat1' },
  // the embedding
  { op: 'Gather', change: roll(0), model: embed, feeds: ids, expect: 'embed' },
  { op: 'Abs', change: bump(0.05), model: embed, feeds: ids, expect: 'abs1' },
  { op: 'Neg', change: negate, model: embed, feeds: ids, expect: 'neg1' },
  { op: 'Max', change: bump(-0.5, 1), model: embed, feeds: ids, expect: 'max1' },
  { op: 'Where', change: roll(1), model: embed, feeds: ids, expect: 'where1' },
  { op: 'Unsqueeze', change: bump(0.5), model: embed, feeds: ids, expect: 'unsq1' },
  { op: 'Squeeze', change: roll(2), model: embed, feeds: ids, expect: 'sq1' },
  { op: 'ArgMax', change: intPlusOne, ints: true, model: embed, feeds: ids, expect: 'argmax1' },
  // shared models (../shared/models): the node is the first the defect changes
  { op: 'Softmax', change: roll(1), model: 'small-cnn', dims: { batch: 2 } },
  { op: 'HardSwish', change: bump(0.1, 5), model: 'mobilenet-v3-ish' },
  { op: 'ReduceMean', change: scale(1.02), model: 'mobilenet-v3-ish' },
  { op: 'LayerNormalization', change: bump(0.02, 9), model: 'bert-tiny', dims: { seq: 4 } },
  { op: 'Erf', change: scale(0.98), model: 'bert-tiny', dims: { seq: 4 } },
  { op: 'Gemm', change: bump(0.05, 7), model: 'gpt2-tiny', dims: { seq: 3 } },
  { op: 'Sigmoid', change: scale(1.02), model: 'llama-tiny', dims: { seq: 3 } },
];

/** The nodes of a model in topological order (as bisect orders them). */
function topological(bytes: Uint8Array): string[] {
  const ir = decodeModel(bytes);
  expandFunctions(ir);
  return validateGraph(ir.graph).nodes.map((n) => n.name);
}

/** Whether the one-node model in `dir` gives outputs out of tolerance from onnxruntime's (output_<i>.pb) with `registry`. */
async function reproDiffers(dir: string, registry?: OpRegistry): Promise<boolean> {
  const path = join(dir, 'model.onnx');
  const ds = readTestDataset(join(dir, 'test_data_set_0'), decodeModel(readFileSync(path)));
  // As bisect ran it (and as MLX_ORT_REWRITES=0 mlx-ort run would): a rewrite could replace the node.
  const s = await MlxSession.create(path, { registry, compiled: false, graphRewrites: false });
  try {
    const feeds = Object.fromEntries(s.inputNames.map((n, i) => [n, ds.inputs[i] as HostTensor]));
    const out = await s.run(feeds);
    return s.outputNames.some((n, i) => {
      const d = diff(n, out[n] as HostTensor, ds.outputs[i] as HostTensor, BISECT_TOLERANCE);
      return d.bad > 0 || d.mismatch !== undefined;
    });
  } finally {
    s.release();
  }
}

describe('bisect pins a seeded defect', () => {
  it('has at least 30 defects over at least 25 op types', () => {
    expect(cases.length).toBeGreaterThanOrEqual(30);
    expect(new Set(cases.map((c) => c.op)).size).toBeGreaterThanOrEqual(25);
  });

  cases.forEach((c, k) => {
    const label = typeof c.model === 'string' ? c.model : c.expect;
    it(`${c.op} in ${label}`, async () => {
      let path: string | Uint8Array = c.model as Uint8Array;
      if (typeof c.model === 'string') {
        path = join(sharedPath('models'), c.model, 'model.onnx');
        expectShared(path);
      }
      const { registry, touched } = defective(c.op, c.change, c.ints);
      const outDir = join(tmp, `case-${k}`);
      const r = await bisect(path, { feeds: c.feeds, dims: c.dims, registry, outDir });
      const order = topological(typeof path === 'string' ? readFileSync(path) : path);
      const expected = c.expect ?? order.find((n) => touched.has(n));
      expect(touched.has(expected!), `the defect changed ${expected}`).toBe(true);
      expect(r.first?.node, formatBisect(r).join('\n')).toBe(expected);
      expect(r.first?.opType).toBe(c.op);
      expect(r.first!.outputs[0].bad).toBeGreaterThan(0);
      expect(r.repro).toBe(outDir);
      expect(await reproDiffers(outDir, registry), 'the one-node model with the defect').toBe(true);
      expect(await reproDiffers(outDir), 'the one-node model on the default registry').toBe(false);
    }, 120_000);
  });
});

describe('bisect without a defect', () => {
  it('reports no differing node on the built models', async () => {
    for (const [bytes, feeds] of [
      [chain, x],
      [cnn, img],
      [embed, ids],
    ] as const) {
      const r = await bisect(bytes, { feeds, outDir: join(tmp, 'none') });
      expect(r.first, formatBisect(r).join('\n')).toBeUndefined();
      expect(r.repro).toBeUndefined();
      expect(r.differing).toBe(0);
      expect(r.compared).toBeGreaterThanOrEqual(r.nodes);
      expect(formatBisect(r).at(-1)).toBe('no node differs from onnxruntime beyond the tolerance');
    }
    expect(existsSync(join(tmp, 'none'))).toBe(false);
  });

  it('reports no differing node on shared models', async () => {
    for (const [name, dims] of [
      ['small-cnn', { batch: 2 }],
      ['bert-tiny', { seq: 6 }],
      ['lstm-tagger', { seq: 5 }],
    ] as const) {
      const path = join(sharedPath('models'), name, 'model.onnx');
      expectShared(path);
      const r = await bisect(path, { dims });
      expect(r.first, formatBisect(r).join('\n')).toBeUndefined();
      expect(r.compared).toBeGreaterThan(0);
    }
  }, 120_000);
});

describe('bisect reports', () => {
  it('a defect inside a model-local function pins the node of its body', async () => {
    const bytes = model({
      opsets: { '': 17, custom: 1 },
      inputs: [v('x', 'float32', [2, 3])],
      outputs: [v('y', 'float32', [2, 3])],
      functions: [
        {
          name: 'Gate',
          domain: 'custom',
          inputs: ['a'],
          outputs: ['b'],
          nodes: [node('Relu', ['a'], ['t'], { name: 'inner_relu' }), node('Sigmoid', ['t'], ['b'], { name: 'inner_sigmoid' })],
          opsets: { '': 17 },
        },
      ],
      nodes: [node('Gate', ['x'], ['g'], { name: 'gate', domain: 'custom' }), node('Mul', ['g', 'x'], ['y'], { name: 'mul' })],
    });
    const feeds = { x: { dtype: 1, dims: [2, 3], data: Float32Array.from(seeded(6, 61)) } as HostTensor };
    const { registry, touched } = defective('Sigmoid', scale(1.05));
    const outDir = join(tmp, 'function');
    const r = await bisect(bytes, { feeds, registry, outDir });
    expect(touched.size).toBe(1);
    expect(r.first).toMatchObject({ node: [...touched][0], opType: 'Sigmoid' });
    expect(await reproDiffers(outDir, registry)).toBe(true);
    expect(await reproDiffers(outDir)).toBe(false);
  });

  it('a defect inside an If branch pins the If, whose one-node model carries the outer values', async () => {
    const branch = (op: string) => ({
      name: `${op}_branch`,
      inputs: [],
      outputs: [v(`${op}_out`, 'float32')],
      nodes: [node(op, ['r'], [`${op}_out`], { name: `${op}_in_branch` })],
    });
    const bytes = model({
      inputs: [v('x', 'float32', [2, 3]), v('c', 'bool', [])],
      outputs: [v('y', 'float32')],
      nodes: [
        node('Relu', ['x'], ['r'], { name: 'relu' }),
        node('If', ['c'], ['z'], { name: 'if', attrs: { then_branch: { g: branch('Softmax') }, else_branch: { g: branch('Neg') } } }),
        node('Add', ['z', 'x'], ['y'], { name: 'add' }),
      ],
    });
    const feeds = {
      x: { dtype: 1, dims: [2, 3], data: Float32Array.from(seeded(6, 51)) } as HostTensor,
      c: { dtype: 9, dims: [], data: Uint8Array.from([1]) } as HostTensor,
    };
    const { registry, touched } = defective('Softmax', bump(0.05));
    const outDir = join(tmp, 'if');
    const r = await bisect(bytes, { feeds, registry, outDir });
    expect([...touched]).toEqual(['Softmax_in_branch']);
    expect(r.first).toMatchObject({ node: 'if', opType: 'If' });
    const ir = decodeModel(readFileSync(join(outDir, 'model.onnx')));
    expect(ir.graph.inputs.map((i) => i.name)).toEqual(['c', 'r']);
    expect(await reproDiffers(outDir, registry)).toBe(true);
    expect(await reproDiffers(outDir)).toBe(false);
  });

  it('skips values the MLX plan does not keep, and says so', async () => {
    const bytes = model({
      inputs: [v('a', 'float32', [2, 3])],
      outputs: [v('y', 'float32', [2, 3])],
      nodes: [
        node('Relu', ['a'], ['r'], { name: 'relu' }),
        node('Softmax', ['r'], ['s'], { name: 'softmax' }),
        node('Neg', ['s'], ['n'], { name: 'neg' }),
        node('Add', ['n', 'a'], ['y'], { name: 'add' }),
      ],
    });
    const feeds = { a: { dtype: 1, dims: [2, 3], data: Float32Array.from(seeded(6, 41)) } as HostTensor };
    const r = await bisect(bytes, { feeds, disabledOps: ['Softmax', 'Neg'], fallback: 'cpu' });
    // Softmax's output lives only inside the partition onnxruntime runs (Softmax, Neg).
    expect(r.first, formatBisect(r).join('\n')).toBeUndefined();
    expect(r.skipped).toEqual([{ value: 's', why: 'the MLX plan does not keep it (folded, aliased, or inside a fallback partition)' }]);
    expect(r.compared).toBe(3);
    expect(formatBisect(r)[1]).toBe(
      "not compared: 1 ('s': the MLX plan does not keep it (folded, aliased, or inside a fallback partition))",
    );
  });

  it('the histogram in ulps and the worst element', async () => {
    const { registry } = defective('MatMul', bump(0.05, 9));
    const outDir = join(tmp, 'report');
    const r = await bisect(chain, { feeds: x, registry, outDir });
    const o = r.first!.outputs[0];
    expect(o).toMatchObject({ output: 'h1', elemType: 1, dims: [4, 8], bad: 1, total: 32 });
    expect(o.worst!.index).toEqual([1, 1]);
    expect(Number(o.worst!.mlx) - Number(o.worst!.ort)).toBeCloseTo(0.05, 5);
    expect(o.worst!.ulps).toBeGreaterThan(65536);
    expect(o.histogram!.reduce((a, [, n]) => a + n, 0)).toBe(32);
    expect(o.histogram!.at(-1)).toEqual(['>=65536', 1]);
    const lines = formatBisect(r);
    expect(lines[0]).toBe(`<bytes>: 26 nodes, ${r.compared} node outputs compared (rtol 0.001, atol 0.0001)`);
    expect(r.differing).toBeGreaterThan(1);
    expect(lines[1]).toBe(`first differing node: #0 'mm1' (MatMul), of ${r.differing} differing`);
    expect(lines[2]).toBe("  output 'h1' float32 [4, 8]: 1 of 32 elements out of tolerance");
    expect(lines[3]).toMatch(/^ {4}ulps: 0: \d+, 1: \d+, 2-3: \d+, 4-15: \d+, 16-255: \d+, 256-65535: \d+, >=65536: 1$/);
    expect(lines[4]).toMatch(/^ {4}largest \|mlx - onnxruntime\|: element \[1, 1\] mlx -?[\d.e+-]+, onnxruntime -?[\d.e+-]+ \(\d+ ulps\)$/);
    expect(lines[5]).toBe(
      `one-node model: ${join(outDir, 'model.onnx')} (MLX_ORT_REWRITES=0 mlx-ort run ${join(outDir, 'model.onnx')} --inputs ${join(outDir, 'test_data_set_0')})`,
    );
    // The one-node model: the node, its input as a feed, its weight an initializer.
    const ir = decodeModel(readFileSync(join(outDir, 'model.onnx')));
    expect(ir.graph.nodes.map((n) => n.name)).toEqual(['mm1']);
    expect(ir.graph.inputs.map((i) => i.name)).toEqual(['x']);
    expect([...ir.graph.initializers.keys()]).toEqual(['W1']);
    expect(ir.graph.outputs.map((o) => o.name)).toEqual(['h1']);
  });

  it('an output of another element type', async () => {
    const { registry } = defective('Relu', (o) => mx.astype(o, 'float16'));
    const outDir = join(tmp, 'dtype');
    const r = await bisect(chain, { feeds: x, registry, outDir });
    expect(r.first?.node).toBe('relu1');
    expect(r.first!.outputs[0]).toMatchObject({ output: 'h3', bad: 32, mismatch: 'element type float16 on MLX, float32 on onnxruntime' });
    expect(formatBisect(r)[2]).toBe("  output 'h3' float32 [4, 8]: element type float16 on MLX, float32 on onnxruntime");
    expect(await reproDiffers(outDir, registry)).toBe(true);
    expect(await reproDiffers(outDir)).toBe(false);
  });

  it('integer outputs count the differing elements', async () => {
    const { registry } = defective('ArgMax', intPlusOne, true);
    const r = await bisect(embed, { feeds: ids, registry });
    expect(r.first!.outputs[0]).toMatchObject({ output: 'best', elemType: 7, bad: 1, total: 10, worst: { index: [0, 0] } });
    expect(r.first!.outputs[0].histogram).toBeUndefined();
    expect(formatBisect(r)[2]).toBe("  output 'best' int64 [2, 5]: 1 of 10 elements differ");
    expect(formatBisect(r)[3]).toMatch(/^ {4}first difference: element \[0, 0\] mlx \d+, onnxruntime \d+$/);
    expect(r.repro).toBeUndefined();
  });

  it('ulps of each float type', () => {
    const t = (dtype: number, data: HostTensor['data']): HostTensor => ({ dtype, dims: [data.length], data });
    const tol = { rtol: 0, atol: 0 };
    const ulps = (a: HostTensor, b: HostTensor) => diff('v', a, b, tol).worst?.ulps;
    const f32next = new Float32Array([1, 1]);
    new Int32Array(f32next.buffer)[1] += 3;
    expect(ulps(t(1, f32next.slice(0, 1)), t(1, f32next.slice(1)))).toBe(3);
    // across zero: -0 and +0 are the same point, the smallest subnormals one ulp either side
    expect(ulps(t(1, new Float32Array([-1e-45])), t(1, new Float32Array([1e-45])))).toBe(2);
    expect(ulps(t(11, new Float64Array([1])), t(11, new Float64Array([1 + 2 ** -51])))).toBe(2);
    expect(ulps(t(10, new Uint16Array([0x3c00])), t(10, new Uint16Array([0x3c05])))).toBe(5); // float16 1 and 1 + 5 ulps
    expect(ulps(t(16, new Uint16Array([0xbf80])), t(16, new Uint16Array([0xbf81])))).toBe(1); // bfloat16 -1
    expect(ulps(t(1, new Float32Array([Number.NaN])), t(1, new Float32Array([1])))).toBe(Number.POSITIVE_INFINITY);
    expect(diff('v', t(1, new Float32Array([Number.NaN])), t(1, new Float32Array([Number.NaN])), tol).bad).toBe(0);
    expect(diff('v', t(1, new Float32Array([1, 2])), t(1, new Float32Array([1])), tol).mismatch).toBe(
      'shape [2] on MLX, [1] on onnxruntime',
    );
    expect(diff('v', t(6, new Int32Array([1])), t(1, new Float32Array([1])), tol).mismatch).toBe(
      'element type int32 on MLX, float32 on onnxruntime',
    );
  });
});

describe('bisect errors', () => {
  it('a model onnxruntime cannot run', async () => {
    // onnxruntime's CPU provider has no Relu for bfloat16; MLX has.
    const bytes = model({
      inputs: [v('a', 'float32', [3])],
      outputs: [v('b', 'float32', [3])],
      nodes: [
        node('Cast', ['a'], ['a16'], { name: 'to_bf16', attrs: { to: 16 } }),
        node('Relu', ['a16'], ['r16'], { name: 'relu_bf16' }),
        node('Cast', ['r16'], ['b'], { name: 'to_f32', attrs: { to: 1 } }),
      ],
    });
    const feeds = { a: { dtype: 1, dims: [3], data: Float32Array.from([1, -2, 3]) } as HostTensor };
    const e = await bisect(bytes, { feeds }).catch((err) => err);
    expect(e).toBeInstanceOf(OrtMlxError);
    expect(e.message).toMatch(
      /^bisect: onnxruntime-node \(CPU provider\) cannot load model <bytes> with its node outputs exposed: Could not find an implementation for Relu\(14\) node with name 'relu_bf16'$/,
    );
  });

  it('bad tolerances', async () => {
    await expect(bisect(chain, { feeds: x, rtol: -1 })).rejects.toThrow('rtol must be a finite number >= 0, got -1');
    await expect(bisect(chain, { feeds: x, atol: Number.NaN })).rejects.toThrow('atol must be a finite number >= 0, got NaN');
  });
});

describe('mlx-ort bisect', () => {
  afterEach(() => {
    vi.restoreAllMocks();
    process.exitCode = undefined;
  });
  /** stdout and stderr lines of one main() call. */
  async function cli(argv: string[]): Promise<{ out: string[]; err: string[] }> {
    const out: string[] = [];
    const err: string[] = [];
    vi.spyOn(console, 'log').mockImplementation((...a: unknown[]) => void out.push(a.map(String).join(' ')));
    vi.spyOn(console, 'error').mockImplementation((...a: unknown[]) => void err.push(a.map(String).join(' ')));
    await main(argv);
    return { out, err };
  }
  const chainPath = join(tmp, 'chain.onnx');
  const symbolic = join(tmp, 'symbolic.onnx');
  writeFileSync(chainPath, chain);
  writeFileSync(
    symbolic,
    model({
      inputs: [v('a', 'float32', ['n', 4])],
      outputs: [v('b', 'float32', ['n', 4])],
      nodes: [node('Relu', ['a'], ['r'], { name: 'relu' }), node('Sigmoid', ['r'], ['b'], { name: 'sig' })],
    }),
  );

  it('prints no differing node for a model without a defect, and writes nothing', async () => {
    const outDir = join(tmp, 'cli-none');
    const { out } = await cli(['bisect', symbolic, '--dim', 'n=3', '--out', outDir, '--rtol', '0', '--atol', '1e-6']);
    expect(out).toEqual([
      `${symbolic}: 2 nodes, 2 node outputs compared (rtol 0, atol 0.000001)`,
      'no node differs from onnxruntime beyond the tolerance',
    ]);
    expect(existsSync(outDir)).toBe(false);
    expect(process.exitCode).toBeUndefined();
  });

  it('takes the inputs of a one-node model it wrote, which mlx-ort run compares with', async () => {
    const { registry } = defective('Sigmoid', scale(1.01));
    const outDir = join(tmp, 'cli-repro');
    const r = await bisect(chainPath, { feeds: x, registry, outDir });
    expect(r.first?.node).toBe('sig1');
    const { out } = await cli([
      'bisect',
      join(outDir, 'model.onnx'),
      '--inputs',
      join(outDir, 'test_data_set_0'),
      '--out',
      join(tmp, 'unused'),
    ]);
    expect(out.at(-1)).toBe('no node differs from onnxruntime beyond the tolerance');
    const run = (await cli(['run', join(outDir, 'model.onnx'), '--inputs', join(outDir, 'test_data_set_0'), '--runs', '1'])).out;
    const line = run.find((l) => l.startsWith('  h5: largest |mlx - expected| = '));
    expect(Number(line!.split(' = ')[1])).toBeLessThan(1e-5);
  });

  it('--help', async () => {
    const { out } = await cli(['bisect', '--help']);
    expect(out[0].split('\n')[0]).toMatch(
      /^ {2}mlx-ort bisect <model.onnx> \[--inputs DIR\] \[--dim name=value \.\.\.\] \[--device cpu\|gpu\] \[--rtol R\] \[--atol A\] \[--out DIR\]$/,
    );
    const usage = (await cli(['help'])).out.join('\n');
    expect(usage).toContain('mlx-ort bisect <model.onnx>');
  });

  it.each([
    [['--rtol=-1'], "--rtol must be a number >= 0, got '-1'"],
    [['--atol', 'x'], "--atol must be a number >= 0, got 'x'"],
    [['--atol', ''], "--atol must be a number >= 0, got ''"],
    [['--rtol', 'Infinity'], "--rtol must be a number >= 0, got 'Infinity'"],
    [['--device', 'tpu'], "--device must be cpu or gpu, got 'tpu'"],
    [['--dim', 'n'], "--dim takes name=value, got 'n'"],
    [['--dim', 'n=0'], "--dim n must be a positive integer, got '0'"],
    [['--dim', 'm=2'], "--dim m: the model's inputs have no dimension named 'm' (they have 'n')"],
    [['--dim', 'n=2', '--inputs', tmp], '--dim applies to random inputs; --inputs gives them'],
    [['--out', ''], '--out must not be empty'],
    [['--frobnicate'], "Unknown option '--frobnicate'"],
    [['--rtol'], "Option '--rtol <value>' argument missing"],
    [[symbolic], `one model path expected, got 2: ${symbolic} ${symbolic}`],
  ])('usage error: %j', async (args, message) => {
    const { err } = await cli(['bisect', symbolic, ...args]);
    expect(err[0]).toContain(`mlx-ort bisect: ${message}`);
    expect(err[1]).toMatch(/^usage: mlx-ort bisect <model.onnx>/);
    expect(process.exitCode).toBe(2);
  });

  it('usage error: no model', async () => {
    const { err } = await cli(['bisect']);
    expect(err[0]).toBe('mlx-ort bisect: no model path given');
    expect(process.exitCode).toBe(2);
  });

  it('--inputs of another shape: the feed check names the input', async () => {
    await expect(cli(['bisect', symbolic, '--inputs', join(tmp, 'cli-repro', 'test_data_set_0')])).rejects.toThrow(
      "model symbolic.onnx: input 'a' expects dimension 1 to be 4, got 8 (shape [4, 8])",
    );
  });
});
