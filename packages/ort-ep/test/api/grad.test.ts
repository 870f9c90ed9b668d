// MlxSession.valueAndGrad against float64 central finite differences computed by onnxruntime-node
// on a float64 copy of each model (the reference is independent of MLX and of this provider).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fromBinary, toBinary } from '@bufbuild/protobuf';
import * as mx from '@mlx/core';
import { ModelProtoSchema } from 'onnx-buf';
import { describe, expect, it } from 'vitest';
import { InvalidFeedError, MlxSession, NotDifferentiableError, type HostTensor } from '../../src/index.js';
import { readTestCase } from '../../src/onnx/index.js';
import { sharedPath } from '../helpers/shared.js';
import { model, node, v, type ModelSpec, type NodeSpec, type TensorSpec } from '../helpers/build.js';
import { ort, seeded } from '../helpers/ort.js';

type F = 'float32' | 'float64';
interface Case {
  name: string;
  /** The graph, in float type `t`: its float inputs and initializers in `t`. */
  build: (t: F) => {
    nodes: NodeSpec[];
    outputs: string[];
    opset?: number;
    extraInputs?: { name: string; type: string; dims: number[]; data: number[] }[];
  };
  /** Differentiated values: name, dims, and whether it is an initializer of the MLX model (else a fed input). */
  wrt: { name: string; dims: number[]; init?: boolean; scale?: number; positive?: boolean }[];
  tol?: number;
  /**
   * For ops onnxruntime has no float64 kernel for (Erf, HardSigmoid, Conv): the outputs computed
   * in float64 in JS from the differentiated values, instead of onnxruntime's.
   */
  ref?: (vals: Map<string, number[]>) => number[][];
}

const size = (d: number[]) => d.reduce((a, b) => a * b, 1);

/** Values of a differentiated tensor: seeded in [-1, 1) times scale, or in [0.5, 1.5) when positive. */
function valuesOf(w: Case['wrt'][number], seed: number): number[] {
  const s = seeded(size(w.dims), seed).map((x) => x * (w.scale ?? 1));
  return w.positive ? s.map((x) => 1 + x / 2) : s;
}

function specOf(c: Case, t: F, asInputs: boolean, values: Map<string, number[]>): ModelSpec {
  const g = c.build(t);
  const inputs = c.wrt.filter((w) => asInputs || !w.init).map((w) => v(w.name, t, w.dims));
  const initializers: TensorSpec[] = asInputs
    ? []
    : c.wrt.filter((w) => w.init).map((w) => ({ name: w.name, type: t, dims: w.dims, values: values.get(w.name)! }));
  for (const e of g.extraInputs ?? [])
    initializers.push({ name: e.name, type: e.type as F, dims: e.dims, values: e.type === 'int64' ? e.data.map(BigInt) : e.data });
  return {
    opsets: { '': g.opset ?? 17 },
    inputs,
    initializers,
    outputs: g.outputs.map((o) => v(o, t)),
    nodes: g.nodes,
  };
}

/** The loss both sides differentiate: sum over the outputs of <y, r> with fixed seeded weights r. */
const weights = (n: number, k: number) => seeded(n, 1000 + k);

async function referenceGrads(c: Case, values: Map<string, number[]>): Promise<Map<string, number[]>> {
  const s = c.ref ? undefined : await ort.InferenceSession.create(model(specOf(c, 'float64', true, values)));
  try {
    const loss = async (vals: Map<string, number[]>): Promise<number> => {
      let ys: ArrayLike<number>[];
      if (c.ref) ys = c.ref(vals);
      else {
        const feeds: Record<string, import('onnxruntime-node').Tensor> = {};
        for (const w of c.wrt) feeds[w.name] = new ort.Tensor('float64', Float64Array.from(vals.get(w.name)!), w.dims);
        const out = await s!.run(feeds);
        ys = c.build('float64').outputs.map((o) => out[o].data as Float64Array);
      }
      let l = 0;
      ys.forEach((y, k) => {
        const r = weights(y.length, k);
        for (let i = 0; i < y.length; i++) l += y[i] * r[i];
      });
      return l;
    };
    const h = 1e-6;
    const grads = new Map<string, number[]>();
    for (const w of c.wrt) {
      const g: number[] = [];
      const base = values.get(w.name)!;
      for (let i = 0; i < base.length; i++) {
        const plus = new Map(values);
        const minus = new Map(values);
        plus.set(
          w.name,
          base.map((x, j) => (j === i ? x + h : x)),
        );
        minus.set(
          w.name,
          base.map((x, j) => (j === i ? x - h : x)),
        );
        g.push(((await loss(plus)) - (await loss(minus))) / (2 * h));
      }
      grads.set(w.name, g);
    }
    return grads;
  } finally {
    await s?.release();
  }
}

