// The static executor's own tiny steps (native/src/static_tiny.cpp): a host program's small
// integer, bool and float32 elementwise ops, copies, concatenations and integer reductions are
// computed by the executor instead of each primitive's kernel. Each case runs one function as a
// HostProgram (the static executor) and eagerly (MLX's own kernels): the results must agree bit for
// bit, wrap-around, NaN and views included. A child process with MLXC_PRIM_TIMES=static shows the
// steps are the executor's, and MLXC_STATIC_TINY=0 that they are not then.
import { describe, expect, it } from 'vitest';
import { CORE_INDEX, runScript } from '../test/child.js';
import * as mx from './index.js';

const I32 = [2147483647, -2147483648, 7, -3, 0, 1, 100000, -100000, 65535, 3, -1, 2];
const J32 = [1, -1, 7, 5, 0, -2, 100000, 3, 2, -3, -1, 46341];
const F32 = [Number.NaN, 1.5, -0, 0, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, 3.25, -2.5, 1e-40, 16777217, -7, 0.1];
const G32 = [2, Number.NaN, 0, -0, Number.POSITIVE_INFINITY, 1, 3.25, -3, 1e-40, 1, Number.NaN, 0.2];
const BOOLS = [1, 0, 1, 1, 0, 0, 1, 0, 1, 0, 0, 1];
const U8 = [0, 1, 255, 128, 127, 200, 3, 250, 9, 17, 255, 64];
const I64 = [2n ** 62n, -(2n ** 62n), 5n, -1n];

type Inputs = { a: mx.Array; b: mx.Array; f: mx.Array; g: mx.Array; m: mx.Array; u: mx.Array; c: mx.Array };
const slots: mx.HostSlot[] = [
  { dtype: 'int32', shape: [3, 4] },
  { dtype: 'int32', shape: [3, 4] },
  { dtype: 'float32', shape: [3, 4] },
  { dtype: 'float32', shape: [3, 4] },
  { dtype: 'bool', shape: [3, 4] },
  { dtype: 'uint8', shape: [3, 4] },
  { dtype: 'int64', shape: [4] },
];
const hostData = [
  Int32Array.from(I32),
  Int32Array.from(J32),
  Float32Array.from(F32),
  Float32Array.from(G32),
  Uint8Array.from(BOOLS),
  Uint8Array.from(U8),
  BigInt64Array.from(I64),
];

