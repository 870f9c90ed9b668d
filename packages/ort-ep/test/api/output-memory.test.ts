// Where results land on the host: pre-allocated CPU outputs read into directly, and
// preferredOutputLocation 'cpu-pinned' (pooled host blocks, page-locked on MLX's CUDA build; here,
// on the CPU, page-aligned ordinary memory). Values against onnxruntime-node; in-place-ness
// against object identity; the pool's reuse against its counters after a real collection.
import { readFileSync } from 'node:fs';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { InvalidFeedError, MlxSession } from '../../src/index.js';
import { model, node, v } from '../helpers/build.js';
import { expectSameOutputs, mlxCpu, ort, randomF32, seeded, type Feeds } from '../helpers/ort.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

// y = x W (512 x 256 float32: 512 KiB, a pooled block), s = sum(y) (4 bytes: ordinary memory),
// i = argmax over the last axis (int64, 4 KiB).
const bytes = model({
  inputs: [v('x', 'float32', [512, 128])],
  outputs: [v('y', 'float32', [512, 256]), v('s', 'float32', []), v('i', 'int64', [512])],
  nodes: [
    node('MatMul', ['x', 'w'], ['y']),
    node('ReduceSum', ['y'], ['s'], { attrs: { keepdims: 0 } }),
    node('ArgMax', ['y'], ['i'], { attrs: { axis: -1, keepdims: 0 } }),
  ],
  initializers: [{ name: 'w', type: 'float32', dims: [128, 256], values: seeded(128 * 256, 3) }],
});
const feeds = (seed: number): Feeds => ({ x: randomF32([512, 128], seed) });
const tol = { rtol: 1e-4, atol: 1e-4 };

async function reference(f: Feeds) {
  const s = await ort.InferenceSession.create(bytes);
  try {
    return await s.run(f);
  } finally {
    await s.release();
  }
}

async function withMlx<T>(options: object, body: (s: import('onnxruntime-node').InferenceSession) => Promise<T>): Promise<T> {
  const s = await ort.InferenceSession.create(bytes, { ...mlxCpu, ...options } as never);
  try {
    return await body(s);
  } finally {
    await s.release();
  }
}