async function mlxGrads(c: Case, values: Map<string, number[]>, compiled: boolean): Promise<Map<string, number[]>> {
  // Initializers are differentiated in a session without graph rewrites (some derive new weights from them).
  const s = await MlxSession.create(model(specOf(c, 'float32', false, values)), { device: 'cpu', compiled, graphRewrites: false });
  try {
    const feeds: Record<string, HostTensor> = {};
    for (const w of c.wrt) if (!w.init) feeds[w.name] = { dtype: 1, dims: w.dims, data: Float32Array.from(values.get(w.name)!) };
    const outs = c.build('float32').outputs;
    const r = await s.valueAndGrad(feeds, {
      wrt: c.wrt.map((w) => w.name),
      output: (o) => {
        let l: mx.Array | undefined;
        outs.forEach((name, k) => {
          const y = o[name];
          const t = mx.sum(mx.multiply(y, mx.Array.fromTypedArray(Float32Array.from(weights(y.size, k)), y.shape)));
          l = l ? mx.add(l, t) : t;
        });
        return l!;
      },
      fetches: outs,
    });
    return new Map(c.wrt.map((w) => [w.name, Array.from((r.grads[w.name] as HostTensor).data as Float32Array)]));
  } finally {
    s.release();
  }
}

async function expectGradsMatch(c: Case): Promise<void> {
  const values = new Map(c.wrt.map((w, i) => [w.name, valuesOf(w, 7 + i)]));
  const ref = await referenceGrads(c, values);
  for (const compiled of [false, true]) {
    const got = await mlxGrads(c, values, compiled);
    for (const w of c.wrt) {
      const want = ref.get(w.name)!;
      const g = got.get(w.name)!;
      expect(g.length, `${c.name}: d/d${w.name} size`).toBe(want.length);
      const scale = Math.max(1, ...want.map(Math.abs));
      const err = Math.max(...g.map((x, i) => Math.abs(x - want[i])));
      expect(err / scale, `${c.name}: d/d${w.name}: ${g.slice(0, 6)} vs ${want.slice(0, 6)}`).toBeLessThan(c.tol ?? 2e-4);
    }
  }
}

/** erf in float64 (its Taylor series: |x| < 3 here). */
function erf(x: number): number {
  let sum = 0;
  let term = x;
  for (let n = 0; n < 80; n++) {
    sum += term / (2 * n + 1);
    term *= (-x * x) / (n + 1);
  }
  return (2 / Math.sqrt(Math.PI)) * sum;
}
const hardSigmoid = (x: number, a: number, b: number) => Math.max(0, Math.min(1, a * x + b));

/** A 2-D convolution in float64 (NCHW, OIHW, groups, pads [top, left, bottom, right], strides). */
function conv2d(
  x: number[],
  [n, c, h, wd]: number[],
  w: number[],
  [o, cg, kh, kw]: number[],
  bias: number[] | undefined,
  group: number,
  pads: number[],
  strides: number[],
): number[] {
  const oh = Math.floor((h + pads[0] + pads[2] - kh) / strides[0]) + 1;
  const ow = Math.floor((wd + pads[1] + pads[3] - kw) / strides[1]) + 1;
  const og = o / group;
  const y: number[] = [];
  for (let b = 0; b < n; b++)
    for (let oc = 0; oc < o; oc++)
      for (let i = 0; i < oh; i++)
        for (let j = 0; j < ow; j++) {
          let acc = bias ? bias[oc] : 0;
          const g = Math.floor(oc / og);
          for (let ic = 0; ic < cg; ic++)
            for (let p = 0; p < kh; p++)
              for (let q = 0; q < kw; q++) {
                const yy = i * strides[0] - pads[0] + p;
                const xx = j * strides[1] - pads[1] + q;
                if (yy < 0 || yy >= h || xx < 0 || xx >= wd) continue;
                acc += x[((b * c + g * cg + ic) * h + yy) * wd + xx] * w[((oc * cg + ic) * kh + p) * kw + q];
              }
          y.push(acc);
        }
  return y;
}

