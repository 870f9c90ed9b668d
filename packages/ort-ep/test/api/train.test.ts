// Trainable sessions: parameters() and setParameters() (initializers replaced in place, folded
// nodes and compiled signatures renewed), trainStep() with @mlx/core's optimizers, and
// saveModel() (initializers written back, large ones as external data) checked by running the
// saved model, and a model built independently with the same weights, in onnxruntime-node.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as mx from '@mlx/core';
import { afterAll, describe, expect, it } from 'vitest';
import { MlxSession, OnnxDataType, ParameterMismatchError, UnknownParameterError, type HostTensor, type Value } from '../../src/index.js';
import { model, node, v, type ModelSpec } from '../helpers/build.js';
import { bool, f32, plain, runOn, seeded } from '../helpers/ort.js';

const tmp = mkdtempSync(join(tmpdir(), 'mlx-ort-train-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const N = 5;
// W1 [4, 16] and W2t [64, 16] (host constants, W2t read through a Transpose folded at plan time)
// and W3 [64, 256] (64 KiB: held by MLX only, once the session is made).
const dims: Record<string, number[]> = { W1: [4, 16], W2t: [64, 16], W3: [64, 256] };
const initial = (name: string, seed: number) =>
  seeded(
    dims[name].reduce((a, b) => a * b, 1),
    seed,
  ).map((x) => x * 0.3);

function spec(values: Record<string, number[]>): ModelSpec {
  return {
    opsets: { '': 17 },
    inputs: [v('x', 'float32', [N, 4])],
    initializers: [
      ...Object.keys(dims).map((name) => ({ name, type: 'float32' as const, dims: dims[name], values: values[name] })),
      { name: 'shape', type: 'int64' as const, dims: [2], values: [BigInt(N), 256n] },
    ],
    outputs: [v('y', 'float32', [N, 256])],
    nodes: [
      node('MatMul', ['x', 'W1'], ['h1']),
      node('Tanh', ['h1'], ['t1']),
      node('Transpose', ['W2t'], ['W2'], { attrs: { perm: { ints: [1, 0] } } }),
      node('MatMul', ['t1', 'W2'], ['h2']),
      node('MatMul', ['h2', 'W3'], ['h3']),
      node('Reshape', ['h3', 'shape'], ['y']),
    ],
  };
}

const start = { W1: initial('W1', 1), W2t: initial('W2t', 2), W3: initial('W3', 3) };
const xData = seeded(N * 4, 7);
const feeds = (): Record<string, HostTensor> => ({ x: { dtype: OnnxDataType.FLOAT, dims: [N, 4], data: Float32Array.from(xData) } });
const dataOf = (t: HostTensor | Value) => Array.from((t as HostTensor).data as Float32Array);

async function ortOutputs(bytes: Uint8Array | string): Promise<number[]> {
  const { ort } = await import('../helpers/ort.js');
  const s = await ort.InferenceSession.create(bytes as Uint8Array);
  try {
    const out = await s.run({ x: f32(xData, [N, 4]) });
    return plain(out.y);
  } finally {
    await s.release();
  }
}

function expectClose(got: number[], want: number[], tol = 1e-5): void {
  expect(got.length).toBe(want.length);
  let worst = 0;
  for (let i = 0; i < got.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]) / (1 + Math.abs(want[i])));
  expect(worst).toBeLessThanOrEqual(tol);
}

