// Shape, dtype and ndim are immutable in MLX, so an Array reads each from the library once and keeps
// it; the first read of any of them reads all three in one call (mlxc_array_meta). Checked by
// counting calls of the raw functions (`fn`, the object that @mlx/core calls through).
import { loadMlxC } from '@mlx/sys';
import { afterEach, describe, expect, it, vi } from 'vitest';
import * as mx from './index.js';
import { fn } from './native.js';

const raw = loadMlxC();
const metadataFns = ['mlx_array_ndim', 'mlx_array_shape', 'mlx_array_dtype', 'mlxc_array_meta'] as const;

/** The shape as MLX reports it, read through the raw functions directly. */
function nativeShape(a: mx.Array): number[] {
  const nd = Number(raw.fn.mlx_array_ndim(a.handle));
  return nd === 0 ? [] : Array.from(raw.koffi.decode(raw.fn.mlx_array_shape(a.handle), 'int', nd) as number[]);
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('Array metadata', () => {
  it('shape, dtype and ndim are what MLX reports, for results of ops and for scalars', () => {
    const a = mx.reshape(mx.arange(0, 24, 1, 'int32'), [2, 3, 4]);
    const t = mx.transpose(a, [2, 0, 1]);
    const s = mx.sum(a);
    const h = mx.astype(t, 'float16');
    expect(nativeShape(a)).toEqual([2, 3, 4]);
    expect([a.shape, a.ndim, a.dtype]).toEqual([nativeShape(a), 3, 'int32']);
    expect([t.shape, t.ndim, t.dtype]).toEqual([nativeShape(t), 3, 'int32']);
    expect(t.shape).toEqual([4, 2, 3]);
    expect([s.shape, s.ndim, s.dtype]).toEqual([[], 0, 'int32']);
    expect([h.shape, h.dtype, h.itemsize]).toEqual([[4, 2, 3], 'float16', 2]);
  });

  it('repeated reads do not call into the library again', () => {
    const spies = metadataFns.map((n) => vi.spyOn(fn, n));
    const calls = () => spies.map((s) => s.mock.calls.length);
    const a = mx.reshape(mx.arange(0, 24), [4, 6]);
    const b = mx.zeros([5], 'uint8');
    // Creating arrays reads none of them.
    expect(calls()).toEqual([0, 0, 0, 0]);

    expect(a.shape).toEqual([4, 6]);
    expect(a.dtype).toBe('float32');
    expect(a.ndim).toBe(2);
    const once = calls();
    expect(once).toEqual([0, 0, 0, 1]);
    for (let i = 0; i < 100; i++) {
      expect(a.shape).toEqual([4, 6]);
      expect(a.dtype).toBe('float32');
      expect(a.ndim).toBe(2);
      expect(a.itemsize).toBe(4);
    }
    expect(calls()).toEqual(once);

    // Each array keeps its own values.
    expect([b.shape, b.dtype, b.ndim]).toEqual([[5], 'uint8', 1]);
    expect(calls()).toEqual([0, 0, 0, 2]);
  });

  it('a rank beyond the one-call buffer still reads its whole shape', () => {
    const dims = Array.from({ length: 33 }, (_, i) => (i % 3) + 1);
    const a = mx.zeros(dims, 'int8');
    expect(a.shape).toEqual(nativeShape(a));
    expect([a.ndim, a.dtype]).toEqual([33, 'int8']);
  });

  it('shape is a copy: changing it leaves the array alone', () => {
    const a = mx.zeros([2, 3]);
    const s = a.shape;
    s.push(7);
    s[0] = 9;
    expect(a.shape).toEqual([2, 3]);
    expect(a.toList()).toEqual([
      [0, 0, 0],
      [0, 0, 0],
    ]);
  });

  it('a disposed array still refuses metadata reads, cached or not', () => {
    const a = mx.zeros([2, 3]);
    expect(a.shape).toEqual([2, 3]);
    a.dispose();
    expect(() => a.shape).toThrow(/disposed/);
    expect(() => a.dtype).toThrow(/disposed/);
    expect(() => a.ndim).toThrow(/disposed/);
  });
});

describe('Array.fromBytes', () => {
  it('reads little-endian element bytes at any alignment', () => {
    const buf = new Uint8Array(1 + 8);
    new DataView(buf.buffer).setFloat32(1, 1.5, true);
    new DataView(buf.buffer).setFloat32(5, -2.25, true);
    const a = mx.Array.fromBytes(buf.subarray(1), [2], 'float32');
    expect(a.toList()).toEqual([1.5, -2.25]);
    expect(() => mx.Array.fromBytes(buf.subarray(1, 8), [2], 'float32')).toThrow(
      'Array.fromBytes: 7 bytes for shape [2] float32, which needs 8',
    );
  });
});
