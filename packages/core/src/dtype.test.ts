// Data in and out for every dtype: TypedArrays, nested arrays, item(), toList(), casts, views
// (non-contiguous results), empty arrays and float64 on the CPU.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';

/**
 * The nearest value with `mant` mantissa bits (round half to even); below 2^minExp the spacing stays
 * that of 2^minExp (subnormals).
 */
function roundToMantissa(x: number, mant: number, minExp: number): number {
  if (x === 0 || !Number.isFinite(x)) return x;
  const e = Math.max(minExp, Math.floor(Math.log2(Math.abs(x))));
  const q = 2 ** (mant - e);
  const y = x * q;
  const f = Math.floor(y);
  const r = y - f > 0.5 || (y - f === 0.5 && f % 2 !== 0) ? f + 1 : f;
  return r / q;
}

describe('construction from TypedArrays', () => {
  const cases: [mx.TypedArray, mx.Dtype][] = [
    [new Float32Array([1.5, -2.25, 3e30]), 'float32'],
    [new Float64Array([1 + 2 ** -40, -1e300, 5e-324]), 'float64'],
    [new Int8Array([-128, 0, 127]), 'int8'],
    [new Int16Array([-32768, 1, 32767]), 'int16'],
    [new Int32Array([-(2 ** 31), 7, 2 ** 31 - 1]), 'int32'],
    [new BigInt64Array([-(2n ** 63n), 0n, 2n ** 63n - 1n]), 'int64'],
    [new Uint8Array([0, 128, 255]), 'uint8'],
    [new Uint16Array([0, 1000, 65535]), 'uint16'],
    [new Uint32Array([0, 123456789, 2 ** 32 - 1]), 'uint32'],
    [new BigUint64Array([0n, 2n ** 63n, 2n ** 64n - 1n]), 'uint64'],
  ];
  for (const [data, dtype] of cases) {
    it(`${data.constructor.name} gives ${dtype} and reads back exactly`, () => {
      const a = mx.array(data);
      expect(a.dtype).toBe(dtype);
      expect(a.shape).toEqual([3]);
      expect(a.itemsize).toBe(data.BYTES_PER_ELEMENT);
      expect(a.nbytes).toBe(3 * data.BYTES_PER_ELEMENT);
      const back = a.toTypedArray();
      expect(back.constructor).toBe(data.constructor);
      expect(Array.from(back as ArrayLike<number | bigint>)).toEqual(Array.from(data as ArrayLike<number | bigint>));
      expect(a.toList()).toEqual(Array.from(data as ArrayLike<number | bigint>));
      // Each element through item() (a slice of one).
      for (let i = 0; i < 3; i++) expect(mx.slice(a, [i], [i + 1], [1]).item()).toBe(data[i]);
    });
  }

  it('a subarray view copies only its own elements', () => {
    const buf = new Float32Array([0, 1, 2, 3, 4, 5]);
    expect(mx.array(buf.subarray(2, 5)).toList()).toEqual([2, 3, 4]);
    expect(mx.array(new Int32Array(buf.buffer, 8, 2).fill(9)).toList()).toEqual([9, 9]);
  });

  it('with a shape, and converting to another dtype', () => {
    const a = mx.array(new Int32Array([1, 2, 3, 4, 5, 6]), { shape: [2, 3] });
    expect(a.toList()).toEqual([
      [1, 2, 3],
      [4, 5, 6],
    ]);
    const f = mx.array(new Float32Array([1.9, -1.9]), { dtype: 'int32' });
    expect(f.dtype).toBe('int32');
    expect(f.toList()).toEqual([1, -1]); // truncation toward zero
    expect(() => mx.array(new Float32Array(3), { shape: [2, 2] })).toThrow(RangeError);
  });

  it('bool from Uint8Array bytes', () => {
    const b = mx.array(new Uint8Array([1, 0, 1, 1]), 'bool');
    expect(b.dtype).toBe('bool');
    expect(b.toList()).toEqual([true, false, true, true]);
    expect(Array.from(b.toTypedArray() as Uint8Array)).toEqual([1, 0, 1, 1]);
    expect(mx.slice(b, [1], [2], [1]).item()).toBe(false);
  });

  it('float16 and bfloat16 from uint16 bits, and their bits back', () => {
    // 1.0 = 0x3c00, -2.0 = 0xc000, 65504 = 0x7bff (largest), 2^-24 = 0x0001 (smallest subnormal), inf = 0x7c00.
    const h = mx.array(new Uint16Array([0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00]), 'float16');
    expect(h.dtype).toBe('float16');
    expect(h.toList()).toEqual([1, -2, 65504, 2 ** -24, Infinity]);
    expect(Array.from(h.toTypedArray() as Uint16Array)).toEqual([0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00]);
    expect(mx.isnan(mx.array(new Uint16Array([0x7e00]), 'float16')).item()).toBe(true);
    // bfloat16 is the top half of a float32: 1.0 = 0x3f80, -0.5 = 0xbf00, 3.0e38 ~ 0x7f62.
    const b = mx.array(new Uint16Array([0x3f80, 0xbf00, 0x4049]), 'bfloat16');
    expect(b.toList()).toEqual([1, -0.5, 3.140625]);
    expect(mx.astype(b, 'float32').toList()).toEqual([1, -0.5, 3.140625]);
  });

  it('complex64 from interleaved float32 pairs', () => {
    const c = mx.array(new Float32Array([1, 2, -3, 0.5]), { dtype: 'complex64', shape: [2] });
    expect(c.dtype).toBe('complex64');
    expect(c.toList()).toEqual([
      [1, 2],
      [-3, 0.5],
    ]);
    expect(mx.real(c).toList()).toEqual([1, -3]);
    expect(mx.imag(c).toList()).toEqual([2, 0.5]);
    expect(() => mx.slice(c, [0], [1], [1]).item()).toThrow(TypeError);
  });
});

