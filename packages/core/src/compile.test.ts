// compile: results equal the eager ones, traces are reused for the same shapes, and errors inside
// propagate. On the CPU, MLX builds fused kernels with g++ at run time: these tests stay few.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';

const flat = (a: mx.Array | mx.Array[]) => Array.from((a as mx.Array).toTypedArray() as ArrayLike<number>);
function expectClose(got: number[], expected: readonly number[], tol = 1e-5): void {
  expect(got.length).toBe(expected.length);
  got.forEach((g, i) => expect(Math.abs(g - expected[i]), `element ${i}`).toBeLessThanOrEqual(tol * (1 + Math.abs(expected[i]))));
}

describe('compile', () => {
  it('a fused elementwise function: same values, one trace per input shape', () => {
    let traces = 0;
    const f = mx.compile((a, b) => {
      traces++;
      return mx.add(mx.multiply(mx.exp(a), b), mx.sin(a));
    });
    try {
      const ref = (a: number[], b: number[]) => a.map((x, i) => Math.exp(x) * b[i] + Math.sin(x));
      const a = [0.5, -1, 2];
      const b = [1, 2, 3];
      expectClose(flat(f(mx.array(a), mx.array(b))), ref(a, b));
      expect(traces).toBe(1);
      // Same shapes and dtypes: the trace is reused (the JS function is not called again).
      const a2 = [3, 0, -2];
      expectClose(flat(f(mx.array(a2), mx.array(b))), ref(a2, b));
      expect(traces).toBe(1);
      // A new shape traces again.
      expectClose(flat(f(mx.array([1, 2]), mx.array([0.5, 0.25]))), ref([1, 2], [0.5, 0.25]));
      expect(traces).toBe(2);
    } finally {
      f.dispose();
    }
  });

  it('a compiled matmul with several outputs; shapeless reuses one trace across sizes', () => {
    let traces = 0;
    const g = mx.compile((a, b) => {
      traces++;
      return [mx.matmul(a, b), mx.sum(b)];
    });
    const s = mx.compile(
      (a) => {
        traces++;
        return mx.multiply(a, 2);
      },
      { shapeless: true },
    );
    try {
      const [p, t] = g(
        mx.array([
          [1, 2],
          [3, 4],
        ]),
        mx.array([[5], [6]]),
      ) as mx.Array[];
      expect(p.toList()).toEqual([[17], [39]]);
      expect(t.item()).toBe(11);
      expect(traces).toBe(1);
      // Without a C++ compiler compile() captures: each shape is traced once, shapeless or not.
      const perShape = mx.cpuCompileAvailable() ? 0 : 1;
      expect((s(mx.array([1, 2, 3])) as mx.Array).toList()).toEqual([2, 4, 6]);
      expect((s(mx.array([1, 5, 7, 9, 11])) as mx.Array).toList()).toEqual([2, 10, 14, 18, 22]);
      expect(traces).toBe(2 + perShape);
      expect((s(mx.array([3, 4, 5])) as mx.Array).toList()).toEqual([6, 8, 10]);
      expect(traces).toBe(2 + perShape);
      // A different number of dimensions still traces again.
      expect((s(mx.array([[1], [5]])) as mx.Array).toList()).toEqual([[2], [10]]);
      expect(traces).toBe(3 + perShape);
    } finally {
      g.dispose();
      s.dispose();
    }
  });

  it('a JS exception in the compiled function propagates as the same error', () => {
    const err = new RangeError('no trace for you');
    const bad = mx.compile(() => {
      throw err;
    });
    try {
      expect(() => bad(mx.array([1]))).toThrow(err);
    } finally {
      bad.dispose();
    }
    expect(mx.add(mx.array([1]), 1).toList()).toEqual([2]);
  });

  it('grad of a compiled function', () => {
    const f = mx.compile((x) => mx.sum(mx.multiply(mx.sin(x), x)));
    try {
      const xs = [0.1, 1.2, -0.7];
      const g = mx.grad((x) => f(x) as mx.Array)(mx.array(xs)) as mx.Array;
      expectClose(
        flat(g),
        xs.map((x) => Math.cos(x) * x + Math.sin(x)),
      );
    } finally {
      f.dispose();
    }
  });

  it('disableCompile runs the function eagerly (traced on every call)', () => {
    let traces = 0;
    mx.disableCompile();
    try {
      const f = mx.compile((a) => {
        traces++;
        return mx.add(a, 1);
      });
      expect((f(mx.array([1])) as mx.Array).toList()).toEqual([2]);
      expect((f(mx.array([2])) as mx.Array).toList()).toEqual([3]);
      expect(traces).toBe(2);
      f.dispose();
    } finally {
      mx.enableCompile();
    }
  });

  it("setCompileMode: 'disabled' at compile() gives an eager function; 'no_fuse' still traces once", () => {
    let traces = 0;
    const body = (a: mx.Array) => {
      traces++;
      return mx.add(mx.multiply(a, 2), 1);
    };
    mx.setCompileMode('disabled');
    const eager = mx.compile(body);
    mx.setCompileMode('no_fuse');
    const traced = mx.compile(body);
    try {
      expect(flat(eager(mx.array([1, 2])))).toEqual([3, 5]);
      expect(flat(eager(mx.array([3, 4])))).toEqual([7, 9]);
      // Compiled while disabled: the JS function runs on every call.
      expect(traces).toBe(2);
      expect(flat(traced(mx.array([1, 2])))).toEqual([3, 5]);
      expect(flat(traced(mx.array([5, 6])))).toEqual([11, 13]);
      expect(traces).toBe(3);
      expect(() => mx.setCompileMode('fast' as never)).toThrow(
        "compile mode must be one of disabled, no_simplify, no_fuse, enabled, got 'fast'",
      );
    } finally {
      mx.setCompileMode('enabled');
      eager.dispose();
      traced.dispose();
    }
  });
});