describe('output memory', () => {
  it("'cpu-pinned' outputs come in pooled blocks, equal to onnxruntime's, and feed back", async () => {
    const want = await reference(feeds(1));
    await withMlx({ preferredOutputLocation: 'cpu-pinned' }, async (s) => {
      const out = await s.run(feeds(1));
      expectSameOutputs(out, want, tol);
      expect(out.y.location).toBe('cpu-pinned');
      // The block is page-aligned and at least the result's size.
      expect((out.y.data as Float32Array).byteOffset).toBe(0);
      expect((out.y.data as Float32Array).buffer.byteLength).toBe(mx.hostSizeClass(512 * 256 * 4));
      // Results under the pool's minimum come in ordinary memory, and say so.
      expect(out.s.location).toBe('cpu');
      expect(out.i.location).toBe('cpu');
      // A block fed back as an input (y's first 128 columns as x's shape is not y's: slice it).
      const y = out.y.data as Float32Array;
      const x2 = new Float32Array(mx.hostBuffer(512 * 128 * 4)!, 0, 512 * 128);
      for (let r = 0; r < 512; r++) x2.set(y.subarray(r * 256, r * 256 + 128), r * 128);
      const fed = { x: ort.Tensor.fromPinnedBuffer('float32', x2, [512, 128]) as never };
      // onnxruntime-node's CPU provider takes only 'cpu' tensors: the same data as one.
      const want2 = await reference({ x: new ort.Tensor('float32', x2, [512, 128]) });
      expectSameOutputs(await s.run(fed), want2, { rtol: 1e-4, atol: 1e-2 });
    });
  });

  it('per-output locations: only the named output is pinned', async () => {
    await withMlx({ preferredOutputLocation: { y: 'cpu', i: 'cpu-pinned' } }, async (s) => {
      const out = await s.run(feeds(2));
      expect(out.y.location).toBe('cpu');
      // i is 4 KiB: under the minimum, so ordinary memory even though it asked.
      expect(out.i.location).toBe('cpu');
    });
    await expect(withMlx({ preferredOutputLocation: 'texture' }, async () => {})).rejects.toThrow(/'cpu', 'cpu-pinned' or 'gpu-buffer'/);
  });

  it('a pre-allocated CPU output is written in place, run after run', async () => {
    await withMlx({}, async (s) => {
      const y = new ort.Tensor('float32', new Float32Array(512 * 256), [512, 256]);
      const i = new ort.Tensor('int64', new BigInt64Array(512), [512]);
      const data = y.data;
      for (const seed of [3, 4]) {
        const want = await reference(feeds(seed));
        const out = await s.run(feeds(seed), { y, i, s: null });
        expect(out.y).toBe(y);
        expect(out.y.data).toBe(data);
        expect(out.i).toBe(i);
        expectSameOutputs(out, want, tol);
      }
    });
  });

  it('a pre-allocated output of another shape or type is refused before anything is written', async () => {
    await withMlx({}, async (s) => {
      const wrong = new ort.Tensor('float32', new Float32Array(512 * 256).fill(7), [256, 512]);
      await expect(s.run(feeds(5), { y: wrong })).rejects.toThrow(
        /output 'y' is float32 \[512, 256\], but its pre-allocated (buffer|tensor) is float32 \[256, 512\]/,
      );
      expect((wrong.data as Float32Array).every((x) => x === 7)).toBe(true);
      const wrongType = new ort.Tensor('int32', new Int32Array(512), [512]);
      await expect(s.run(feeds(5), { i: wrongType })).rejects.toThrow(
        /output 'i' is int64 \[512\], but its pre-allocated (buffer|tensor) is int32 \[512\]/,
      );
    });
  });

  it('MlxSession: outputBuffers are checked together, before any is written', async () => {
    const session = await MlxSession.create(bytes, { device: 'cpu' });
    try {
      const x = feeds(6).x;
      const f = { x: { dtype: 1, dims: [512, 128], data: x.data as Float32Array } };
      const good = { dtype: 1, dims: [512, 256], data: new Float32Array(512 * 256).fill(3) };
      const bad = { dtype: 7, dims: [511], data: new BigInt64Array(511) };
      await expect(session.run(f, ['y', 'i'], { outputBuffers: { y: good, i: bad } })).rejects.toThrow(InvalidFeedError);
      expect(good.data.every((v) => v === 3)).toBe(true);
      await expect(session.run(f, ['y'], { outputBuffers: { s: good } })).rejects.toThrow(
        /outputBuffers names 's', which this run does not fetch/,
      );
      const out = await session.run(f, ['y'], { outputBuffers: { y: good } });
      expect(out.y).toBe(good);
      const ref = await reference({ x });
      const r = ref.y.data as Float32Array;
      let worst = 0;
      for (let k = 0; k < r.length; k++) worst = Math.max(worst, Math.abs(good.data[k] - r[k]));
      expect(worst).toBeLessThan(1e-3);
    } finally {
      session.release();
    }
  });

  it('pinned blocks of dropped results go back to the pool and are reused', async () => {
    await withMlx({ preferredOutputLocation: 'cpu-pinned' }, async (s) => {
      const f = feeds(7);
      await s.run(f);
      for (let k = 0; k < 4; k++) {
        gc();
        await new Promise((r) => setTimeout(r, 5));
      }
      const before = mx.hostMemory.stats();
      for (let k = 0; k < 6; k++) {
        await s.run(f);
        gc();
        await new Promise((r) => setTimeout(r, 5));
      }
      const after = mx.hostMemory.stats();
      // Six runs, each y's block back in the pool before the next: no new allocation of its class.
      expect(after.reuses - before.reuses).toBeGreaterThanOrEqual(5);
      expect(after.allocations - before.allocations).toBeLessThanOrEqual(1);
    });
  });

  it("outputMemory 'pooled' and 'auto' read large results into blocks that stay 'cpu' tensors, run after run; 'fresh' does not", async () => {
    // A 1 MiB result: y of a wider product (512 x 512 float32), and a small one beside it (its sum):
    // the first runs trace, the later ones are one native call each (mx.HostProgram).
    const wide = model({
      inputs: [v('x', 'float32', [512, 128])],
      outputs: [v('y', 'float32', [512, 512]), v('s', 'float32', [])],
      nodes: [node('MatMul', ['x', 'w'], ['y']), node('ReduceSum', ['y'], ['s'], { attrs: { keepdims: 0 } })],
      initializers: [{ name: 'w', type: 'float32', dims: [128, 512], values: seeded(128 * 512, 4) }],
    });
    const ref = await ort.InferenceSession.create(wide);
    const wants = [await ref.run(feeds(8)), await ref.run(feeds(9))];
    await ref.release();
    for (const [memory, pooled] of [
      ['pooled', true],
      ['fresh', false],
      ['auto', true],
    ] as const) {
      const s = await ort.InferenceSession.create(wide, {
        executionProviders: [{ name: 'mlx', device: 'cpu', outputMemory: memory }],
      } as never);
      const handedOut = () => mx.hostMemory.stats().allocations + mx.hostMemory.stats().reuses;
      const inBlocks: boolean[] = [];
      for (let run = 0; run < 5; run++) {
        const before = handedOut();
        const out = await s.run(feeds(8 + (run % 2)));
        // Blocks handed out by the pool (monotonic, unlike live blocks, which collections lower).
        inBlocks.push(handedOut() === before + 1);
        expect(out.y.location).toBe('cpu');
        expectSameOutputs(out, wants[run % 2], tol);
        // The small result never shares the large one's memory.
        expect((out.s.data as Float32Array).buffer).not.toBe((out.y.data as Float32Array).buffer);
      }
      expect({ memory, inBlocks }).toEqual({ memory, inBlocks: inBlocks.map(() => pooled) });
      await s.release();
    }
    await expect(
      ort.InferenceSession.create(wide, { executionProviders: [{ name: 'mlx', device: 'cpu', outputMemory: 'pinned' }] } as never),
    ).rejects.toThrow(/outputMemory must be 'auto', 'pooled' or 'fresh', got 'pinned'/);
  });

  it('a synchronous loop of runs holds at most the live limit in blocks; later results are ordinary memory, still right', async () => {
    // No finalizer runs until the event loop turns, so no block of a dropped result comes back
    // during such a loop: without the live limit every run took a new block (375 MB of them after
    // 110 runs of a 3 MiB result).
    const wide = model({
      inputs: [v('x', 'float32', [512, 128])],
      outputs: [v('y', 'float32', [512, 512])],
      nodes: [node('MatMul', ['x', 'w'], ['y'])],
      initializers: [{ name: 'w', type: 'float32', dims: [128, 512], values: seeded(128 * 512, 5) }],
    });
    const ref = await ort.InferenceSession.create(wide);
    const want = await ref.run(feeds(10));
    await ref.release();
    const s = await MlxSession.create(wide, { device: 'cpu' });
    const x = feeds(10).x;
    const hostFeeds = { x: { dtype: 1, dims: [512, 128], data: x.data as Float32Array } };
    gc();
    await new Promise((resolve) => setTimeout(resolve, 10));
    const live0 = mx.hostMemory.stats().liveBytes;
    const before = mx.hostMemory.setLiveLimit(live0 + (4 << 20));
    try {
      const results: Float32Array[] = [];
      for (let i = 0; i < 10; i++) results.push(s.runSync(hostFeeds).y.data as Float32Array);
      expect(mx.hostMemory.stats().liveBytes).toBeLessThanOrEqual(live0 + (4 << 20));
      const expected = want.y.data as Float32Array;
      for (const r of results) {
        expect(r.length).toBe(expected.length);
        let worst = 0;
        for (let i = 0; i < r.length; i++) worst = Math.max(worst, Math.abs(r[i] - expected[i]) / (1 + Math.abs(expected[i])));
        expect(worst).toBeLessThan(1e-4);
      }
    } finally {
      mx.hostMemory.setLiveLimit(before);
      s.release();
    }
  });
});