const s = (v: number, dtype: mx.Dtype) => mx.scalar(v, dtype);
const cases: [string, (x: Inputs) => mx.Array][] = [
  ['int32 add, subtract, multiply wrap', ({ a, b }) => mx.add(mx.multiply(a, b), mx.subtract(a, b))],
  ['int32 maximum, minimum', ({ a, b }) => mx.subtract(mx.maximum(a, b), mx.minimum(a, s(3, 'int32')))],
  ['int32 comparisons', ({ a, b }) => mx.logicalOr(mx.less(a, b), mx.logicalAnd(mx.greaterEqual(a, b), mx.notEqual(a, s(7, 'int32'))))],
  ['int32 equal, less equal, greater', ({ a, b }) => mx.logicalAnd(mx.lessEqual(a, b), mx.logicalNot(mx.greater(a, b)))],
  ['int32 negative (of the minimum too)', ({ a }) => mx.negative(a)],
  ['uint8 wraps', ({ u }) => mx.add(mx.multiply(u, u), s(200, 'uint8'))],
  ['int64 products and sums', ({ c }) => mx.add(mx.multiply(c, s(3, 'int64')), c)],
  ['float32 arithmetic, NaN and infinities', ({ f, g }) => mx.subtract(mx.multiply(f, g), mx.add(f, g))],
  ['float32 maximum and minimum with NaN on either side', ({ f, g }) => mx.add(mx.maximum(f, g), mx.minimum(g, f))],
  ['float32 comparisons with NaN', ({ f, g }) => mx.logicalOr(mx.less(f, g), mx.equal(f, g))],
  ['float32 negative', ({ f }) => mx.negative(f)],
  ['select of ints and of floats', ({ a, b, f, g, m }) => mx.add(mx.where(m, a, b), mx.astype(mx.where(m, f, g), 'int32'))],
  ['casts between integers', ({ a, u }) => mx.add(mx.astype(mx.astype(a, 'int8'), 'int32'), mx.astype(mx.astype(u, 'int32'), 'int32'))],
  [
    'int64 to int32 and int32 to uint32',
    ({ a, c }) => mx.add(mx.astype(mx.astype(a, 'uint32'), 'int64'), mx.astype(mx.astype(c, 'int32'), 'int64')),
  ],
  [
    'integers to float32 and float32 to bool',
    ({ a, f }) => mx.logicalAnd(mx.astype(f, 'bool'), mx.greater(mx.astype(a, 'float32'), s(0, 'float32'))),
  ],
  ['bool to int32', ({ m, b }) => mx.multiply(mx.astype(m, 'int32'), b)],
  ['a transposed view, reshaped', ({ a }) => mx.reshape(mx.transpose(a), [12])],
  ['a slice view, squeezed and expanded', ({ a }) => mx.expandDims(mx.squeeze(mx.slice(a, [1, 0], [2, 4], [1, 1]), [0]), [1])],
  ['a broadcast row', ({ c }) => mx.add(mx.broadcastTo(c, [3, 4]), s(1, 'int64'))],
  [
    'concatenations of views along either axis',
    ({ a, b }) => mx.concatenate([mx.transpose(mx.slice(a, [0, 0], [3, 4], [1, 1])), mx.transpose(b)], 0),
  ],
  ['concatenation along the last axis', ({ a, b }) => mx.concatenate([a, mx.slice(b, [0, 1], [3, 3], [1, 1])], 1)],
  ['int32 sums over the last axis, wrapping', ({ a }) => mx.sumAxes(a, [1], false)],
  ['int32 sums over the first axis (not a trailing run)', ({ a }) => mx.sumAxes(a, [0], true)],
  ['a sum of everything, of a transposed view', ({ a }) => mx.sum(mx.transpose(a))],
  [
    'maxima, minima, all and any',
    ({ a, m }) =>
      mx.add(
        mx.add(mx.maxAxes(a, [1], false), mx.minAxes(a, [1], false)),
        mx.astype(mx.logicalAnd(mx.allAxes(m, [1], false), mx.logicalNot(mx.anyAxes(m, [1], false))), 'int32'),
      ),
  ],
  ['a sum of bools', ({ m }) => mx.sum(m)],
  [
    'the decode step shape: a mask sum less one, bounds checked',
    ({ m, a }) => {
      const len = mx.subtract(mx.sumAxes(mx.astype(m, 'int64'), [1], false), s(1, 'int64'));
      const pos = mx.astype(len, 'int32');
      return mx.where(mx.less(pos, s(0, 'int32')), mx.add(pos, s(4, 'int32')), mx.minimum(pos, mx.maxAxes(a, [1], false)));
    },
  ],
];

/** The bits of a typed array, so NaN payloads and -0 compare too. */
function bits(t: mx.TypedArray | BigInt64Array): number[] | string[] {
  if (t instanceof BigInt64Array || t instanceof BigUint64Array) return Array.from(t, String);
  if (t instanceof Float32Array) return Array.from(new Uint32Array(t.buffer, t.byteOffset, t.length));
  return Array.from(t as ArrayLike<number>);
}