describe('construction from nested arrays', () => {
  const values = [
    [0, 1, 2],
    [3, 4, 5],
  ];
  for (const d of mx.dtypes) {
    it(`${d}: shape, values, item() and toList()`, () => {
      const a = mx.array(values, d);
      expect(a.dtype).toBe(d);
      expect(a.shape).toEqual([2, 3]);
      const expected =
        d === 'bool'
          ? values.map((r) => r.map((v) => v !== 0))
          : d === 'int64' || d === 'uint64'
            ? values.map((r) => r.map(BigInt))
            : d === 'complex64'
              ? values.map((r) => r.map((v) => [v, 0]))
              : values;
      expect(a.toList()).toEqual(expected);
      if (d !== 'complex64') expect(mx.slice(a, [1, 2], [2, 3], [1, 1]).item()).toEqual((expected as unknown[][])[1][2]);
    });
  }

  it('infers bool, int64 and float32; bigints and booleans keep their type', () => {
    expect(mx.array([true, false]).dtype).toBe('bool');
    expect(mx.array([1n, -(2n ** 62n)]).toList()).toEqual([1n, -(2n ** 62n)]);
    expect(mx.array([[1.5]]).dtype).toBe('float32');
    expect(mx.array(3).shape).toEqual([]);
    expect(mx.array(3).item()).toBe(3);
  });

  it('rejects ragged input', () => {
    expect(() => mx.array([[1, 2], [3]] as never)).toThrow(/ragged/);
    expect(() => mx.array([1, [2]] as never)).toThrow(/ragged/);
  });

  it('scalar() makes zero-dimensional arrays of any dtype', () => {
    const s = mx.scalar(-7, 'int16');
    expect(s.shape).toEqual([]);
    expect(s.ndim).toBe(0);
    expect(s.size).toBe(1);
    expect(s.item()).toBe(-7);
    expect(mx.scalar(2n ** 40n, 'int64').item()).toBe(2n ** 40n);
    expect(mx.scalar(true, 'bool').item()).toBe(true);
    expect(mx.scalar(0.1, 'float16').item()).toBe(roundToMantissa(0.1, 10, -14));
    expect(mx.scalar(0.1, 'bfloat16').item()).toBe(roundToMantissa(0.1, 7, -126));
  });
});

