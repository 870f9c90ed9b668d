// JS numbers into the C ints of the ABI (and how messages name a bad value). Unchecked, both ways lose the value silently: an
// Int32Array wraps (a dimension of 2^32 + 3 becomes 3) and truncates fractions, and koffi saturates
// an `int` parameter. Every shape, axis and index list and every int argument goes through here,
// and a value that does not fit is a RangeError naming the argument and the value.

/** What an int list means: `dim` a size (0 to 2^31-1); `dimOrInfer` a size or -1 (reshape's
 * "inferred"); `nonzero` a slice stride (MLX divides by it); `any` an int32 (axes, starts, ...). */
export type IntListRule = 'any' | 'dim' | 'dimOrInfer' | 'nonzero';

const INT32_MIN = -(2 ** 31);
const INT32_MAX = 2 ** 31 - 1;
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

const ranges: Record<IntListRule, [number, number, string]> = {
  any: [INT32_MIN, INT32_MAX, 'an integer in [-2147483648, 2147483647]'],
  dim: [0, INT32_MAX, 'an integer in [0, 2147483647]'],
  dimOrInfer: [-1, INT32_MAX, 'an integer in [0, 2147483647] or -1'],
  nonzero: [INT32_MIN, INT32_MAX, 'a non-zero integer in [-2147483648, 2147483647]'],
};

/** A JS value as a message names it: `4294967299`, `the string "abc"`, `null`, `an object (Map)`. */
export function describeValue(v: unknown): string {
  if (typeof v === 'string') return `the string ${JSON.stringify(v.length > 20 ? `${v.slice(0, 20)}...` : v)}`;
  if (typeof v === 'bigint') return `${v}n`;
  if (v === null) return 'null';
  if (typeof v === 'object')
    return globalThis.Array.isArray(v) ? 'an array' : `an object (${Object.prototype.toString.call(v).slice(8, -1)})`;
  if (typeof v === 'number' || typeof v === 'boolean' || v === undefined) return String(v);
  return `a ${typeof v}`;
}

function refuse(label: string, v: unknown, wanted: string): never {
  if (typeof v !== 'number') throw new TypeError(`${label} must be ${wanted}, got ${describeValue(v)}`);
  throw new RangeError(`${label} must be ${wanted}, got ${describeValue(v)}`);
}

/** A `const char*` argument: a string without NUL characters (the C side would stop at one). */
export function toCString(v: string, label: string): string {
  if (typeof v !== 'string') throw new TypeError(`${label} must be a string, got ${describeValue(v)}`);
  if (v.includes('\0')) throw new RangeError(`${label} must not contain a NUL character`);
  return v;
}

/** An `int` argument: an integer that fits in int32. */
export function toInt32(v: number, label: string): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < INT32_MIN || v > INT32_MAX) refuse(label, v, ranges.any[2]);
  return v;
}

function listOf(values: readonly unknown[], label: string): readonly unknown[] {
  if (!globalThis.Array.isArray(values) && !(ArrayBuffer.isView(values) && !(values instanceof DataView))) {
    throw new TypeError(`${label} must be an array of integers, got ${describeValue(values)}`);
  }
  return values;
}

/** An `const int*` list: each element checked against `rule`. */
export function toInt32Array(values: readonly number[], label: string, rule: IntListRule = 'any'): Int32Array {
  const xs = listOf(values, label);
  const [lo, hi, wanted] = ranges[rule];
  const out = new Int32Array(xs.length);
  for (let i = 0; i < xs.length; i++) {
    const v = xs[i];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < lo || v > hi || (rule === 'nonzero' && v === 0)) {
      refuse(`${label}[${i}]`, v, wanted);
    }
    out[i] = v;
  }
  return out;
}

/** A `const int64_t*` list: integers (numbers within 2^53, or bigints) that fit in int64. */
export function toInt64Array(values: readonly (number | bigint)[], label: string): BigInt64Array {
  const xs = listOf(values, label);
  const wanted = 'an integer in [-2^63, 2^63-1] (a safe integer or a bigint)';
  const out = new BigInt64Array(xs.length);
  for (let i = 0; i < xs.length; i++) {
    const v = xs[i];
    const b = typeof v === 'bigint' ? v : typeof v === 'number' && Number.isSafeInteger(v) ? BigInt(v) : undefined;
    if (b === undefined || b < INT64_MIN || b > INT64_MAX) refuse(`${label}[${i}]`, v, wanted);
    out[i] = b;
  }
  return out;
}
