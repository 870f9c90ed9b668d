// Shared pieces of the quantized KV-cache test cases (GroupQueryAttention's int8, 4-bit and float8
// caches): seeded scales and cache buffers whose rows past each entry's written length are zero.
import { f32, seeded, type OrtTensor } from './ort.js';

/** Seeded cache scales, base + 0.004 · u: [1] for PER_TENSOR, [1, kvHeads, 1, headSize] for PER_CHANNEL. */
export function cacheScales(quant: 'PER_TENSOR' | 'PER_CHANNEL', kvHeads: number, headSize: number, seed: number, base: number): OrtTensor {
  const dims = quant === 'PER_TENSOR' ? [1] : [1, kvHeads, 1, headSize];
  return f32(
    seeded(
      dims.reduce((a, b) => a * b, 1),
      seed,
    ).map((x) => base + 0.004 * x),
    dims,
  );
}

/**
 * Zeroes the rows of a [B, kvHeads, rows, width] cache from row `from[b]` of each entry on (as a
 * generation loop's buffer holds zeros after the rows it has written).
 */
export function clearRowsFrom(
  data: { fill(v: number, start: number, end: number): unknown },
  dims: readonly number[],
  from: readonly number[],
) {
  const [B, kvHeads, rows, width] = dims;
  for (let b = 0; b < B; b++)
    for (let n = 0; n < kvHeads; n++)
      for (let r = from[b]; r < rows; r++) data.fill(0, ((b * kvHeads + n) * rows + r) * width, ((b * kvHeads + n) * rows + r + 1) * width);
}
