// Autodiff (vjp, jvp, valueAndGrad, grad, customVjp, checkpoint) against hand-derived gradients
// and float64 central differences; JS exceptions inside traced functions.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';
import { flat, expectAllClose } from '../test/numeric.js';

const expectClose = (actual: mx.Array | number[], expected: readonly number[], rtol = 1e-5, atol = 1e-6): void =>
  expectAllClose(actual, expected, rtol, atol);
const xs = [-1.5, -0.3, 0.2, 0.9, 2.4];
const ys = [0.7, -1.1, 2.0, 0.4, -0.6];

describe('vjp and jvp', () => {
  it('vjp of sum(sin(x) * x) is cos(x) * x + sin(x)', () => {
    const [outs, [g]] = mx.vjp((x) => mx.sum(mx.multiply(mx.sin(x), x)), [mx.array(xs)], [mx.array(1)]);
    expectClose(outs[0], [xs.reduce((s, x) => s + Math.sin(x) * x, 0)]);
    expectClose(
      g,
      xs.map((x) => Math.cos(x) * x + Math.sin(x)),
    );
  });

  it('vjp of two outputs of two inputs with given cotangents', () => {
    // f(a, b) = [a * b, sin(a)]; da = c1 * b + c2 * cos(a), db = c1 * a.
    const c1 = [1, 2, -1, 0.5, 3];
    const c2 = [0.1, -0.2, 0.3, 1, 2];
    const [outs, [da, db]] = mx.vjp((a, b) => [mx.multiply(a, b), mx.sin(a)], [mx.array(xs), mx.array(ys)], [mx.array(c1), mx.array(c2)]);
    expectClose(
      outs[0],
      xs.map((x, i) => x * ys[i]),
    );
    expectClose(outs[1], xs.map(Math.sin));
    expectClose(
      da,
      xs.map((x, i) => c1[i] * ys[i] + c2[i] * Math.cos(x)),
    );
    expectClose(
      db,
      xs.map((x, i) => c1[i] * x),
    );
  });

  it('jvp of a * b + exp(a) along (ta, tb) is ta * b + a * tb + exp(a) * ta', () => {
    const ta = [1, 0, -1, 2, 0.5];
    const tb = [0, 1, 1, -1, 2];
    const [outs, [t]] = mx.jvp((a, b) => mx.add(mx.multiply(a, b), mx.exp(a)), [mx.array(xs), mx.array(ys)], [mx.array(ta), mx.array(tb)]);
    expectClose(
      outs[0],
      xs.map((x, i) => x * ys[i] + Math.exp(x)),
    );
    expectClose(
      t,
      xs.map((x, i) => ta[i] * ys[i] + x * tb[i] + Math.exp(x) * ta[i]),
    );
  });
});

describe('valueAndGrad and grad', () => {
  it('grad of sum(sin(x) * x)', () => {
    const g = mx.grad((x) => mx.sum(mx.multiply(mx.sin(x), x)))(mx.array(xs));
    expectClose(
      g as mx.Array,
      xs.map((x) => Math.cos(x) * x + Math.sin(x)),
    );
  });

  it('least squares: d/dx sum((A x - y)^2) = 2 A^T (A x - y)', () => {
    const A = [
      [1, 2],
      [3, -1],
      [0.5, 4],
    ];
    const x = [0.3, -0.7];
    const y = [1, 0, 2];
    const r = A.map((row, i) => row[0] * x[0] + row[1] * x[1] - y[i]);
    const expected = [0, 1].map((j) => 2 * A.reduce((s, row, i) => s + row[j] * r[i], 0));
    const loss = (xx: mx.Array) => mx.sum(mx.square(mx.subtract(mx.matmul(mx.array(A), xx), mx.array(y))));
    const [value, g] = mx.valueAndGrad(loss)(mx.array(x));
    expectClose(value as mx.Array, [r.reduce((s, v) => s + v * v, 0)]);
    expectClose(g as mx.Array, expected);
  });

  it('cross-entropy of softmax: the gradient is softmax(z) - onehot', () => {
    const z = [2, -1, 0.5, 0.1];
    const label = 2;
    const onehot = z.map((_, i) => (i === label ? 1 : 0));
    const ce = (zz: mx.Array) => mx.negative(mx.sum(mx.multiply(mx.array(onehot), mx.subtract(zz, mx.logsumexp(zz)))));
    const m = Math.max(...z);
    const e = z.map((v) => Math.exp(v - m));
    const s = e.reduce((a, b) => a + b, 0);
    expectClose(
      mx.grad(ce)(mx.array(z)) as mx.Array,
      e.map((v, i) => v / s - onehot[i]),
    );
  });

  it('argnums: one index gives one gradient, a list gives a list; extra outputs ride along', () => {
    const f = (a: mx.Array, b: mx.Array) => [mx.sum(mx.multiply(mx.square(a), b)), mx.add(a, b)];
    const [values, gb] = mx.valueAndGrad(f, 1)(mx.array(xs), mx.array(ys));
    expect(Array.isArray(values)).toBe(true);
    expectClose(
      (values as mx.Array[])[1],
      xs.map((x, i) => x + ys[i]),
    );
    expectClose(
      gb as mx.Array,
      xs.map((x) => x * x),
    );
    const [, both] = mx.valueAndGrad(f, [0, 1])(mx.array(xs), mx.array(ys));
    const [ga, gb2] = both as mx.Array[];
    expectClose(
      ga,
      xs.map((x, i) => 2 * x * ys[i]),
    );
    expectClose(
      gb2,
      xs.map((x) => x * x),
    );
  });

  it('matches float64 central differences on the CPU stream', () => {
    // log, sqrt, tanh and division are exact to float64 rounding on MLX's CPU backend.
    const f = (x: mx.Array) => mx.sum(mx.add(mx.multiply(mx.log(x), mx.power(x, 3)), mx.divide(mx.sqrt(x), mx.add(mx.square(x), 1))), null);
    const fTanh = (x: mx.Array) => mx.add(f(x), mx.sum(mx.tanh(mx.multiply(x, x))));
    const x0 = [0.3, 0.8, 1.7, 2.9];
    mx.withStream('cpu', () => {
      const g = flat(mx.grad(fTanh)(mx.array(new Float64Array(x0))) as mx.Array);
      const h = 1e-6;
      const value = (v: number[]) => fTanh(mx.array(new Float64Array(v))).item() as number;
      const fd = x0.map((_, i) => {
        const up = [...x0];
        const down = [...x0];
        up[i] += h;
        down[i] -= h;
        return (value(up) - value(down)) / (2 * h);
      });
      expectClose(g, fd, 1e-7, 1e-7);
      // And against the hand-derived derivative.
      const d = (x: number) =>
        3 * x * x * Math.log(x) + x * x + (1 - 3 * x * x) / (2 * Math.sqrt(x) * (1 + x * x) ** 2) + 2 * x * (1 - Math.tanh(x * x) ** 2);
      expectClose(g, x0.map(d), 1e-12, 1e-12);
    });
  });
});

