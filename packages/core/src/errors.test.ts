// MLX errors become MlxError exceptions carrying MLX's message and the failing C function; the
// process keeps working afterwards.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';

function thrown(f: () => unknown): mx.MlxError {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(mx.MlxError);
    return e as mx.MlxError;
  }
  throw new Error('expected an MlxError, nothing was thrown');
}

/** The library still computes after an error: a fresh op gives the right numbers. */
function stillWorks(): void {
  const r = mx.matmul(
    mx.array([
      [1, 2],
      [3, 4],
    ]),
    mx.array([[5], [6]]),
  );
  expect(r.toList()).toEqual([[17], [39]]);
}

describe('MlxError', () => {
  it('bad matmul shapes', () => {
    const e = thrown(() => mx.matmul(mx.zeros([2, 3]), mx.zeros([4, 5])));
    expect(e.name).toBe('MlxError');
    expect(e.functionName).toBe('mlx_matmul');
    expect(e.mlxMessage).toContain('[matmul]');
    expect(e.mlxMessage).toContain('(2,3)');
    expect(e.mlxMessage).toContain('(4,5)');
    expect(e.message).toBe(`mlx_matmul: ${e.mlxMessage}`);
    expect(e.stack).toContain('errors.test.ts');
    stillWorks();
  });

  it('reshape to a wrong size', () => {
    const e = thrown(() => mx.reshape(mx.zeros([6]), [4, 2]));
    expect(e.functionName).toBe('mlx_reshape');
    expect(e.mlxMessage).toMatch(/\[reshape\] Cannot reshape array of size 6 into shape \(4,2\)/);
    stillWorks();
  });

  it('out-of-range axis', () => {
    const e = thrown(() => mx.sum(mx.zeros([2, 3]), 2));
    expect(e.functionName).toBe('mlx_sum_axis');
    expect(e.mlxMessage).toMatch(/Invalid axis 2 for array with 2 dimensions/);
    const e2 = thrown(() => mx.softmax(mx.zeros([2, 3]), [0, -3]));
    expect(e2.functionName).toBe('mlx_softmax_axes');
    const e3 = thrown(() => mx.transpose(mx.zeros([2, 3]), [0, 2]));
    expect(e3.functionName).toBe('mlx_transpose_axes');
    expect(e3.mlxMessage).toContain('[transpose]');
    stillWorks();
  });

  it('shapes that do not broadcast, bad concatenation, bad squeeze', () => {
    const e = thrown(() => mx.add(mx.zeros([2, 3]), mx.zeros([4])));
    expect(e.functionName).toBe('mlx_add');
    expect(e.mlxMessage).toMatch(/broadcast/i);
    expect(thrown(() => mx.concatenate([mx.zeros([2, 3]), mx.zeros([2, 2])], 0)).mlxMessage).toContain('[concatenate]');
    expect(thrown(() => mx.squeeze(mx.zeros([2, 3]), 0)).functionName).toBe('mlx_squeeze_axis');
    stillWorks();
  });

  it('linalg shape errors at construction, numeric failures when the data is read', () => {
    const e = thrown(() => mx.linalg.inv(mx.zeros([2, 3]), { stream: 'cpu' }));
    expect(e.functionName).toBe('mlx_linalg_inv');
    expect(e.mlxMessage).toMatch(/square/i);
    // A singular matrix builds a graph; the LU factorization fails when it is evaluated.
    const singular = mx.linalg.inv(mx.zeros([2, 2]), { stream: 'cpu' });
    const e2 = thrown(() => singular.toList());
    // toList reads through mlxc_array_read_any, which evaluates first.
    expect(e2.functionName).toBe('mlxc_array_read_any');
    expect(e2.mlxMessage).toMatch(/LU factorization failed/);
    stillWorks();
  });

  it('many errors in a row leave no stale message behind', () => {
    for (let i = 0; i < 200; i++) {
      expect(() => mx.reshape(mx.zeros([3]), [2])).toThrow(mx.MlxError);
    }
    // The next successful call is not affected by the earlier failures, and a new error carries its own message.
    stillWorks();
    const e = thrown(() => mx.matmul(mx.zeros([1, 7]), mx.zeros([8, 1])));
    expect(e.mlxMessage).toContain('[matmul]');
    expect(e.mlxMessage).not.toContain('reshape');
  });

  it('JS-side argument errors are plain TypeErrors and RangeErrors, before MLX is called', () => {
    expect(() => mx.array([1, 2], { dtype: 'float8' as never })).toThrow(TypeError);
    expect(() => mx.add(mx.zeros([1]), 'x' as never)).toThrow(TypeError);
    expect(() => mx.array(new Float32Array(2), { shape: [1.5, 2] })).toThrow(RangeError);
    expect(() => mx.zeros([2]).item()).toThrow(RangeError);
    stillWorks();
  });

  it('a disposed array cannot be used', () => {
    const a = mx.array([1, 2]);
    a.dispose();
    expect(() => mx.add(a, 1)).toThrow(/disposed/);
    expect(String(a)).toBe('array(<disposed>)');
    stillWorks();
  });
});
