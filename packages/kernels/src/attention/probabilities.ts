// Pieces shared by the dense and tiled pullbacks: recomputing a block of probabilities from the
// row logsumexp, and the score-gradient step dS = P ∘ (dP − rowsum(O ∘ dO)) (∘ tanh′ with softcap).
import {
  isneginf,
  matmul,
  max,
  multiply,
  notEqual,
  reshape,
  scalar,
  scope,
  slice,
  square,
  subtract,
  swapaxes,
  tanh,
  where,
  type Array,
} from '@mlx/core';
import { exp } from '../accurate-math.js';
import { softmax } from '../softmax.js';
import { maskScores, type BlockMasks } from './mask.js';

/**
 * The logsumexp of each row made safe for exp(S − lse): rows with no visible key (lse = −∞) get
 * +∞, so every probability in them is exp(−∞) = 0 instead of exp(−∞ + ∞) = NaN.
 */
export function safeLogsumexp(lse: Array): Array {
  using inf = scalar(Infinity, lse.dtype);
  using empty = isneginf(lse);
  return where(empty, inf, lse);
}

/** Rows [r0, r1) of axis 3 (the sequence axis of the grouped layout). */
export function rows5(x: Array, r0: number, r1: number): Array {
  const s = x.shape;
  if (r0 === 0 && r1 === s[3]) return slice(x, [0, 0, 0, 0, 0], s, [1, 1, 1, 1, 1]);
  return slice(x, [0, 0, 0, r0, 0], [s[0], s[1], s[2], r1, s[4]], [1, 1, 1, 1, 1]);
}

/** Rows [r0, r1) of axis 2 of a [b, h, s, d] array. */
export function rows4(x: Array, r0: number, r1: number): Array {
  const s = x.shape;
  return slice(x, [0, 0, r0, 0], [s[0], s[1], r1, s[3]], [1, 1, 1, 1]);
}

/** Scores of (already scaled) query rows against keys, softcapped; also returns tanh for the backward. */
export function cappedScores(qScaled: Array, kT: Array, softcap: number): { scores: Array; tanh: Array | null } {
  const raw = matmul(qScaled, kT);
  if (softcap <= 0) return { scores: raw, tanh: null };
  const t = scope(() => tanh(multiply(raw, 1 / softcap)));
  raw.dispose();
  return { scores: multiply(t, softcap), tanh: t };
}

export interface ScoreBlock {
  /** Masked (softcapped) scores [b, hk, g, bq, bk]. */
  scores: Array;
  /** tanh(raw / softcap), kept for the softcap derivative; null without softcap. */
  tanh: Array | null;
}

/**
 * Masked scores of scaled query rows `qs` (rows [q0, q1)) against key rows [k0, k1) given as kT
 * ([b, hk, 1, d, bk]); null when the whole block is masked out.
 */
export function scoreBlock(
  qs: Array,
  kT: Array,
  softcap: number,
  masks: BlockMasks,
  q0: number,
  q1: number,
  k0: number,
  k1: number,
): ScoreBlock | null {
  const { scores, tanh } = cappedScores(qs, kT, softcap);
  const masked = maskScores(scores, masks, q0, q1, k0, k1);
  if (masked === null) {
    tanh?.dispose();
    return null;
  }
  return { scores: masked, tanh };
}

/**
 * Softmax over keys that leaves rows with no visible key at zero: MLX's softmax of an all −∞ row
 * is NaN, so such rows get finite scores first and zero weights after. One fused softmax pass is
 * cheaper than logsumexp followed by exp(S − lse) when the whole row is at hand.
 */
export function rowSoftmax(scores: Array, emptyRowsPossible: boolean): Array {
  if (!emptyRowsPossible) return softmax(scores, -1);
  return scope(() => {
    // != rather than >: a row whose max is NaN (a NaN query or key) is not empty, and its NaN
    // propagates as onnxruntime's does, instead of turning into zeros.
    const valid = notEqual(max(scores, -1, { keepdims: true }), scalar(-Infinity, scores.dtype));
    const zero = scalar(0, scores.dtype);
    return where(valid, softmax(where(valid, scores, zero), -1), zero);
  });
}

/** P = exp(S − lse) for a block, given the safe logsumexp of its rows. */
export function blockProbabilities(block: ScoreBlock, lseSafe: Array): Array {
  using shifted = subtract(block.scores, lseSafe);
  return exp(shifted);
}

/**
 * dS for a block: P ∘ (dP − delta), the gradient of the masked scores (what an additive mask,
 * added after the softcap, receives), and times tanh′ = 1 − tanh² under softcap, the gradient of
 * the raw scores. `masked` is null unless asked for (then the caller owns both).
 */
export function scoreGradients(
  p: Array,
  doRows: Array,
  vT: Array,
  delta: Array,
  tanh: Array | null,
  wantMasked: boolean,
): { ds: Array; masked: Array | null } {
  using dp = matmul(doRows, vT);
  using centred = subtract(dp, delta);
  const masked = multiply(p, centred);
  if (tanh === null) return { ds: masked, masked: wantMasked ? reshape(masked, masked.shape) : null };
  using t2 = square(tanh);
  using slope = subtract(1, t2);
  const ds = multiply(masked, slope);
  if (wantMasked) return { ds, masked };
  masked.dispose();
  return { ds, masked: null };
}

/** dS for a block: P ∘ (dP − delta), times tanh′ = 1 − tanh² under softcap. */
export function scoreGradient(p: Array, doRows: Array, vT: Array, delta: Array, tanh: Array | null): Array {
  return scoreGradients(p, doRows, vT, delta, tanh, false).ds;
}

export const transposeLast = (x: Array): Array => swapaxes(x, -1, -2);