describe('parameters and setParameters', () => {
  for (const compiled of [true, false])
    it(`a run after setParameters uses the new values, folded nodes and compiled signatures included (compiled: ${compiled})`, async () => {
      const s = await MlxSession.create(model(spec(start)), { device: 'cpu', graphRewrites: false, compiled });
      try {
        // Three runs: a compiled session traces its signature on the second and replays on the third.
        for (let i = 0; i < 3; i++)
          expectClose(
            dataOf((await s.run(feeds())).y),
            await runOn('cpu', model(spec(start)), { x: f32(xData, [N, 4]) }).then((o) => plain(o.y)),
          );
        expect(Object.keys(s.parameters()).sort()).toEqual(['W1', 'W2t', 'W3']);
        const p = s.parameters(['W1', 'W2t', 'W3']);
        expect(Array.from(p.W2t.toTypedArray())).toEqual(Array.from(Float32Array.from(start.W2t)));
        const next = { W1: initial('W1', 11), W2t: initial('W2t', 12), W3: initial('W3', 13) };
        s.setParameters({
          W1: mx.array(next.W1, { shape: dims.W1 }),
          W2t: mx.array(next.W2t, { shape: dims.W2t }),
          W3: { dtype: OnnxDataType.FLOAT, dims: dims.W3, data: Float32Array.from(next.W3) },
        });
        // The arrays parameters() gave are copies: they keep the old values, and are the caller's.
        expect(Array.from(p.W2t.toTypedArray())).toEqual(Array.from(Float32Array.from(start.W2t)));
        mx.dispose(p);
        const want = await runOn('cpu', model(spec(next)), { x: f32(xData, [N, 4]) }).then((o) => plain(o.y));
        for (let i = 0; i < 3; i++) expectClose(dataOf((await s.run(feeds())).y), want);
        expect(Array.from(s.parameters(['W3']).W3.toTypedArray())).toEqual(Array.from(Float32Array.from(next.W3)));
      } finally {
        s.release();
      }
    });

  it('setParameters while a run is in flight: that run ends, the runs after it use the new values', async () => {
    const s = await MlxSession.create(model(spec(start)), { device: 'cpu', graphRewrites: false });
    try {
      for (let i = 0; i < 2; i++) await s.run(feeds());
      const next = { W1: initial('W1', 41), W2t: initial('W2t', 42), W3: initial('W3', 43) };
      const inFlight = s.run(feeds());
      await new Promise((r) => setImmediate(r));
      s.setParameters(Object.fromEntries(Object.entries(next).map(([k, d]) => [k, mx.array(d, { shape: dims[k] })])));
      const after = s.run(feeds());
      expect(dataOf((await inFlight).y)).toHaveLength(N * 256);
      const want = await runOn('cpu', model(spec(next)), { x: f32(xData, [N, 4]) }).then((o) => plain(o.y));
      expectClose(dataOf((await after).y), want);
      expect(s.compileStats.misses).toBeGreaterThan(0);
    } finally {
      s.release();
    }
  });

  it('refuses unknown names, non-float initializers, other shapes and dtypes, naming them', async () => {
    const s = await MlxSession.create(model(spec(start)), { device: 'cpu', graphRewrites: false });
    try {
      expect(() => s.parameters(['nope'])).toThrow(UnknownParameterError);
      expect(() => s.parameters(['h1'])).toThrow(/'h1' is not an initializer of the model \(its parameters include 'W1', 'W2t', 'W3'\)/);
      expect(() => s.setParameters({ shape: mx.array([5, 256], { dtype: 'int64' }) })).toThrow(
        /initializer 'shape' is int64: only floating-point initializers are parameters/,
      );
      expect(() => s.setParameters({ W1: mx.zeros([16, 4]) })).toThrow(ParameterMismatchError);
      expect(() => s.setParameters({ W1: mx.zeros([16, 4]) })).toThrow(/'W1' has shape \[4, 16\] in the model, the new value \[16, 4\]/);
      expect(() => s.setParameters({ W1: mx.zeros([4, 16], 'float16') })).toThrow(/'W1' is float32 in the model, the new value is float16/);
      // Nothing changed: a refused record is refused whole, before any value is replaced.
      expect(() => s.setParameters({ W1: mx.zeros([4, 16]), W3: mx.zeros([1]) })).toThrow(ParameterMismatchError);
      expect(Array.from(s.parameters(['W1']).W1.toTypedArray())).toEqual(Array.from(Float32Array.from(start.W1)));
    } finally {
      s.release();
    }
  });

  it('refuses initializers a graph rewrite replaced by derived ones', async () => {
    const m = model({
      opsets: { '': 17 },
      inputs: [v('x', 'float32', [2, 3])],
      initializers: [
        { name: 'W', type: 'float32', dims: [3, 2], values: seeded(6, 1) },
        { name: 'B', type: 'float32', dims: [2], values: seeded(2, 2) },
      ],
      outputs: [v('y', 'float32', [2, 2])],
      nodes: [node('MatMul', ['x', 'W'], ['m']), node('Add', ['m', 'B'], ['y'])],
    });
    const s = await MlxSession.create(m, { device: 'cpu' });
    try {
      // matmul-add joins W and B (and on an AVX-512 CPU pack-matmul packs the product's weight, dropping W).
      expect(() => s.setParameters({ W: mx.zeros([3, 2]) })).toThrow(
        /graph rewrites \(matmul-add x1[^)]*\).*'W' may no longer be what the nodes read: create the session with graphRewrites: false/,
      );
      // The first parameter it checks: B where pack-matmul dropped W (AVX-512), else W.
      expect(() => s.parameters()).toThrow(/'(B|W)' may no longer be what the nodes read/);
      expect(() => s.saveModel()).toThrow(/create the session with graphRewrites: false to save a model other runtimes load/);
    } finally {
      s.release();
    }
  });
});

