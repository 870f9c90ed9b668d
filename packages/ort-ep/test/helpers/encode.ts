// Element values as the bytes and bits an ONNX file stores them in: raw_data (little-endian,
// written with DataView whatever the host's byte order), IEEE half and bfloat16 bits, and packed
// 4-bit values. Written here once, from the ONNX spec, and never through the loader under test:
// a test that encoded with the loader's own conversion could not catch a mistake in it.

/** ONNX element type codes by the names onnxruntime-common uses. */
export const ELEM = {
  float32: 1,
  uint8: 2,
  int8: 3,
  uint16: 4,
  int16: 5,
  int32: 6,
  int64: 7,
  string: 8,
  bool: 9,
  float16: 10,
  float64: 11,
  uint32: 12,
  uint64: 13,
  complex64: 14,
  complex128: 15,
  bfloat16: 16,
  uint4: 21,
  int4: 22,
} as const;
export type ElemName = keyof typeof ELEM;

/** The element type code of a name, or the code itself. */
export const elemCode = (t: ElemName | number): number => (typeof t === 'number' ? t : ELEM[t]);

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** float32 -> IEEE half bits, round to nearest even. */
export function toHalfBits(x: number): number {
  f32[0] = x;
  const b = u32[0];
  const sign = (b >>> 16) & 0x8000;
  const exp = (b >>> 23) & 0xff;
  let mant = b & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let h = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    if (rem > half || (rem === half && h & 1)) h++;
    return sign | h;
  }
  let h = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && h & 1)) h++;
  return sign | h;
}

/** float32 -> bfloat16 bits, round to nearest even. */
export function toBfloatBits(x: number): number {
  f32[0] = x;
  const b = u32[0];
  return ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
}

/** Two 4-bit values per byte, the first in the low nibble (an odd count leaves the last high nibble 0). */
export function pack4(values: number[]): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array((values.length + 1) >> 1);
  values.forEach((x, i) => (out[i >> 1] |= (x & 0xf) << (i & 1 ? 4 : 0)));
  return out;
}

type Put = (d: DataView, offset: number, x: number | bigint) => void;
const n = Number;
const big = (x: number | bigint) => BigInt(x);
/** Bytes per stored number and how to write one. Complex types store (re, im) pairs of floats. */
const writers: Record<number, [number, Put]> = {
  [ELEM.float32]: [4, (d, o, x) => d.setFloat32(o, n(x), true)],
  [ELEM.complex64]: [4, (d, o, x) => d.setFloat32(o, n(x), true)],
  [ELEM.float64]: [8, (d, o, x) => d.setFloat64(o, n(x), true)],
  [ELEM.complex128]: [8, (d, o, x) => d.setFloat64(o, n(x), true)],
  [ELEM.float16]: [2, (d, o, x) => d.setUint16(o, toHalfBits(n(x)), true)],
  [ELEM.bfloat16]: [2, (d, o, x) => d.setUint16(o, toBfloatBits(n(x)), true)],
  [ELEM.int8]: [1, (d, o, x) => d.setInt8(o, n(x))],
  [ELEM.uint8]: [1, (d, o, x) => d.setUint8(o, n(x))],
  [ELEM.bool]: [1, (d, o, x) => d.setUint8(o, n(x))],
  [ELEM.int16]: [2, (d, o, x) => d.setInt16(o, n(x), true)],
  [ELEM.uint16]: [2, (d, o, x) => d.setUint16(o, n(x), true)],
  [ELEM.int32]: [4, (d, o, x) => d.setInt32(o, n(x), true)],
  [ELEM.uint32]: [4, (d, o, x) => d.setUint32(o, n(x), true)],
  [ELEM.int64]: [8, (d, o, x) => d.setBigInt64(o, big(x), true)],
  [ELEM.uint64]: [8, (d, o, x) => d.setBigUint64(o, big(x), true)],
};

/**
 * The raw_data bytes of values of an element type (also the contents of external data files).
 * float16 and bfloat16 take numbers and round them; to store exact bits, encode them as uint16.
 * Complex types take interleaved (re, im) values; int4/uint4 are packed two per byte.
 */
export function encodeRaw(type: ElemName | number, values: ArrayLike<number | bigint>): Uint8Array<ArrayBuffer> {
  const code = elemCode(type);
  if (code === ELEM.int4 || code === ELEM.uint4) return pack4(Array.from(values, n));
  const w = writers[code];
  if (!w) throw new Error(`build: no raw encoding for element type ${code}`);
  const [width, put] = w;
  const out = new Uint8Array(width * values.length);
  const d = new DataView(out.buffer);
  for (let i = 0; i < values.length; i++) put(d, i * width, values[i]);
  return out;
}
