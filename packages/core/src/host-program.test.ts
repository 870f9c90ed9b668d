// HostProgram: a captured (or compiled) function over host data in one native call. Each result is
// compared with the same function applied to arrays made from the same data (eager MLX ops), on
// new data every run, so a run that kept an earlier run's values would fail.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';

const rand = (n: number, seed: number) => Float32Array.from({ length: n }, (_, i) => Math.sin(seed * 97 + i * 1.3));

describe('HostProgram', () => {
  const w = mx.array(rand(12, 1), { shape: [4, 3] });
  const f = (x: mx.Array, idx: mx.Array) => [mx.tanh(mx.matmul(x, w)), mx.add(mx.take(mx.sum(x, -1), idx, 0), 1)];

  it('runs the function over several host inputs and returns every result', () => {
    const g = mx.captureGraph(f);
    const p = new mx.HostProgram(
      g,
      [
        { dtype: 'float32', shape: [5, 4] },
        { dtype: 'int32', shape: [2] },
      ],
      [
        { dtype: 'float32', shape: [5, 3] },
        { dtype: 'float32', shape: [2] },
      ],
    );
    for (let k = 0; k < 3; k++) {
      const x = rand(20, 10 + k);
      const idx = Int32Array.of(k, 4 - k);
      const [y0, y1] = p.run([x, idx]) as Float32Array[];
      const [e0, e1] = f(mx.array(x, { shape: [5, 4] }), mx.array(idx));
      expect(Array.from(y0 as Float32Array)).toEqual(Array.from(e0.toTypedArray() as Float32Array));
      expect(Array.from(y1 as Float32Array)).toEqual(Array.from(e1.toTypedArray() as Float32Array));
      // Each result has a buffer of its own.
      expect(y0.byteOffset).toBe(0);
      expect(y0.buffer.byteLength).toBe(15 * 4);
      expect(y0.buffer).not.toBe(y1.buffer);
    }
    g.dispose();
  });

  it('gives large results populated memory of the run: the largest a view, pooled unless asked not to', async () => {
    // y [640, 512] float32 (1.25 MiB) and its row sums (small), sync and async, pooled or not.
    const g = mx.captureGraph((x: mx.Array) => {
      const y = mx.tanh(x);
      return [y, mx.sum(y, -1)];
    });
    for (const pooledResults of [true, false]) {
      const p = new mx.HostProgram(
        g,
        [{ dtype: 'float32', shape: [640, 512] }],
        [
          { dtype: 'float32', shape: [640, 512] },
          { dtype: 'float32', shape: [640] },
        ],
        undefined,
        { pooledResults },
      );
      for (let k = 0; k < 4; k++) {
        const x = rand(640 * 512, 20 + k);
        const handedOut = mx.hostMemory.stats().allocations + mx.hostMemory.stats().reuses;
        const [y, r] = (k % 2 ? await p.runAsync([x]) : p.run([x])) as Float32Array[];
        const taken = mx.hostMemory.stats().allocations + mx.hostMemory.stats().reuses - handedOut;
        const [e0, e1] = [mx.tanh(mx.array(x, { shape: [640, 512] }))].flatMap((t) => [t, mx.sum(t, -1)]);
        expect(Buffer.from(y.buffer, y.byteOffset, y.byteLength).equals(Buffer.from((e0.toTypedArray() as Float32Array).buffer))).toBe(
          true,
        );
        expect(Array.from(r)).toEqual(Array.from(e1.toTypedArray() as Float32Array));
        // The small result is a copy of its own; the large one a block of the pool (or not).
        expect(r.buffer).not.toBe(y.buffer);
        expect(r.buffer.byteLength).toBe(640 * 4);
        expect({ k, taken }).toEqual({ k, taken: pooledResults ? 1 : 0 });
        e0.dispose();
        e1.dispose();
      }
    }
    g.dispose();
  });

  it('reads a single input from a view and writes a single result in place', () => {
    const h = mx.captureGraph((x: mx.Array) => mx.exp(mx.transpose(x)));
    const p = new mx.HostProgram(h, [{ dtype: 'float32', shape: [2, 3] }], [{ dtype: 'float32', shape: [3, 2] }]);
    const backing = rand(10, 3);
    const view = backing.subarray(4, 10);
    const [y] = p.run([view]);
    const e = mx.exp(mx.transpose(mx.array(view.slice(), { shape: [2, 3] })));
    expect(Array.from(y as Float32Array)).toEqual(Array.from(e.toTypedArray() as Float32Array));
    h.dispose();
  });

  it('refuses inputs of the wrong size and results of another signature, with specific errors', () => {
    const g = mx.captureGraph((x: mx.Array) => mx.sum(x, -1));
    const wrong = new mx.HostProgram(g, [{ dtype: 'float32', shape: [2, 3] }], [{ dtype: 'float32', shape: [3] }]);
    expect(() => wrong.run([new Float32Array(5)])).toThrow(/input 0 must be 24 bytes of float32/);
    expect(() => wrong.run([new Float32Array(6)])).toThrow(/result 0 is float32 \[2\], the caller expects float32 \[3\]/);
    const right = new mx.HostProgram(g, [{ dtype: 'float32', shape: [2, 3] }], [{ dtype: 'float32', shape: [2] }]);
    expect(Array.from(right.run([Float32Array.of(1, 2, 3, 4, 5, 6)])[0] as Float32Array)).toEqual([6, 15]);
    expect(() => new mx.HostProgram(((x: mx.Array) => x) as never, [], [])).toThrow(/compile\(\) or captureGraph\(\)/);
    g.dispose();
  });

  it('carries every integer and float dtype, and bool', () => {
    for (const dtype of ['bool', 'uint8', 'int8', 'int16', 'uint16', 'int32', 'uint32', 'int64', 'uint64', 'float16', 'float64'] as const) {
      const g = mx.captureGraph((x: mx.Array) => mx.stack([x, x]));
      const p = new mx.HostProgram(g, [{ dtype, shape: [3] }], [{ dtype, shape: [2, 3] }]);
      const ctor = mx.typedArrayCtor(dtype);
      const big = dtype === 'int64' || dtype === 'uint64';
      const x = new ctor(3);
      for (let i = 0; i < 3; i++) (x as unknown as (number | bigint)[])[i] = big ? BigInt(i + 1) : dtype === 'bool' ? i % 2 : i + 1;
      const [y] = p.run([x]);
      expect(y).toBeInstanceOf(ctor);
      expect(Array.from(y as ArrayLike<number | bigint>)).toEqual([
        ...Array.from(x as ArrayLike<number | bigint>),
        ...Array.from(x as ArrayLike<number | bigint>),
      ]);
      g.dispose();
    }
  });

  it('takes and returns Arrays beside host data, and writes a consumed input in place', () => {
    // A KV-cache-shaped step: the cache (an Array the caller keeps) gets the host rows at row 5,
    // and the sum of the new rows comes back as host data.
    const [B, T, D] = [4, 1024, 1024];
    const g = mx.captureGraph((x: mx.Array, cache: mx.Array) => [
      mx.sliceUpdate(cache, x, [0, 5, 0], [B, 6, D], [1, 1, 1]),
      mx.sum(x, [1, 2]),
    ]);
    const p = new mx.HostProgram(
      g,
      [
        { dtype: 'float32', shape: [B, 1, D] },
        { dtype: 'float32', shape: [B, T, D], array: true },
      ],
      [
        { dtype: 'float32', shape: [B, T, D], array: true },
        { dtype: 'float32', shape: [B] },
      ],
    );
    const x = Float32Array.from({ length: B * D }, (_, i) => (i % 7) - 3);
    const expectedSums = Array.from({ length: B }, (_, b) => x.subarray(b * D, (b + 1) * D).reduce((a, v) => a + v, 0));
    const check = (cache: mx.Array) => {
      const all = cache.toTypedArray() as Float32Array;
      for (let b = 0; b < B; b++) {
        expect(Array.from(all.subarray(b * T * D + 5 * D, b * T * D + 6 * D))).toEqual(Array.from(x.subarray(b * D, (b + 1) * D)));
        expect(all[b * T * D + 4 * D]).toBe(1);
        expect(all[b * T * D + 6 * D]).toBe(1);
      }
    };
    const bytes = B * T * D * 4;
    // Kept: the caller's cache is read, not written; the result is a new array.
    let cache = mx.ones([B, T, D]);
    mx.evaluate(cache);
    const kept = p.run([x, cache]);
    expect(cache.disposed).toBe(false);
    check(kept[0] as mx.Array);
    expect((cache.toTypedArray() as Float32Array)[5 * D]).toBe(1);
    expect(Array.from(kept[1] as Float32Array)).toEqual(expectedSums);
    (kept[0] as mx.Array).dispose();
    // Consumed: the run holds the cache's only reference and the update writes into its buffer
    // (no second cache at the peak); the handle is disposed.
    const before = mx.memory.active();
    mx.memory.resetPeak();
    const taken = p.run([x, cache], [false, true]);
    expect(cache.disposed).toBe(true);
    expect(mx.memory.peak() - before).toBeLessThan(bytes / 2);
    check(taken[0] as mx.Array);
    expect(Array.from(taken[1] as Float32Array)).toEqual(expectedSums);
    // Not consumed, the peak holds two caches.
    cache = taken[0] as mx.Array;
    mx.memory.resetPeak();
    const copied = p.run([x, cache]);
    expect(mx.memory.peak() - before).toBeGreaterThanOrEqual(bytes);
    (copied[0] as mx.Array).dispose();
    cache.dispose();
    g.dispose();
  });

  it('refuses Array inputs of another signature without consuming them', () => {
    const g = mx.captureGraph((a: mx.Array, b: mx.Array) => [mx.add(a, b)]);
    const p = new mx.HostProgram(
      g,
      [
        { dtype: 'float32', shape: [3] },
        { dtype: 'float32', shape: [3], array: true },
      ],
      [{ dtype: 'float32', shape: [3], array: true }],
    );
    const wrong = mx.array([1, 2], { dtype: 'float32' });
    expect(() => p.run([Float32Array.of(1, 2, 3), wrong])).toThrow(/input 1 is float32 \[2\], the program takes float32 \[3\]/);
    expect(wrong.disposed).toBe(false);
    expect(() => p.run([Float32Array.of(1, 2, 3), Float32Array.of(1, 2, 3)])).toThrow(/input 1 must be an Array of float32/);
    const b = mx.array([10, 20, 30], { dtype: 'float32' });
    const [y] = p.run([Float32Array.of(1, 2, 3), b]) as mx.Array[];
    expect(Array.from(y.toTypedArray() as Float32Array)).toEqual([11, 22, 33]);
    b.dispose();
    expect(() => p.run([Float32Array.of(1, 2, 3), b])).toThrow(/not a disposed one/);
    // A lazy input is computed first.
    const lazy = mx.multiply(mx.array([1, 1, 1], { dtype: 'float32' }), 2);
    const [z] = p.run([Float32Array.of(1, 2, 3), lazy], [false, true]) as mx.Array[];
    expect(lazy.disposed).toBe(true);
    expect(Array.from(z.toTypedArray() as Float32Array)).toEqual([3, 4, 5]);
    y.dispose();
    z.dispose();
    wrong.dispose();
    g.dispose();
  });

  it('runs on the stream evaluation thread with runAsync, with the results of run()', async () => {
    // The trace's primitives on an any-thread stream, which the evaluation thread can run.
    const stream = mx.newStream('cpu', { anyThread: true });
    const g = mx.captureGraph((x: mx.Array, cache: mx.Array) => [
      mx.sliceUpdate(cache, mx.exp(x, { stream }), [0, 2], [2, 3], [1, 1], { stream }),
      mx.sum(x, null, { stream }),
    ]);
    const p = new mx.HostProgram(
      g,
      [
        { dtype: 'float32', shape: [2, 1] },
        { dtype: 'float32', shape: [2, 4], array: true },
      ],
      [
        { dtype: 'float32', shape: [2, 4], array: true },
        { dtype: 'float32', shape: [] },
      ],
      stream,
    );
    let cache = mx.zeros([2, 4], 'float32', { stream });
    for (let k = 0; k < 6; k++) {
      const x = Float32Array.of(k, -k);
      const kept = p.run([x, cache]) as [mx.Array, Float32Array];
      const before = mx.hostProgramStaticRuns();
      // Consumed on odd rounds, kept on even ones; the first call made the program on this thread.
      const taken = k % 2 === 1;
      const t0 = performance.now();
      const [next, sum] = (await p.runAsync([x, cache], [false, taken])) as [mx.Array, Float32Array];
      // Its time on the evaluation thread, without the hand-offs: under the call's own.
      expect(p.lastAsyncMs).toBeGreaterThan(0);
      expect(p.lastAsyncMs).toBeLessThanOrEqual(performance.now() - t0);
      expect(cache.disposed).toBe(taken);
      // The static executor ran it (on the evaluation thread).
      if (process.env.MLXC_INLINE_EVAL !== '0') expect(mx.hostProgramStaticRuns() - before).toBe(1);
      expect(Array.from(next.toTypedArray() as Float32Array)).toEqual(Array.from(kept[0].toTypedArray() as Float32Array));
      expect(Array.from(sum)).toEqual(Array.from(kept[1]));
      kept[0].dispose();
      if (!taken) cache.dispose();
      cache = next;
    }
    expect(Array.from(cache.toTypedArray() as Float32Array)).toEqual([
      0,
      0,
      Math.fround(Math.exp(5)),
      0,
      0,
      0,
      Math.fround(Math.exp(-5)),
      0,
    ]);
    // A refused input throws before anything is queued; an input given to be consumed is given up
    // all the same (as with run()), one kept is not.
    const wrong = mx.zeros([3, 4], 'float32', { stream });
    expect(() => p.runAsync([Float32Array.of(1, 2), wrong])).toThrow(/input 1 is float32 \[3, 4\], the program takes float32 \[2, 4\]/);
    expect(wrong.disposed).toBe(false);
    expect(() => p.runAsync([Float32Array.of(1, 2), wrong], [false, true])).toThrow(/the program takes float32 \[2, 4\]/);
    expect(wrong.disposed).toBe(true);
    cache.dispose();
    g.dispose();
    // A trace on the default stream (which only this thread may evaluate) runs here instead.
    const h = mx.captureGraph((x: mx.Array) => [mx.exp(x)]);
    const q = new mx.HostProgram(h, [{ dtype: 'float32', shape: [2] }], [{ dtype: 'float32', shape: [2] }]);
    expect(Array.from((await q.runAsync([Float32Array.of(0, 1)]))[0] as Float32Array)).toEqual([1, Math.fround(Math.E)]);
    expect(Array.from((await q.runAsync([Float32Array.of(1, 0)]))[0] as Float32Array)).toEqual([Math.fround(Math.E), 1]);
    h.dispose();
  });
});