describe('customVjp and checkpoint', () => {
  it('the custom VJP replaces the derived one and sees primals, cotangents and outputs', () => {
    // Straight-through floor: the gradient passes unchanged.
    const ste = mx.customVjp(
      (x) => mx.floor(x),
      (_p, c) => [c[0]],
    );
    try {
      expect((ste(mx.array(xs)) as mx.Array).toList()).toEqual(xs.map(Math.floor));
      expectClose(
        mx.grad((x) => mx.sum(mx.multiply(ste(x) as mx.Array, 3)))(mx.array(xs)) as mx.Array,
        xs.map(() => 3),
      );
    } finally {
      ste.dispose();
    }
    // A VJP written from the outputs (exp' = exp) and one from the primals.
    const myExp = mx.customVjp(
      (x) => mx.exp(x),
      (_p, c, o) => [mx.multiply(mx.multiply(c[0], o[0]), 2)],
    );
    const withX = mx.customVjp(
      (x) => mx.sin(x),
      (p, c) => [mx.multiply(c[0], p[0])],
    );
    try {
      expectClose(
        mx.grad((x) => mx.sum(myExp(x) as mx.Array))(mx.array(xs)) as mx.Array,
        xs.map((x) => 2 * Math.exp(x)),
      );
      expectClose(mx.grad((x) => mx.sum(withX(x) as mx.Array))(mx.array(xs)) as mx.Array, xs);
    } finally {
      myExp.dispose();
      withX.dispose();
    }
  });

  it('checkpoint gives the same values and gradients as the plain function', () => {
    const body = (x: mx.Array) => mx.multiply(mx.tanh(x), mx.exp(x));
    const ck = mx.checkpoint(body);
    try {
      expectClose(
        ck(mx.array(xs)) as mx.Array,
        xs.map((x) => Math.tanh(x) * Math.exp(x)),
      );
      const g = mx.grad((x) => mx.sum(ck(x) as mx.Array))(mx.array(xs)) as mx.Array;
      expectClose(
        g,
        xs.map((x) => (1 - Math.tanh(x) ** 2) * Math.exp(x) + Math.tanh(x) * Math.exp(x)),
      );
    } finally {
      ck.dispose();
    }
  });
});

