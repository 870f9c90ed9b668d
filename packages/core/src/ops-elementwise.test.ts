// Elementwise math, comparisons and logic, against float64 references computed in plain JS.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';
import { inputs, flat } from '../test/numeric.js';

/** Deterministic inputs: float32-representable values in [lo, hi). */

function expectClose(actual: mx.Array, expected: readonly number[], rtol = 2e-6, atol = 1e-6): void {
  const got = Array.from(actual.toTypedArray() as Float32Array);
  expect(got.length).toBe(expected.length);
  for (let i = 0; i < got.length; i++) {
    const e = expected[i];
    if (Number.isNaN(e)) expect(got[i], `element ${i}`).toBeNaN();
    else if (!Number.isFinite(e)) expect(got[i], `element ${i}`).toBe(e);
    else expect(Math.abs(got[i] - e), `element ${i}: got ${got[i]}, expected ${e}`).toBeLessThanOrEqual(atol + rtol * Math.abs(e));
  }
}

/** erf by its Maclaurin series (exact to float64 rounding for |x| <= 3). */
function erf(x: number): number {
  let term = x;
  let sum = x;
  for (let n = 1; n < 100; n++) {
    term *= (-x * x) / n;
    sum += term / (2 * n + 1);
    if (Math.abs(term) < 1e-17) break;
  }
  return (2 / Math.sqrt(Math.PI)) * sum;
}
/** erfinv by Newton's method on erf. */
function erfinv(y: number): number {
  let x = 0;
  for (let i = 0; i < 60; i++) x -= (erf(x) - y) / ((2 / Math.sqrt(Math.PI)) * Math.exp(-x * x));
  return x;
}

type Unary = (a: mx.Array) => mx.Array;
const unary: [string, Unary, (x: number) => number, number, number, number?][] = [
  ['abs', mx.abs, Math.abs, -5, 5],
  ['negative', mx.negative, (x) => -x, -5, 5],
  ['sign', mx.sign, Math.sign, -5, 5],
  ['square', mx.square, (x) => x * x, -5, 5],
  ['sqrt', mx.sqrt, Math.sqrt, 0, 100],
  ['rsqrt', mx.rsqrt, (x) => 1 / Math.sqrt(x), 0.01, 100, 1e-5],
  ['reciprocal', mx.reciprocal, (x) => 1 / x, 0.1, 10],
  ['exp', mx.exp, Math.exp, -10, 10],
  ['expm1', mx.expm1, Math.expm1, -1, 1, 1e-5],
  ['log', mx.log, Math.log, 0.01, 100],
  ['log1p', mx.log1p, Math.log1p, -0.5, 10],
  ['log2', mx.log2, Math.log2, 0.01, 100],
  ['log10', mx.log10, Math.log10, 0.01, 100],
  ['sin', mx.sin, Math.sin, -6, 6],
  ['cos', mx.cos, Math.cos, -6, 6],
  ['tan', mx.tan, Math.tan, -1.2, 1.2, 1e-5],
  ['arcsin', mx.arcsin, Math.asin, -0.99, 0.99, 1e-5],
  ['arccos', mx.arccos, Math.acos, -0.99, 0.99, 1e-5],
  ['arctan', mx.arctan, Math.atan, -10, 10],
  ['sinh', mx.sinh, Math.sinh, -4, 4, 1e-5],
  ['cosh', mx.cosh, Math.cosh, -4, 4, 1e-5],
  ['tanh', mx.tanh, Math.tanh, -4, 4, 1e-5],
  ['arcsinh', mx.arcsinh, Math.asinh, -10, 10, 1e-5],
  ['arccosh', mx.arccosh, Math.acosh, 1.01, 10, 1e-5],
  ['arctanh', mx.arctanh, Math.atanh, -0.95, 0.95, 1e-5],
  ['sigmoid', mx.sigmoid, (x) => 1 / (1 + Math.exp(-x)), -10, 10],
  ['erf', mx.erf, erf, -3, 3, 1e-5],
  ['erfinv', mx.erfinv, erfinv, -0.99, 0.99, 1e-4],
  ['floor', mx.floor, Math.floor, -5, 5],
  ['ceil', mx.ceil, Math.ceil, -5, 5],
  ['degrees', mx.degrees, (x) => (x * 180) / Math.PI, -4, 4],
  ['radians', mx.radians, (x) => (x * Math.PI) / 180, -360, 360],
];