describe("MLX's buffer cache on the CPU", () => {
  /** Minor page faults of this process so far (Linux). */
  const minorFaults = () => Number(readFileSync('/proc/self/stat', 'utf8').split(') ')[1].split(' ')[7]);

  it.skipIf(process.platform !== 'linux')('keeps a 39 MB product for the next run: its pages are not faulted in again', async () => {
    // y = relu(x W): the product's 39 MB buffer is over MLX's 32 MiB default cache limit, so
    // without a higher limit it went back to the system at each run and came back a page fault
    // per 4 KiB (9,600 a run).
    const [M, K, N] = [300, 64, 32768];
    const big = model({
      inputs: [v('x', 'float32', [M, K])],
      outputs: [v('y', 'float32', [M, N])],
      nodes: [node('MatMul', ['x', 'w'], ['h']), node('Relu', ['h'], ['y'])],
      initializers: [{ name: 'w', type: 'float32', dims: [K, N], values: seeded(K * N, 4) }],
    });
    const x = randomF32([M, K], 5);
    const ref = await ort.InferenceSession.create(big);
    const want = await ref.run({ x });
    await ref.release();
    const s = await ort.InferenceSession.create(big, mlxCpu);
    try {
      for (let i = 0; i < 3; i++) await s.run({ x });
      const before = minorFaults();
      const out = await s.run({ x });
      const faults = minorFaults() - before;
      expectSameOutputs(out, want, tol);
      // The result's host block is pooled, and the product's buffer cached: a few pages at most.
      expect(faults).toBeLessThan((M * N * 4) / 4096 / 10);
    } finally {
      await s.release();
    }
  });
});
