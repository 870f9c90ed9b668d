// ext.takeRows (mlxc_take_rows): rows of a table by index, an embedding lookup. The expected rows
// are read from the table's own data in JavaScript; the kernel's path (an evaluated table in row
// order, int32 or int64 positions on a CPU stream) and the fallbacks to take are each checked.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';
import { flat } from '../test/numeric.js';

const cpu = { stream: 'cpu' } as const;

/** table[positions] row by row from the JS data (negative positions from the end). */
function expected(data: number[], rows: number, positions: number[]): number[] {
  const width = data.length / rows;
  return positions.flatMap((p) => {
    const k = p < 0 ? p + rows : p;
    return data.slice(k * width, (k + 1) * width);
  });
}

describe('ext.takeRows', () => {
  it('takes rows of float32, float16, int64 and bool tables by int32 and int64 positions, negative ones too', () => {
    const data = Array.from({ length: 7 * 6 }, (_, i) => (i % 11) - 3);
    const positions = [6, 0, -1, 3, -7, 3];
    for (const dtype of ['float32', 'float16', 'int64', 'bool'] as const) {
      const values = dtype === 'bool' ? data.map((v) => (v > 0 ? 1 : 0)) : data;
      const table = mx.array(values, { shape: [7, 2, 3], dtype }).eval();
      for (const idt of ['int32', 'int64'] as const) {
        const idx = mx.array(positions, { shape: [2, 3], dtype: idt });
        const got = mx.ext.takeRows(table, idx, cpu);
        expect(got.shape).toEqual([2, 3, 2, 3]);
        expect(got.dtype).toBe(dtype);
        const read = dtype === 'float16' ? mx.astype(got, 'float32') : got;
        expect(flat(read).map(Number), `${dtype} by ${idt}`).toEqual(expected(values, 7, positions));
      }
    }
  });

  it('copies many rows on the kernel threads, and takes a scalar position and no positions', () => {
    const rows = 300;
    const width = 1024;
    const data = Float32Array.from({ length: rows * width }, (_, i) => Math.sin(i * 0.01));
    const table = mx.array(data, { shape: [rows, width] }).eval();
    const positions = Array.from({ length: 400 }, (_, i) => (i * 37) % rows);
    const got = mx.ext.takeRows(table, mx.array(positions, { dtype: 'int32' }), cpu);
    expect(
      Buffer.from((got.toTypedArray() as Float32Array).buffer).equals(
        Buffer.from(Float32Array.from(expected(Array.from(data), rows, positions)).buffer),
      ),
    ).toBe(true);
    const one = mx.ext.takeRows(table, mx.array(5, { dtype: 'int64' }), cpu);
    expect(one.shape).toEqual([width]);
    expect(flat(one)).toEqual(Array.from(data.subarray(5 * width, 6 * width)));
    expect(mx.ext.takeRows(table, mx.zeros([0], 'int32'), cpu).shape).toEqual([0, width]);
  });

  it('takes a view, a table still to be computed and small integer positions through take', () => {
    const base = mx
      .array(
        Array.from({ length: 12 }, (_, i) => i),
        { shape: [3, 4], dtype: 'float32' },
      )
      .eval();
    // The transpose [4, 3] is a view: row k of it is column k of base.
    const view = mx.ext.takeRows(mx.transpose(base), mx.array([3, 0], { dtype: 'int32' }), cpu);
    expect(flat(view)).toEqual([3, 7, 11, 0, 4, 8]);
    const lazy = mx.ext.takeRows(mx.multiply(base, 2), mx.array([-1], { dtype: 'int64' }), cpu);
    expect(flat(lazy)).toEqual([16, 18, 20, 22]);
    const small = mx.ext.takeRows(base, mx.array([2, 1], { dtype: 'uint8' }), cpu);
    expect(flat(small)).toEqual([8, 9, 10, 11, 4, 5, 6, 7]);
  });

  it('clamps positions past the table (front ends check them first) and refuses non-integer ones', () => {
    const table = mx.array([1, 2, 3, 4, 5, 6], { shape: [3, 2], dtype: 'float32' }).eval();
    expect(flat(mx.ext.takeRows(table, mx.array([5, -9], { dtype: 'int32' }), cpu))).toEqual([5, 6, 1, 2]);
    expect(() => mx.ext.takeRows(table, mx.array([0.5], { dtype: 'float32' }), cpu)).toThrow(/indices must be integers/);
    expect(() => mx.ext.takeRows(mx.array(1), mx.array([0], { dtype: 'int32' }), cpu)).toThrow(/at least one axis/);
  });

  it('differentiates the table (the gradient of take)', () => {
    const table = mx.array([1, 2, 3, 4, 5, 6], { shape: [3, 2], dtype: 'float32' }).eval();
    const idx = mx.array([2, 2, 0], { dtype: 'int32' });
    const g = mx.grad((t: mx.Array) => mx.sum(mx.ext.takeRows(t, idx, cpu)))(table) as mx.Array;
    expect(flat(g)).toEqual([1, 1, 0, 0, 2, 2]);
  });
});
