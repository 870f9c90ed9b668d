// onnxruntime's intraOpNumThreads session option sets the CPU threads (the fused kernels' pool and
// OpenBLAS) for the process; bad values are refused by name.
import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { model, node, v } from '../helpers/build.js';
import { f32, ort } from '../helpers/ort.js';

const bytes = model({ inputs: [v('x', 'float32', [4])], outputs: [v('y', 'float32', [4])], nodes: [node('Erf', ['x'], ['y'])] });
const create = (intraOpNumThreads?: number) =>
  ort.InferenceSession.create(bytes, { executionProviders: [{ name: 'mlx', device: 'cpu' }], intraOpNumThreads } as never);

describe('intraOpNumThreads', () => {
  it('sets the CPU threads; 0 or unset leaves them', async () => {
    const before = mx.cpuThreads();
    try {
      const s = await create(1);
      expect(mx.cpuThreads()).toBe(1);
      const feeds = { x: f32([0, 0.5, -1, 2], [4]) };
      const { y } = await s.run(feeds);
      await s.release();
      const ref = await ort.InferenceSession.create(bytes);
      const want = (await ref.run(feeds)).y.data as Float32Array;
      await ref.release();
      (y.data as Float32Array).forEach((got, i) => expect(Math.abs(got - want[i])).toBeLessThanOrEqual(2e-7));
      await (await create(0)).release();
      expect(mx.cpuThreads()).toBe(1);
      await (await create(3)).release();
      expect(mx.cpuThreads()).toBe(3);
    } finally {
      mx.setCpuThreads(before);
    }
  });
  it('refuses negative and fractional counts', async () => {
    await expect(create(-2)).rejects.toThrow(/intraOpNumThreads must be an integer from 0 to 1024, got -2/);
    await expect(create(1.5)).rejects.toThrow(/intraOpNumThreads must be an integer from 0 to 1024, got 1.5/);
  });
});
