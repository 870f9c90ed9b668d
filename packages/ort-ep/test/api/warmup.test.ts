// MlxSession.warmup: compiles a feed signature ahead of the first real request (zero feeds of the
// declared shapes, or given ones), so that the first request replays a traced program; and the
// session's device and backend as metadata.
import { describe, expect, it } from 'vitest';
import { InvalidFeedError, MlxSession, type HostTensor } from '../../src/index.js';
import { model, node, v } from '../helpers/build.js';
import { seeded } from '../helpers/ort.js';

const mlp = model({
  opsets: { '': 17 },
  inputs: [v('x', 'float32', ['N', 4])],
  outputs: [v('y', 'float32', ['N', 3])],
  initializers: [{ name: 'w', type: 'float32', dims: [4, 3], values: seeded(12, 3) }],
  nodes: [node('MatMul', ['x', 'w'], ['xw']), node('Softmax', ['xw'], ['y'], { attrs: { axis: -1 } })],
});
const values = (t: HostTensor | unknown) => Array.from((t as HostTensor).data as ArrayLike<number>, Number);

describe('warmup', () => {
  it('traces the signature of zero feeds, so that the first request of that shape is a replay', async () => {
    const s = await MlxSession.create(mlp, { device: 'cpu' });
    const eager = await MlxSession.create(mlp, { device: 'cpu', compiled: false });
    try {
      const { runsMs } = await s.warmup({ dims: { N: 3 } });
      expect(runsMs).toHaveLength(2);
      expect(s.compileStats).toMatchObject({ misses: 1, hits: 1, size: 1 });
      expect(s.describeSignatures()[0].traced).toBe(1);
      const x: HostTensor = { dtype: 1, dims: [3, 4], data: Float32Array.from(seeded(12, 7)) };
      const got = values((await s.run({ x })).y);
      const want = values((await eager.run({ x })).y);
      expect(s.compileStats).toMatchObject({ misses: 1, hits: 2 });
      got.forEach((g, i) => expect(Math.abs(g - want[i])).toBeLessThan(1e-6));
    } finally {
      s.release();
      eager.release();
    }
  });

  it('takes given feeds, runs once without the compiled path, and refuses bad dimensions', async () => {
    const s = await MlxSession.create(mlp, { device: 'cpu', compiled: false });
    try {
      const x: HostTensor = { dtype: 1, dims: [2, 4], data: new Float32Array(8) };
      expect((await s.warmup({ feeds: { x } })).runsMs).toHaveLength(1);
      await expect(s.warmup({ dims: { N: -2 } })).rejects.toThrow(InvalidFeedError);
      await expect(s.warmup({ dims: { N: 1.5 } })).rejects.toThrow(/dimension 'N' of input 'x' must be a non-negative integer, got 1.5/);
    } finally {
      s.release();
    }
  });

  it('reports the device and the MLX backend', async () => {
    const s = await MlxSession.create(mlp, { device: 'cpu' });
    expect([s.device, s.backend]).toEqual(['cpu', 'cpu']);
    s.release();
  });
});
