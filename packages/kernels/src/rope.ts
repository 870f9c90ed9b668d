// Rotary position embedding: rotates pairs of features of x by position-dependent angles given
// as cos/sin caches (optionally gathered by position ids). Two pairings: half-split (feature i
// with i + r/2, GPT-NeoX / LLaMA) and interleaved (2i with 2i+1, GPT-J). The rotation is
// orthogonal, so the pullback is the same rotation by the negated angles.
//
// With x1, x2 the two halves (or the even and odd features), y1 = x1·cos − x2·sin and
// y2 = x2·cos + x1·sin. It is written as x·C + swap(x)·S over a [.., 2, r/2] (or [.., r/2, 2])
// view of x, where swap reverses the pair axis (a view with a negative stride), C = cos and
// S = (−sin, sin): one elementwise expression that a compiled graph runs as one kernel, with no
// halves to slice out and concatenate. (a + (−b) is a − b exactly, so the results are those of
// the two-line form to the bit.)
import {
  Array,
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
  splitSections,
  add,
  take,
  zerosLike,
  type Dtype,
} from '@mlx/core';
import { defineCustomVjp } from './custom-vjp.js';

/** Which features rotate: [rotaryOffset, rotaryOffset + rotaryDim); those before and after pass through. */
export interface RotarySpan {
  /** How many features rotate (default: all from rotaryOffset on; must be even). */
  rotaryDim?: number;
  /** The first rotated feature (default 0). */
  rotaryOffset?: number;
}

export interface RotaryEmbeddingOptions extends RotarySpan {
  /**
   * cos of the angles: [positions, r/2] (indexed by positionIds), or already laid out: [s, r/2],
   * [b, s, r/2], or any shape that broadcasts against x's [..., r/2].
   */
  cos: Array;
  /** sin of the angles, shaped like cos. */
  sin: Array;
  /** Integer positions [b, s] (or [s]) into the first axis of cos/sin. */
  positionIds?: Array | null;
  /** Pair feature 2i with 2i+1 instead of i with i + r/2 (default false). */
  interleaved?: boolean;
  /**
   * Where a 4-D x keeps its heads, for cos/sin of rank 2 or 3: 1 for [b, h, s, d] (default), 2
   * for [b, s, h, d]. The tables get a size-1 axis there.
   */
  headAxis?: 1 | 2;
}

/** A rotation's factors C and S, made once by rotaryFactors for every tensor rotated by the same angles. */
export interface RotaryFactors {
  /** cos with a size-1 pair axis: [..., 1, r/2] (half-split) or [..., r/2, 1] (interleaved). */
  readonly cos: Array;
  /** (−sin, sin) along the pair axis: [..., 2, r/2] or [..., r/2, 2]. */
  readonly sin: Array;
  readonly interleaved: boolean;
}

export interface RotaryFactorsOptions extends RotarySpan {
  factors: RotaryFactors;
}