describe('exceptions inside traced functions', () => {
  class Mine extends Error {}
  it('propagate as the same error out of vjp, jvp, grad and a custom VJP', () => {
    const err = new Mine('from the traced function');
    expect(() =>
      mx.vjp(
        () => {
          throw err;
        },
        [mx.array(xs)],
        [mx.array(1)],
      ),
    ).toThrow(err);
    expect(() =>
      mx.jvp(
        () => {
          throw err;
        },
        [mx.array(xs)],
        [mx.array(xs)],
      ),
    ).toThrow(err);
    expect(() =>
      mx.grad(() => {
        throw err;
      })(mx.array(xs)),
    ).toThrow(err);
    const cv = mx.customVjp(
      (x) => mx.sin(x),
      () => {
        throw err;
      },
    );
    try {
      expect(() => mx.grad((x) => mx.sum(cv(x) as mx.Array))(mx.array(xs))).toThrow(err);
    } finally {
      cv.dispose();
    }
    // The process keeps working.
    expectClose(
      mx.grad((x) => mx.sum(mx.square(x)))(mx.array(xs)) as mx.Array,
      xs.map((x) => 2 * x),
    );
  });

  it('an MlxError raised inside keeps its function name', () => {
    let e: unknown;
    try {
      mx.grad((x) => mx.sum(mx.matmul(x, mx.zeros([7, 2]))))(mx.zeros([2, 3]));
    } catch (err) {
      e = err;
    }
    expect(e).toBeInstanceOf(mx.MlxError);
    expect((e as mx.MlxError).functionName).toBe('mlx_matmul');
    expect(mx.sum(mx.arange(3)).item()).toBe(3);
  });

  it('MLX refusing the arguments of vjp or jvp is an MlxError naming that function', () => {
    const f = (a: mx.Array, b: mx.Array) => mx.multiply(a, b);
    const errorOf = (body: () => unknown): mx.MlxError => {
      try {
        body();
      } catch (e) {
        return e as mx.MlxError;
      }
      throw new Error('expected an error');
    };
    // A cotangent of the wrong shape; one tangent too few.
    const v = errorOf(() => mx.vjp(f, [mx.array(xs), mx.array(xs)], [mx.array([1, 2])]));
    expect(v).toBeInstanceOf(mx.MlxError);
    expect(v.functionName).toBe('mlx_vjp');
    const j = errorOf(() => mx.jvp(f, [mx.array(xs), mx.array(xs)], [mx.array(xs)]));
    expect(j).toBeInstanceOf(mx.MlxError);
    expect(j.functionName).toBe('mlx_jvp');
  });

  it('returning something that is not an Array is a TypeError', () => {
    expect(() => mx.vjp(() => 3 as never, [mx.array(xs)], [mx.array(1)])).toThrow(TypeError);
    expect(mx.add(1, 1).item()).toBe(2);
  });
});

describe('Closure and evaluate', () => {
  it('a closure from a JS function applies to arrays', () => {
    using cl = mx.Closure.fromFunction(([a, b]) => [mx.add(a, b), mx.multiply(a, b)]);
    const [s, p] = cl.apply([mx.array([1, 2]), mx.array([3, 4])]);
    expect(s.toList()).toEqual([4, 6]);
    expect(p.toList()).toEqual([3, 8]);
  });
  it('evaluate computes several arrays in one walk', () => {
    const a = mx.exp(mx.array(xs));
    const b = mx.sum(a);
    expect(a.isAvailable()).toBe(false);
    mx.evaluate(a, [b]);
    expect(a.isAvailable() && b.isAvailable()).toBe(true);
    expectClose(b, [xs.reduce((s, x) => s + Math.exp(x), 0)]);
  });
  it('transforms leave no arrays behind', () => {
    const base = mx.memory.active();
    mx.scope(() => {
      mx.evaluate(mx.grad((x) => mx.sum(mx.multiply(mx.sin(x), x)))(mx.array(xs)) as mx.Array);
      mx.evaluate(mx.vjp((x) => mx.exp(x), [mx.array(xs)], [mx.ones([5])]).flat());
    });
    expect(mx.memory.active()).toBe(base);
  });
});

describe('re-entrant closure calls', () => {
  // A compiled function's trace runs its JS body, and the body may apply other closures (here a
  // custom VJP). With more results than the first call has room for, the compiled function is
  // called again: it must get its own inputs again, not the nested call's (which once retraced it
  // with the wrong arrays, or replayed its trace on them).
  it('a compiled function with many results whose body applies another closure', () => {
    const half = mx.customVjp(
      (v: mx.Array) => mx.multiply(v, 0.5),
      (_p, cot) => [mx.multiply(cot[0], 0.5)],
    );
    let traces = 0;
    const n = 90;
    const f = mx.compile((x: mx.Array, y: mx.Array) => {
      traces++;
      const h = half(mx.reshape(y, [2, 2])) as mx.Array;
      const base = mx.add(x, mx.sum(h));
      return Array.from({ length: n }, (_, i) => mx.add(base, i));
    });
    const x = mx.array([1, 2, 3]);
    const y = mx.array([4, 5, 6, 7]);
    for (let call = 0; call < 3; call++) {
      const outs = f(x, y) as mx.Array[];
      expect(outs.length).toBe(n);
      // sum(y) / 2 = 11: outs[i] = x + 11 + i.
      for (const i of [0, 1, 45, n - 1]) expect(flat(outs[i])).toEqual([12 + i, 13 + i, 14 + i]);
      mx.dispose(outs);
    }
    expect(traces).toBe(1);
    f.dispose();
    half.dispose();
    x.dispose();
    y.dispose();
  });
});
