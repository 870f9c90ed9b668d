// Devices and streams on the CPU-only wheel: the default device, per-call streams, new streams and
// withStream overrides.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';

describe('devices', () => {
  it('the default device is the CPU here, and there is no GPU', () => {
    if (process.env.MLX_DEVICE) return; // an explicit choice in the environment
    expect(mx.gpuAvailable()).toBe(false);
    expect(mx.metalAvailable()).toBe(false);
    expect(mx.cudaAvailable()).toBe(false);
    const d = mx.defaultDevice();
    expect(d.type).toBe('cpu');
    expect(d.index).toBe(0);
    expect(String(d)).toBe('Device(cpu, 0)');
    expect(new mx.Device('cpu').available).toBe(true);
    expect(new mx.Device('gpu').available).toBe(false);
  });

  it('setDefaultDevice refuses the GPU without one and accepts the CPU', () => {
    expect(() => mx.setDefaultDevice('gpu')).toThrow(/no GPU/);
    mx.setDefaultDevice('cpu');
    mx.setDefaultDevice(new mx.Device('cpu'));
    expect(mx.defaultDevice().type).toBe('cpu');
  });

  it('asking for the GPU stream of a CPU-only build is an MlxError', () => {
    const e = (() => {
      try {
        mx.add(1, 2, { stream: 'gpu' });
      } catch (err) {
        return err;
      }
    })();
    expect(e).toBeInstanceOf(mx.MlxError);
    expect((e as mx.MlxError).mlxMessage).toMatch(/gpu/i);
    expect(mx.add(1, 2).item()).toBe(3);
  });
});

describe('streams', () => {
  it('the default stream is the CPU default stream, created once', () => {
    const s = mx.defaultStream();
    expect(s.device.type).toBe('cpu');
    expect(s).toBe(mx.defaultStreamOf('cpu'));
    expect(String(s)).toMatch(/^Stream\(Device\(cpu, 0\), \d+\)$/);
    expect(s.owned).toBe(false);
  });

  it("per-call { stream: 'cpu' } and { stream: Stream }", () => {
    expect(mx.add(mx.array([1, 2]), 3, { stream: 'cpu' }).toList()).toEqual([4, 5]);
    expect(mx.multiply(mx.array([1, 2]), 3, { stream: mx.defaultStreamOf('cpu') }).toList()).toEqual([3, 6]);
  });

  it('newStream gives a distinct stream that computes and can be synchronized', () => {
    const s = mx.newStream('cpu');
    try {
      expect(s.owned).toBe(true);
      expect(s.device.type).toBe('cpu');
      expect(s.index).not.toBe(mx.defaultStream().index);
      const r = mx.matmul(mx.array([[1, 2]]), mx.array([[3], [4]]), { stream: s });
      mx.asyncEval(r);
      s.synchronize();
      expect(r.isAvailable()).toBe(true);
      expect(r.item()).toBe(11);
      // Work on two streams combined in one graph.
      const t = mx.add(r, mx.array([[1]]), { stream: 'cpu' });
      expect(t.item()).toBe(12);
      mx.synchronize(s);
      mx.synchronize();
    } finally {
      s.dispose();
    }
    expect(() => s.handle).toThrow(/disposed/);
  });

  it('withStream overrides the default for a block, nests, and restores on throw', () => {
    const a = mx.newStream('cpu');
    const b = mx.newStream('cpu');
    try {
      const before = mx.defaultStream();
      mx.withStream(a, () => {
        expect(mx.defaultStream()).toBe(a);
        mx.withStream(b, () => expect(mx.defaultStream()).toBe(b));
        expect(mx.defaultStream()).toBe(a);
        expect(mx.sum(mx.arange(4)).item()).toBe(6);
      });
      expect(mx.defaultStream()).toBe(before);
      expect(() =>
        mx.withStream(a, () => {
          throw new Error('inside');
        }),
      ).toThrow('inside');
      expect(mx.defaultStream()).toBe(before);
      expect(mx.withStream('cpu', () => mx.defaultStream())).toBe(mx.defaultStreamOf('cpu'));
      expect(mx.withStream(a, () => 42)).toBe(42);
      // A device type names the innermost stream of that device, so { stream: 'cpu' } stays on it.
      mx.withStream(a, () => expect(mx.withStream('cpu', () => mx.defaultStream())).toBe(a));
    } finally {
      a.dispose();
      b.dispose();
    }
  });

  it('asyncEval starts work and reading waits for it', () => {
    const x = mx.sum(mx.multiply(mx.arange(1000), 2));
    mx.asyncEval(x);
    expect(x.item()).toBe(999 * 1000);
    expect(x.isAvailable()).toBe(true);
  });
});
