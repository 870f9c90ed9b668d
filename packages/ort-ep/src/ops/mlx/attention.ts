// mlx.fused::Attention, from the rewrite of decomposed attention (src/plan/rewrite/attention.ts):
//   y = MatMul(Softmax(masks(MatMul(q, kt) * scale), -1) [-> Cast], v)
// with masks an additive `mask` (input 3) and a Where on `cond` (input 4: keep the score where cond
// is keep_if_true, else `fill`), in the order where_first says. Where MLX's fused
// scaled_dot_product_attention takes the shapes (4-D, equal batch, query heads a multiple of the
// key heads, a mask that broadcasts to the scores), it runs that, with the masks folded into one
// additive mask (the fill swamps every score, so a Where is an additive fill); otherwise the same
// ops as the pattern, with the fused softmax kernel on the CPU. Inputs 5 and 6, where present, are
// computed factors of Q and Kᵀ (x * f, or x / f with q_div / k_div), folded into the scale when
// they are one value known on the host.
//
// Which devices take the fused op is measured (`bench/sdpa.ts`): on the CPU, MLX's fused op is
// its own composition of the same ops with MLX's scalar softmax, slower than the composition here
// with the fused softmax kernel. The CPU in float32 takes @mlx/core's native attention kernel
// (ext.fusedAttention: one primitive, the scores of a block of rows kept in cache through the
// masks and the softmax) with the same folded mask; other dtypes keep the composition.
import * as mx from '@mlx/core';
import { softmax } from '@mlx/kernels';
import type { Attrs } from '../../registry/attrs.js';
import type { OpContext } from '../../registry/types.js';
import { OnnxDataType } from '../../onnx/index.js';
import { mxDtypeOf } from '../../runtime/convert.js';
import { keepType } from '../helpers/util.js';

export interface FusedAttentionParams {
  scale: number;
  fill: number;
  keepIfTrue: boolean;
  whereFirst: boolean;
  /** Where(IsNaN(p), 0, p) after the softmax: rows with no visible key give zeros. */
  nanToZero: boolean;
  /** Casts of the probabilities, in order. */
  castTo: number[];
  /** Inputs 5 (on Q) and 6 (on Kᵀ), where present, divide rather than multiply. */
  qDiv: boolean;
  kDiv: boolean;
}

export const parseFusedAttention = (a: Attrs): FusedAttentionParams => ({
  scale: a.float('scale', 1),
  fill: a.float('fill', 0),
  keepIfTrue: a.int('keep_if_true', 1) !== 0,
  whereFirst: a.int('where_first', 0) !== 0,
  nanToZero: a.int('nan_to_zero', 0) !== 0,
  castTo: a.ints('cast_to', []),
  qDiv: a.int('q_div', 0) !== 0,
  kDiv: a.int('k_div', 0) !== 0,
});

/**
 * x times (or over) the computed factor of input i, as the graph's Mul or Div: folded into `scale`
 * when it is one floating-point value known on the host (torch's sqrt(1 / sqrt(d)), from the shape)
 * that cannot raise x's rank, else applied to x.
 */
function applyFactor(ctx: OpContext<FusedAttentionParams>, i: number, x: mx.Array, div: boolean, scale: { value: number }): mx.Array {
  if (!ctx.has(i)) return x;
  const h = ctx.hostIfKnown(i);
  if (h && h.data.length === 1 && h.dims.length <= x.ndim && (h.dtype === OnnxDataType.FLOAT || h.dtype === OnnxDataType.DOUBLE)) {
    const f = Number(h.data[0]);
    const by = div ? 1 / f : f;
    // Math.fround: the graph multiplies in float32 by the factor as float32 holds it.
    if (Number.isFinite(by) && by !== 0 && x.dtype === 'float32' && h.dtype === OnnxDataType.FLOAT) {
      scale.value *= div ? 1 / Math.fround(f) : Math.fround(f);
      return x;
    }
  }
  const f = ctx.input(i);
  return div ? mx.divide(x, f) : mx.multiply(x, f);
}

/** MLX_ORT_SDPA=fused|composite forces one form on every device (for measurements and tests). */
function form(): 'fused' | 'composite' | 'auto' {
  const e = process.env.MLX_ORT_SDPA;
  return e === 'fused' || e === 'composite' ? e : 'auto';
}

const FLOAT_DTYPES = new Set<mx.Dtype>(['float32', 'float16', 'bfloat16']);

/** Whether `shape` broadcasts to `to` (right-aligned, no more dims). */
function broadcastsTo(shape: readonly number[], to: readonly number[]): boolean {
  if (shape.length > to.length) return false;
  const off = to.length - shape.length;
  return shape.every((d, i) => d === 1 || d === to[off + i]);
}

function composite(
  q: mx.Array,
  kt: mx.Array,
  v: mx.Array,
  mask: mx.Array | undefined,
  cond: mx.Array | undefined,
  p: FusedAttentionParams,
) {
  let s = mx.matmul(q, kt);
  if (p.scale !== 1) s = mx.multiply(s, mx.scalar(p.scale, s.dtype));
  const where = (x: mx.Array) => {
    const f = mx.scalar(p.fill, x.dtype);
    return p.keepIfTrue ? mx.where(cond!, x, f) : mx.where(cond!, f, x);
  };
  if (cond && p.whereFirst) s = where(s);
  if (mask) s = mx.add(s, mask);
  if (cond && !p.whereFirst) s = where(s);
  // The Softmax op's own: @mlx/kernels' softmax, the fused CPU kernel for float32.
  let probs = softmax(s, -1);
  if (p.nanToZero) probs = mx.where(mx.isnan(probs), mx.scalar(0, probs.dtype), probs);
  for (const to of p.castTo) probs = keepType(probs, to);
  return mx.matmul(probs, v);
}

