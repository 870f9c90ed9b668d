import type { Array } from '@mlx/core';

/** What the attention pullback reads. `out` is optional (recomputed when absent). */
export interface AttentionVjpInputs {
  q: Array;
  k: Array;
  v: Array;
  /** The forward's output; when given, rowsum(out ∘ gradOut) replaces a recomputation. */
  out?: Array | null;
  gradOut: Array;
  mask?: Array | null;
}

export interface AttentionGradients {
  dq: Array;
  dk: Array;
  dv: Array;
  /**
   * d/d mask for an additive (float) mask: the gradient of the masked scores, summed over the
   * axes the mask broadcasts along, in the mask's shape and dtype (zero in its columns that no
   * visible score reads). Absent without a mask or with a boolean one (which has no gradient).
   */
  dmask?: Array;
}
