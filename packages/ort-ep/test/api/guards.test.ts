// OpContext.guard: data checks made on the device fail the run with the node's name and the op's
// message, on the eager path, on every compiled run (analysed, traced, replayed) and for constants
// folded at plan time; the session keeps working afterwards.
import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { MlxSession, NodeExecutionError, type HostTensor } from '../../src/index.js';
import { OpRegistry, defaultRegistry } from '../../src/internal.js';
import { msOp } from '../../src/registry/op.js';
import { model, node, v } from '../helpers/build.js';

// com.microsoft::TestPick(x, i): x[i] along axis 0 with i checked on the device.
const pick = msOp('TestPick', 1, {
  run: (ctx) => {
    const x = ctx.input(0);
    const i = mx.astype(ctx.input(1), 'int32');
    const n = x.shape[0];
    ctx.guard(
      mx.any(mx.logicalOr(mx.less(i, 0), mx.greaterEqual(i, n))),
      ([lo, hi]) => `index out of range [0, ${n - 1}]: saw ${lo}..${hi}`,
      mx.stack([mx.min(i), mx.max(i)]),
    );
    return [mx.take(x, mx.clip(i, 0, n - 1), 0)];
  },
});
const registry = new OpRegistry().add(...defaultRegistry.entries(), pick);

const m = (indices?: number[]) =>
  model({
    opsets: { '': 17, 'com.microsoft': 1 },
    inputs: [v('x', 'float32', [4]), ...(indices ? [] : [v('i', 'int64', [2])])],
    outputs: [v('y', 'float32', [2])],
    initializers: indices ? [{ name: 'i', type: 'int64', dims: [2], values: indices.map(BigInt) }] : [],
    nodes: [
      node('Relu', ['x'], ['r']),
      node('TestPick', ['r', 'i'], ['p'], { domain: 'com.microsoft', name: 'pick' }),
      node('Neg', ['p'], ['y']),
    ],
  });
const x: HostTensor = { dtype: 1, dims: [4], data: Float32Array.from([1, 2, 3, 4]) };
const i = (a: number, b: number): HostTensor => ({ dtype: 7, dims: [2], data: BigInt64Array.from([BigInt(a), BigInt(b)]) });
const values = (t: unknown) => [...((t as HostTensor).data as Float32Array)];

describe('device-side data checks', () => {
  for (const compiled of [false, true]) {
    it(`fail the run naming the node, then the session works on (${compiled ? 'compiled' : 'eager'})`, async () => {
      const s = await MlxSession.create(m(), { device: 'cpu', compiled, registry });
      try {
        // Runs 1-3 of one signature: analysed, traced, replayed.
        for (let r = 0; r < 3; r++) {
          expect(values((await s.run({ x, i: i(3, 0) })).y)).toEqual([-4, -1]);
          const e = await s.run({ x, i: i(1, 7) }).then(
            () => undefined,
            (err: Error) => err,
          );
          expect(e).toBeInstanceOf(NodeExecutionError);
          expect(e!.message).toBe("model <bytes>, node 'pick' (TestPick): index out of range [0, 3]: saw 1..7");
          expect(() => s.runSync({ x, i: i(-1, 2) })).toThrow('index out of range [0, 3]: saw -1..2');
        }
      } finally {
        s.release();
      }
    });
  }

  it('a check that fails on constants is left to run time, where it fails the run', async () => {
    const good = await MlxSession.create(m([2, 3]), { device: 'cpu', registry });
    expect(values(good.runSync({ x }).y)).toEqual([-3, -4]);
    good.release();
    const bad = await MlxSession.create(m([2, 9]), { device: 'cpu', registry });
    try {
      expect(() => bad.runSync({ x })).toThrow("node 'pick' (TestPick): index out of range [0, 3]: saw 2..9");
    } finally {
      bad.release();
    }
  });
});
