// What @mlx/core cannot represent it refuses, naming the argument and the value: non-numeric array
// data (which used to become NaN or 0), ints that do not fit MLX's int32 (which used to wrap or be
// truncated: zeros([2 ** 32 + 3]) had shape [3]), and slice strides of 0 (which used to kill the
// process with SIGFPE inside MLX).
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';

/** The error `body` throws (fails the test if it returns). */
function thrown(body: () => unknown): Error {
  try {
    body();
  } catch (e) {
    return e as Error;
  }
  throw new Error('expected an error, but the call returned');
}

function expectRefused(body: () => unknown, kind: typeof TypeError | typeof RangeError, message: RegExp): void {
  const e = thrown(body);
  expect(e, e.message).toBeInstanceOf(kind);
  expect(e.message).toMatch(message);
}

const x23 = () => mx.reshape(mx.arange(0, 6), [2, 3]);

describe('array data that MLX cannot hold', () => {
  it('is a TypeError naming where it sits and what it is', () => {
    expectRefused(() => mx.array('abc' as never), TypeError, /^array: data is the string "abc"/);
    expectRefused(() => mx.array({} as never), TypeError, /^array: data is an object \(Object\)/);
    expectRefused(() => mx.array(undefined as never), TypeError, /^array: data is undefined/);
    expectRefused(() => mx.array(null as never), TypeError, /^array: data is null/);
    expectRefused(() => mx.array([1, null] as never), TypeError, /^array: data\[1\] is null/);
    expectRefused(
      () =>
        mx.array([
          [1, 2],
          [3, 'x'],
        ] as never),
      TypeError,
      /^array: data\[1\]\[1\] is the string "x"/,
    );
    expectRefused(() => mx.array([[1], [undefined]] as never, 'int32'), TypeError, /^array: data\[1\]\[0\] is undefined/);
    expectRefused(() => mx.array([new Map()] as never), TypeError, /^array: data\[0\] is an object \(Map\)/);
    expectRefused(() => mx.scalar('1' as never, 'float32'), TypeError, /^scalar: value is the string "1"/);
  });

  it('numbers, booleans and bigints (NaN included) are still taken', () => {
    expect(
      mx
        .array([
          [1, 2.5],
          [-3, 4],
        ])
        .toList(),
    ).toEqual([
      [1, 2.5],
      [-3, 4],
    ]);
    expect(mx.array([true, false]).toList()).toEqual([true, false]);
    expect(mx.array([2n ** 40n]).toList()).toEqual([2n ** 40n]);
    expect(mx.array([NaN]).item()).toBeNaN();
    expect(mx.scalar(3, 'int8').item()).toBe(3);
  });
});

describe('shapes, axes and other ints', () => {
  it('dimensions beyond int32, fractional or negative are RangeErrors naming the argument and value', () => {
    expectRefused(() => mx.zeros([2 ** 32 + 3]), RangeError, /^zeros: shape\[0\] must be an integer in \[0, 2147483647\], got 4294967299$/);
    expectRefused(() => mx.ones([2, 2.5]), RangeError, /^ones: shape\[1\] .* got 2\.5$/);
    expectRefused(() => mx.full([-1], 0), RangeError, /^full: shape\[0\] .* got -1$/);
    expectRefused(() => mx.broadcastTo(x23(), [2 ** 31, 3]), RangeError, /^broadcastTo: shape\[0\] .* got 2147483648$/);
    expectRefused(() => mx.random.normal([3, NaN], 'float32', 0, 1), RangeError, /^randomNormal: shape\[1\] .* got NaN$/);
    expectRefused(() => mx.zeros(3 as never), TypeError, /^zeros: shape must be an array of integers, got 3$/);
    expectRefused(() => mx.zeros(['2'] as never), TypeError, /^zeros: shape\[0\] .* got the string "2"$/);
    // The largest int32 dimension is representable (an empty array of it costs nothing).
    expect(mx.zeros([2 ** 31 - 1, 0]).shape).toEqual([2 ** 31 - 1, 0]);
  });

  it('reshape takes -1 for an inferred dimension, and nothing below it', () => {
    expect(mx.reshape(x23(), [-1]).shape).toEqual([6]);
    expect(mx.reshape(x23(), [3, -1]).shape).toEqual([3, 2]);
    // MLX itself accepted [-2, -3] for six elements and made an array of that "shape".
    expectRefused(
      () => mx.reshape(x23(), [-2, -3]),
      RangeError,
      /^reshape: shape\[0\] must be an integer in \[0, 2147483647\] or -1, got -2$/,
    );
  });

  it('the shape of array() and Array.fromTypedArray is checked the same way', () => {
    expectRefused(
      () => mx.Array.fromTypedArray(new Float32Array(0), [2 ** 32, 0]),
      RangeError,
      /^Array\.fromTypedArray: shape\[0\] .* got 4294967296$/,
    );
    expectRefused(() => mx.array(new Float32Array(0), { shape: [2 ** 32, 0] }), RangeError, /^array: shape\[0\] .* got 4294967296$/);
    expectRefused(() => mx.array([1, 2, 3, 4], { shape: [2 ** 32 + 2, 2] }), RangeError, /^array: shape\[0\] .* got 4294967298$/);
    expect(mx.array([1, 2, 3, 4], { shape: [2, -1] }).toList()).toEqual([
      [1, 2],
      [3, 4],
    ]);
  });

  it('axes and int arguments must be int32 integers', () => {
    expectRefused(
      () => mx.sum(x23(), [2 ** 32]),
      RangeError,
      /^sumAxes: axes\[0\] must be an integer in \[-2147483648, 2147483647\], got 4294967296$/,
    );
    expectRefused(() => mx.expandDims(x23(), 0.7), RangeError, /^expandDims: axis .* got 0\.7$/);
    expectRefused(() => mx.expandDims(x23(), 2 ** 32), RangeError, /^expandDims: axis .* got 4294967296$/);
    expectRefused(() => mx.repeat(x23(), 2 ** 32 + 1, 0), RangeError, /^repeatAxis: repeats .* got 4294967297$/);
    expectRefused(() => mx.asStrided(x23(), [2], [1.5], 0), RangeError, /^asStrided: strides\[0\] .* got 1\.5$/);
    // Optional ints too (koffi would have passed 64 for 64.5).
    expectRefused(() => mx.quantize(mx.zeros([4, 128]), 64.5, 4, 'affine'), RangeError, /^quantize: groupSize .* got 64\.5$/);
    expect(mx.quantize(mx.zeros([4, 128]), 64, 4, 'affine').length).toBe(3);
    expect(mx.sum(x23(), [-1]).toList()).toEqual([3, 12]);
    expect(mx.asStrided(x23(), [3], [2n as never], 0).toList()).toEqual([0, 2, 4]);
  });

  it('valueAndGrad argnums are non-negative int32 integers', () => {
    const f = (a: mx.Array, b: mx.Array) => mx.sum(mx.multiply(a, b));
    expectRefused(() => mx.valueAndGrad(f, 0.5), RangeError, /^valueAndGrad: argnums\[0\] .* got 0\.5$/);
    expectRefused(() => mx.grad(f, [0, -1]), RangeError, /^valueAndGrad: argnums\[1\] .* got -1$/);
    const g = mx.grad(f, 1)(mx.array([1, 2]), mx.array([3, 4])) as mx.Array;
    expect(g.toList()).toEqual([1, 2]);
  });
});