const un = (op: string, extra: Partial<Case> = {}, attrs?: NodeSpec['attrs'], opset?: number): Case => ({
  name: op,
  build: () => ({ nodes: [node(op, ['x'], ['y'], attrs ? { attrs } : {})], outputs: ['y'], opset }),
  wrt: [{ name: 'x', dims: [3, 4] }],
  ...extra,
});
const bin = (op: string, extra: Partial<Case> = {}): Case => ({
  name: op,
  build: () => ({ nodes: [node(op, ['a', 'b'], ['y'])], outputs: ['y'] }),
  wrt: [
    { name: 'a', dims: [3, 4] },
    { name: 'b', dims: [4], init: true },
  ],
  ...extra,
});

const CASES: Case[] = [
  bin('Add'),
  bin('Sub'),
  bin('Mul'),
  bin('Div', {
    wrt: [
      { name: 'a', dims: [3, 4] },
      { name: 'b', dims: [4], init: true, positive: true },
    ],
  }),
  bin('Pow', {
    wrt: [
      { name: 'a', dims: [3, 4], positive: true },
      { name: 'b', dims: [4], init: true },
    ],
  }),
  {
    name: 'MatMul',
    build: () => ({ nodes: [node('MatMul', ['a', 'w'], ['y'])], outputs: ['y'] }),
    wrt: [
      { name: 'a', dims: [2, 3, 4] },
      { name: 'w', dims: [4, 5], init: true },
    ],
  },
  {
    name: 'Gemm',
    build: () => ({ nodes: [node('Gemm', ['a', 'w', 'c'], ['y'], { attrs: { transB: 1, alpha: 0.5, beta: { f: 2 } } })], outputs: ['y'] }),
    wrt: [
      { name: 'a', dims: [3, 4] },
      { name: 'w', dims: [5, 4], init: true },
      { name: 'c', dims: [5], init: true },
    ],
  },
  un('Relu', { wrt: [{ name: 'x', dims: [3, 4] }] }),
  un('Sigmoid'),
  un('Tanh'),
  un('Exp'),
  un('Log', { wrt: [{ name: 'x', dims: [3, 4], positive: true }] }),
  un('Softmax', {}, { axis: -1 }, 13),
  {
    name: 'Where',
    build: () => ({
      nodes: [node('Where', ['cond', 'a', 'b'], ['y'])],
      outputs: ['y'],
      extraInputs: [{ name: 'cond', type: 'bool', dims: [3, 4], data: [1, 0, 0, 1, 1, 1, 0, 0, 1, 0, 1, 0] }],
    }),
    wrt: [
      { name: 'a', dims: [3, 4] },
      { name: 'b', dims: [4], init: true },
    ],
  },
  un('Gelu', { ref: (m) => [m.get('x')!.map((x) => 0.5 * x * (1 + erf(x / Math.SQRT2)))] }, undefined, 20),
  un(
    'Gelu',
    {
      name: 'Gelu (tanh)',
      ref: (m) => [m.get('x')!.map((x) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3))))],
    },
    { approximate: 'tanh' },
    20,
  ),
  un('HardSigmoid', { ref: (m) => [m.get('x')!.map((x) => hardSigmoid(x, 0.3, 0.4))] }, { alpha: { f: 0.3 }, beta: { f: 0.4 } }),
  un(
    'HardSwish',
    { ref: (m) => [m.get('x')!.map((x) => x * hardSigmoid(x, 1 / 6, 0.5))], wrt: [{ name: 'x', dims: [3, 4], scale: 4 }] },
    undefined,
    14,
  ),
  {
    name: 'LayerNormalization',
    build: () => ({
      nodes: [node('LayerNormalization', ['x', 'g', 'b'], ['y'], { attrs: { axis: -1, epsilon: { f: 1e-5 } } })],
      outputs: ['y'],
    }),
    wrt: [
      { name: 'x', dims: [3, 4] },
      { name: 'g', dims: [4], init: true },
      { name: 'b', dims: [4], init: true },
    ],
  },
  {
    name: 'Conv',
    build: () => ({ nodes: [node('Conv', ['x', 'w', 'b'], ['y'], { attrs: { pads: [1, 0, 1, 1], strides: [1, 2] } })], outputs: ['y'] }),
    wrt: [
      { name: 'x', dims: [1, 2, 4, 5] },
      { name: 'w', dims: [3, 2, 3, 2], init: true },
      { name: 'b', dims: [3], init: true },
    ],
    ref: (m) => [conv2d(m.get('x')!, [1, 2, 4, 5], m.get('w')!, [3, 2, 3, 2], m.get('b')!, 1, [1, 0, 1, 1], [1, 2])],
  },
  {
    name: 'Conv (depthwise)',
    build: () => ({ nodes: [node('Conv', ['x', 'w'], ['y'], { attrs: { group: 3, pads: [1, 1, 1, 1] } })], outputs: ['y'] }),
    wrt: [
      { name: 'x', dims: [1, 3, 4, 4] },
      { name: 'w', dims: [3, 1, 3, 3], init: true },
    ],
    ref: (m) => [conv2d(m.get('x')!, [1, 3, 4, 4], m.get('w')!, [3, 1, 3, 3], undefined, 3, [1, 1, 1, 1], [1, 1])],
  },
  {
    name: 'Reshape, Transpose',
    build: () => ({
      nodes: [node('Reshape', ['x', 'shape'], ['r']), node('Transpose', ['r'], ['y'], { attrs: { perm: [2, 0, 1] } })],
      outputs: ['y'],
      extraInputs: [{ name: 'shape', type: 'int64', dims: [3], data: [2, 3, 2] }],
    }),
    wrt: [{ name: 'x', dims: [3, 4], init: true }],
  },
  {
    name: 'Concat, Slice',
    build: () => ({
      nodes: [node('Concat', ['a', 'b'], ['c'], { attrs: { axis: 1 } }), node('Slice', ['c', 'starts', 'ends', 'axes', 'steps'], ['y'])],
      outputs: ['y'],
      extraInputs: [
        { name: 'starts', type: 'int64', dims: [2], data: [1, 6] },
        { name: 'ends', type: 'int64', dims: [2], data: [3, 0] },
        { name: 'axes', type: 'int64', dims: [2], data: [0, 1] },
        { name: 'steps', type: 'int64', dims: [2], data: [1, -2] },
      ],
    }),
    wrt: [
      { name: 'a', dims: [3, 4] },
      { name: 'b', dims: [3, 3], init: true },
    ],
  },
  {
    // MLX's Pad primitive has no VJP for its fill value (asked for both, it crashed the process).
    name: 'Pad (constant, the value an input)',
    build: () => ({
      nodes: [node('Pad', ['x', 'pads', 'value'], ['y'], { attrs: { mode: 'constant' } })],
      outputs: ['y'],
      opset: 18,
      extraInputs: [{ name: 'pads', type: 'int64', dims: [4], data: [1, 0, 0, 2] }],
    }),
    wrt: [
      { name: 'x', dims: [2, 3] },
      { name: 'value', dims: [] },
    ],
  },
  {
    // The class weights are an input, differentiable: @mlx/kernels' nllLoss held them constant.
    name: 'NegativeLogLikelihoodLoss (mean, class weights)',
    build: () => ({
      nodes: [node('NegativeLogLikelihoodLoss', ['x', 't', 'w'], ['y'], { attrs: { reduction: 'mean', ignore_index: 2 } })],
      outputs: ['y'],
      opset: 13,
      extraInputs: [{ name: 't', type: 'int64', dims: [3, 2], data: [0, 3, 2, 1, 3, 3] }],
    }),
    wrt: [
      { name: 'x', dims: [3, 4, 2] },
      { name: 'w', dims: [4], positive: true },
    ],
  },
  {
    name: 'SoftmaxCrossEntropyLoss (none, class weights)',
    build: () => ({
      nodes: [node('SoftmaxCrossEntropyLoss', ['x', 't', 'w'], ['y'], { attrs: { reduction: 'none' } })],
      outputs: ['y'],
      opset: 13,
      extraInputs: [{ name: 't', type: 'int64', dims: [3], data: [0, 3, 1] }],
    }),
    wrt: [
      { name: 'x', dims: [3, 4] },
      { name: 'w', dims: [4], positive: true },
    ],
  },
  {
    // An additive mask is an input with a gradient: the attention kernel's VJP held it constant.
    name: 'Attention (additive mask)',
    build: () => ({ nodes: [node('Attention', ['q', 'k', 'v', 'mask'], ['y'])], outputs: ['y'], opset: 23 }),
    wrt: [
      { name: 'q', dims: [1, 2, 3, 4] },
      { name: 'k', dims: [1, 2, 3, 4] },
      { name: 'v', dims: [1, 2, 3, 4] },
      { name: 'mask', dims: [3, 3], init: true },
    ],
  },
  {
    // The cos/sin caches are inputs with gradients: the fused rotation's VJP held them constant.
    name: 'RotaryEmbedding (wrt the caches)',
    build: () => ({ nodes: [node('RotaryEmbedding', ['x', 'cos', 'sin'], ['y'])], outputs: ['y'], opset: 23 }),
    wrt: [
      { name: 'x', dims: [1, 1, 2, 4] },
      { name: 'cos', dims: [1, 2, 2] },
      { name: 'sin', dims: [1, 2, 2] },
    ],
    // onnxruntime has no float64 RotaryEmbedding: half-split rotation in JS.
    ref: (m) => {
      const [x, c, sn] = [m.get('x')!, m.get('cos')!, m.get('sin')!];
      const y = x.slice();
      for (let t = 0; t < 2; t++)
        for (let i = 0; i < 2; i++) {
          const [a, b] = [x[4 * t + i], x[4 * t + i + 2]];
          y[4 * t + i] = a * c[2 * t + i] - b * sn[2 * t + i];
          y[4 * t + i + 2] = b * c[2 * t + i] + a * sn[2 * t + i];
        }
      return [y];
    },
  },
  {
    name: 'Gather (wrt data)',
    build: () => ({
      nodes: [node('Gather', ['w', 'ids'], ['y'], { attrs: { axis: 0 } })],
      outputs: ['y'],
      extraInputs: [{ name: 'ids', type: 'int64', dims: [2, 3], data: [0, 4, 2, 2, -1, 1] }],
    }),
    wrt: [{ name: 'w', dims: [5, 3], init: true }],
  },
  {
    name: 'ReduceMean, ReduceSum',
    build: () => ({
      nodes: [node('ReduceMean', ['x', 'ax1'], ['m'], { attrs: { keepdims: 0 } }), node('ReduceSum', ['x', 'ax0'], ['s'])],
      outputs: ['m', 's'],
      opset: 18,
      extraInputs: [
        { name: 'ax1', type: 'int64', dims: [1], data: [-1] },
        { name: 'ax0', type: 'int64', dims: [1], data: [0] },
      ],
    }),
    wrt: [{ name: 'x', dims: [2, 3, 4] }],
  },
];