describe('the static executor computes tiny steps as MLX does', () => {
  for (const [name, f] of cases) {
    it(name, () => {
      const fn = (...xs: mx.Array[]) => f({ a: xs[0], b: xs[1], f: xs[2], g: xs[3], m: xs[4], u: xs[5], c: xs[6] });
      const arrays = hostData.map((d, i) => mx.array(d as never, { shape: slots[i].shape, dtype: slots[i].dtype }));
      const want = fn(...arrays).eval();
      const program = new mx.HostProgram(mx.captureGraph(fn), slots, [{ dtype: want.dtype, shape: want.shape }]);
      const before = mx.hostProgramStaticRuns();
      // The first run traces; the second replays the kept program.
      for (let r = 0; r < 2; r++) {
        const [got] = program.run(hostData);
        expect(bits(got as mx.TypedArray), name).toEqual(bits(want.toTypedArray()));
      }
      expect(mx.hostProgramStaticRuns() - before).toBe(2);
    });
  }
});

describe('MLXC_PRIM_TIMES=static names the executor-computed steps; MLXC_STATIC_TINY=0 turns them off', () => {
  const script = `
    import * as mx from ${CORE_INDEX};
    const f = mx.captureGraph((a, b) => mx.where(mx.less(a, b), mx.add(a, b), mx.subtract(a, b)));
    const slot = { dtype: 'int32', shape: [4] };
    const p = new mx.HostProgram(f, [slot, slot], [slot]);
    let y;
    for (let i = 0; i < 3; i++) y = p.run([new Int32Array([1, 5, -2, 7]), new Int32Array([3, 4, -2, 9])])[0];
    console.log(Array.from(y).join(','));`;
  it('Less, Add, Subtract and Select rows marked (executor), or not', () => {
    const on = runScript(script, { MLXC_PRIM_TIMES: 'static' });
    expect(on.status, on.stderr).toBe(0);
    expect(on.stdout.trim()).toBe('4,1,0,16');
    for (const p of ['Less', 'Add', 'Subtract', 'Select']) expect(on.stderr).toMatch(new RegExp(`\\n\\s+${p} \\(executor\\)\\s+3 `));
    const off = runScript(script, { MLXC_PRIM_TIMES: 'static', MLXC_STATIC_TINY: '0' });
    expect(off.status, off.stderr).toBe(0);
    expect(off.stdout.trim()).toBe('4,1,0,16');
    expect(off.stderr).not.toContain('(executor)');
    expect(off.stderr).toMatch(/\n\s+Select\s+3 /);
  });

  it('float32 steps of at most 64 elements only: a larger one runs its kernel', () => {
    // A float32 tiny step gathers its values one by one: over a rotary embedding's 512-element
    // strided products that cost several times MLX's kernel (llama-tiny 0.29 against 0.10 ms a run).
    const sized = (n: number) => `
      import * as mx from ${CORE_INDEX};
      const f = mx.captureGraph((a, b) => mx.multiply(mx.transpose(a, [1, 0]), b));
      const p = new mx.HostProgram(f, [{ dtype: 'float32', shape: [${n}, 2] }, { dtype: 'float32', shape: [2, ${n}] }], [{ dtype: 'float32', shape: [2, ${n}] }]);
      const a = Float32Array.from({ length: ${2 * n} }, (_, i) => i);
      const b = new Float32Array(${2 * n}).fill(0.5);
      let y;
      for (let i = 0; i < 3; i++) y = p.run([a, b])[0];
      console.log(y[1], y[${n}]);`;
    const small = runScript(sized(32), { MLXC_PRIM_TIMES: 'static' });
    expect(small.status, small.stderr).toBe(0);
    expect(small.stdout.trim()).toBe('1 0.5');
    expect(small.stderr).toMatch(/\n\s+Multiply \(executor\)\s+3 /);
    const large = runScript(sized(256), { MLXC_PRIM_TIMES: 'static' });
    expect(large.status, large.stderr).toBe(0);
    expect(large.stdout.trim()).toBe('1 0.5');
    expect(large.stderr).not.toContain('(executor)');
    expect(large.stderr).toMatch(/\n\s+Multiply\s+3 /);
  });
});