describe('trainStep', () => {
  // A loss of the outputs written with @mlx/core: the mean square distance to a target.
  const target = seeded(N * 256, 21).map((x) => x * 0.1);
  const mse = (o: Record<string, mx.Array>) => mx.mean(mx.square(mx.subtract(o.y, mx.array(target, { shape: [N, 256] }))));

  it('one SGD step equals p - lr * grad, with the gradients valueAndGrad gives, and the loss falls', async () => {
    const s = await MlxSession.create(model(spec(start)), { device: 'cpu', graphRewrites: false });
    try {
      const g = await s.valueAndGrad(feeds(), { output: mse, wrt: ['W1', 'W2t'] });
      const lr = 0.5;
      const r = await s.trainStep(feeds(), { output: mse, wrt: ['W1', 'W2t'], optimizer: new mx.optim.SGD({ lr }) });
      expect(r.loss).toBeCloseTo(g.value, 6);
      const p = s.parameters(['W1', 'W2t', 'W3']);
      for (const n of ['W1', 'W2t'] as const) {
        const grad = dataOf(g.grads[n]);
        expectClose(
          Array.from(p[n].toTypedArray() as Float32Array),
          start[n].map((x, i) => x - lr * grad[i]),
          1e-6,
        );
      }
      // W3 was not trained.
      expect(Array.from(p.W3.toTypedArray())).toEqual(Array.from(Float32Array.from(start.W3)));
      mx.dispose(p);
      const after = await s.valueAndGrad(feeds(), { output: mse, wrt: ['W1'] });
      expect(after.value).toBeLessThan(g.value);
    } finally {
      s.release();
    }
  });

  it('AdamW with clipping over all parameters: the loss falls over steps, memory stays flat', async () => {
    const s = await MlxSession.create(model(spec(start)), { device: 'cpu', graphRewrites: false });
    const opt = new mx.optim.AdamW({ lr: 0.01, weightDecay: 0 });
    try {
      const losses: number[] = [];
      let before = 0;
      for (let i = 0; i < 12; i++) {
        const r = await s.trainStep(feeds(), { output: mse, optimizer: opt, clipGradNorm: 1 });
        expect(r.gradNorm).toBeGreaterThan(0);
        expect(r.outputs.y).toBeDefined();
        losses.push(r.loss);
        if (i === 2) before = mx.memory.active();
      }
      expect(mx.memory.active() - before).toBeLessThan(64 << 10);
      expect(losses.at(-1)!).toBeLessThan(losses[0] * 0.8);
      expect(opt.state().step).toBe(12);
    } finally {
      opt.dispose();
      s.release();
    }
  });

  it('a lazy array the loss captured from outside is an error that says to evaluate it first', async () => {
    const s = await MlxSession.create(model(spec(start)), { device: 'cpu', graphRewrites: false });
    try {
      // Made by an op on this thread's stream and not evaluated: the session's thread cannot compute it.
      const lazy = mx.multiply(mx.array(target, { shape: [N, 256] }), 1);
      const loss = (o: Record<string, mx.Array>) => mx.mean(mx.square(mx.subtract(o.y, lazy)));
      await expect(s.trainStep(feeds(), { output: loss, optimizer: new mx.optim.SGD({ lr: 0.1 }) })).rejects.toThrow(
        /the output function used an array made lazily outside it .*evaluate it first \(labels.eval\(\)\)/,
      );
      // Evaluated, the same array is fine, and the session works on.
      lazy.eval();
      const r = await s.trainStep(feeds(), { output: loss, optimizer: new mx.optim.SGD({ lr: 0.1 }) });
      expect(r.loss).toBeGreaterThan(0);
      lazy.dispose();
    } finally {
      s.release();
    }
  });

  it('gradient accumulation over micro-batches, as the README shows, equals one step on the whole batch', async () => {
    // A loss summed over rows: the gradients of two halves add up to the whole batch's.
    const sumLoss = (rows: number[]) => (o: Record<string, mx.Array>) =>
      mx.sum(
        mx.square(
          mx.subtract(
            o.y,
            mx.array(
              rows.flatMap((r) => target.slice(r * 256, (r + 1) * 256)),
              { shape: [rows.length, 256] },
            ),
          ),
        ),
      );
    const rowsOf = (rows: number[]) => ({
      x: {
        dtype: OnnxDataType.FLOAT,
        dims: [rows.length, 4],
        data: Float32Array.from(rows.flatMap((r) => xData.slice(r * 4, (r + 1) * 4))),
      },
    });
    const free = spec(start);
    free.inputs = [v('x', 'float32', ['n', 4])];
    free.initializers = free.initializers!.map((t) => (t.name === 'shape' ? { ...t, values: [-1n, 256n] } : t));
    free.outputs = [v('y', 'float32', ['n', 256])];
    const wrt = ['W1', 'W2t', 'W3'];
    const whole = await MlxSession.create(model(free), { device: 'cpu', graphRewrites: false });
    const parts = await MlxSession.create(model(free), { device: 'cpu', graphRewrites: false });
    try {
      const all = [0, 1, 2, 3, 4];
      await whole.trainStep(rowsOf(all), { output: sumLoss(all), wrt, optimizer: new mx.optim.SGD({ lr: 0.01 }) });

      const acc = new mx.optim.GradientAccumulator();
      for (const rows of [
        [0, 1, 2],
        [3, 4],
      ]) {
        const r = await parts.valueAndGrad(rowsOf(rows), { output: sumLoss(rows), wrt, keepOnDevice: true });
        const grads = Object.fromEntries(wrt.map((n) => [n, (r.grads[n] as Value & { kind: 'device' }).array]));
        acc.add(grads);
        mx.dispose(grads);
      }
      const opt = new mx.optim.SGD({ lr: 0.01 });
      const summed = acc.take();
      const next = opt.step(parts.parameters(wrt), summed);
      parts.setParameters(next);
      mx.dispose([summed, next]);

      const a = whole.parameters(wrt);
      const b = parts.parameters(wrt);
      for (const n of wrt)
        expectClose(Array.from(b[n].toTypedArray() as Float32Array), Array.from(a[n].toTypedArray() as Float32Array), 1e-5);
      mx.dispose([a, b]);
    } finally {
      whole.release();
      parts.release();
    }
  });

  it('checks its options first', async () => {
    const s = await MlxSession.create(model(spec(start)), { device: 'cpu', graphRewrites: false });
    try {
      expect(() => s.trainStep(feeds(), { output: mse } as never)).toThrow(/optimizer must be an optimizer/);
      expect(() => s.trainStep(feeds(), { output: mse, optimizer: new mx.optim.SGD({ lr: 1 }), clipGradNorm: 0 })).toThrow(
        /clipGradNorm must be a positive number/,
      );
      await expect(s.trainStep(feeds(), { output: mse, optimizer: new mx.optim.SGD({ lr: 1 }), wrt: ['shape'] })).rejects.toThrow(
        /trainStep: initializer 'shape' is int64/,
      );
    } finally {
      s.release();
    }
  });
});