describe('valueAndGrad matches float64 central finite differences (onnxruntime-node)', () => {
  for (const c of CASES) it(c.name, async () => expectGradsMatch(c), 60_000);
});

/** sum over the outputs of <y, r>, r seeded per output (the weights both sides use). */
function weightedLoss(o: Record<string, mx.Array>, names: readonly string[]): mx.Array {
  let l: mx.Array | undefined;
  names.forEach((name, k) => {
    const y = o[name];
    const t = mx.sum(mx.multiply(y, mx.Array.fromTypedArray(Float32Array.from(weights(y.size, k)), y.shape)));
    l = l ? mx.add(l, t) : t;
  });
  return l!;
}

describe('bert-tiny: weight gradients against central differences of onnxruntime-node', () => {
  const dir = sharedPath('models/bert-tiny');
  const WRT = [
    'onnx::MatMul_317',
    'onnx::MatMul_342',
    'm.embeddings.LayerNorm.weight',
    'm.pooler.dense.weight',
    'm.embeddings.word_embeddings.weight',
  ];

  it('the directional derivative along a seeded direction, per initializer', async () => {
    const bytes = readFileSync(join(dir, 'model.onnx'));
    const tc = readTestCase(dir);
    const names = ['input_ids', 'attention_mask', 'token_type_ids'];
    const feeds = Object.fromEntries(names.map((n, i) => [n, tc.datasets[0].inputs[i] as HostTensor]));
    const outs = ['last_hidden_state', 'pooler_output'];
    const s = await MlxSession.create(join(dir, 'model.onnx'), { device: 'cpu', graphRewrites: false });
    let got: Awaited<ReturnType<MlxSession['valueAndGrad']>>;
    try {
      got = await s.valueAndGrad(feeds, { wrt: WRT, output: (o) => weightedLoss(o, outs), fetches: outs });
    } finally {
      s.release();
    }
    // The reference: onnxruntime-node (float32; Erf has no float64 kernel there) on copies of the
    // model with one initializer moved by +-h along a seeded direction.
    const proto = fromBinary(ModelProtoSchema, bytes);
    const ortFeeds = Object.fromEntries(
      names.map((n) => [n, new ort.Tensor('int64', feeds[n].data as BigInt64Array, feeds[n].dims as number[])]),
    );
    const loss = async (model: Uint8Array): Promise<number> => {
      const o = await ort.InferenceSession.create(model);
      try {
        const r = await o.run(ortFeeds);
        let l = 0;
        outs.forEach((name, k) => {
          const y = r[name].data as Float32Array;
          const w = weights(y.length, k);
          for (let i = 0; i < y.length; i++) l += y[i] * w[i];
        });
        return l;
      } finally {
        await o.release();
      }
    };
    expect(got.value).toBeCloseTo(await loss(bytes), 2);
    const h = 1e-2;
    for (const [k, name] of WRT.entries()) {
      const t = proto.graph!.initializer.find((i) => i.name === name)!;
      const raw = t.rawData.length > 0;
      const base = raw ? new Float32Array(Uint8Array.from(t.rawData).buffer) : Float32Array.from(t.floatData);
      const set = (x: Float32Array) => {
        if (raw) t.rawData = new Uint8Array(x.buffer);
        else t.floatData = Array.from(x);
      };
      const d = seeded(base.length, 50 + k);
      const moved = async (step: number) => {
        set(base.map((x, i) => x + step * d[i]));
        return loss(toBinary(ModelProtoSchema, proto));
      };
      const central = async (step: number) => ((await moved(step)) - (await moved(-step))) / (2 * step);
      // Richardson's extrapolation of two steps cancels the central difference's h^2 term.
      const fd = (4 * (await central(h / 2)) - (await central(h))) / 3;
      set(base);
      const g = (got.grads[name] as HostTensor).data as Float32Array;
      expect(g.length).toBe(base.length);
      const dot = g.reduce((a, x, i) => a + x * d[i], 0);
      expect(Math.abs(dot - fd), `${name}: <grad, d> ${dot} vs ${fd}`).toBeLessThan(1e-2 * Math.max(1, Math.abs(fd)));
    }
  }, 120_000);
});

