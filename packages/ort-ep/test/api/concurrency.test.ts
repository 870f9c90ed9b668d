// run() does not block the event loop, runs of one session queue in order, and runs of two
// sessions overlap: a short run finishes while a long one still computes.
import { describe, expect, it } from 'vitest';
import { MlxSession, type HostTensor } from '../../src/index.js';
import { model, node, v } from '../helpers/build.js';

// y = x @ w @ w @ ... (n times): n matmuls of d x d.
function chain(n: number, d: number): Uint8Array {
  const w = Array.from({ length: d * d }, (_, i) => ((i * 7919) % 13) / 13 / d);
  return model({
    opsets: { '': 17 },
    inputs: [v('x', 'float32', [d, d])],
    outputs: [v('y', 'float32', [d, d])],
    initializers: [{ name: 'w', type: 'float32', dims: [d, d], values: w }],
    nodes: Array.from({ length: n }, (_, i) => node('MatMul', [i ? `h${i}` : 'x', 'w'], [i === n - 1 ? 'y' : `h${i + 1}`])),
  });
}
const feed = (d: number): HostTensor => ({ dtype: 1, dims: [d, d], data: Float32Array.from({ length: d * d }, (_, i) => (i % 5) / 5) });

describe('concurrency', () => {
  it('a short run on one session finishes while a long run on another computes', async () => {
    const long = await MlxSession.create(chain(48, 512), { device: 'cpu', compiled: false });
    const short = await MlxSession.create(chain(1, 8), { device: 'cpu', compiled: false });
    try {
      await long.run({ x: feed(512) });
      await short.run({ x: feed(8) });
      const order: string[] = [];
      let ticks = 0;
      const timer = setInterval(() => ticks++, 1);
      const a = long.run({ x: feed(512) }).then(() => order.push('long'));
      await new Promise((r) => setTimeout(r, 5));
      const b = short.run({ x: feed(8) }).then(() => order.push('short'));
      await Promise.all([a, b]);
      clearInterval(timer);
      expect(order).toEqual(['short', 'long']);
      // The event loop kept turning while the long run computed.
      expect(ticks).toBeGreaterThan(5);
    } finally {
      long.release();
      short.release();
    }
  });

  it('runs of one session complete in the order they were asked for, with their own results', async () => {
    const s = await MlxSession.create(chain(2, 16), { device: 'cpu' });
    try {
      const xs = [1, 2, 3, 4, 5].map((k) => ({ dtype: 1, dims: [16, 16], data: new Float32Array(256).fill(k) }) as HostTensor);
      const done: number[] = [];
      const results = await Promise.all(
        xs.map((x, k) =>
          s.run({ x }).then((r) => {
            done.push(k);
            return r.y as HostTensor;
          }),
        ),
      );
      expect(done).toEqual([0, 1, 2, 3, 4]);
      // Each result is its own feed's: linear in the feed's constant value.
      const first = (results[0].data as Float32Array)[0];
      results.forEach((r, k) => expect((r.data as Float32Array)[0]).toBeCloseTo(first * (k + 1), 3));
    } finally {
      s.release();
    }
  });
});
