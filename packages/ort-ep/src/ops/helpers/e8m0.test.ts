// float8e8m0 codes against a reference written from the format's definition in float64: a code c
// is 2^(c - 127) (0xFF NaN); x = m·2^k with m in [1, 2) encodes to k + 127, plus one when rounding
// up ('up': m > 1; 'nearest': m >= 1.5), never past 0xFE when saturating.
import { describe, expect, it } from 'vitest';
import { decodeE8M0, encodeE8M0, type E8M0Rounding } from './minifloat.js';

function reference(x: number, saturate: boolean, rounding: E8M0Rounding): number {
  if (!Number.isFinite(x)) return 0xff;
  const a = Math.abs(Math.fround(x));
  if (a === 0) return 0;
  const k = Math.floor(Math.log2(a));
  const m = a / 2 ** k;
  let code = k + 127;
  if (code <= 0) return 0; // float32 subnormals: exponent field 0 (only 'up' rounds them to 1)
  const up = rounding === 'up' ? m > 1 : rounding === 'nearest' ? m >= 1.5 : false;
  if (up && !(saturate && code === 0xfe)) code++;
  return code & 0xff;
}

describe('float8e8m0', () => {
  const values = [1, 1.25, 1.5, 1.75, 2, 3, 0.3, 1e-3, -6, 2 ** 100 * 1.3, 2 ** 127 * 1.5, 2 ** -120 * 1.9, 0.75];
  for (const rounding of ['up', 'down', 'nearest'] as const)
    it(`encodes with rounding '${rounding}', saturating and not`, () => {
      for (const saturate of [true, false])
        for (const x of values)
          expect({ x, code: encodeE8M0(x, saturate, rounding) }).toEqual({ x, code: reference(x, saturate, rounding) });
    });
  it('NaN and infinities encode to 0xFF; zero to 0', () => {
    for (const x of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]) expect(encodeE8M0(x, true, 'up')).toBe(0xff);
    expect(encodeE8M0(0, true, 'up')).toBe(0);
  });
  it('decodes every code to a power of two, 0xFF to NaN', () => {
    for (let c = 0; c < 255; c++) expect(decodeE8M0(c)).toBe(2 ** (c - 127));
    expect(decodeE8M0(0xff)).toBeNaN();
  });
});
