// Pooled host blocks (hostBuffer) and reads into a given destination (Array.readInto). On this CPU
// build the blocks are page-aligned ordinary memory; the values are checked against toTypedArray
// and the JS data they came from, and the pool's reuse against its counters after a real GC.
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

  it('mlxc_host_free refuses a pointer it did not give, without freeing it', () => {
    const libc = raw.koffi.load(process.platform === 'darwin' ? 'libc.dylib' : 'libc.so.6');
    const malloc = libc.func('void *malloc(size_t)');
    const freeC = libc.func('void free(void *)');
    const p = malloc(64);
    expect(raw.fn.mlxc_host_free(p)).not.toBe(0);
    freeC(p);
  });
});
