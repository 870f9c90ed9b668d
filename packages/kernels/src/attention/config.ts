// Options of scaled-dot-product attention, resolved once into a plain config (the key of the
// custom-VJP closure cache) plus the shapes every strategy needs.
import type { Array, Dtype } from '@mlx/core';

export type AttentionMaskKind = 'none' | 'boolean' | 'additive';
export type AttentionImplementation = 'auto' | 'fused' | 'composite';
export type AttentionVjpStrategy = 'auto' | 'dense' | 'tiled' | 'autodiff';

export interface AttentionVjpOptions {
  /** Which backward pass the registered custom VJP runs (default 'auto': chosen from the budget). */
  strategy?: AttentionVjpStrategy;
  /** Bytes the backward pass may allocate beyond its inputs (default 512 MiB). */
  workspaceBytes?: number;
}

export interface AttentionOptions {
  /** Multiplies Q·Kᵀ (default 1/sqrt(head size)). */
  scale?: number;
  /**
   * Causal masking: query i sees key j only when j ≤ i + causalOffset. This is the ONNX Attention
   * rule (onnx/reference/ops/op_attention.py): the offset is the length of the past key cache
   * that precedes the current queries, 0 without one (the upper-left alignment that the ONNX and
   * PyTorch docs describe for sq ≠ sk). Pass causalOffset = sk − sq for bottom-right alignment
   * (K holding past + current keys), which is also what MLX's fused 'causal' mode does.
   */
  causal?: boolean;
  causalOffset?: number;
  /**
   * Boolean (true = attend) or additive float mask, broadcastable to [b, hq, sq, w] with w ≤ sk;
   * when w < sk the missing key columns are masked out (padded with −∞ / false, as ONNX does).
   */
  mask?: Array | null;
  /** When > 0, scores become softcap·tanh(scores/softcap) before masking. */
  softcap?: number;
  /**
   * The caller's promise that every query row sees at least one key through the masks (a decode
   * step, whose query always sees its own key): the forward then skips the zeroing of rows with
   * none (a reduction and two selects). A row that has none after all comes out NaN, not zeros.
   */
  rowsNeverEmpty?: boolean;
  /** 'auto' uses MLX's fast.scaledDotProductAttention wherever it computes the same thing. */
  implementation?: AttentionImplementation;
  /** Backward pass used when this call is differentiated. */
  vjp?: AttentionVjpOptions;
}

/** What selects the math (JSON-serialisable; shapes are read from the arrays). */
export interface AttentionConfig {
  [key: string]: string | number | boolean | null;
  scale: number | null;
  causal: boolean;
  causalOffset: number;
  softcap: number;
  maskKind: AttentionMaskKind;
  rowsNeverEmpty: boolean;
}

export interface AttentionShape {
  batch: number;
  queryHeads: number;
  kvHeads: number;
  /** Query heads per key/value head. */
  groupSize: number;
  querySeq: number;
  keySeq: number;
  headDim: number;
  valueDim: number;
  dtype: Dtype;
}

export const DEFAULT_WORKSPACE_BYTES = 512 * 1024 * 1024;

export function attentionConfig(options: AttentionOptions = {}): AttentionConfig {
  const mask = options.mask ?? null;
  const softcap = options.softcap ?? 0;
  if (!(softcap >= 0) || !Number.isFinite(softcap)) throw new RangeError(`softcap must be a finite number ≥ 0, got ${softcap}`);
  const causalOffset = options.causalOffset ?? 0;
  if (!Number.isInteger(causalOffset)) throw new RangeError(`causalOffset must be an integer, got ${causalOffset}`);
  if (options.scale !== undefined && !Number.isFinite(options.scale)) throw new RangeError(`scale must be finite, got ${options.scale}`);
  return {
    scale: options.scale ?? null,
    causal: options.causal ?? false,
    causalOffset,
    softcap,
    maskKind: mask === null ? 'none' : mask.dtype === 'bool' ? 'boolean' : 'additive',
    rowsNeverEmpty: options.rowsNeverEmpty ?? false,
  };
}

export function attentionShape(q: Array, k: Array, v: Array): AttentionShape {
  const [qs, ks, vs] = [q.shape, k.shape, v.shape];
  if (qs.length !== 4 || ks.length !== 4 || vs.length !== 4) {
    throw new RangeError(`attention takes 4-D q, k, v ([batch, heads, seq, dim]); got [${qs}], [${ks}], [${vs}]`);
  }
  const [batch, queryHeads, querySeq, headDim] = qs;
  const [kb, kvHeads, keySeq, kd] = ks;
  if (kb !== batch || vs[0] !== batch) throw new RangeError(`batch sizes differ: q [${qs}], k [${ks}], v [${vs}]`);
  if (kd !== headDim) throw new RangeError(`q and k head sizes differ: q [${qs}], k [${ks}]`);
  if (vs[1] !== kvHeads || vs[2] !== keySeq) throw new RangeError(`k and v disagree on heads or length: k [${ks}], v [${vs}]`);
  if (kvHeads === 0 || queryHeads % kvHeads !== 0)
    throw new RangeError(`query heads (${queryHeads}) must be a multiple of key/value heads (${kvHeads})`);
  return { batch, queryHeads, kvHeads, groupSize: queryHeads / kvHeads, querySeq, keySeq, headDim, valueDim: vs[3], dtype: q.dtype };
}

export function resolvedScale(config: AttentionConfig, shape: AttentionShape): number {
  return config.scale ?? 1 / Math.sqrt(shape.headDim);
}

/** Whether some query row may see no key at all (then its output and gradients are zero). */
export function mayHaveEmptyRows(config: AttentionConfig): boolean {
  if (config.rowsNeverEmpty) return false;
  return config.maskKind !== 'none' || (config.causal && config.causalOffset < 0);
}
