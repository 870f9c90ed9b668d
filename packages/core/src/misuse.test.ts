// Misuse of @mlx/core that used to kill the process: arrays larger than memory (zeros of 16 TiB,
// ones of 32 GiB: MLX wrote into the null buffer of a failed allocation, SIGSEGV), convolutions
// with groups 0 (SIGFPE), take with an index far past the array (an out-of-bounds read, SIGSEGV),
// asStrided past the end of its buffer (reads what lies beyond), and int32 floorDivide of INT_MIN
// by -1 (SIGFPE on x86). Each case runs in a child process, since before the fix each killed the
// process that ran it.
import { spawnSync } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/**
 * What `expr` (an expression over `mx`) gives in a child process: its evaluated value as a list,
 * (int64 values as '<digits>n'), or the class, code and message of what it threw. `kb` sets an address-space limit (`ulimit -v`)
 * so that an allocation larger than memory fails the same on every machine; --jitless keeps tsx's
 * WebAssembly lexer from reserving gigabytes of it.
 */
function outcome(expr: string, kb = 8_000_000): { value?: unknown; name?: string; code?: string; message?: string } {
  const code = `
    import * as mx from './src/index.ts';
    let out;
    try {
      const r = ${expr};
      mx.evaluate(r);
      out = { value: r.toList() };
    } catch (e) {
      out = { name: e.constructor.name, code: e.code, message: e.message };
    }
    process.stdout.write(JSON.stringify(out, (_k, v) => (typeof v === 'bigint' ? String(v) + 'n' : v)));`;
  const r = spawnSync(
    'bash',
    ['-c', `ulimit -v ${kb} && exec "$0" --jitless --conditions=source --import tsx --input-type=module -e "$1"`, process.execPath, code],
    { cwd: pkg, encoding: 'utf8', timeout: 60_000 },
  );
  expect({ status: r.status, signal: r.signal }, r.stderr).toEqual({ status: 0, signal: null });
  return JSON.parse(r.stdout);
}

describe('allocations larger than memory are MlxErrors with code ERR_MLX_ALLOCATION', () => {
  it('zeros of 16 TiB', () => {
    expect(outcome("mx.zeros([2 ** 21, 2 ** 21], 'float32')")).toEqual({
      name: 'MlxError',
      code: 'ERR_MLX_ALLOCATION',
      message: 'mlx_eval: [malloc] Unable to allocate 17592186044416 bytes.',
    });
  });
  it('ones of 32 GiB', () => {
    expect(outcome("mx.ones([8, 2 ** 30], 'float32')")).toMatchObject({ name: 'MlxError', code: 'ERR_MLX_ALLOCATION' });
  });
  it('a resident array (the arena of weights) past the address space left', () => {
    // 1.5 GB of data fits under a 2.5 GB limit; its resident copy's mapping does not.
    const expr = "mx.Array.fromTypedArray(new Uint8Array(1.5e9), [1.5e9], 'uint8', { resident: true })";
    expect(outcome(expr, 2_500_000)).toMatchObject({
      name: 'MlxError',
      code: 'ERR_MLX_ALLOCATION',
      message: expect.stringMatching(/^mlxc_array_new_resident: \[malloc\] Unable to allocate \d+ bytes\.$/),
    });
  });
  it("a shape whose size overflows MLX's arithmetic is refused when the op is made", () => {
    expect(outcome("mx.zeros([2 ** 16, 2 ** 16, 2 ** 16, 2 ** 16], 'float32')")).toEqual({
      name: 'MlxError',
      code: 'ERR_MLX',
      message:
        "mlx_zeros: [shape] an array of shape [65536, 65536, 65536, 65536] would hold 7.38e+19 bytes, more than any memory (its element count overflows MLX's size arithmetic)",
    });
    expect(outcome('mx.broadcastTo(mx.ones([1]), [2 ** 31 - 1, 2 ** 31 - 1, 2 ** 31 - 1])').message).toMatch(
      /^mlx_broadcast_to: \[shape\]/,
    );
  });
  it('the process goes on: a small array after a failed large one', () => {
    expect(
      outcome('(() => { try { mx.evaluate(mx.ones([8, 2 ** 30])); } catch { /* expected */ } return mx.add(mx.ones([2]), 1); })()'),
    ).toEqual({ value: [2, 2] });
  });
});

