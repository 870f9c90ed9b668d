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
}