interface RopeConfig {
  [key: string]: number | boolean;
  interleaved: boolean;
  rotaryDim: number;
  rotaryOffset: number;
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

/**
 * The factors of the rotation by cos/sin that already broadcast against x's [..., r/2] (no
 * gathering): cos with a pair axis and (−sin, sin). Make them once to rotate several tensors by
 * the same angles (q and k, every layer of a decoding step) with rotaryEmbedding's `factors`.
 */
export function rotaryFactors(cosTable: Array, sinTable: Array, options: { interleaved?: boolean } = {}): RotaryFactors {
  const interleaved = options.interleaved ?? false;
  return scope(() => {
    const pairAxis = interleaved ? -1 : -2;
    const signs = Array.fromTypedArray(Float32Array.of(-1, 1), interleaved ? [2] : [2, 1], 'float32');
    const c = expandDims(cosTable, pairAxis);
    const s = multiply(expandDims(sinTable, pairAxis), astype(signs, sinTable.dtype));
    return { cos: c, sin: s, interleaved };
  });
}

/** x·C + swap(x)·S over the pair view of x's last axis (all of it rotates). */
function rotateAll(x: Array, c: Array, s: Array, interleaved: boolean): Array {
  return scope(() => {
    const rd = x.shape[x.ndim - 1];
    const half = rd / 2;
    const lead = x.shape.slice(0, -1);
    const v = reshape(x, interleaved ? [...lead, half, 2] : [...lead, 2, half]);
    const pairAxis = v.ndim + (interleaved ? -1 : -2);
    const start = v.shape.map(() => 0);
    const stop = [...v.shape];
    const strides = v.shape.map(() => 1);
    start[pairAxis] = 1;
    stop[pairAxis] = -3; // one before index 0, for the negative stride
    strides[pairAxis] = -1;
    const swapped = slice(v, start, stop, strides);
    return reshape(add(multiply(v, c), multiply(swapped, s)), [...lead, rd]);
  });
}

/** Rotates features [offset, offset + r) of x by the factors; the others pass through. */
function rotateSpan(x: Array, c: Array, s: Array, config: RopeConfig): Array {
  const d = x.shape[x.ndim - 1];
  const { rotaryDim: r, rotaryOffset: off } = config;
  if (off === 0 && r === d) return rotateAll(x, c, s, config.interleaved);
  return scope(() => {
    const cuts = [off, off + r].filter((cut) => cut > 0 && cut < d);
    const parts = splitSections(x, cuts, -1);
    const at = off > 0 ? 1 : 0;
    parts[at] = rotateAll(parts[at], c, s, config.interleaved);
    return concatenate(parts, -1);
  });
}

const rotaryOp = defineCustomVjp<RopeConfig>(
  ([x, c, s], config) => [rotateSpan(x, c, s, config)],
  // R(θ)ᵀ = R(−θ): rotate the cotangent back. cos and sin are constants (zero cotangents).
  ([, c, s], [dy], _o, config) => {
    using minusSin = negative(s);
    return [rotateSpan(dy, c, minusSin, config), zerosLike(c), zerosLike(s)];
  },
);

/** cos/sin gathered by position and shaped to broadcast against x's [..., s, r/2]. */
function anglesFor(x: Array, table: Array, positionIds: Array | null | undefined, headAxis: 1 | 2): Array {
  return scope(() => {
    // No stop-gradient: rotaryEmbedding's VJP gives the tables none, and the composite
    // differentiates them (ONNX's RotaryEmbedding takes the caches as inputs).
    let t = table;
    if (positionIds) t = take(t, positionIds, 0); // [b, s, r/2] or [s, r/2]
    // Against [b, h, s, d] the head axis goes between batch and sequence; against [b, s, h, d] after the sequence.
    if (x.ndim === 4 && t.ndim === 3) t = expandDims(t, headAxis);
    else if (x.ndim === 4 && t.ndim === 2 && headAxis === 2) t = expandDims(t, 1);
    return t;
  });
}

function configOf(x: Array, options: RotaryEmbeddingOptions | RotaryFactorsOptions): RopeConfig {
  const d = x.shape[x.ndim - 1];
  const offset = options.rotaryOffset ?? 0;
  if (!Number.isInteger(offset) || offset < 0 || offset >= d) throw new RangeError(`rotaryOffset must be in [0, ${d}), got ${offset}`);
  const rotaryDim = options.rotaryDim ?? d - offset;
  if (rotaryDim % 2 !== 0 || rotaryDim <= 0 || offset + rotaryDim > d)
    throw new RangeError(
      `rotaryDim must be even and in (0, ${d - offset}] (the features from rotaryOffset ${offset} on), got ${rotaryDim}`,
    );
  const interleaved = 'factors' in options ? options.factors.interleaved : (options.interleaved ?? false);
  return { interleaved, rotaryDim, rotaryOffset: offset };
}

/** The options' factors: given, or made from cos/sin (gathered and laid out for x). */
function factorsFor(x: Array, options: RotaryEmbeddingOptions | RotaryFactorsOptions): RotaryFactors {
  if ('factors' in options) return options.factors;
  const headAxis = options.headAxis ?? 1;
  return rotaryFactors(anglesFor(x, options.cos, options.positionIds, headAxis), anglesFor(x, options.sin, options.positionIds, headAxis), {
    interleaved: options.interleaved,
  });
}

/**
 * Rotary position embedding of x ([b, h, s, d], [b, s, h, d] with headAxis 2, or [b, s, d]) with
 * cos/sin caches, optionally gathered by positionIds, pairing features half-split (default) or
 * interleaved, over rotaryDim features from rotaryOffset; or with factors made once by
 * rotaryFactors. Differentiable in x; cos and sin are treated as constants.
 */
export function rotaryEmbedding(x: Array, options: RotaryEmbeddingOptions | RotaryFactorsOptions): Array {
  const config = configOf(x, options);
  return scope(() => {
    const f = factorsFor(x, options);
    return rotaryOp([x, f.cos, f.sin], config)[0];
  });
}

/** The pullback of rotaryEmbedding with respect to x: the inverse rotation of gradOut. */
export function rotaryEmbeddingVjp(gradOut: Array, options: RotaryEmbeddingOptions | RotaryFactorsOptions): Array {
  const config = configOf(gradOut, options);
  return scope(() => {
    const f = factorsFor(gradOut, options);
    return rotateSpan(gradOut, f.cos, negative(f.sin), config);
  });
}

/**
 * rotaryEmbedding from plain ops (the autodiff reference): differentiable in x and in cos and sin
 * (their gathered rows, summed over what they broadcast against).
 */
export function rotaryEmbeddingComposite(x: Array, options: RotaryEmbeddingOptions | RotaryFactorsOptions): Array {
  const config = configOf(x, options);
  return scope(() => {
    const f = factorsFor(x, options);
    return rotateSpan(x, f.cos, f.sin, config);
  });
}