describe('arguments MLX crashes on are checked', () => {
  it('conv groups of 0 (or less) are refused by name', () => {
    expect(outcome('mx.conv2d(mx.ones([1, 4, 4, 2]), mx.ones([2, 3, 3, 2]), 1, 1, 0, 0, 1, 1, 0)')).toEqual({
      name: 'MlxError',
      code: 'ERR_MLX',
      message: 'mlx_conv2d: [conv2d] groups must be a positive integer, got 0',
    });
    expect(outcome('mx.conv1d(mx.ones([1, 4, 2]), mx.ones([2, 3, 2]), 1, 0, 1, -1)')).toMatchObject({
      message: 'mlx_conv1d: [conv1d] groups must be a positive integer, got -1',
    });
    expect(outcome('mx.convGeneral(mx.ones([1, 4, 2]), mx.ones([2, 3, 2]), [1], [0], [0], [1], [1], 0, false)')).toMatchObject({
      message: 'mlx_conv_general: [conv_general] groups must be a positive integer, got 0',
    });
    expect(outcome('mx.conv2d(mx.ones([1, 4, 4, 2]), mx.ones([2, 3, 3, 1]), 1, 1, 0, 0, 1, 1, 2)')).toEqual({ value: expect.any(Array) });
  });

  it('take with an index past the array is an error at evaluation; in-range negative indices still wrap', () => {
    const far = outcome("mx.take(mx.arange(0, 4), mx.array([1, 1e7], 'int32'))");
    expect(far).toMatchObject({ name: 'MlxError', code: 'ERR_MLX' });
    expect(far.message).toMatch(/\[take\] index 10000000 is out of range for an axis of size 4 \(valid: -4 to 3\)$/);
    expect(outcome("mx.take(mx.reshape(mx.arange(0, 8), [2, 4]), mx.array([0, -5], 'int32'), 1)").message).toMatch(
      /\[take\] index -5 is out of range for an axis of size 4/,
    );
    expect(outcome("mx.takeAlongAxis(mx.arange(0, 4), mx.array([4], 'int64'), 0)").message).toMatch(
      /\[take_along_axis\] index 4 is out of range for an axis of size 4/,
    );
    expect(outcome("mx.take(mx.arange(0, 4), mx.array([-1, 0, 3], 'int32'))")).toEqual({ value: [3, 0, 3] });
    expect(outcome("mx.take(mx.reshape(mx.arange(0, 8), [2, 4]), mx.array([-4n, 3n], 'int64'), 1)")).toEqual({
      value: [
        [0, 3],
        [4, 7],
      ],
    });
  });

  it('asStrided may not reach past its buffer', () => {
    expect(outcome('mx.asStrided(mx.arange(0, 4), [1000], [1], 0)')).toEqual({
      name: 'MlxError',
      code: 'ERR_MLX',
      message: 'mlx_as_strided: [as_strided] the view reaches elements 0 to 999 of an array of 4 elements',
    });
    expect(outcome('mx.asStrided(mx.arange(0, 4), [2], [-1], 0)').message).toMatch(/reaches elements -1 to 0 of an array of 4/);
    expect(outcome('mx.asStrided(mx.arange(0, 4), [2, 2], [1, 1], 1)')).toEqual({
      value: [
        [1, 2],
        [2, 3],
      ],
    });
    expect(outcome('mx.asStrided(mx.arange(0, 4), [0, 5], [100, 100], 0)')).toEqual({ value: [] });
  });

  it('integer floorDivide and remainder of the minimum by -1 wrap as two-complement division does', () => {
    expect(outcome("mx.floorDivide(mx.array([-2147483648, 7, -7], 'int32'), mx.array([-1, -1, 2], 'int32'))")).toEqual({
      value: [-2147483648, -7, -4],
    });
    expect(outcome("mx.remainder(mx.array([-2147483648, 7], 'int32'), mx.array([-1, -3], 'int32'))")).toEqual({ value: [0, -2] });
    expect(outcome("mx.floorDivide(mx.array([-9223372036854775808n], 'int64'), mx.array([-1n], 'int64'))")).toEqual({
      value: ['-9223372036854775808n'],
    });
  });
});

describe("take's index check keeps take's other uses", () => {
  it('differentiates through take and takeAlongAxis', () => {
    const g = mx.grad((a: mx.Array) => mx.sum(mx.take(a, mx.array([0, 2, 2, -1], 'int32'))));
    const d = g(mx.array([1, 2, 3, 4]));
    expect((Array.isArray(d) ? d[0] : d).toList()).toEqual([1, 0, 2, 1]);
    const g2 = mx.grad((a: mx.Array) => mx.sum(mx.takeAlongAxis(a, mx.array([[1], [0]], 'int32'), 1)));
    const d2 = g2(
      mx.array([
        [1, 2],
        [3, 4],
      ]),
    );
    expect((Array.isArray(d2) ? d2[0] : d2).toList()).toEqual([
      [0, 1],
      [1, 0],
    ]);
  });

  it('checks against the size of the array a shapeless compile is called with', () => {
    const f = mx.compile((a: mx.Array, i: mx.Array) => mx.take(a, i), { shapeless: true });
    try {
      const r4 = f(mx.arange(0, 4), mx.array([3], 'int32')) as mx.Array;
      expect(r4.toList()).toEqual([3]);
      const r8 = f(mx.arange(0, 8), mx.array([7], 'int32')) as mx.Array;
      expect(r8.toList()).toEqual([7]);
      const bad = f(mx.arange(0, 8), mx.array([8], 'int32')) as mx.Array;
      expect(() => mx.evaluate(bad)).toThrow(/\[take\] index 8 is out of range for an axis of size 8/);
    } finally {
      f.dispose();
    }
  });
});