describe('unary math', () => {
  for (const [name, f, ref, lo, hi, rtol] of unary) {
    it(name, () => {
      const xs = inputs(64, lo, hi, name.length * 7919);
      expectClose(f(mx.array(xs, { shape: [8, 8] })), xs.map(ref), rtol ?? 2e-6, 1e-6);
    });
  }

  it('round (half to even, and to decimals)', () => {
    expect(flat(mx.round(mx.array([0.5, 1.5, 2.5, -1.5, 1.2, -2.7]), 0))).toEqual([0, 2, 2, -2, 1, -3]);
    expectClose(mx.round(mx.array([1.234, -5.678]), 2), [1.23, -5.68], 1e-6);
  });

  it('nanToNum replaces NaN and infinities', () => {
    const a = mx.array([NaN, Infinity, -Infinity, 2]);
    expect(flat(mx.nanToNum(a, 0, 100, -100))).toEqual([0, 100, -100, 2]);
  });
});

type Binary = (a: mx.ArrayLike, b: mx.ArrayLike) => mx.Array;
const binary: [string, Binary, (a: number, b: number) => number, [number, number], [number, number]][] = [
  ['add', mx.add, (a, b) => a + b, [-10, 10], [-10, 10]],
  ['subtract', mx.subtract, (a, b) => a - b, [-10, 10], [-10, 10]],
  ['multiply', mx.multiply, (a, b) => a * b, [-10, 10], [-10, 10]],
  ['divide', mx.divide, (a, b) => a / b, [-10, 10], [0.5, 10]],
  ['power', mx.power, (a, b) => a ** b, [0.1, 4], [-2, 3]],
  ['maximum', mx.maximum, Math.max, [-10, 10], [-10, 10]],
  ['minimum', mx.minimum, Math.min, [-10, 10], [-10, 10]],
  ['arctan2', mx.arctan2, Math.atan2, [-10, 10], [-10, 10]],
  ['logaddexp', mx.logaddexp, (a, b) => Math.max(a, b) + Math.log1p(Math.exp(-Math.abs(a - b))), [-20, 20], [-20, 20]],
  // Python semantics: the remainder takes the sign of the divisor.
  ['remainder', mx.remainder, (a, b) => a - b * Math.floor(a / b), [-10, 10], [0.5, 3]],
  ['floorDivide', mx.floorDivide, (a, b) => Math.floor(a / b), [-10, 10], [0.5, 3]],
];

describe('binary math with broadcasting', () => {
  for (const [name, f, ref, [alo, ahi], [blo, bhi]] of binary) {
    it(name, () => {
      const a = inputs(12, alo, ahi, 17 + name.length);
      const b = inputs(4, blo, bhi, 91 + name.length);
      // [3, 4] op [4]: b broadcasts along the rows.
      const expected = a.map((x, i) => ref(x, b[i % 4]));
      // floorDivide and remainder near integer quotients are sensitive to float32 rounding of a/b.
      const tol = name === 'power' ? 1e-5 : 2e-6;
      expectClose(f(mx.array(a, { shape: [3, 4] }), mx.array(b)), expected, tol, 1e-5);
    });
  }

  it('scalars take the dtype of the array operand', () => {
    const i = mx.add(mx.array([1, 2], 'int32'), 3);
    expect(i.dtype).toBe('int32');
    expect(flat(i)).toEqual([4, 5]);
    const h = mx.multiply(mx.array([1.5, 2], 'float16'), 2);
    expect(h.dtype).toBe('float16');
    expect(h.toList()).toEqual([3, 4]);
    expect(mx.add(mx.array([1, 2], 'int32'), 0.5).dtype).toBe('float32');
  });

  it('divmod returns the floor quotient and the remainder', () => {
    const [q, r] = mx.divmod(mx.array([7, -7, 7.5]), mx.array([3, 3, -2]));
    expect(flat(q)).toEqual([2, -3, -4]);
    expect(flat(r)).toEqual([1, 2, -0.5]);
  });
});

describe('comparisons', () => {
  const a = inputs(16, -3, 3, 5).map(Math.round);
  const b = inputs(16, -3, 3, 6).map(Math.round);
  const cmp: [string, Binary, (x: number, y: number) => boolean][] = [
    ['equal', mx.equal, (x, y) => x === y],
    ['notEqual', mx.notEqual, (x, y) => x !== y],
    ['less', mx.less, (x, y) => x < y],
    ['lessEqual', mx.lessEqual, (x, y) => x <= y],
    ['greater', mx.greater, (x, y) => x > y],
    ['greaterEqual', mx.greaterEqual, (x, y) => x >= y],
  ];
  for (const [name, f, ref] of cmp) {
    it(name, () => {
      const r = f(mx.array(a), mx.array(b));
      expect(r.dtype).toBe('bool');
      expect(r.toList()).toEqual(a.map((x, i) => ref(x, b[i])));
    });
  }

  it('isnan, isinf, isposinf, isneginf, isfinite', () => {
    const v = [NaN, Infinity, -Infinity, 0, -1.5];
    const x = mx.array(v);
    expect(mx.isnan(x).toList()).toEqual(v.map(Number.isNaN));
    expect(mx.isinf(x).toList()).toEqual(v.map((y) => Math.abs(y) === Infinity));
    expect(mx.isposinf(x).toList()).toEqual(v.map((y) => y === Infinity));
    expect(mx.isneginf(x).toList()).toEqual(v.map((y) => y === -Infinity));
    expect(mx.isfinite(x).toList()).toEqual(v.map(Number.isFinite));
  });

  it('isclose and allclose', () => {
    const x = mx.array([1, 2, 3]);
    const y = mx.array([1 + 1e-7, 2.5, 3 - 1e-6]);
    expect(mx.isclose(x, y, 1e-5, 1e-8, false).toList()).toEqual([true, false, true]);
    expect(mx.allclose(x, y, 1e-5, 1e-8, false).item()).toBe(false);
    expect(mx.allclose(x, mx.add(x, 1e-7), 1e-5, 1e-8, false).item()).toBe(true);
    expect(mx.arrayEqual(x, mx.array([1, 2, 3]), false).item()).toBe(true);
  });
});

