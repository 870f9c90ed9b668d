// captureGraph: traced once per input signature with placeholder inputs, replayed from native
// code. Every result is compared with the same function called directly (eager MLX ops), on new
// data each call, so a replay that kept the first call's values would fail.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';

const cpu = { stream: 'cpu' as const };
const randn = (shape: number[], seed: number) => mx.randomNormal(shape, 'float32', 0, 1, mx.randomKey(seed), cpu);
const same = (a: mx.Array, b: mx.Array) =>
  expect(Array.from(a.toTypedArray() as Float32Array)).toEqual(Array.from(b.toTypedArray() as Float32Array));

describe('captureGraph', () => {
  it('replays a graph over new inputs: the results are those of the function on them', () => {
    const w = randn([8, 4], 1); // a constant the function closes over
    const f = (x: mx.Array, y: mx.Array) => mx.tanh(mx.add(mx.matmul(x, w), mx.multiply(y, 2)));
    let traces = 0;
    const g = mx.captureGraph((x, y) => {
      traces++;
      return f(x, y);
    });
    for (let k = 0; k < 4; k++) {
      const x = randn([3, 8], 10 + k);
      const y = randn([3, 4], 20 + k);
      same(g(x, y) as mx.Array, f(x, y));
    }
    expect(traces).toBe(1);
    g.dispose();
  });

  it('traces again for new shapes or dtypes, once each', () => {
    let traces = 0;
    const g = mx.captureGraph((x) => {
      traces++;
      return mx.sum(mx.exp(x), -1);
    });
    for (const shape of [[2, 5], [3, 5], [2, 5], [3, 5], [7]]) {
      const x = randn(shape, shape.length * 7 + shape[0]);
      same(g(x) as mx.Array, mx.sum(mx.exp(x), -1));
    }
    expect(traces).toBe(3);
    const i = mx.array([1, 2, 3], 'int32');
    expect(Array.from((g(i) as mx.Array).toTypedArray() as Float32Array)[0]).toBeCloseTo(Math.E + Math.E ** 2 + Math.E ** 3, 3);
    expect(traces).toBe(4);
    g.dispose();
  });

  it('replays primitives with several outputs, and returns inputs and constants as they are', () => {
    const c = mx.array([1, 2, 3], 'float32');
    const g = mx.captureGraph((x) => {
      const [a, b] = mx.split(x, 2, 0);
      const [q, r] = mx.divmod(a, mx.add(b, 3));
      return [q, r, x, c];
    });
    for (const seed of [1, 2, 3]) {
      const x = mx.abs(randn([4, 3], seed));
      const [q, r, xo, co] = g(x) as mx.Array[];
      const [a, b] = mx.split(x, 2, 0);
      const [q0, r0] = mx.divmod(a, mx.add(b, 3));
      same(q, q0);
      same(r, r0);
      same(xo, x);
      same(co, c);
    }
    g.dispose();
  });

  it('a function that reads its inputs’ data cannot be captured: a clean error, then it works again', () => {
    const g = mx.captureGraph((x) => mx.multiply(x, (mx.max(x) as mx.Array).item() as number));
    expect(() => g(mx.array([1, 2], 'float32'))).toThrow();
    const ok = mx.captureGraph((x) => mx.multiply(x, 3));
    same(ok(mx.array([1, 2], 'float32')) as mx.Array, mx.array([3, 6], 'float32'));
    g.dispose();
    ok.dispose();
  });
});
