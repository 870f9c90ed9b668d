// Comparison of an output with its expected value: shape, element type, then values (floats within
// atol + rtol*|expected|, NaN equals NaN; integers, bools and strings exactly).
import { OnnxDataType, type HostTensor } from '../../src/onnx/index.js';
import { bfloat16BitsToNumber, float16BitsToNumber } from '@mlx/core';

export interface Tolerance {
  rtol: number;
  atol: number;
}

export interface Mismatch {
  ok: false;
  why: string;
  /** Largest |actual - expected| over the elements, for float outputs. */
  worst?: number;
}

const floatTypes = new Set<number>([
  OnnxDataType.FLOAT,
  OnnxDataType.DOUBLE,
  OnnxDataType.FLOAT16,
  OnnxDataType.BFLOAT16,
  OnnxDataType.COMPLEX64,
]);

function toNumbers(t: HostTensor): ArrayLike<number> | string[] {
  if (t.dtype === OnnxDataType.FLOAT16) return Array.from(t.data as Uint16Array, float16BitsToNumber);
  if (t.dtype === OnnxDataType.BFLOAT16) return Array.from(t.data as Uint16Array, bfloat16BitsToNumber);
  if (t.data instanceof BigInt64Array || t.data instanceof BigUint64Array) return Array.from(t.data, Number);
  return t.data as ArrayLike<number>;
}

export function compareTensor(actual: HostTensor, expected: HostTensor, tol: Tolerance): { ok: true; worst: number } | Mismatch {
  if (actual.dims.join(',') !== expected.dims.join(','))
    return { ok: false, why: `shape [${actual.dims.join(', ')}] != expected [${expected.dims.join(', ')}]` };
  if (actual.dtype !== expected.dtype) return { ok: false, why: `element type ${actual.dtype} != expected ${expected.dtype}` };
  if (actual.dtype === OnnxDataType.STRING) {
    const a = actual.data as string[],
      e = expected.data as string[];
    for (let i = 0; i < e.length; i++) if (a[i] !== e[i]) return { ok: false, why: `string ${i}: '${a[i]}' != '${e[i]}'` };
    return { ok: true, worst: 0 };
  }
  if (actual.data instanceof BigInt64Array || actual.data instanceof BigUint64Array) {
    const a = actual.data,
      e = expected.data as BigInt64Array;
    for (let i = 0; i < e.length; i++) if (a[i] !== e[i]) return { ok: false, why: `element ${i}: ${a[i]} != ${e[i]}` };
    return { ok: true, worst: 0 };
  }
  const a = toNumbers(actual) as ArrayLike<number>,
    e = toNumbers(expected) as ArrayLike<number>;
  if (a.length !== e.length) return { ok: false, why: `${a.length} elements != expected ${e.length}` };
  const isFloat = floatTypes.has(expected.dtype);
  let worst = 0;
  let firstBad = -1;
  for (let i = 0; i < e.length; i++) {
    const x = a[i],
      y = e[i];
    if (Number.isNaN(y) && Number.isNaN(x)) continue;
    if (!isFloat) {
      if (x !== y && firstBad < 0) firstBad = i;
      continue;
    }
    if (x === y) continue; // infinities of the same sign
    const err = Math.abs(x - y);
    if (!(err <= tol.atol + tol.rtol * Math.abs(y))) {
      if (firstBad < 0) firstBad = i;
      if (!(err <= worst)) worst = Number.isNaN(err) ? Infinity : err;
    }
  }
  if (firstBad >= 0)
    return {
      ok: false,
      why: `element ${firstBad}: ${a[firstBad]} != expected ${e[firstBad]}${isFloat ? ` (worst error ${worst.toExponential(2)})` : ''}`,
      worst,
    };
  return { ok: true, worst };
}