describe('logic and bits', () => {
  const p = [true, true, false, false];
  const q = [true, false, true, false];
  it('logicalAnd, logicalOr, logicalNot', () => {
    expect(mx.logicalAnd(mx.array(p), mx.array(q)).toList()).toEqual(p.map((v, i) => v && q[i]));
    expect(mx.logicalOr(mx.array(p), mx.array(q)).toList()).toEqual(p.map((v, i) => v || q[i]));
    expect(mx.logicalNot(mx.array(p)).toList()).toEqual(p.map((v) => !v));
  });

  it('bitwise and, or, xor, invert and shifts on integers', () => {
    const a = [0b1100, 0b1010, 255, 7];
    const b = [0b1010, 0b0110, 15, 1];
    const A = mx.array(a, 'int32');
    const B = mx.array(b, 'int32');
    expect(flat(mx.bitwiseAnd(A, B))).toEqual(a.map((x, i) => x & b[i]));
    expect(flat(mx.bitwiseOr(A, B))).toEqual(a.map((x, i) => x | b[i]));
    expect(flat(mx.bitwiseXor(A, B))).toEqual(a.map((x, i) => x ^ b[i]));
    expect(flat(mx.bitwiseInvert(A))).toEqual(a.map((x) => ~x));
    expect(flat(mx.leftShift(A, B))).toEqual(a.map((x, i) => x << b[i]));
    expect(flat(mx.rightShift(A, B))).toEqual(a.map((x, i) => x >> b[i]));
    // uint8 wraps.
    expect(flat(mx.leftShift(mx.array([200], 'uint8'), 1))).toEqual([(200 << 1) & 0xff]);
  });

  it('where selects with broadcasting', () => {
    const cond = mx.array([
      [true, false, true],
      [false, false, true],
    ]);
    const x = mx.array([1, 2, 3]);
    const r = mx.where(cond, x, -1);
    expect(r.toList()).toEqual([
      [1, -1, 3],
      [-1, -1, 3],
    ]);
  });

  it('a JS scalar beside a bool mask takes the dtype of the value operand, not of the mask', () => {
    // where(mask, x, 0) keeps x's dtype: the first non-bool array decides the scalar's dtype.
    const m = [true, false, true, false];
    const mask = mx.array(m);
    const pick = (x: number[], s: number) => x.map((v, i) => (m[i] ? v : s));
    const hv = [1.5, 2.5, -3, 4];
    const h = mx.where(mask, mx.array(hv, 'float16'), 0.25);
    expect(h.dtype).toBe('float16');
    expect(h.toList()).toEqual(pick(hv, 0.25));
    const uv = [1, 2, 3, 250];
    const u = mx.where(mask, mx.array(uv, 'uint8'), 7);
    expect(u.dtype).toBe('uint8');
    expect(u.toList()).toEqual(pick(uv, 7));
    // The scalar before the value operand.
    const b = mx.where(mask, 0.5, mx.array(hv, 'bfloat16'));
    expect(b.dtype).toBe('bfloat16');
    expect(b.toList()).toEqual(hv.map((v, i) => (m[i] ? 0.5 : v)));
    // With only bool arrays, the scalar follows the first of them.
    const bb = mx.where(mask, mask, false);
    expect(bb.dtype).toBe('bool');
    expect(bb.toList()).toEqual(m);
  });

  it('clip with bounds on either side or both', () => {
    const xs = inputs(10, -5, 5, 3);
    expectClose(
      mx.clip(mx.array(xs), -1, 2),
      xs.map((x) => Math.min(2, Math.max(-1, x))),
    );
    expectClose(
      mx.clip(mx.array(xs), null, 0),
      xs.map((x) => Math.min(0, x)),
    );
    expectClose(
      mx.clip(mx.array(xs), 0, null),
      xs.map((x) => Math.max(0, x)),
    );
  });
});
