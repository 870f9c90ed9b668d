// The head layout of attention: a projection [b, s, heads·d] as per-head rows [b, heads, s, d]
// (what scaledDotProductAttention and rotaryEmbedding take) and back. Both are a reshape and a
// transpose, so MLX's autodiff differentiates them (no custom VJP needed).
import { reshape, transpose, type Array } from '@mlx/core';

/** [b, s, heads·d] → [b, heads, s, d]. Throws for other ranks or a width that `heads` does not divide. */
export function toHeads(x: Array, heads: number): Array {
  if (x.ndim !== 3) throw new RangeError(`toHeads: expected [batch, seq, heads * headDim], got shape [${x.shape.join(', ')}]`);
  const [b, s, hidden] = x.shape;
  if (!Number.isInteger(heads) || heads < 1 || hidden % heads !== 0) {
    throw new RangeError(`toHeads: hidden size ${hidden} is not a multiple of ${heads} heads`);
  }
  return transpose(reshape(x, [b, s, heads, hidden / heads]), [0, 2, 1, 3]);
}

/** [b, heads, s, d] → [b, s, heads·d]: the inverse of toHeads. */
export function fromHeads(x: Array): Array {
  if (x.ndim !== 4) throw new RangeError(`fromHeads: expected [batch, heads, seq, headDim], got shape [${x.shape.join(', ')}]`);
  const [b, h, s, d] = x.shape;
  return reshape(transpose(x, [0, 2, 1, 3]), [b, s, h * d]);
}
