// Losses against onnxruntime-node's CPU provider, on the edges the node suite leaves out: ignored
// targets outside [0, C) with weights, float64 inputs (MLX's CPU exp is float32-accurate there),
// N-d inputs with the log_prob output, and inputs that are MLX arrays (moved there by a no-op Clip).
import { describe, expect, it } from 'vitest';
import { model, node, v, type AttrSpec } from '../../test/helpers/build.js';
import { expectSameAsOrt, ort, plain, runOn, seeded, type Feeds } from '../../test/helpers/ort.js';

interface LossCase {
  op: 'NegativeLogLikelihoodLoss' | 'SoftmaxCrossEntropyLoss';
  x: number[]; // dims of the scores (N, C, ...)
  type?: 'float32' | 'float64';
  targets: number[];
  weights?: number[];
  attrs?: Record<string, AttrSpec>;
  logProb?: boolean;
  device?: boolean;
}

async function same(c: LossCase): Promise<void> {
  const type = c.type ?? 'float32';
  const tdims = [c.x[0], ...c.x.slice(2)];
  const nodes = c.device ? [node('Clip', ['x'], ['xd'])] : [];
  const outs = c.logProb ? ['loss', 'logp'] : ['loss'];
  nodes.push(node(c.op, [c.device ? 'xd' : 'x', 't', ...(c.weights ? ['w'] : [])], outs, { attrs: c.attrs }));
  const bytes = model({
    opsets: { '': 13 },
    inputs: [v('x', type, c.x), v('t', 'int64', tdims), ...(c.weights ? [v('w', type, [c.x[1]])] : [])],
    outputs: outs.map((o) => v(o, type)),
    nodes,
  });
  const n = c.x.reduce((a, b) => a * b, 1);
  const arr = (xs: number[]) => (type === 'float64' ? Float64Array.from(xs) : Float32Array.from(xs)) as Float32Array;
  const feeds: Feeds = {
    x: new ort.Tensor(type, arr(seeded(n, 3).map((z) => 3 * z)), c.x),
    t: new ort.Tensor('int64', BigInt64Array.from(c.targets.map(BigInt)), tdims),
  };
  if (c.weights) feeds.w = new ort.Tensor(type, arr(c.weights), [c.x[1]]);
  await expectSameAsOrt(bytes, feeds, { rtol: 1e-5, atol: 1e-6 });
}

describe('NegativeLogLikelihoodLoss', () => {
  it('ignore_index 100 (outside [0, C)) with weights, mean', () =>
    same({ op: 'NegativeLogLikelihoodLoss', x: [4, 3], targets: [0, 100, 2, 1], weights: [0.2, 0.5, 0.3], attrs: { ignore_index: 100 } }));
  it('negative ignore_index, N-d, sum, on MLX', () =>
    same({
      op: 'NegativeLogLikelihoodLoss',
      x: [2, 3, 2, 2],
      targets: [0, -5, 2, 1, 1, 1, -5, 0],
      attrs: { ignore_index: -5, reduction: 'sum' },
      device: true,
    }));
  it('reduction none, float64', () =>
    same({ op: 'NegativeLogLikelihoodLoss', x: [3, 4, 2], type: 'float64', targets: [3, 0, 1, 2, 0, 0], attrs: { reduction: 'none' } }));
});

describe('SoftmaxCrossEntropyLoss', () => {
  it('float64 with log_prob, N-d, none', () =>
    same({
      op: 'SoftmaxCrossEntropyLoss',
      x: [2, 5, 3],
      type: 'float64',
      targets: [4, 0, 1, 2, 3, 3],
      attrs: { reduction: 'none' },
      logProb: true,
    }));
  it('weights and ignore_index, mean, on MLX', () =>
    same({
      op: 'SoftmaxCrossEntropyLoss',
      x: [5, 3],
      targets: [0, 1, -1, 2, 1],
      weights: [1, 2, 0.5],
      attrs: { ignore_index: -1 },
      device: true,
    }));
  it('ignore_index without weights, mean over the counted targets', () =>
    same({ op: 'SoftmaxCrossEntropyLoss', x: [4, 6, 2], targets: [0, 5, 7, 7, 1, 2, 3, 7], attrs: { ignore_index: 7 }, logProb: true }));
});

describe('SoftmaxCrossEntropyLoss log_prob of a row holding +inf', () => {
  it('is NaN throughout, as in onnxruntime (x - max first, inf - inf)', async () => {
    const bytes = model({
      opsets: { '': 13 },
      inputs: [v('x', 'float32', [2, 4]), v('y', 'int64', [2])],
      outputs: [v('z', 'float32'), v('log_prob', 'float32')],
      nodes: [node('SoftmaxCrossEntropyLoss', ['x', 'y'], ['z', 'log_prob'], { attrs: { reduction: 'none' } })],
    });
    const feeds: Feeds = {
      x: new ort.Tensor('float32', Float32Array.from([0.5, Infinity, 0, 0.25, 1, 2, 3, -Infinity]), [2, 4]),
      y: new ort.Tensor('int64', BigInt64Array.from([0n, 2n]), [2]),
    };
    const [want, have] = [await runOn('cpu', bytes, feeds), await runOn('mlx', bytes, feeds)];
    for (const k of ['z', 'log_prob']) {
      const [a, b] = [plain(have[k]), plain(want[k])];
      expect(a.map(Number.isNaN)).toEqual(b.map(Number.isNaN));
      a.forEach((t, i) => {
        if (!Number.isNaN(t)) expect(t === b[i] || Math.abs(t - b[i]) <= 1e-5 * Math.max(1, Math.abs(b[i]))).toBe(true);
      });
    }
  });
});
