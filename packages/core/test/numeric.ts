// Helpers shared by the op tests: deterministic inputs, data out as numbers, and an elementwise
// closeness check (|got − expected| ≤ atol + rtol·|expected|) that names the first bad element.
import { expect } from 'vitest';
import type * as mx from '../src/index.js';

/** n float32-representable values in [lo, hi) from a fixed linear congruential sequence. */
export function inputs(n: number, lo: number, hi: number, seed = 1): number[] {
  let s = seed >>> 0;
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out.push(Math.fround(lo + ((hi - lo) * s) / 2 ** 32));
  }
  return out;
}

export const flat = (a: mx.Array | mx.Array[]): number[] => Array.from((a as mx.Array).toTypedArray() as ArrayLike<number>);

export function expectAllClose(actual: mx.Array | number[], expected: readonly number[], rtol: number, atol: number): void {
  const got = Array.isArray(actual) ? actual : flat(actual);
  expect(got.length).toBe(expected.length);
  for (let i = 0; i < got.length; i++) {
    expect(Math.abs(got[i] - expected[i]), `element ${i}: got ${got[i]}, expected ${expected[i]}`).toBeLessThanOrEqual(
      atol + rtol * Math.abs(expected[i]),
    );
  }
}
