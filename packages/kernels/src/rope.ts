// Rotary position embedding: rotates pairs of features of x by position-dependent angles given
// as cos/sin caches (optionally gathered by position ids). Two pairings: half-split (feature i
// with i + r/2, GPT-NeoX / LLaMA) and interleaved (2i with 2i+1, GPT-J). The rotation is
// orthogonal, so the pullback is the same rotation by the negated angles.
import {
  arange,
  astype,
  concatenate,
  cos,
  expandDims,
  multiply,
  negative,
  outer,
  power,
  reshape,
  scope,
  sin,
  slice,
  stack,
  stopGradient,
  subtract,
  add,
  take,
  zerosLike,
  type Array,
  type Dtype,
} from '@mlx/core';
import { defineCustomVjp } from './custom-vjp.js';

export interface RotaryEmbeddingOptions {
  /** cos of the angles: [positions, r/2] (indexed by positionIds), or [s, r/2] / [b, s, r/2]. */
  cos: Array;
  /** sin of the angles, shaped like cos. */
  sin: Array;
  /** Integer positions [b, s] (or [s]) into the first axis of cos/sin. */
  positionIds?: Array | null;
  /** Pair feature 2i with 2i+1 instead of i with i + r/2 (default false). */
  interleaved?: boolean;
  /** Rotate only the first r features (default: all; must be even). */
  rotaryDim?: number;
}

interface RopeConfig {
  [key: string]: number | boolean;
  interleaved: boolean;
  rotaryDim: number;
}

/** cos/sin caches for positions [0, maxPositions): angle(p, i) = p·scale / base^(2i/r). */
export function rotaryCache(
  maxPositions: number,
  rotaryDim: number,
  options: { base?: number; scale?: number; dtype?: Dtype } = {},
): { cos: Array; sin: Array } {
  if (rotaryDim % 2 !== 0) throw new RangeError(`rotaryDim must be even, got ${rotaryDim}`);
  return scope(() => {
    const exponents = multiply(arange(0, rotaryDim, 2, 'float32'), 1 / rotaryDim);
    const inverseFrequency = power(options.base ?? 10000, negative(exponents));
    const angles = outer(multiply(arange(0, maxPositions, 1, 'float32'), options.scale ?? 1), inverseFrequency);
    const dtype = options.dtype ?? 'float32';
    return { cos: astype(cos(angles), dtype), sin: astype(sin(angles), dtype) };
  });
}

/** Rotates the first r features of x ([..., s, d]) by (cos, sin), each broadcastable to [..., s, r/2]. */
function rotate(x: Array, c: Array, s: Array, config: RopeConfig): Array {
  return scope(() => {
    const shape = x.shape;
    const d = shape[shape.length - 1];
    const r = config.rotaryDim;
    const half = r / 2;
    const lead = shape.slice(0, -1);
    const at = (from: number, to: number) => slice(x, [...lead.map(() => 0), from], [...lead, to], [...lead.map(() => 1), 1]);
    let x1: Array;
    let x2: Array;
    if (config.interleaved) {
      const pairs = reshape(at(0, r), [...lead, half, 2]);
      x1 = reshape(slice(pairs, [...lead.map(() => 0), 0, 0], [...lead, half, 1], [...lead.map(() => 1), 1, 1]), [...lead, half]);
      x2 = reshape(slice(pairs, [...lead.map(() => 0), 0, 1], [...lead, half, 2], [...lead.map(() => 1), 1, 1]), [...lead, half]);
    } else {
      x1 = at(0, half);
      x2 = at(half, r);
    }
    const y1 = subtract(multiply(x1, c), multiply(x2, s));
    const y2 = add(multiply(x2, c), multiply(x1, s));
    const rotated = config.interleaved ? reshape(stack([y1, y2], -1), [...lead, r]) : concatenate([y1, y2], -1);
    return r === d ? rotated : concatenate([rotated, at(r, d)], -1);
  });
}

const rotaryOp = defineCustomVjp<RopeConfig>(
  ([x, c, s], config) => [rotate(x, c, s, config)],
  // R(θ)ᵀ = R(−θ): rotate the cotangent back. cos and sin are constants (zero cotangents).
  ([, c, s], [dy], _o, config) => {
    using minusSin = negative(s);
    return [rotate(dy, c, minusSin, config), zerosLike(c), zerosLike(s)];
  },
);

/** cos/sin gathered by position and shaped to broadcast against x's [..., s, r/2]. */
function anglesFor(x: Array, table: Array, positionIds: Array | null | undefined): Array {
  return scope(() => {
    let t = stopGradient(table);
    if (positionIds) t = take(t, positionIds, 0); // [b, s, r/2] or [s, r/2]
    // [b, s, r/2] against [b, h, s, r/2]: the head axis goes between batch and sequence.
    if (t.ndim === 3 && x.ndim === 4) t = expandDims(t, 1);
    return t;
  });
}

/**
 * Rotary position embedding of x ([b, h, s, d] or [b, s, d]) with cos/sin caches, optionally
 * gathered by positionIds, pairing features half-split (default) or interleaved, over the first
 * rotaryDim features. Differentiable in x; cos and sin are treated as constants.
 */
export function rotaryEmbedding(x: Array, options: RotaryEmbeddingOptions): Array {
  const d = x.shape[x.ndim - 1];
  const rotaryDim = options.rotaryDim ?? d;
  if (rotaryDim % 2 !== 0 || rotaryDim > d || rotaryDim <= 0)
    throw new RangeError(`rotaryDim must be even and in (0, ${d}], got ${rotaryDim}`);
  const config: RopeConfig = { interleaved: options.interleaved ?? false, rotaryDim };
  return scope(() => {
    const c = anglesFor(x, options.cos, options.positionIds);
    const s = anglesFor(x, options.sin, options.positionIds);
    return rotaryOp([x, c, s], config)[0];
  });
}

/** The pullback of rotaryEmbedding with respect to x: the inverse rotation of gradOut. */
export function rotaryEmbeddingVjp(gradOut: Array, options: RotaryEmbeddingOptions): Array {
  return scope(() => {
    const d = gradOut.shape[gradOut.ndim - 1];
    const config: RopeConfig = { interleaved: options.interleaved ?? false, rotaryDim: options.rotaryDim ?? d };
    const c = anglesFor(gradOut, options.cos, options.positionIds);
    const s = anglesFor(gradOut, options.sin, options.positionIds);
    return rotate(gradOut, c, negative(s), config);
  });
}

/** rotaryEmbedding from plain ops (the autodiff reference). */
export function rotaryEmbeddingComposite(x: Array, options: RotaryEmbeddingOptions): Array {
  return scope(() => {
    const d = x.shape[x.ndim - 1];
    const config: RopeConfig = { interleaved: options.interleaved ?? false, rotaryDim: options.rotaryDim ?? d };
    return rotate(x, anglesFor(x, options.cos, options.positionIds), anglesFor(x, options.sin, options.positionIds), config);
  });
}
