// Pooled host blocks (hostBuffer) and reads into a given destination (Array.readInto). On this CPU
// build the blocks are page-aligned ordinary memory; the values are checked against toTypedArray
// and the JS data they came from, and the pool's reuse against its counters after a real GC.
import { release } from 'node:os';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { loadMlxC } from '@mlx/sys';
import { afterAll, describe, expect, it } from 'vitest';
import * as mx from './index.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
const raw = loadMlxC();

async function collectGarbage(): Promise<void> {
  // FinalizationRegistry callbacks run in a task after the collection that found the objects.
  for (let i = 0; i < 4; i++) {
    gc();
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('hostBuffer', () => {
  const limit = mx.hostMemory.stats().limitBytes;
  afterAll(() => {
    mx.hostMemory.setLimit(limit);
  });

  it('gives size-classed blocks, none below the minimum', () => {
    expect(mx.hostBuffer(mx.HOST_BLOCK_MIN_BYTES - 1)).toBeUndefined();
    const n = (3 << 20) + 5;
    const ab = mx.hostBuffer(n)!;
    expect(ab).toBeInstanceOf(ArrayBuffer);
    expect(ab.byteLength).toBe(mx.hostSizeClass(n));
    expect(ab.byteLength).toBeGreaterThanOrEqual(n);
    expect(ab.byteLength).toBeLessThanOrEqual(n * 1.125 + 4096);
    // No CUDA here: ordinary memory.
    expect(mx.hostMemory.stats().pinned).toBe(false);
    for (const bad of [-1, 1.5, Number.NaN]) expect(() => mx.hostBuffer(bad)).toThrow(TypeError);
  });

  it('reads into a block and uploads from one unchanged', () => {
    const n = 1 << 20;
    const src = new Float32Array(n).map((_, i) => Math.cos(i) * 100);
    const a = mx.multiply(mx.Array.fromTypedArray(src, [n]), 2).eval();
    const dst = new Float32Array(mx.hostBuffer(n * 4)!, 0, n);
    a.readInto(dst);
    expect(Buffer.from(dst.buffer, 0, n * 4).equals(Buffer.from((a.toTypedArray() as Float32Array).buffer))).toBe(true);
    // The block back in as a feed.
    const b = mx.Array.fromTypedArray(dst, [n]);
    expect(Array.from(mx.subtract(b, a).toTypedArray() as Float32Array).every((v) => v === 0)).toBe(true);
    a.dispose();
    b.dispose();
  });

  it('readInto checks the destination class and length, and reads views contiguous', () => {
    const a = mx.array([
      [1, 2, 3],
      [4, 5, 6],
    ]);
    expect(() => a.readInto(new Int32Array(6))).toThrow(/Float32Array/);
    expect(() => a.readInto(new Float32Array(5))).toThrow(RangeError);
    const t = mx.transpose(a);
    expect(Array.from(t.readInto(new Float32Array(6)) as Float32Array)).toEqual([1, 4, 2, 5, 3, 6]);
    a.dispose();
    t.dispose();
  });

  it('returns a block to the pool once its ArrayBuffer is collected, and reuses it', async () => {
    const n = 5 << 20;
    const before = mx.hostMemory.stats();
    let ab: ArrayBuffer | undefined = mx.hostBuffer(n);
    expect(mx.hostMemory.stats().liveBytes).toBe(before.liveBytes + ab!.byteLength);
    new Uint8Array(ab!).fill(7);
    ab = undefined;
    await collectGarbage();
    const after = mx.hostMemory.stats();
    expect(after.cachedBytes).toBeGreaterThanOrEqual(before.cachedBytes + mx.hostSizeClass(n));
    const again = mx.hostBuffer(n)!;
    expect(mx.hostMemory.stats().reuses).toBe(after.reuses + 1);
    expect(again.byteLength).toBe(mx.hostSizeClass(n));
  });

  it('stays within its limit and frees cached blocks over it', async () => {
    mx.hostMemory.trim(true);
    const { liveBytes } = mx.hostMemory.stats();
    mx.hostMemory.setLimit(liveBytes + (4 << 20));
    const kept = mx.hostBuffer(3 << 20);
    expect(kept).toBeDefined();
    expect(mx.hostBuffer(3 << 20)).toBeUndefined();
    mx.hostMemory.setLimit(limit);
    expect(mx.hostBuffer(3 << 20)).toBeDefined();
    await collectGarbage();
    mx.hostMemory.setLimit(mx.hostMemory.stats().liveBytes);
    expect(mx.hostMemory.stats().cachedBytes).toBe(0);
    mx.hostMemory.setLimit(limit);
    expect(kept!.byteLength).toBe(3 << 20);
  });

  it('gives out at most its live limit of blocks not yet collected (a loop that never lets finalizers run)', () => {
    const before = mx.hostMemory.setLiveLimit(mx.hostMemory.stats().liveBytes + (16 << 20));
    try {
      expect(before).toBe(256 * 2 ** 20);
      const held: ArrayBuffer[] = [];
      // Synchronously, as a loop of runSync() calls holds its results until it yields.
      for (let i = 0; i < 12; i++) {
        const b = mx.hostBuffer(3 << 20);
        if (!b) break;
        held.push(b);
      }
      expect(held.length).toBe(5);
      expect(mx.hostBuffer(3 << 20)).toBeUndefined();
      expect(mx.hostMemory.stats().liveBytes).toBeLessThanOrEqual(mx.hostMemory.stats().liveLimitBytes);
      expect(() => mx.hostMemory.setLiveLimit(-1)).toThrow(/non-negative integer/);
    } finally {
      mx.hostMemory.setLiveLimit(before);
    }
  });

  it('mlxc_host_free refuses a pointer it did not give, without freeing it', () => {
    const libc = raw.koffi.load(process.platform === 'darwin' ? 'libc.dylib' : 'libc.so.6');
    const malloc = libc.func('void *malloc(size_t)');
    const freeC = libc.func('void free(void *)');
    const p = malloc(64);
    expect(raw.fn.mlxc_host_free(p)).not.toBe(0);
    freeC(p);
  });
});

describe('populatedBytes', () => {
  // MADV_POPULATE_WRITE came with Linux 5.14; elsewhere the call does nothing.
  const [major, minor] = (process.platform === 'linux' ? release() : '0.0').split('.').map(Number);
  const populates = major > 5 || (major === 5 && minor >= 14);

  it('gives zero-filled bytes whose pages exist before the first write', () => {
    const n = 64 << 20;
    const before = process.memoryUsage().rss;
    const plain = new Uint8Array(n);
    const afterPlain = process.memoryUsage().rss;
    const b = mx.populatedBytes(n);
    const afterPopulated = process.memoryUsage().rss;
    expect(b).toBeInstanceOf(Uint8Array);
    expect(b.length).toBe(n);
    // Zeros throughout (a sample of every page), and writable.
    for (let i = 0; i < n; i += 4096) expect(b[i]).toBe(0);
    b[n - 1] = 7;
    expect(b[n - 1]).toBe(7);
    expect(plain.length).toBe(n);
    if (populates) {
      // A fresh buffer's pages are made by its first writes; the populated one's are resident already.
      expect(afterPlain - before).toBeLessThan(n / 4);
      expect(afterPopulated - afterPlain).toBeGreaterThan(n * 0.9);
    }
  });

  it('takes sizes under the threshold and refuses bad ones', () => {
    expect(mx.populatedBytes(0).length).toBe(0);
    expect(Array.from(mx.populatedBytes(5))).toEqual([0, 0, 0, 0, 0]);
    for (const bad of [-1, 1.5, Number.NaN]) expect(() => mx.populatedBytes(bad)).toThrow(TypeError);
  });
});

describe('uploads of 1 MiB and more', () => {
  it('hold the data they were made from (MLX-allocated, populated, copied on several threads)', () => {
    // Lengths around the threshold and the copy's 2 MiB parts, from views at odd byte offsets.
    for (const bytes of [(1 << 20) - 4, 1 << 20, (5 << 20) + 12]) {
      const n = bytes / 4;
      const backing = new Uint8Array(bytes + 3);
      const f = new Float32Array(n);
      for (let i = 0; i < n; i++) f[i] = (i % 9973) * 0.5 + 1 / (1 + i);
      backing.set(new Uint8Array(f.buffer), 3);
      const a = mx.Array.fromBytes(backing.subarray(3, 3 + bytes), [n], 'float32');
      const back = a.toTypedArray() as Float32Array;
      expect(back.length).toBe(n);
      expect(Buffer.from(back.buffer, back.byteOffset, back.byteLength).equals(Buffer.from(f.buffer))).toBe(true);
      // The array computes like any other: its largest element against the data's.
      let want = f[0];
      for (let i = 1; i < n; i++) want = Math.max(want, f[i]);
      const s = mx.max(a);
      expect(s.item()).toBe(want);
      s.dispose();
      a.dispose();
    }
  });
});
