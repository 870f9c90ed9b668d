// What takes long the first time reports progress (onProgress), and warm-up is reachable from
// onnxruntime's InferenceSession.create through the provider's options (warmup), so that the
// first request is a replay.
import { describe, expect, it } from 'vitest';
import { mlx, type MlxProgressEvent } from '../../src/index.js';
import { model, node, v } from '../helpers/build.js';
import { f32, ort, seeded } from '../helpers/ort.js';

const mlp = model({
  opsets: { '': 17 },
  inputs: [v('x', 'float32', ['N', 4])],
  outputs: [v('y', 'float32', ['N', 3])],
  initializers: [{ name: 'w', type: 'float32', dims: [4, 3], values: seeded(12, 3) }],
  nodes: [node('MatMul', ['x', 'w'], ['xw']), node('Softmax', ['xw'], ['y'], { attrs: { axis: -1 } })],
});
const phases = (events: MlxProgressEvent[]) => events.map((e) => `${e.phase}:${e.state}${e.detail ? `:${e.detail}` : ''}`);
const x = f32(seeded(12, 7), [3, 4]);

describe('onProgress', () => {
  it('reports loading and uploading at create(), analysis on the first run, the trace on the second, nothing on replays', async () => {
    const events: MlxProgressEvent[] = [];
    const s = await ort.InferenceSession.create(mlp, {
      executionProviders: [mlx({ device: 'cpu', onProgress: (e) => events.push(e) })],
    });
    try {
      expect(phases(events)).toEqual(['load:start', 'load:end', 'upload:start', 'upload:end']);
      for (const e of events) expect(e.model).toBe('<bytes>');
      for (const e of events.filter((e) => e.state === 'end')) expect(e.ms).toBeGreaterThanOrEqual(0);
      events.length = 0;
      await s.run({ x });
      expect(phases(events)).toEqual(['analyse:start', 'analyse:end']);
      events.length = 0;
      await s.run({ x });
      expect(phases(events)).toEqual(['trace:start', 'trace:end']);
      events.length = 0;
      await s.run({ x });
      await s.run({ x: f32(seeded(8, 1), [2, 4]) }); // a new signature: analysed again
      expect(phases(events)).toEqual(['analyse:start', 'analyse:end']);
    } finally {
      await s.release();
    }
  });

  it('a callback that throws becomes a process warning, not the caller’s error', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.message);
    process.on('warning', onWarning);
    try {
      const s = await ort.InferenceSession.create(mlp, {
        executionProviders: [
          mlx({
            device: 'cpu',
            onProgress: () => {
              throw new Error('boom');
            },
          }),
        ],
      });
      const { y } = await s.run({ x });
      expect(y.dims).toEqual([3, 3]);
      await s.release();
      await new Promise((r) => setImmediate(r));
      expect(warnings.some((m) => /onProgress threw: boom/.test(m))).toBe(true);
    } finally {
      process.off('warning', onWarning);
    }
  });
});

describe('warmup through the provider options', () => {
  it('create() warms the signature up: the first request is a replay, with the results of a cold session', async () => {
    const events: MlxProgressEvent[] = [];
    const warm = await ort.InferenceSession.create(mlp, {
      executionProviders: [mlx({ device: 'cpu', warmup: { dims: { N: 3 } }, onProgress: (e) => events.push(e) })],
    });
    const cold = await ort.InferenceSession.create(mlp, { executionProviders: [mlx({ device: 'cpu' })] });
    try {
      expect(phases(events)).toContain('warmup:end:run 2 of 2');
      expect(phases(events)).toContain('trace:end');
      events.length = 0;
      const got = (await warm.run({ x })).y.data as Float32Array;
      expect(events).toEqual([]); // a replay: nothing to analyse or trace
      const want = (await cold.run({ x })).y.data as Float32Array;
      got.forEach((g, i) => expect(Math.abs(g - want[i])).toBeLessThan(1e-6));
    } finally {
      await warm.release();
      await cold.release();
    }
  });

  it('refuses malformed warmup and onProgress options by name', async () => {
    const create = (o: object) => ort.InferenceSession.create(mlp, { executionProviders: [mlx({ device: 'cpu', ...o })] });
    await expect(create({ warmup: 'yes' })).rejects.toThrow(/warmup must be true, false or \{ dims/);
    await expect(create({ warmup: { dims: [3] } })).rejects.toThrow(/warmup.dims must be an object/);
    await expect(create({ onProgress: 'log' })).rejects.toThrow(/onProgress must be a function, got string/);
    await expect(create({ warmup: { dims: { N: -2 } } })).rejects.toThrow(/non-negative integer/);
  });
});