describe('saveModel', () => {
  it('writes the trained initializers; onnxruntime-node runs the saved model (external data too) as the session does', async () => {
    const s = await MlxSession.create(model(spec(start)), { device: 'cpu', graphRewrites: false });
    const opt = new mx.optim.AdamW({ lr: 0.05 });
    try {
      const target = seeded(N * 256, 31).map((x) => x * 0.1);
      const loss = (o: Record<string, mx.Array>) => mx.mean(mx.square(mx.subtract(o.y, mx.array(target, { shape: [N, 256] }))));
      for (let i = 0; i < 3; i++) await s.trainStep(feeds(), { output: loss, optimizer: opt });
      const mine = dataOf((await s.run(feeds())).y);
      const untrained = await ortOutputs(model(spec(start)));
      expect(Math.max(...mine.map((x, i) => Math.abs(x - untrained[i])))).toBeGreaterThan(1e-3);

      // In memory: every initializer inside the model.
      expectClose(await ortOutputs(s.saveModel()), mine);

      // To a file, initializers of 4 KiB and more in a data file beside it (W2t, held by MLX, and W3).
      const path = join(tmp, 'trained.onnx');
      s.saveModel(path, { externalData: { threshold: 4096 } });
      expect(existsSync(join(tmp, 'trained.onnx.data'))).toBe(true);
      expect(readFileSync(path).length).toBeLessThan(4096);
      expectClose(await ortOutputs(path), mine);
      // And MLX loads it back with the same weights.
      const again = await MlxSession.create(path, { device: 'cpu', graphRewrites: false });
      try {
        expectClose(dataOf((await again.run(feeds())).y), mine, 1e-6);
      } finally {
        again.release();
      }
    } finally {
      opt.dispose();
      s.release();
    }
  });

  it('writes back the initializers of subgraphs MLX holds, and the free dimensions the file declared', async () => {
    // A 64 KiB initializer inside If's branch: held by MLX only (its graph entry dropped) once the session is made.
    const branch = (b: string, seed: number) => ({
      inputs: [],
      outputs: [v(`${b}_out`, 'float32', ['n', 128])],
      initializers: [{ name: `${b}_w`, type: 'float32' as const, dims: [128, 128], values: seeded(128 * 128, seed) }],
      nodes: [node('MatMul', ['x', `${b}_w`], [`${b}_m`]), node('Identity', [`${b}_m`], [`${b}_out`])],
    });
    const m = model({
      opsets: { '': 17 },
      inputs: [v('x', 'float32', ['n', 128]), v('c', 'bool', [])],
      outputs: [v('y', 'float32', ['n', 128])],
      nodes: [node('If', ['c'], ['y'], { attrs: { then_branch: { g: branch('then', 51) }, else_branch: { g: branch('else', 52) } } })],
    });
    const x = seeded(2 * 128, 52);
    const feed = (c: boolean) => ({ x: f32(x, [2, 128]), c: bool([c ? 1 : 0], []) });
    const s = await MlxSession.create(m, { device: 'cpu', graphRewrites: false, freeDimensionOverrides: { n: 2 } });
    try {
      const saved = s.saveModel();
      for (const c of [true, false]) {
        const want = await runOn('cpu', m, feed(c));
        const got = await runOn('cpu', saved, feed(c));
        expect(plain(got.y)).toEqual(plain(want.y));
      }
      // The saved file declares 'n' again, as the original does: another batch size runs.
      const other = await runOn('cpu', saved, { x: f32(seeded(3 * 128, 53), [3, 128]), c: feed(true).c });
      expect(other.y.dims).toEqual([3, 128]);
    } finally {
      s.release();
    }
  });

  it('a released session refuses parameters, setParameters, trainStep and saveModel', async () => {
    const s = await MlxSession.create(model(spec(start)), { device: 'cpu', graphRewrites: false });
    s.release();
    expect(() => s.parameters()).toThrow(/session was released/);
    expect(() => s.setParameters({ W1: mx.zeros([4, 16]) })).toThrow(/session was released/);
    expect(() => s.saveModel()).toThrow(/session was released/);
    await expect(s.trainStep(feeds(), { output: 'y', optimizer: new mx.optim.SGD({ lr: 1 }) })).rejects.toThrow(/session was released/);
  });

  it('refuses a data file outside the model folder, and external data without a path', async () => {
    const s = await MlxSession.create(model(spec(start)), { device: 'cpu', graphRewrites: false });
    try {
      expect(() => s.saveModel(join(tmp, 'x.onnx'), { externalData: { location: '../x.data' } })).toThrow(
        /must be a file name beside the model/,
      );
      expect(() => s.saveModel(undefined, { externalData: { threshold: 1 } })).toThrow(/externalData needs a path/);
    } finally {
      s.release();
    }
  });
});
