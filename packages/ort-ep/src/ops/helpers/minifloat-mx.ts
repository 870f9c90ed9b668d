// Float8/float4 codes on MLX arrays for the quantizers: decoding through a 256-entry table (a take),
// encoding on the host (MLX has no such dtypes, and the rounding rules are easiest exact there).
import * as mx from '@mlx/core';
import { decodeSmallFloat, encodeSmallFloat, isSmallFloat } from './minifloat.js';

/** The format (its ONNX element type) when `t` is a float8/float4 type, else undefined. */
export function miniFloatOf(t: number): number | undefined {
  return isSmallFloat(t) ? t : undefined;
}

const luts = new Map<number, Float32Array>();
function lut(spec: number): Float32Array {
  let t = luts.get(spec);
  if (!t) {
    t = Float32Array.from({ length: 256 }, (_, c) => decodeSmallFloat(c & (spec === 23 ? 0x0f : 0xff), spec));
    luts.set(spec, t);
  }
  return t;
}

/** Codes (uint8) -> float32 values. */
export function decodeMiniFloat(codes: mx.Array, spec: number): mx.Array {
  const table = mx.array(lut(spec), { shape: [256] });
  return mx.take(table, mx.astype(codes, 'int32'), 0);
}

/** float values -> codes (uint8), rounding to nearest even, with the ONNX saturation rules. */
export function encodeMiniFloat(values: mx.Array, spec: number, saturate: boolean): mx.Array {
  const v = mx.astype(values, 'float32');
  const data = v.toTypedArray() as Float32Array;
  const codes = Uint8Array.from(data, (x) => encodeSmallFloat(x, spec, saturate));
  return mx.Array.fromTypedArray(codes, v.shape, 'uint8');
}
