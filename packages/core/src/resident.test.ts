// Resident arrays (Array.fromTypedArray / fromBytes with { resident: true }): the same values as
// ordinary uploads, read by MLX's kernels like any array; on Linux's CPU build, held in the arena of
// huge-page mappings that memory.resident() reports, counted in memory.active(), and given back when
// their arrays are freed.
import { describe, expect, it } from 'vitest';
import { CORE_INDEX, runScript } from '../test/child.js';
import { advisedBytes } from '../test/smaps.js';
import * as mx from './index.js';

const MB = 1 << 20;
/** Where the arena is used: Linux, MLX's CPU build (a GPU build's host arrays are its allocator's). */
const arena = process.platform === 'linux' && !mx.gpuAvailable();

describe('resident arrays', () => {
  it('hold the values given, of every width, for kernels and reads alike', () => {
    const cases: [mx.Dtype, ArrayBufferView][] = [
      ['float32', Float32Array.from({ length: 1000 }, (_, i) => Math.sin(i) * 1e3)],
      ['float16', Uint16Array.from({ length: 333 }, (_, i) => 0x3c00 + i)],
      ['int8', Int8Array.from({ length: 77 }, (_, i) => (i * 37) % 256)],
      ['int64', BigInt64Array.from({ length: 9 }, (_, i) => BigInt(i) * 10n ** 15n - 7n)],
      ['bool', Uint8Array.from({ length: 5 }, (_, i) => i & 1)],
      ['float32', new Float32Array(0)],
    ];
    for (const [dtype, data] of cases) {
      const n = (data as Float32Array).length;
      const a = mx.Array.fromTypedArray(data, [n], dtype, { resident: true });
      const b = mx.Array.fromTypedArray(data, [n], dtype);
      expect(Array.from(a.toTypedArray() as Iterable<unknown>)).toEqual(Array.from(b.toTypedArray() as Iterable<unknown>));
      if (dtype !== 'bool' && n > 0) {
        // An op reads the arena's buffer: a sum against the ordinary copy's.
        const sa = mx.sum(mx.astype(a, 'float64')).item();
        const sb = mx.sum(mx.astype(b, 'float64')).item();
        expect(sa).toBe(sb);
      }
      a.dispose();
      b.dispose();
    }
    const bytes = Uint8Array.from({ length: 24 }, (_, i) => i * 11);
    const c = mx.Array.fromBytes(bytes, [2, 3], 'int32', { resident: true });
    expect(Array.from(c.toTypedArray() as Int32Array)).toEqual(Array.from(new Int32Array(bytes.buffer)));
    c.dispose();
  });

  it('a weight larger than a chunk gets a mapping of its own, given back when it is freed', () => {
    const before = mx.memory.resident();
    const activeBefore = mx.memory.active();
    const n = (12 * MB) / 4 + 3;
    const data = Float32Array.from({ length: n }, (_, i) => i % 1024);
    const a = mx.Array.fromTypedArray(data, [n], 'float32', { resident: true });
    const want = data.reduce((s, v) => s + v, 0);
    expect(mx.scope(() => mx.sum(mx.astype(a, 'float64')).item())).toBe(want);
    const held = mx.memory.resident();
    if (arena) {
      expect(held.live - before.live).toBe(n * 4);
      // Its data rounded up to 2 MiB pages, and the 4 KiB page before them for its size word.
      expect(held.mapped - before.mapped).toBeGreaterThanOrEqual(14 * MB);
      expect(held.mapped - before.mapped).toBeLessThanOrEqual(14 * MB + 64 * 1024);
      expect(mx.memory.active() - activeBefore).toBeGreaterThanOrEqual(n * 4);
    } else {
      expect(held).toEqual(before);
    }
    a.dispose();
    expect(mx.memory.resident()).toEqual(before);
    expect(mx.memory.active()).toBeLessThanOrEqual(activeBefore);
  });

  it('memory.peak() counts resident arrays as memory.active() does, however they come and go', () => {
    mx.memory.resetPeak();
    const base = mx.memory.active();
    expect(mx.memory.peak()).toBe(base);
    const n = (4 * MB) / 4;
    const r = mx.Array.fromTypedArray(new Float32Array(n).fill(1), [n], 'float32', { resident: true });
    const held = mx.memory.active();
    expect(mx.memory.peak()).toBe(held);
    // MLX's own arrays on top: the peak is both at once.
    const m = mx.full([n], 2).eval();
    const both = mx.memory.active();
    // (full()'s fill value, a scalar, was held for a moment too.)
    const peak = mx.memory.peak();
    expect(peak).toBeGreaterThanOrEqual(both);
    expect(peak).toBeLessThanOrEqual(both + 64);
    r.dispose();
    m.dispose();
    expect(mx.memory.active()).toBe(base);
    expect(mx.memory.peak()).toBe(peak);
    mx.memory.resetPeak();
    expect(mx.memory.peak()).toBe(base);
  });

  it.runIf(arena)('asks for huge pages before the data is written', () => {
    const before = mx.memory.resident();
    const advised = advisedBytes();
    const n = (10 * MB) / 4;
    const a = mx.Array.fromTypedArray(new Float32Array(n).fill(0.5), [n], 'float32', { resident: true });
    const after = mx.memory.resident();
    // Within the process's budget of advised memory (128 MiB by default), which nothing else here comes near.
    expect(after.huge - before.huge).toBe(10 * MB);
    expect(advisedBytes() - advised).toBe(10 * MB);
    a.dispose();
    expect(mx.memory.resident().huge).toBe(before.huge);
  });

  it.runIf(arena)('small arrays share a chunk, which outlives its arrays and is reused from its start', () => {
    const data = new Float32Array(1024).fill(2);
    const first = Array.from({ length: 8 }, () => mx.Array.fromTypedArray(data, [1024], 'float32', { resident: true }));
    const mapped = mx.memory.resident().mapped;
    const more = Array.from({ length: 8 }, () => mx.Array.fromTypedArray(data, [1024], 'float32', { resident: true }));
    expect(mx.memory.resident().mapped).toBe(mapped);
    for (const a of [...first, ...more]) a.dispose();
    const left = mx.memory.resident();
    expect(left.live).toBe(0);
    // Filling more than a chunk's 32 MiB one small array at a time opens a second chunk only once
    // the first is full; all freed, the arena keeps one chunk.
    const block = new Float32Array((MB - 64) / 4).fill(1);
    const many = Array.from({ length: 40 }, () => mx.Array.fromTypedArray(block, [block.length], 'float32', { resident: true }));
    expect(mx.memory.resident().live).toBe(40 * block.byteLength);
    expect(mx.memory.resident().mapped).toBeGreaterThan(left.mapped);
    for (const a of many) a.dispose();
    expect(mx.memory.resident()).toEqual({ live: 0, mapped: 32 * MB, huge: 32 * MB });
  });

  it.runIf(arena)('MLXC_HUGEPAGES sets the budget of advised memory in MiB; a bad value is a clear error', () => {
    // A 6 MiB weight (in the shared 32 MiB chunk, which is over a budget of 16), then two 10 MiB
    // weights of their own mappings: the first within the budget, the second past it.
    const code = `
      import * as mx from ${CORE_INDEX};
      const MB = 1 << 20;
      const make = (mib) => mx.Array.fromTypedArray(new Float32Array((mib * MB) / 4), [(mib * MB) / 4], 'float32', { resident: true });
      const out = {};
      try {
        const small = make(6);
        out.small = mx.memory.resident().huge;
        const a = make(10);
        out.first = mx.memory.resident().huge;
        const b = make(10);
        out.second = mx.memory.resident().huge;
      } catch (e) {
        out.error = e.message;
      }
      console.log(JSON.stringify(out));`;
    const run = (value: string) => {
      const r = runScript(code, { MLXC_HUGEPAGES: value });
      expect(r.status, r.stderr).toBe(0);
      return JSON.parse(r.stdout.trim().split('\n').at(-1)!);
    };
    expect(run('16')).toEqual({ small: 0, first: 10 * MB, second: 10 * MB });
    expect(run('0')).toEqual({ small: 0, first: 0, second: 0 });
    expect(run('64')).toEqual({ small: 32 * MB, first: 42 * MB, second: 52 * MB });
    expect(run('lots').error).toMatch(/MLXC_HUGEPAGES=lots: expected a budget in MiB \(0: no huge pages\)/);
  });
});
