// MlxSession.valueAndGrad against float64 central finite differences computed by onnxruntime-node
// on a float64 copy of each model (the reference is independent of MLX and of this provider).
import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { MlxSession, NotDifferentiableError, type HostTensor } from '../../src/index.js';
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
