// ext.boundedIndices: integer indices made int32 positions in one primitive, with the flag and the
// offenders a front end reports; take trusts these positions (no second check in the graph).
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';

const nums = (a: mx.Array) => Array.from(a.toTypedArray() as ArrayLike<number | bigint>, Number);
const run = (idx: mx.Array, dims: number[], negative: boolean) => {
  const [pos, bad, detail] = mx.ext.boundedIndices(idx, dims, negative);
  return { pos: nums(pos), shape: pos.shape, dtype: pos.dtype, bad: bad.item(), detail: nums(detail) };
};

describe('ext.boundedIndices', () => {
  it('wraps negative indices and flags nothing when all are in range', () => {
    const r = run(mx.array(new BigInt64Array([0n, -1n, 3n, -4n]), { shape: [2, 2] }), [4], true);
    expect(r).toEqual({ pos: [0, 3, 3, 0], shape: [2, 2], dtype: 'int32', bad: false, detail: [0, 0] });
    // The flag is one bool of shape [1]: a run's flags concatenate with no node per flag.
    expect(mx.ext.boundedIndices(mx.array(new Int32Array([1])), [4], true)[1].shape).toEqual([1]);
  });

  it('clamps out-of-range indices and names the smallest under and the largest over the range', () => {
    expect(run(mx.array(new Int32Array([7, -9, 2, 5, -6])), [4], true)).toMatchObject({ pos: [3, 0, 2, 3, 0], bad: true, detail: [-9, 7] });
    // Without negative indices -1 is out of range.
    expect(run(mx.array(new Int32Array([-1, 2])), [4], false)).toMatchObject({ pos: [0, 2], bad: true, detail: [-1, 0] });
  });

  it('takes empty indices', () => {
    expect(run(mx.zeros([0, 3], 'int64'), [4], true)).toEqual({ pos: [], shape: [0, 3], dtype: 'int32', bad: false, detail: [0, 0] });
  });

  // The composed form (MLX's ops: other devices, and the CPU with MLXC_CPU_KERNELS=off) in a child
  // process on the CPU, and on the GPU where there is one.
  it('the composed form (MLX ops, as on a GPU) gives the same, empty indices too', () => {
    const index = fileURLToPath(new URL('./index.ts', import.meta.url));
    const script = `import * as mx from ${JSON.stringify(index)};
const nums = (a) => Array.from(a.toTypedArray(), Number);
const where = mx.gpuAvailable() ? ['cpu', 'gpu'] : ['cpu'];
const out = where.map((d) => {
  const on = { stream: mx.defaultStreamOf(d) };
  const [pos, bad, detail] = mx.ext.boundedIndices(mx.array(new Int32Array([7, -9, 2, 5, -6])), [4], true, on);
  const [p2, b2, d2] = mx.ext.boundedIndices(mx.array(new Int32Array([1, 4, 2, 5, -3, 0]), { shape: [3, 2] }), [3, 5], true, on);
  const empty = mx.ext.boundedIndices(mx.zeros([0, 3], 'int64'), [4], true, on);
  return [nums(pos), bad.shape, bad.item(), nums(detail), nums(p2), b2.item(), nums(d2), empty[0].shape, empty[1].item()];
});
console.log(JSON.stringify(out));`;
    const r = spawnSync(process.execPath, ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', script], {
      env: { ...process.env, MLXC_CPU_KERNELS: 'off', VITEST: undefined },
      encoding: 'utf8',
    });
    expect(r.status, r.stderr).toBe(0);
    const want = [[3, 0, 2, 3, 0], [1], true, [-9, 7], [1, 4, 2, 4, 0, 0], true, [0, 5], [0, 3], false];
    // The kernel (this process) and the composed form (the child) agree.
    const kernel = run(mx.array(new Int32Array([7, -9, 2, 5, -6])), [4], true);
    expect([kernel.pos, [1], kernel.bad, kernel.detail]).toEqual(want.slice(0, 4));
    for (const got of JSON.parse(r.stdout.trim().split('\n').at(-1)!)) expect(got).toEqual(want);
  });

  it('reads every integer type as int64 (uint64 wraps as astype does)', () => {
    expect(run(mx.array(new Uint8Array([1, 200])), [10], false)).toMatchObject({ pos: [1, 9], bad: true, detail: [0, 200] });
    expect(run(mx.array(new BigUint64Array([2n ** 64n - 1n])), [3], true)).toMatchObject({ pos: [2], bad: false });
  });

  it('checks each component of the last axis against its own size', () => {
    const idx = mx.array(new Int32Array([1, 4, 2, 5, -3, 0]), { shape: [3, 2] });
    expect(run(idx, [3, 5], true)).toMatchObject({ pos: [1, 4, 2, 4, 0, 0], bad: true, detail: [0, 5] });
    expect(() => mx.ext.boundedIndices(idx, [3, 5, 7], true)).toThrow(/3 sizes for index tuples of length 2/);
  });

  it('follows strided views in logical order', () => {
    const t = mx.transpose(mx.array(new Int32Array([0, 1, 2, 3, 4, 5]), { shape: [2, 3] }));
    expect(run(t, [4], true)).toMatchObject({ pos: [0, 3, 1, 3, 2, 3], shape: [3, 2], bad: true, detail: [0, 5] });
  });

  it('refuses non-integer indices and negative sizes', () => {
    expect(() => mx.ext.boundedIndices(mx.array([1.5]), [4], true)).toThrow(/indices must be integers/);
    expect(() => mx.ext.boundedIndices(mx.array(new Int32Array([1])), [-1], true)).toThrow(/sizes must not be negative/);
  });

  it('take trusts positions made for its axis size and checks others again', () => {
    const a = mx.array(new Float32Array([10, 11, 12, 13]));
    const idx = mx.array(new Int32Array([3, -1, 0]));
    expect(nums(mx.take(a, mx.ext.boundedIndices(idx, [4], true)[0], 0))).toEqual([13, 13, 10]);
    // Positions bounded by a larger size than the axis are checked by take itself.
    const [wide] = mx.ext.boundedIndices(mx.array(new Int32Array([4])), [5], true);
    expect(() => mx.take(a, wide, 0).eval()).toThrow(/\[take\] index 4 is out of range for an axis of size 4/);
  });

  it('a shapeless compile checks them again: its replays may index a smaller array', () => {
    const idx = mx.array(new Int32Array([3]));
    const bounded = (a: mx.Array) => mx.ext.boundedIndices(idx, [a.shape[0]], true)[0];
    const take = mx.compile((a: mx.Array) => mx.take(a, bounded(a), 0), { shapeless: true });
    const along = mx.compile((a: mx.Array) => mx.takeAlongAxis(a, bounded(a), 0), { shapeless: true });
    const small = mx.array(new Float32Array([1, 2]));
    for (const f of [take, along]) {
      expect(nums(f(mx.array(new Float32Array([1, 2, 3, 4]))) as mx.Array)).toEqual([4]);
      if (mx.cpuCompileAvailable()) {
        expect(() => (f(small) as mx.Array).eval()).toThrow(/index 3 is out of range for an axis of size 2/);
      } else {
        // Without a C++ compiler compile() captures, one trace per shape: the smaller array gets
        // its own, whose positions are bounded (clamped) for its own size, as eagerly.
        expect(nums(f(small) as mx.Array)).toEqual(nums(mx.take(small, bounded(small), 0)));
      }
      f.dispose();
    }
  });
});