/** The additive mask that the masks amount to (for the fused op), in the scores' dtype. */
function additiveMask(
  mask: mx.Array | undefined,
  cond: mx.Array | undefined,
  p: FusedAttentionParams,
  dtype: mx.Dtype,
): mx.Array | undefined {
  let m = mask ? (mask.dtype === dtype ? mask : mx.astype(mask, dtype)) : undefined;
  if (!cond) return m;
  const f = mx.scalar(p.fill, dtype);
  const open = m && !p.whereFirst ? m : mx.scalar(0, dtype);
  const w = p.keepIfTrue ? mx.where(cond, open, f) : mx.where(cond, f, open);
  // where first, then + mask: a filled score is fill + mask; else the fill alone.
  if (m && p.whereFirst) m = mx.add(w, m);
  else m = w;
  return m;
}

/**
 * The native CPU kernel with the masks folded into one additive mask [b | 1, h | 1, sq | 1, sk | 1]
 * (a key axis of 1 broadcast to sk: the kernel takes a mask's width as the keys it may see). Rows
 * the mask hides entirely (all −∞) are NaN, as the graph's softmax makes them, unless nan_to_zero.
 */
function nativeCpu(
  q: mx.Array,
  kt: mx.Array,
  v: mx.Array,
  mask: mx.Array | undefined,
  cond: mx.Array | undefined,
  p: FusedAttentionParams,
) {
  const sk = kt.shape[3];
  let m = additiveMask(mask, cond, p, q.dtype);
  if (m) {
    const dims = [...new Array<number>(4 - m.ndim).fill(1), ...m.shape];
    m = mx.reshape(m, dims);
    if (dims[3] !== sk) m = mx.broadcastTo(m, [dims[0], dims[1], dims[2], sk]);
  }
  return mx.ext.fusedAttention(q, mx.swapaxes(kt, -1, -2), v, m ?? null, p.scale, false, 0, !p.nanToZero);
}

export function fusedAttention(ctx: OpContext<FusedAttentionParams>): mx.Array {
  const scale = { value: ctx.params.scale };
  const q = applyFactor(ctx, 5, ctx.input(0), ctx.params.qDiv, scale);
  const kt = applyFactor(ctx, 6, ctx.input(1), ctx.params.kDiv, scale);
  const p = scale.value === ctx.params.scale ? ctx.params : { ...ctx.params, scale: scale.value };
  const v = ctx.input(2);
  const mask = ctx.has(3) ? ctx.input(3) : undefined;
  const cond = ctx.has(4) ? ctx.input(4) : undefined;
  const f = form();
  const onCpu = mx.defaultStream().device.type === 'cpu';
  if (f === 'composite') return composite(q, kt, v, mask, cond, p);
  const [b, h, sq, d] = q.shape;
  const [kb, hk, kd, sk] = kt.shape;
  const fits =
    q.ndim === 4 &&
    kt.ndim === 4 &&
    v.ndim === 4 &&
    FLOAT_DTYPES.has(q.dtype) &&
    kt.dtype === q.dtype &&
    v.dtype === q.dtype &&
    kb === b &&
    v.shape[0] === b &&
    kd === d &&
    hk > 0 &&
    h % hk === 0 &&
    v.shape[1] === hk &&
    v.shape[2] === sk &&
    sq > 0 &&
    sk > 0 &&
    d > 0 &&
    p.castTo.every((to) => mxDtypeOf(to) === q.dtype) &&
    (!mask || broadcastsTo(mask.shape, [b, h, sq, sk])) &&
    (!cond || (cond.dtype === 'bool' && broadcastsTo(cond.shape, [b, h, sq, sk])));
  if (!fits) return composite(q, kt, v, mask, cond, p);
  if (onCpu) {
    // A Where's fill folds into an additive mask exactly only when it swamps every score (−∞, or
    // as −3.4e38 does: a row it hides entirely then stays a uniform row of fills either way).
    const foldable = !cond || p.fill <= -1e30;
    return q.dtype === 'float32' && f === 'auto' && foldable ? nativeCpu(q, kt, v, mask, cond, p) : composite(q, kt, v, mask, cond, p);
  }
  const m = additiveMask(mask, cond, p, q.dtype);
  const k = mx.swapaxes(kt, -1, -2);
  const out = mx.fast.scaledDotProductAttention(q, k, v, p.scale, m ? 'array' : '', m ?? null);
  if (!p.nanToZero || !m) return out;
  // The guard zeroes the rows whose softmax is NaN: those the mask hides entirely. (NaN in Q or K
  // also makes a row NaN, which the graph zeroes and this leaves NaN.)
  const open = mx.greater(mx.max(m, -1, { keepdims: true }), mx.scalar(Number.NEGATIVE_INFINITY, m.dtype));
  return mx.where(open, out, mx.scalar(0, out.dtype));
}
