// The one-call run: once a signature's program is one traced segment over host feeds and its
// replay has evaluated, each later run is a single native call (mx.HostProgram). Its results must
// be those of the eager path bit for bit, on new data every run (a run that kept an earlier run's
// values would fail), for every element type it carries; each result has its own buffer; the
// transfer counters count what it moved; runs that ask for more than host results take the
// general path and still get what they asked for.
import type * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { MlxSession, transferStats, type HostTensor } from '../../src/index.js';
import { model, node, v } from '../helpers/build.js';

// y = where(m, 2x, -x) (float32), z = k + 1 (int64), h = float16(x), s = sum(x) > 0 (bool).
const m = model({
  opsets: { '': 17 },
  inputs: [v('x', 'float32', [2, 3]), v('m', 'bool', [2, 3]), v('k', 'int64', [3])],
  outputs: [v('y', 'float32', [2, 3]), v('z', 'int64', [3]), v('h', 'float16', [2, 3]), v('s', 'bool', [])],
  initializers: [
    { name: 'two', type: 'float32', dims: [], values: [2] },
    { name: 'one', type: 'int64', dims: [], values: [1n] },
    { name: 'zero', type: 'float32', dims: [], values: [0] },
  ],
  nodes: [
    node('Mul', ['x', 'two'], ['x2']),
    node('Neg', ['x'], ['nx']),
    node('Where', ['m', 'x2', 'nx'], ['y']),
    node('Add', ['k', 'one'], ['z']),
    node('Cast', ['x'], ['h'], { attrs: { to: 10 } }),
    node('ReduceSum', ['x'], ['sx'], { attrs: { keepdims: 0 } }),
    node('Greater', ['sx', 'zero'], ['s']),
  ],
});

const feedsOf = (r: number): Record<string, HostTensor> => ({
  x: { dtype: 1, dims: [2, 3], data: Float32Array.from({ length: 6 }, (_, i) => Math.sin(r * 7 + i) * (r % 2 ? 3 : -1)) },
  m: { dtype: 9, dims: [2, 3], data: Uint8Array.from({ length: 6 }, (_, i) => (i + r) % 2) },
  k: { dtype: 7, dims: [3], data: BigInt64Array.from([BigInt(r), BigInt(-r), 1n << 40n]) },
});

const plain = (t: HostTensor) => ({ dtype: t.dtype, dims: [...t.dims], data: Array.from(t.data as ArrayLike<number | bigint>) });

describe('one-call runs', () => {
  it('give the eager path results, bit for bit, run after run, each result in its own buffer', async () => {
    const fast = await MlxSession.create(m, { device: 'cpu' });
    const eager = await MlxSession.create(m, { device: 'cpu', compiled: false });
    try {
      for (let r = 0; r < 8; r++) {
        const feeds = feedsOf(r);
        const t0 = transferStats();
        const got = r % 2 ? fast.runSync(feeds) : await fast.run(feeds);
        const t1 = transferStats();
        const want = eager.runSync(feeds);
        for (const name of ['y', 'z', 'h', 's'])
          expect(plain(got[name] as HostTensor), `${name}, run ${r}`).toEqual(plain(want[name] as HostTensor));
        const buffers = Object.values(got).map((t) => ((t as HostTensor).data as ArrayBufferView).buffer);
        expect(new Set(buffers).size).toBe(4);
        for (const t of Object.values(got)) expect(((t as HostTensor).data as ArrayBufferView).byteOffset).toBe(0);
        // The counters move by the feeds and results, as on the general path's replays (its first
        // run uploads the constants too).
        if (r < 2) continue;
        expect(t1.uploads - t0.uploads).toBe(3);
        expect(t1.uploadedBytes - t0.uploadedBytes).toBe(24 + 6 + 24);
        expect(t1.downloads - t0.downloads).toBe(4);
        expect(t1.downloadedBytes - t0.downloadedBytes).toBe(24 + 24 + 12 + 1);
        // Analysed, traced, replayed (which makes the one-call form): the later runs are one call
        // each (ffi-calls.test.ts counts them).
        expect(fast.describeSignatures()[0].oneCall).toBe(r >= 2);
      }
      expect(fast.compileStats.misses).toBe(1);
    } finally {
      fast.release();
      eager.release();
    }
  });

  it('leave runs that ask for device results, pre-allocated buffers or donations to the general path', async () => {
    const s = await MlxSession.create(m, { device: 'cpu' });
    try {
      for (let r = 0; r < 4; r++) s.runSync(feedsOf(r));
      const feeds = feedsOf(9);
      const want = s.runSync(feeds);
      const kept = s.runSync(feeds, ['y'], { keepOnDevice: ['y'] });
      const y = kept.y as { kind: string; array: mx.Array };
      expect(y.kind).toBe('device');
      expect(Array.from(y.array.toTypedArray() as Float32Array)).toEqual(Array.from((want.y as HostTensor).data as Float32Array));
      y.array.dispose();
      const into: HostTensor = { dtype: 1, dims: [2, 3], data: new Float32Array(6) };
      const out = s.runSync(feeds, ['y', 'z', 'h', 's'], { outputBuffers: { y: into } });
      expect(out.y).toBe(into);
      expect(Array.from(into.data as Float32Array)).toEqual(Array.from((want.y as HostTensor).data as Float32Array));
    } finally {
      s.release();
    }
  });

  it('feed a graph input with an initializer only when the run fed it (its default otherwise)', async () => {
    // b is a graph input with a default: runs that leave it out use the initializer.
    const withDefault = model({
      opsets: { '': 17 },
      inputs: [v('x', 'float32', [3]), v('b', 'float32', [3])],
      outputs: [v('y', 'float32', [3])],
      initializers: [{ name: 'b', type: 'float32', dims: [3], values: [10, 20, 30] }],
      nodes: [node('Add', ['x', 'b'], ['y'])],
    });
    const s = await MlxSession.create(withDefault, { device: 'cpu' });
    try {
      for (let r = 0; r < 5; r++) {
        const x: HostTensor = { dtype: 1, dims: [3], data: Float32Array.of(r, 2 * r, 3 * r) };
        expect(Array.from(s.runSync({ x }).y.data as Float32Array)).toEqual([10 + r, 20 + 2 * r, 30 + 3 * r]);
        const b: HostTensor = { dtype: 1, dims: [3], data: Float32Array.of(-r, 1, 2) };
        expect(Array.from((await s.run({ x, b })).y.data as Float32Array)).toEqual([0, 2 * r + 1, 3 * r + 2]);
      }
    } finally {
      s.release();
    }
  });
});
