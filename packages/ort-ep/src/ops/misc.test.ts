// BitCast against onnxruntime-node (host tensors and MLX arrays, which take mx.view), the
// preview-training optimizers against their formulas at T > 0 (the node suite only has T = 0,
// which skips bias correction and the momentum ramp-up), and the random generators by their
// distributions, shapes, types and seeded reproducibility.
import { describe, expect, it } from 'vitest';
import { float16BitsToNumber } from '@mlx/core';
import { model, node, v, type AttrSpec, type ElemName } from '../../test/helpers/build.js';
import { expectSameAsOrt, ort, plain, seeded, type Feeds, type OrtTensor } from '../../test/helpers/ort.js';

async function mlx(bytes: Uint8Array, feeds: Feeds, runs = 1): Promise<Record<string, OrtTensor>[]> {
  const s = await ort.InferenceSession.create(bytes, { executionProviders: ['mlx'] });
  try {
    const out = [];
    for (let i = 0; i < runs; i++) out.push(await s.run(feeds));
    return out;
  } finally {
    await s.release();
  }
}

describe('BitCast', () => {
  // No infinities (the Clip that moves inputs onto MLX would clamp them in onnxruntime) and no
  // NaN results (the comparison reads values as numbers, where NaN equals nothing).
  const cases: [ElemName, ElemName, ArrayLike<number | bigint>][] = [
    ['float32', 'int32', Float32Array.of(1, -2.5, NaN, 3e38)],
    ['int64', 'float64', BigInt64Array.of(4607182418800017408n, -4611686018427387904n, 1n)],
    ['float16', 'uint16', Uint16Array.of(0x3c00, 0xfbff, 0x7e00)],
    ['int32', 'float32', Int32Array.of(0x3f800000, -1082130432, 7)],
    ['uint8', 'int8', Uint8Array.of(0, 127, 128, 255)],
  ];
  for (const [from, to, data] of cases) {
    for (const device of [false, true]) {
      it(`${from} -> ${to}${device ? ' (MLX array)' : ''}`, async () => {
        // A Clip with no bounds moves the input onto MLX without changing it.
        const nodes = device ? [node('Clip', ['x'], ['xd'])] : [];
        nodes.push(
          node('BitCast', [device ? 'xd' : 'x'], ['y'], {
            attrs: { to: { i: { int32: 6, float64: 11, uint16: 4, float32: 1, int8: 3 }[to as string]! } },
          }),
        );
        const bytes = model({ opsets: { '': 26 }, inputs: [v('x', from, [data.length])], outputs: [v('y', to)], nodes });
        await expectSameAsOrt(bytes, { x: new ort.Tensor(from as 'float32', data as Float32Array, [data.length]) }, { rtol: 0, atol: 0 });
      });
    }
  }
});

// ---------------------------------------------------------------------------------------------

const T = 'ai.onnx.preview.training';
const scalarF = (x: number) => new ort.Tensor('float32', Float32Array.of(x), []);
const scalarI = (x: number) => new ort.Tensor('int64', BigInt64Array.of(BigInt(x)), []);
const vec = (xs: number[]) => new ort.Tensor('float32', Float32Array.from(xs), [xs.length]);

/** Runs an optimizer on two tensors [X1, X2, G1, G2, S1a, S1b, ...] and returns its outputs in order. */
async function optimizer(
  op: string,
  states: number,
  attrs: Record<string, AttrSpec>,
  step: number,
  tensors: number[][],
): Promise<number[][]> {
  const names = ['r', 't', ...tensors.map((_, i) => `in${i}`)];
  const outs = Array.from({ length: 2 * (1 + states) }, (_, i) => `out${i}`);
  const bytes = model({
    opsets: { '': 17, [T]: 1 },
    inputs: [v('r', 'float32', []), v('t', 'int64', []), ...tensors.map((x, i) => v(`in${i}`, 'float32', [x.length]))],
    outputs: outs.map((o) => v(o, 'float32')),
    nodes: [node(op, names, outs, { domain: T, attrs })],
  });
  const feeds: Feeds = { r: scalarF(0.1), t: scalarI(step) };
  tensors.forEach((x, i) => (feeds[`in${i}`] = vec(x)));
  const [r] = await mlx(bytes, feeds);
  return outs.map((o) => plain(r[o]));
}

const close = (have: number[][], want: number[][]) =>
  have.forEach((row, i) => row.forEach((x, j) => expect(x, `output ${i}[${j}]`).toBeCloseTo(want[i][j], 5)));

