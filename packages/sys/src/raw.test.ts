// A few calls straight through the koffi declarations: no safe layer, handles freed by hand.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadMlxC, MlxDtype, type MlxHandle } from './index.js';

const c = loadMlxC();
const { fn, koffi } = c;
const messages: string[] = [];
let handler: unknown;
let stream: MlxHandle;

beforeAll(() => {
  // mlx-c's default handler exits the process; this one records the message instead.
  handler = koffi.register(
    (msg: string) => {
      messages.push(msg);
    },
    koffi.pointer(c.types.callbacks.mlx_error_handler_func as never),
  );
  fn.mlx_set_error_handler(handler, null, null);
  stream = fn.mlx_default_cpu_stream_new();
});

afterAll(() => {
  fn.mlx_stream_free(stream);
});

function fromData(data: Float32Array, shape: number[]): MlxHandle {
  const h = fn.mlx_array_new_data(data, Int32Array.from(shape), shape.length, MlxDtype.FLOAT32);
  expect(h.ctx).toBeTruthy();
  return h;
}

function readFloat32(h: MlxHandle): number[] {
  expect(fn.mlx_array_eval(h)).toBe(0);
  const n = Number(fn.mlx_array_size(h));
  return Array.from(koffi.decode(fn.mlx_array_data_float32(h), 'float', n) as ArrayLike<number>);
}

describe('raw koffi calls', () => {
  it('reports the version of MLX it was built against', () => {
    const s = fn.mlx_string_new();
    expect(fn.mlx_version(s as never)).toBe(0);
    expect(fn.mlx_string_data(s)).toMatch(/^\d+\.\d+\.\d+/);
    fn.mlx_string_free(s);
  });

  it('creates an array from data and reads its shape, dtype and values back', () => {
    const a = fromData(new Float32Array([1, 2, 3, 4, 5, 6]), [2, 3]);
    expect(fn.mlx_array_ndim(a)).toBe(2);
    expect(Array.from(koffi.decode(fn.mlx_array_shape(a), 'int', 2) as ArrayLike<number>)).toEqual([2, 3]);
    expect(Number(fn.mlx_array_size(a))).toBe(6);
    expect(fn.mlx_array_dtype(a)).toBe(MlxDtype.FLOAT32);
    expect(Number(fn.mlx_array_nbytes(a))).toBe(24);
    expect(readFloat32(a)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(fn.mlx_array_free(a)).toBe(0);
  });

  it('adds two arrays into an out-parameter and reads the sum', () => {
    const a = fromData(new Float32Array([1, 2, 3]), [3]);
    const b = fromData(new Float32Array([10, 20, 30.5]), [3]);
    const res = fn.mlx_array_new();
    expect(fn.mlx_add(res, a, b, stream)).toBe(0);
    expect(res.ctx).toBeTruthy();
    expect(readFloat32(res)).toEqual([11, 22, 33.5]);
    for (const h of [a, b, res]) fn.mlx_array_free(h);
  });

  it('reads a scalar through the item accessor (which evaluates)', () => {
    const a = fn.mlx_array_new_float32(2.5);
    const b = fn.mlx_array_new_float32(4);
    const res = fn.mlx_array_new();
    expect(fn.mlx_multiply(res, a, b, stream)).toBe(0);
    const out = [0];
    expect(fn.mlx_array_item_float32(out, res)).toBe(0);
    expect(out[0]).toBe(10);
    for (const h of [a, b, res]) fn.mlx_array_free(h);
  });

  it("a bad matmul returns non-zero and hands MLX's message to the error handler", () => {
    messages.length = 0;
    const a = fromData(new Float32Array([1, 2, 3, 4, 5, 6]), [2, 3]);
    const bad = fromData(new Float32Array(8), [2, 4]);
    const res = fn.mlx_array_new();
    expect(fn.mlx_matmul(res, a, bad, stream)).not.toBe(0);
    expect(messages).toHaveLength(1);
    expect(messages[0]).toContain('[matmul]');
    expect(messages[0]).toContain('(2,3)');
    expect(messages[0]).toContain('(2,4)');
    // The process is still alive and the library still computes: [2,3] x [3,1] of ones = row sums.
    const ones = fromData(new Float32Array([1, 1, 1]), [3, 1]);
    const ok = fn.mlx_array_new();
    expect(fn.mlx_matmul(ok, a, ones, stream)).toBe(0);
    expect(readFloat32(ok)).toEqual([6, 15]);
    expect(messages).toHaveLength(1);
    for (const h of [a, bad, res, ones, ok]) fn.mlx_array_free(h);
  });

  it('frees what it allocates: active memory returns to where it was', () => {
    const before = [0];
    expect(fn.mlx_get_active_memory(before)).toBe(0);
    const a = fromData(new Float32Array(1 << 16).fill(1), [1 << 16]);
    expect(fn.mlx_array_eval(a)).toBe(0);
    const during = [0];
    fn.mlx_get_active_memory(during);
    expect(Number(during[0]) - Number(before[0])).toBeGreaterThanOrEqual(4 << 16);
    fn.mlx_array_free(a);
    const after = [0];
    fn.mlx_get_active_memory(after);
    expect(Number(after[0])).toBe(Number(before[0]));
  });
});