describe('string arguments', () => {
  it('must be strings without NUL characters: a TypeError or RangeError naming the argument, not a C++ message', () => {
    const w = mx.zeros([4, 64]);
    // Before: "mlx_quantize: basic_string: construction from null is not valid".
    expectRefused(() => mx.quantize(w, 32, 8, undefined as never), TypeError, /^quantize: mode must be a string, got undefined$/);
    expectRefused(() => mx.quantize(w, 32, 8, 7 as never), TypeError, /^quantize: mode must be a string, got 7$/);
    expectRefused(() => mx.quantize(w, 32, 8, 'affine\0x'), RangeError, /^quantize: mode must not contain a NUL character$/);
    expectRefused(() => mx.ext.fusedActivation(w, null, null as never), TypeError, /^fusedActivation: kind must be a string/);
    // A string that is right still works.
    const [q] = mx.quantize(w, 32, 8, 'affine');
    expect(q.shape).toEqual([4, 16]);
  });
});

describe('slice strides of 0', () => {
  it('are a RangeError, and the process lives on', () => {
    // In a child process: before the check, MLX divided by the stride and the process died of SIGFPE.
    const index = fileURLToPath(new URL('./index.ts', import.meta.url));
    const code = `
      import * as mx from ${JSON.stringify(index)};
      const x = mx.reshape(mx.arange(0, 6), [2, 3]);
      const out = [];
      for (const f of [
        () => mx.slice(x, [0, 0], [2, 3], [1, 0]),
        () => mx.sliceUpdate(x, mx.zeros([1, 1]), [0, 0], [1, 1], [0, 1]),
        () => mx.sliceUpdateAdd(x, mx.zeros([1, 1]), [0, 0], [1, 1], [1, 0]),
      ]) {
        try { f(); out.push('no error'); } catch (e) { out.push(e.name + ': ' + e.message); }
      }
      out.push(String(mx.slice(mx.arange(0, 6), [5], [0], [-2]).toList()));
      console.log(JSON.stringify(out));`;
    const r = spawnSync(process.execPath, ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', code], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect({ status: r.status, signal: r.signal, stderr: r.stderr }).toEqual({ status: 0, signal: null, stderr: '' });
    expect(JSON.parse(r.stdout)).toEqual([
      'RangeError: slice: strides[1] must be a non-zero integer in [-2147483648, 2147483647], got 0',
      'RangeError: sliceUpdate: strides[0] must be a non-zero integer in [-2147483648, 2147483647], got 0',
      'RangeError: sliceUpdateAdd: strides[1] must be a non-zero integer in [-2147483648, 2147483647], got 0',
      '5,3,1',
    ]);
  });
});