describe('what cannot be differentiated is a NotDifferentiableError naming it', () => {
  const f32 = (data: number[], dims: number[]): HostTensor => ({ dtype: 1, dims, data: Float32Array.from(data) });
  const errorOf = async (p: Promise<unknown>) =>
    p.then(
      () => undefined,
      (e: Error) => e,
    );

  it('an integer output, named by the node that makes it', async () => {
    const s = await MlxSession.create(
      model({
        inputs: [v('x', 'float32', [2, 3])],
        outputs: [v('i', 'int64')],
        nodes: [node('ArgMax', ['x'], ['i'], { name: 'pick', attrs: { axis: 1, keepdims: 0 } })],
      }),
      { device: 'cpu' },
    );
    try {
      const e = await errorOf(s.valueAndGrad({ x: f32([1, 2, 3, 4, 5, 6], [2, 3]) }, { output: 'i', wrt: ['x'] }));
      expect(e).toBeInstanceOf(NotDifferentiableError);
      expect((e as NotDifferentiableError).code).toBe('ERR_MLX_ORT_NOT_DIFFERENTIABLE');
      expect(e!.message).toBe(
        "model <bytes>: valueAndGrad: output 'i' (made by node 'pick' (ArgMax)) is int64: only a floating-point value has a gradient",
      );
      expect((e as NotDifferentiableError).nodes).toEqual(['pick']);
    } finally {
      s.release();
    }
  });

  it('an integer input to differentiate, a non-scalar output, an unknown name', async () => {
    const s = await MlxSession.create(
      model({
        inputs: [v('x', 'float32', [2]), v('n', 'int64', [2])],
        outputs: [v('y', 'float32'), v('m', 'int64')],
        nodes: [node('Relu', ['x'], ['y']), node('Neg', ['n'], ['m'])],
      }),
      { device: 'cpu' },
    );
    const feeds = { x: f32([1, -2], [2]), n: { dtype: 7, dims: [2], data: BigInt64Array.from([1n, 2n]) } };
    try {
      let e = await errorOf(s.valueAndGrad(feeds, { output: 'y', wrt: ['n'] }));
      expect(e).toBeInstanceOf(NotDifferentiableError);
      expect(e!.message).toBe("model <bytes>: valueAndGrad: 'n' is int64: only floating-point tensors have gradients");
      e = await errorOf(s.valueAndGrad(feeds, { output: 'y', wrt: ['x'] }));
      expect(e).toBeInstanceOf(NotDifferentiableError);
      expect(e!.message).toMatch(/^model <bytes>: valueAndGrad: output 'y' has shape \[2\]: the value differentiated must be a scalar/);
      e = await errorOf(s.valueAndGrad(feeds, { output: 'y', wrt: ['w'] }));
      expect(e).toBeInstanceOf(InvalidFeedError);
      expect(e!.message).toMatch(/^model <bytes>: valueAndGrad: 'w' is neither an input nor an initializer of the model/);
      // The session still runs, and differentiates a sum of the output.
      const r = s.valueAndGradSync(feeds, { output: (o) => mx.sum(o.y), wrt: ['x'] });
      expect(r.value).toBe(1);
      expect(Array.from((r.grads.x as HostTensor).data as Float32Array)).toEqual([1, 0]);
      expect(Array.from((r.outputs.y as HostTensor).data as Float32Array)).toEqual([1, 0]);
      // keepOnDevice: device Values the caller owns.
      const d = await s.valueAndGrad(feeds, { output: (o) => mx.sum(mx.square(o.y)), wrt: ['x'], keepOnDevice: true });
      const g = d.grads.x as Extract<(typeof d.grads)[string], { kind: 'device' }>;
      expect(g.kind).toBe('device');
      expect(Array.from(g.array.toTypedArray() as Float32Array)).toEqual([2, 0]);
      g.array.dispose();
      mx.dispose(Object.values(d.outputs));
    } finally {
      s.release();
    }
  });

  it('a node that reads a differentiated value on the host (a shape computed from it)', async () => {
    const s = await MlxSession.create(
      model({
        inputs: [v('x', 'float32', [6]), v('s', 'float32', [2])],
        outputs: [v('y', 'float32')],
        nodes: [node('Cast', ['s'], ['si'], { name: 'toInt', attrs: { to: 7 } }), node('Reshape', ['x', 'si'], ['y'], { name: 'shapeOf' })],
      }),
      { device: 'cpu' },
    );
    try {
      const feeds = { x: f32([1, 2, 3, 4, 5, 6], [6]), s: f32([2, 3], [2]) };
      const e = await errorOf(s.valueAndGrad(feeds, { output: (o) => mx.sum(o.y), wrt: ['x', 's'] }));
      expect(e).toBeInstanceOf(NotDifferentiableError);
      expect(e!.message).toBe(
        "model <bytes>: valueAndGrad: 1 node(s) read the data of a differentiated value on the host, which has no gradient: 'shapeOf' (Reshape)",
      );
      expect((e as NotDifferentiableError).nodes).toEqual(['shapeOf']);
      // With respect to x alone the shape is a constant: fine.
      const r = await s.valueAndGrad(feeds, { output: (o) => mx.sum(mx.square(o.y)), wrt: ['x'] });
      expect(Array.from((r.grads.x as HostTensor).data as Float32Array)).toEqual([2, 4, 6, 8, 10, 12]);
    } finally {
      s.release();
    }
  });

  it('nodes that run on onnxruntime (a fallback partition)', async () => {
    const s = await MlxSession.create(
      model({
        inputs: [v('x', 'float32', [2])],
        outputs: [v('y', 'float32')],
        nodes: [node('Tanh', ['x'], ['t'], { name: 'onOrt' }), node('Relu', ['t'], ['y'])],
      }),
      { device: 'cpu', disabledOps: ['Tanh'], fallback: 'cpu' },
    );
    try {
      const e = await errorOf(s.valueAndGrad({ x: f32([1, 2], [2]) }, { output: (o) => mx.sum(o.y), wrt: ['x'] }));
      expect(e).toBeInstanceOf(NotDifferentiableError);
      expect(e!.message).toBe(
        "model <bytes>: valueAndGrad: 1 node(s) run on onnxruntime (a fallback partition), which MLX cannot differentiate through: 'onOrt' (Tanh)",
      );
      expect((e as NotDifferentiableError).nodes).toEqual(['onOrt']);
    } finally {
      s.release();
    }
  });

  it('an initializer that a graph rewrite replaced (MatMul + Add joined, its weight transposed)', async () => {
    const bytes = model({
      inputs: [v('x', 'float32', [2, 3])],
      outputs: [v('y', 'float32')],
      initializers: [
        { name: 'w', type: 'float32', dims: [3, 4], values: seeded(12, 3) },
        { name: 'b', type: 'float32', dims: [4], values: seeded(4, 4) },
      ],
      nodes: [node('MatMul', ['x', 'w'], ['p']), node('Add', ['p', 'b'], ['y'])],
    });
    const feeds = { x: f32(seeded(6, 5), [2, 3]) };
    const s = await MlxSession.create(bytes, { device: 'cpu' });
    try {
      const e = await errorOf(s.valueAndGrad(feeds, { output: (o) => mx.sum(o.y), wrt: ['b'] }));
      expect(e).toBeInstanceOf(NotDifferentiableError);
      expect(e!.message).toMatch(
        /^model <bytes>: valueAndGrad: the session's graph rewrites \(matmul-add x1(?:, pack-matmul x1)?\) replaced initializers by values derived from them, so the gradient with respect to 'b' could miss the nodes that read them: create the session with graphRewrites: false/,
      );
      // Inputs may still be differentiated there.
      const r = await s.valueAndGrad(feeds, { output: (o) => mx.sum(o.y), wrt: ['x'] });
      const w = seeded(12, 3);
      const want = [0, 1, 2].map((k) => w[4 * k] + w[4 * k + 1] + w[4 * k + 2] + w[4 * k + 3]);
      const g = Array.from((r.grads.x as HostTensor).data as Float32Array);
      for (let i = 0; i < 6; i++) expect(g[i]).toBeCloseTo(want[i % 3], 5);
    } finally {
      s.release();
    }
  });
});
