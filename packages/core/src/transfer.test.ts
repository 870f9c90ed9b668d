// Data in and out of arrays through mlxc_array_new_data_on / mlxc_array_read: the paths that, on
// MLX's CUDA build, copy straight to and from device memory. Here (CPU) they are host copies; the
// values are checked against the JS data they came from and against MLX's own data accessor.
import { loadMlxC } from '@mlx/sys';
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';
import { check } from './native.js';

const raw = loadMlxC();
const bytes = (t: ArrayBufferView) => Buffer.from(t.buffer, t.byteOffset, t.byteLength);

describe('transfers', () => {
  it('round-trips large and small data of every width unchanged', () => {
    for (const n of [3, 1 << 18, (1 << 20) + 7]) {
      const f = new Float32Array(n).map((_, i) => Math.sin(i) * 1e3);
      const i8 = new Int8Array(n).map((_, i) => (i * 37) % 251);
      const i64 = new BigInt64Array(n).map((_, i) => BigInt(i) * 123456789n);
      for (const data of [f, i8, i64]) {
        const a = mx.Array.fromTypedArray(data, [n]);
        const back = a.toTypedArray();
        expect(back.constructor).toBe(data.constructor);
        expect(bytes(back).equals(bytes(data))).toBe(true);
        a.dispose();
      }
    }
  });

  it('reads what MLX itself reads at the data pointer, for results and offset views', () => {
    const n = 1 << 18;
    const x = mx.Array.fromTypedArray(
      new Float32Array(n).map((_, i) => i % 1000),
      [n],
    );
    const y = mx.multiply(x, 3).eval();
    const viaMlx = raw.koffi.decode(raw.fn.mlx_array_data_float32(y.handle), 'float', n) as Float32Array;
    expect(bytes(y.toTypedArray()).equals(bytes(Float32Array.from(viaMlx)))).toBe(true);
    // A slice that starts inside the buffer (row-contiguous, non-zero offset).
    const s = mx.slice(y, [1000], [n], [1]);
    expect(bytes(s.toTypedArray()).equals(bytes(Float32Array.from(viaMlx).subarray(1000)))).toBe(true);
    for (const a of [x, y, s]) a.dispose();
  });

  it('keeps data for a CPU stream in host memory (device index -1)', () => {
    using cpu = mx.newStream('cpu');
    const a = mx.withStream(cpu, () => mx.Array.fromTypedArray(new Float32Array(1 << 18), [1 << 18]));
    expect(a.deviceIndex).toBe(-1);
    a.dispose();
  });

  it('refuses a read of the wrong size and a non-contiguous array, with the reason', () => {
    const a = mx.reshape(mx.arange(0, 12, 1, 'float32'), [3, 4]).eval();
    const t = mx.transpose(a, [1, 0]).eval();
    const read = (h: typeof a, bytes: number) => () =>
      check(raw.fn.mlxc_array_read(new Uint8Array(bytes), bytes, h.handle), 'mlxc_array_read');
    expect(read(a, 44)).toThrow(/44 bytes asked of an array of 48/);
    expect(read(t, 48)).toThrow(/not row-contiguous/);
    a.dispose();
    t.dispose();
  });
});