describe('casts', () => {
  const xs = [0.1, 1 / 3, -2.7182817, 1000.123, 6.0e-5, -0.0009765625];
  it('float32 -> float16 -> float32 rounds to the nearest half (10-bit mantissa)', () => {
    const h = mx.astype(mx.array(xs), 'float16');
    expect(h.dtype).toBe('float16');
    expect(h.toList()).toEqual(xs.map((x) => roundToMantissa(Math.fround(x), 10, -14)));
    expect(mx.astype(h, 'float32').toList()).toEqual(xs.map((x) => roundToMantissa(Math.fround(x), 10, -14)));
  });
  it('float32 -> bfloat16 -> float32 rounds to the nearest bfloat16 (7-bit mantissa)', () => {
    const b = mx.array(xs).astype('bfloat16');
    expect(b.toList()).toEqual(xs.map((x) => roundToMantissa(Math.fround(x), 7, -126)));
    expect(b.astype('float32').toList()).toEqual(xs.map((x) => roundToMantissa(Math.fround(x), 7, -126)));
  });
  it('float16 overflows to infinity; the JS bit helpers agree with MLX', () => {
    expect(mx.astype(mx.array([70000, -1e6]), 'float16').toList()).toEqual([Infinity, -Infinity]);
    const bits = Array.from(mx.astype(mx.array(xs), 'float16').toTypedArray() as Uint16Array);
    expect(bits).toEqual(xs.map(mx.numberToFloat16Bits));
    expect(bits.map(mx.float16BitsToNumber)).toEqual(xs.map((x) => roundToMantissa(Math.fround(x), 10, -14)));
    const bbits = Array.from(mx.astype(mx.array(xs), 'bfloat16').toTypedArray() as Uint16Array);
    expect(bbits).toEqual(xs.map(mx.float32ToBfloat16Bits));
    expect(bbits.map(mx.bfloat16BitsToNumber)).toEqual(xs.map((x) => roundToMantissa(Math.fround(x), 7, -126)));
  });
  it('integer casts truncate toward zero and wrap modulo 2^bits', () => {
    expect(mx.astype(mx.array([2.9, -2.9, 0.5]), 'int32').toList()).toEqual([2, -2, 0]);
    expect(mx.astype(mx.array([300, -1, 255], 'int32'), 'uint8').toList()).toEqual([300 & 255, 255, 255]);
    expect(mx.astype(mx.array([2 ** 31 - 1], 'int32'), 'int64').item()).toBe(2n ** 31n - 1n);
    expect(mx.astype(mx.array([-1], 'int32'), 'uint32').item()).toBe(2 ** 32 - 1);
  });
  it('to and from bool', () => {
    expect(mx.astype(mx.array([0, 2, -1, 0.5]), 'bool').toList()).toEqual([false, true, true, true]);
    expect(mx.astype(mx.array([true, false]), 'float32').toList()).toEqual([1, 0]);
  });
});

describe('non-contiguous results read back in logical order', () => {
  for (const d of ['float32', 'int64', 'float16', 'bool', 'uint8'] as const) {
    it(`${d}: transpose, broadcast and strided slice`, () => {
      const base = mx.array(
        [
          [0, 1, 2],
          [3, 4, 5],
        ],
        d,
      );
      const conv = (v: number) => (d === 'bool' ? v !== 0 : d === 'int64' ? BigInt(v) : v);
      expect(mx.transpose(base).toList()).toEqual(
        [
          [0, 3],
          [1, 4],
          [2, 5],
        ].map((r) => r.map(conv)),
      );
      expect(mx.broadcastTo(mx.array([[7], [9]], d), [2, 3]).toList()).toEqual(
        [
          [7, 7, 7],
          [9, 9, 9],
        ].map((r) => r.map(conv)),
      );
      expect(mx.slice(base, [0, 0], [2, 3], [1, 2]).toList()).toEqual(
        [
          [0, 2],
          [3, 5],
        ].map((r) => r.map(conv)),
      );
      const flatT = Array.from(mx.transpose(base).toTypedArray() as ArrayLike<number | bigint>);
      expect(flatT.length).toBe(6);
    });
  }
  it('a reversed slice and a transposed 3-D array', () => {
    const a = mx.arange(24, undefined, 1, 'int32');
    const t = mx.transpose(mx.reshape(a, [2, 3, 4]), [2, 0, 1]);
    const expected: number[] = [];
    for (let k = 0; k < 4; k++) for (let i = 0; i < 2; i++) for (let j = 0; j < 3; j++) expected.push(i * 12 + j * 4 + k);
    expect(Array.from(t.toTypedArray() as Int32Array)).toEqual(expected);
    expect(mx.slice(a, [23], [-25], [-3]).toList()).toEqual([23, 20, 17, 14, 11, 8, 5, 2]);
  });
});