describe('preview training optimizers at T = 3', () => {
  const x = [[1.2, -0.4], [2.8]],
    g = [[-0.9, 0.3], [-2.5]],
    s1 = [[1.7, 0.2], [3.6]],
    s2 = [[0.1, 0.4], [0.3]];
  const flat = (...groups: number[][][]) => groups.flat();
  it('Momentum standard and nesterov', async () => {
    for (const mode of ['standard', 'nesterov']) {
      const attrs = { alpha: { f: 0.9 }, beta: { f: 0.5 }, mode, norm_coefficient: { f: 0.01 } };
      const have = await optimizer('Momentum', 1, attrs, 3, flat(x, g, s1));
      const want: number[][] = [[], [], [], []];
      x.forEach((xi, k) =>
        xi.forEach((xv, j) => {
          const gr = 0.01 * xv + g[k][j];
          const vn = 0.9 * s1[k][j] + 0.5 * gr;
          want[k].push(xv - 0.1 * (mode === 'standard' ? vn : gr + 0.9 * vn));
          want[2 + k].push(vn);
        }),
      );
      close(have, want);
    }
  });
  it('Adagrad with decay', async () => {
    const have = await optimizer(
      'Adagrad',
      1,
      { decay_factor: { f: 0.1 }, epsilon: { f: 1e-6 }, norm_coefficient: { f: 0.01 } },
      3,
      flat(x, g, s1),
    );
    const want: number[][] = [[], [], [], []];
    x.forEach((xi, k) =>
      xi.forEach((xv, j) => {
        const gr = 0.01 * xv + g[k][j];
        const h = s1[k][j] + gr * gr;
        want[k].push(xv - ((0.1 / (1 + 3 * 0.1)) * gr) / (Math.sqrt(h) + 1e-6));
        want[2 + k].push(h);
      }),
    );
    close(have, want);
  });
  it('Adam with bias correction and post-update decay', async () => {
    const [a, b] = [0.9, 0.99];
    const have = await optimizer(
      'Adam',
      2,
      { alpha: { f: a }, beta: { f: b }, epsilon: { f: 1e-6 }, norm_coefficient: { f: 0.01 }, norm_coefficient_post: { f: 0.02 } },
      3,
      flat(x, g, s1, s2),
    );
    const want: number[][] = [[], [], [], [], [], []];
    x.forEach((xi, k) =>
      xi.forEach((xv, j) => {
        const gr = 0.01 * xv + g[k][j];
        const vn = a * s1[k][j] + (1 - a) * gr;
        const hn = b * s2[k][j] + (1 - b) * gr * gr;
        const rate = (0.1 * Math.sqrt(1 - b ** 3)) / (1 - a ** 3);
        want[k].push((1 - 0.02) * (xv - rate * (vn / (Math.sqrt(hn) + 1e-6))));
        want[2 + k].push(vn);
        want[4 + k].push(hn);
      }),
    );
    close(have, want);
  });
});

// ---------------------------------------------------------------------------------------------

function randomModel(
  op: string,
  attrs: Record<string, AttrSpec>,
  input?: [ElemName, number[]],
  out: ElemName = 'float32',
  opset = 22,
): Uint8Array {
  return model({
    opsets: { '': opset },
    inputs: input ? [v('x', input[0], input[1])] : [],
    outputs: [v('y', out)],
    nodes: [node(op, input ? ['x'] : [], ['y'], { attrs })],
  });
}

const stats = (xs: number[]) => {
  const m = xs.reduce((a, b) => a + b, 0) / xs.length;
  return { mean: m, std: Math.sqrt(xs.reduce((a, b) => a + (b - m) ** 2, 0) / xs.length) };
};

describe('random generators', () => {
  it('RandomNormal: shape, float64, mean and scale', async () => {
    const [r] = await mlx(
      randomModel('RandomNormal', { shape: [100, 80], mean: { f: 2 }, scale: { f: 0.5 }, dtype: 11 }, undefined, 'float64'),
      {},
    );
    expect({ type: r.y.type, dims: [...r.y.dims] }).toEqual({ type: 'float64', dims: [100, 80] });
    const s = stats(plain(r.y));
    expect(Math.abs(s.mean - 2)).toBeLessThan(0.03);
    expect(Math.abs(s.std - 0.5)).toBeLessThan(0.03);
  });
  it('RandomUniformLike of an int tensor with dtype float16 stays in [low, high)', async () => {
    const x = new ort.Tensor('int32', new Int32Array(3000), [30, 100]);
    const [r] = await mlx(
      randomModel('RandomUniformLike', { low: { f: -3 }, high: { f: -1 }, dtype: 10 }, ['int32', [30, 100]], 'float16'),
      { x },
    );
    expect({ type: r.y.type, dims: [...r.y.dims] }).toEqual({ type: 'float16', dims: [30, 100] });
    // float16 data arrives as its bits; rounding to float16 may reach `high` itself.
    const ys = plain(r.y).map(float16BitsToNumber);
    expect(ys.every((y) => y >= -3 && y <= -1)).toBe(true);
    expect(Math.abs(stats(ys).mean + 2)).toBeLessThan(0.05);
  });
  it('a seeded node repeats its sequence in a new session, and each run draws anew', async () => {
    const bytes = randomModel('RandomUniform', { shape: [8], seed: { f: 3 } });
    const [a1, a2] = (await mlx(bytes, {}, 2)).map((r) => plain(r.y));
    const [b1] = (await mlx(bytes, {})).map((r) => plain(r.y));
    expect(b1).toEqual(a1);
    expect(a2).not.toEqual(a1);
  });
  it('Bernoulli of 0s and 1s is exact, in the dtype asked for', async () => {
    const x = new ort.Tensor('float64', Float64Array.of(0, 1, 1, 0, 1), [5]);
    const [r] = await mlx(randomModel('Bernoulli', { dtype: 9 }, ['float64', [5]], 'bool'), { x });
    expect({ type: r.y.type, data: plain(r.y) }).toEqual({ type: 'bool', data: [0, 1, 1, 0, 1] });
  });
  it('Multinomial: [batch, sample_size] int64 draws from the logits', async () => {
    const logits = [0, -1e4, -1e4, -1e4, -1e4, 0, ...seeded(3).map(() => -1e4)];
    const x = new ort.Tensor('float32', Float32Array.from(logits.slice(0, 6)), [2, 3]);
    const [r] = await mlx(randomModel('Multinomial', { sample_size: 50, dtype: 7 }, ['float32', [2, 3]], 'int64'), { x });
    expect({ type: r.y.type, dims: [...r.y.dims] }).toEqual({ type: 'int64', dims: [2, 50] });
    const ys = plain(r.y);
    expect(ys.slice(0, 50).every((k) => k === 0) && ys.slice(50).every((k) => k === 2)).toBe(true);
  });
  it('refuses an integer output type', async () => {
    await expect(mlx(randomModel('RandomNormal', { shape: [2], dtype: 6 }, undefined, 'int32'), {})).rejects.toThrow(/not a float type/);
  });
});