describe('empty arrays', () => {
  it('read back without touching data', () => {
    for (const d of ['float32', 'int64', 'float16', 'bool', 'complex64'] as const) {
      const e = mx.zeros([0], d);
      expect(e.size).toBe(0);
      expect(e.toTypedArray().length).toBe(0);
      expect(e.toList()).toEqual([]);
    }
    const e2 = mx.zeros([2, 0, 3]);
    expect(e2.shape).toEqual([2, 0, 3]);
    expect(e2.toList()).toEqual([[], []]);
    expect(mx.transpose(e2).shape).toEqual([3, 0, 2]);
    expect(mx.transpose(e2).toList()).toEqual([[], [], []]);
    expect(mx.array(new Float32Array(0)).toList()).toEqual([]);
    expect(mx.array([]).shape).toEqual([0]);
  });
  it('come out of slicing and reduce sensibly', () => {
    const s = mx.slice(mx.arange(5), [3], [3], [1]);
    expect(s.shape).toEqual([0]);
    expect(s.toList()).toEqual([]);
    expect(mx.sum(s).item()).toBe(0);
    expect(mx.prod(s).item()).toBe(1);
    expect(mx.sum(mx.zeros([0, 4]), 0).toList()).toEqual([0, 0, 0, 0]);
    expect(() => s.item()).toThrow(RangeError);
  });
  it('max of an empty array is an MlxError, not a crash', () => {
    expect(() => mx.max(mx.zeros([0]))).toThrow(mx.MlxError);
    expect(() => mx.logsumexp(mx.zeros([0]))).toThrow(mx.MlxError);
  });
});

describe('float64 on the CPU stream', () => {
  const cpu = { stream: 'cpu' } as const;
  it('keeps float64 precision through arithmetic', () => {
    // (MLX's CPU exp/sin/cos evaluate float64 with float32-accurate approximations, ~1e-7 relative;
    // log, sqrt, tanh, division and sums are exact to float64 rounding.)
    const a = mx.array(new Float64Array([1, 1e-12, Math.PI]));
    const r = mx.add(a, mx.array(new Float64Array([2 ** -40, 1, 0])), cpu);
    expect(r.dtype).toBe('float64');
    expect(Array.from(r.toTypedArray() as Float64Array)).toEqual([1 + 2 ** -40, 1 + 1e-12, Math.PI]);
    expect(mx.log(mx.array(new Float64Array([Math.E])), cpu).item()).toBeCloseTo(1, 15);
    expect(mx.sqrt(mx.array(new Float64Array([2])), cpu).item()).toBe(Math.SQRT2);
    expect(mx.divide(mx.array(new Float64Array([1])), 3, cpu).item()).toBe(1 / 3);
    expect(Math.abs((mx.exp(mx.array(new Float64Array([1])), cpu).item() as number) - Math.E)).toBeLessThan(1e-6);
    expect(mx.sum(mx.array(new Float64Array([0.1, 0.2, 0.3])), null, cpu).item()).toBeCloseTo(0.6, 15);
  });
  it('matmul in float64', () => {
    const a = mx.array(new Float64Array([1 + 1e-10, 2, 3, 4]), { shape: [2, 2] });
    const b = mx.array(new Float64Array([1, 0, 1e-10, 1]), { shape: [2, 2] });
    const r = Array.from(mx.matmul(a, b, cpu).toTypedArray() as Float64Array);
    const ref = [(1 + 1e-10) * 1 + 2 * 1e-10, 2, 3 + 4e-10, 4];
    r.forEach((v, i) => expect(v).toBeCloseTo(ref[i], 14));
  });
  // MLX's GPU backends have no float64: a GPU session computes float64 nodes on the CPU stream, and
  // a transposed (non-contiguous) float64 result was made contiguous on the GPU stream for its read,
  // which failed ("float64 is not supported on the GPU"; ONNX's test_einsum_transpose on an H100).
  it.runIf(mx.gpuAvailable())('reads a non-contiguous float64 result under a GPU default stream (made contiguous on the CPU)', () => {
    const x = mx.transpose(mx.array(new Float64Array([1, 2, 3, 4, 5, 6]), { shape: [2, 3] }), [1, 0], cpu);
    mx.withStream('gpu', () => {
      expect(Array.from(x.toTypedArray() as Float64Array)).toEqual([1, 4, 2, 5, 3, 6]);
    });
  });
  it('casts to float64 and back', () => {
    const v = Math.fround(1 / 3);
    expect(mx.astype(mx.array([v]), 'float64', cpu).item()).toBe(v);
    expect(mx.astype(mx.array(new Float64Array([1 / 3])), 'float32', cpu).item()).toBe(Math.fround(1 / 3));
  });
});

describe('dtype helpers', () => {
  it('itemsize and classification', () => {
    expect(mx.dtypes.map(mx.itemsize)).toEqual([1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 4, 8, 2, 8]);
    expect(mx.dtypes.filter(mx.isFloating)).toEqual(['float16', 'float32', 'float64', 'bfloat16']);
    expect(mx.dtypes.filter(mx.isUnsigned)).toEqual(['uint8', 'uint16', 'uint32', 'uint64']);
    expect(mx.dtypes.filter(mx.isInteger)).toEqual(['uint8', 'uint16', 'uint32', 'uint64', 'int8', 'int16', 'int32', 'int64']);
  });
});
