// Convolutions: Conv, ConvTranspose, ConvInteger, QLinearConv, DeformConv.
// MLX convolves channels-last (input [N, ...spatial, C], weight [O, ...kernel, C/groups]); ONNX is
// channels-first, so each op moves the channel axis in and out around one mx.convGeneral.
import * as mx from '@mlx/core';
import { OnnxDataType } from '../onnx/index.js';
import type { Attrs } from '../registry/attrs.js';
import type { OpContext, OpEntry, OpResult } from '../registry/types.js';
import { onnxOp, invalidNode } from '../registry/op.js';
import { intsIfGiven } from './helpers/util.js';
import {
  exactIntProduct,
  type IntOperand,
  intOperand,
  minusZeroPoint,
  optionalQuantInput,
  quantInput,
  saturateRound,
  typed,
  zeroPointBound,
} from './helpers/quant-math.js';
import {
  kernelOf,
  ones,
  padsOf,
  parseWindow,
  toChannelsFirst,
  toChannelsLast,
  windowOf,
  zeros,
  type Window,
  type WindowAttrs,
} from './helpers/spatial.js';

export interface ConvParams extends WindowAttrs {
  group: number;
}

export function parseConv(attrs: Attrs): ConvParams {
  const group = attrs.int('group', 1);
  // onnxruntime's ConvTranspose divides by it unchecked (SIGFPE): an invalid node, never handed on.
  if (!(group > 0)) throw invalidNode(`group must be positive, got ${group}`);
  return { ...parseWindow(attrs), group };
}

/**
 * MLX's conv_general, except over zero input channels: a sum over no channels is 0, and MLX's CPU
 * kernel divides by the channel count (SIGFPE). The node is built for its output shape only.
 * MLX groups only 1-D and 2-D convolutions: a grouped convolution of more spatial axes is one
 * convolution per group (channels-last x split on its last axis, w on its output channels).
 */
function convGeneral(
  x: mx.Array,
  w: mx.Array,
  ...rest: Parameters<typeof mx.convGeneral> extends [unknown, unknown, ...infer R] ? R : never
): mx.Array {
  const groups = rest[5] ?? 1;
  if (groups > 1 && x.ndim > 4 && x.shape.at(-1) !== 0) {
    const xs = mx.split(x, groups, -1);
    const ws = mx.split(w, groups, 0);
    const ys = xs.map((xg, i) => convGeneral(xg, ws[i], rest[0], rest[1], rest[2], rest[3], rest[4], 1, rest[6]));
    return mx.concatenate(ys, -1);
  }
  const y = mx.convGeneral(x, w, ...rest);
  if (x.shape.at(-1) !== 0 && w.shape.at(-1) !== 0) return y;
  const z = mx.zeros(y.shape, y.dtype);
  y.dispose();
  return z;
}

/** Channels-last convolution of x [N, ...sp, C] with ONNX weight w [O, C/g, ...k]. */
function convLast(xl: mx.Array, w: mx.Array, win: Window, group: number): mx.Array {
  const wl = toChannelsLast(w);
  return convGeneral(xl, wl, win.strides, win.padsBegin, win.padsEnd, win.dilations, ones(win.kernel.length), group, false);
}

function convWindow(p: WindowAttrs, x: readonly number[], w: readonly number[]): Window {
  return windowOf(p, x.slice(2), kernelOf(p, w));
}

/** A channels-last result plus the optional bias (input 2, one per output channel), as [N, C, ...]. */
function addBiasChannelsFirst(ctx: OpContext, y: mx.Array): mx.Array {
  const bias = ctx.optional(2);
  return toChannelsFirst(bias ? mx.add(y, bias) : y);
}

/** A window of 1x1 kernels with unit strides and no padding: a convolution over it is one matrix product. */
export const isUnitWindow = (win: Window) =>
  win.kernel.every((k) => k === 1) &&
  win.strides.every((s) => s === 1) &&
  win.padsBegin.every((p) => p === 0) &&
  win.padsEnd.every((p) => p === 0);

/** A 1x1 convolution with unit strides and no padding: [O, C] x [N, C, S] over the flattened spatial axes. */
const isPointwise = (win: Window, w: readonly number[], group: number) =>
  group === 1 && w.slice(2).every((k) => k === 1) && isUnitWindow(win);

/** What a fused Conv applies after the product (mlx/fused.ts): residual, clamp, HardSigmoid/HardSwish (act 1/2). */
export interface ConvEpilogue {
  residual?: mx.Array;
  lo: number;
  hi: number;
  act: number;
  alpha: number;
  beta: number;
}

const NO_EPILOGUE: ConvEpilogue = { lo: Number.NEGATIVE_INFINITY, hi: Number.POSITIVE_INFINITY, act: 0, alpha: 1, beta: 0 };

/**
 * [O, C] x [N, C, S] over the flattened spatial axes with bias and epilogue in the product's store:
 * @mlx/sys's pointwise conv (register tiles on the CPU kernels' thread pool; MLX's matmul handed
 * these small products to OpenBLAS, whose threads spin against the pool, and its addmm copied the
 * broadcast bias first). Elsewhere MLX's matmul and the epilogue's ops.
 */
function pointwise(ctx: OpContext<ConvParams>, x: mx.Array, o: number, e: ConvEpilogue): mx.Array {
  const c = x.shape[1];
  // Constant weights are reshaped once per session, not by a graph node per run.
  const wm = ctx.inputReshaped(1, [o, c]);
  return mx.ext.pointwiseConv(x, wm, ctx.optional(2) ?? null, e.residual ?? null, e.lo, e.hi, e.act, e.alpha, e.beta);
}

/** One filter per input channel (group = C, weight [C*M, 1, kh, kw]) over 2-D images. */
const isDepthwise = (x: readonly number[], w: readonly number[], group: number) =>
  x.length === 4 && group > 1 && group === x[1] && w[1] === 1 && w[0] % group === 0;

/**
 * A Conv's product in the layout its form leaves it: channels-first [N, O, ...] from the 1x1
 * kernel (bias and the epilogue `e` applied: `finished`) and the depthwise kernel (bias applied,
 * and the epilogue too when it has no residual),
 * channels-last [N, ..., O] from conv_general (bias not applied); `biased` says whether y holds
 * the bias. The fused epilogue (mlx/fused.ts) takes any of them.
 */
export function convProduct(
  ctx: OpContext<ConvParams>,
  e: ConvEpilogue = NO_EPILOGUE,
): { y: mx.Array; channelsLast: boolean; biased: boolean; finished: boolean } {
  const x = ctx.input(0);
  const wShape = ctx.shape(1);
  const win = convWindow(ctx.params, x.shape, wShape);
  const group = ctx.params.group;
  // The channels-first forms that skip the layout moves: 1x1 as a matmul, depthwise as the native
  // kernel (MLX's grouped conv on the CPU is a scalar loop per group; off the CPU it is what the
  // kernel composes).
  const fast = x.size > 0 && x.dtype === 'float32' && ctx.elemType(1) === OnnxDataType.FLOAT && win.out.every((o) => o > 0);
  if (fast && isPointwise(win, wShape, group))
    return { y: pointwise(ctx, x, wShape[0], e), channelsLast: false, biased: true, finished: true };
  const w = ctx.input(1);
  const bias = ctx.optional(2);
  // (The depthwise kernel has no VJP: under a gradient, MlxSession.valueAndGrad, MLX's conv runs.)
  if (fast && !mx.differentiating() && isDepthwise(x.shape, w.shape, group) && win.kernel.every((k, i) => k === w.shape[2 + i])) {
    const [sh, sw] = win.strides;
    const [dh, dw] = win.dilations;
    // Without a residual the epilogue (clamp, HardSigmoid/HardSwish) runs in the kernel's store.
    if (!e.residual) {
      const y = mx.ext.depthwiseConv2dAct(
        x,
        w,
        bias ?? null,
        sh,
        sw,
        win.padsBegin[0],
        win.padsBegin[1],
        win.padsEnd[0],
        win.padsEnd[1],
        dh,
        dw,
        e.lo,
        e.hi,
        e.act,
        e.alpha,
        e.beta,
      );
      return { y, channelsLast: false, biased: true, finished: true };
    }
    const y = mx.ext.depthwiseConv2d(
      x,
      w,
      bias ?? null,
      sh,
      sw,
      win.padsBegin[0],
      win.padsBegin[1],
      win.padsEnd[0],
      win.padsEnd[1],
      dh,
      dw,
    );
    return { y, channelsLast: false, biased: true, finished: false };
  }
  // Any other grouped float32 conv of 1 or 2 spatial axes: the native channels-last product with
  // each group's own weight panels (MLX's grouped conv on the CPU is a scalar loop).
  if (fast && group > 1 && w.shape[0] > 0 && win.kernel.length <= 2 && x.shape[1] === group * w.shape[1] && w.shape[0] % group === 0)
    return { y: groupedGemm(toChannelsLast(x), w, win, group), channelsLast: true, biased: !bias, finished: false };
  // Few output positions, one group: the native channels-first kernel (isSmallConv), the weight
  // read in place, bias and clamp in its store (the rest of the epilogue after it).
  if (fast && isSmallConv(x.shape, w.shape, win, group)) {
    const plain = !e.residual && e.act === 0;
    const [lo, hi] = plain ? [e.lo, e.hi] : [Number.NEGATIVE_INFINITY, Number.POSITIVE_INFINITY];
    const y = mx.ext.smallConv(x, w, bias ?? null, win.strides, win.padsBegin, win.padsEnd, win.dilations, lo, hi);
    return { y, channelsLast: false, biased: true, finished: plain };
  }
  return { y: convLast(toChannelsLast(x), w, win, group), channelsLast: true, biased: !bias, finished: false };
}

/** Output positions per image up to which a convolution takes mx.ext.smallConv. */
export const SMALL_CONV_MAX_POSITIONS = 16;
/** Floats of the im2col rows of one image (positions x C x kernel taps) up to which it does: 64 KiB, in L2. */
export const SMALL_CONV_MAX_IM2COL = 16384;

/**
 * The convolutions of @mlx/sys's small_conv: one group, 1 or 2 spatial axes, the weight's kernel
 * the window's, at most SMALL_CONV_MAX_POSITIONS output positions per image and at most
 * SMALL_CONV_MAX_IM2COL floats in their im2col rows (strides, pads, dilations and batch any).
 * Streaming audio models convolve a frame at a time (Silero VAD: its STFT as a [258, 1, 256]
 * stride-128 convolution into 4 positions, then kernel-3 convolutions of ~128 channels over 4, 2
 * and 1 positions), where MLX's conv_general with the layout moves around it cost ~20 us each for
 * a few hundred thousand multiply-adds; small_conv packs the few im2col rows and multiplies them by
 * the weight rows in place with the small-row product kernels. More positions: conv_general.
 */
export function isSmallConv(x: readonly number[], w: readonly number[], win: Window, group: number): boolean {
  const sp = win.kernel.length;
  if (group !== 1 || sp < 1 || sp > 2 || x.length !== sp + 2 || w.length !== sp + 2 || w[1] !== x[1] || w[0] < 1) return false;
  if (!win.kernel.every((k, i) => k === w[2 + i])) return false;
  const positions = win.out.reduce((a, b) => a * b, 1);
  const depth = w.slice(1).reduce((a, b) => a * b, 1);
  return positions <= SMALL_CONV_MAX_POSITIONS && positions * depth <= SMALL_CONV_MAX_IM2COL;
}

/** Panels per group of the native channels-last convolution (@mlx/sys's conv_gemm). */
const PANEL = 32;

/**
 * Channels-last grouped conv of xl [N, ...sp, C] by ONNX weight w [O, C/g, ...k] through
 * mx.ext.convGemm: the weight padded per group to whole panels ([g * ceil(O/g / 32) * 32, ...k, C/g],
 * zeros past each group's O/g channels) and packed, then one product; bias not applied.
 */
function groupedGemm(xl: mx.Array, w: mx.Array, win: Window, group: number): mx.Array {
  return mx.ext.convGemm(
    xl,
    packGrouped(w, group),
    w.shape[0],
    null,
    null,
    win.strides,
    win.padsBegin,
    win.padsEnd,
    win.dilations,
    -Infinity,
    Infinity,
  );
}

/** ONNX float32 weight w [O, C/g, ...k] in mx.ext.convGemm's panels, each group padded to whole panels. */
function packGrouped(w: mx.Array, group: number): mx.Array {
  const [o, cg, ...k] = w.shape;
  const og = o / group;
  const padded = Math.ceil(og / PANEL) * PANEL;
  let wl = toChannelsLast(w); // [O, ...k, C/g]
  if (group > 1 && padded !== og) {
    const grouped = mx.reshape(wl, [group, og, ...k, cg]);
    wl = mx.reshape(mx.pad(grouped, [1], [0], [padded - og], mx.array(0, { dtype: 'float32' }), 'constant'), [group * padded, ...k, cg]);
  }
  return mx.ext.convPackWeight(wl);
}

function conv(ctx: OpContext<ConvParams>): mx.Array {
  const { y, channelsLast } = convProduct(ctx);
  return channelsLast ? addBiasChannelsFirst(ctx, y) : y;
}

const convEntry = onnxOp('Conv', 1, {
  parse: parseConv,
  run: (ctx) => [conv(ctx)],
});

// ---------------------------------------------------------------------------------------------
// ConvTranspose: a convolution of the stride-dilated input with the flipped kernel, cropped to
// the output window that pads / output_padding / output_shape / auto_pad define.

interface TransposeGeometry {
  padsBegin: number[];
  out: number[];
}

interface ConvTransposeParams extends ConvParams {
  outputPadding?: number[];
  outputShape?: number[];
}

function parseConvTranspose(attrs: Attrs): ConvTransposeParams {
  return { ...parseConv(attrs), outputPadding: intsIfGiven(attrs, 'output_padding'), outputShape: intsIfGiven(attrs, 'output_shape') };
}

function transposeGeometry(p: ConvTransposeParams, spatial: readonly number[], kernel: readonly number[]): TransposeGeometry {
  const n = spatial.length;
  const strides = p.strides ?? ones(n);
  const dilations = p.dilations ?? ones(n);
  const outPad = p.outputPadding ?? zeros(n);
  const autoPad = p.autoPad;
  const full = spatial.map((s, i) => strides[i] * (s - 1) + outPad[i] + (kernel[i] - 1) * dilations[i] + 1);
  const outShape = p.outputShape?.slice(-n);
  if (outShape || autoPad === 'SAME_UPPER' || autoPad === 'SAME_LOWER') {
    // The spec's rule: total padding from the target size; SAME_UPPER puts the odd unit at the end.
    const target = outShape ?? spatial.map((s, i) => s * strides[i]);
    const padsBegin = target.map((t, i) => {
      const total = full[i] - t;
      const half = Math.floor(total / 2);
      return autoPad === 'SAME_UPPER' ? half : total - half;
    });
    return { padsBegin, out: target };
  }
  const pads = autoPad === 'VALID' ? zeros(2 * n) : padsOf(p, n);
  return { padsBegin: pads.slice(0, n), out: full.map((f, i) => f - pads[i] - pads[n + i]) };
}

/** ONNX transpose weight [C, O/g, ...k] -> MLX conv weight [O, ...k, C/g]. */
function transposeWeight(w: mx.Array, group: number): mx.Array {
  const [c, og, ...k] = w.shape;
  const r = k.length;
  const grouped = mx.reshape(w, [group, c / group, og, ...k]);
  const moved = mx.transpose(grouped, [0, 2, ...Array.from({ length: r }, (_, i) => 3 + i), 1]);
  return mx.reshape(moved, [group * og, ...k, c / group]);
}

/** x (channels last) with strides[i] - 1 zeros between neighbours along spatial axis i. */
function dilateInput(x: mx.Array, strides: readonly number[]): mx.Array {
  let y = x;
  strides.forEach((s, i) => {
    if (s === 1) return;
    const axis = i + 1;
    const d = y.shape[axis];
    const spread = mx.pad(mx.expandDims(y, axis + 1), [axis + 1], [0], [s - 1], mx.scalar(0, y.dtype), 'constant');
    const shape = y.shape.slice();
    shape[axis] = d * s;
    const flat = mx.reshape(spread, shape);
    const stop = flat.shape.slice();
    stop[axis] = (d - 1) * s + 1;
    y = mx.slice(
      flat,
      flat.shape.map(() => 0),
      stop,
      flat.shape.map(() => 1),
    );
  });
  return y;
}

function convTranspose(ctx: OpContext<ConvTransposeParams>): mx.Array {
  const p = ctx.params;
  const x = ctx.input(0);
  const w = ctx.input(1);
  const group = p.group;
  const spatial = x.shape.slice(2);
  const kernel = kernelOf(p, w.shape);
  const n = spatial.length;
  const strides = p.strides ?? ones(n);
  const dilations = p.dilations ?? ones(n);
  const g = transposeGeometry(p, spatial, kernel);
  // The full transposed convolution (padding d(k-1) on both sides) has length F; output o is its
  // element o + pad_begin. Extra zero padding covers what lies outside it (negative pads, output
  // padding), then one slice takes the requested window.
  const reach = kernel.map((k, i) => dilations[i] * (k - 1));
  const full = spatial.map((s, i) => (s - 1) * strides[i] + reach[i] + 1);
  const before = g.padsBegin.map((p) => Math.max(0, -p));
  const after = g.out.map((o, i) => Math.max(0, g.padsBegin[i] + o - full[i]));
  // MLX's VJP of an input-dilated convolution gets the input's gradient wrong (a [3, 3] input
  // given a [2, 2] gradient under strides [3, 2]): while differentiating, the zeros go in by ops.
  const dilateByOps = mx.differentiating() && strides.some((s) => s > 1);
  let y = convGeneral(
    dilateByOps ? dilateInput(toChannelsLast(x), strides) : toChannelsLast(x),
    transposeWeight(w, group),
    ones(n),
    reach.map((r, i) => r + before[i]),
    reach.map((r, i) => r + after[i]),
    dilations,
    dilateByOps ? ones(n) : strides,
    group,
    true,
  );
  const start = y.shape.map((_, i) => (i >= 1 && i <= n ? g.padsBegin[i - 1] + before[i - 1] : 0));
  const stop = y.shape.map((d, i) => (i >= 1 && i <= n ? start[i] + g.out[i - 1] : d));
  y = mx.slice(
    y,
    start,
    stop,
    y.shape.map(() => 1),
  );
  return addBiasChannelsFirst(ctx, y);
}

const convTransposeEntry = onnxOp('ConvTranspose', 1, {
  parse: parseConvTranspose,
  run: (ctx) => [convTranspose(ctx)],
});

// ---------------------------------------------------------------------------------------------
// ConvInteger / QLinearConv: (x - x_zp) conv (w - w_zp) in exact int32 (float32 products,
// split into 4-bit halves when a window's sum could exceed float32's integers).

/** A ConvInteger/QLinearConv weight minus its zero point: float32, packed for mx.ext.convGemm where it applies. */
interface IntFilter {
  b: IntOperand;
  packed: boolean;
}

function integerConv(ctx: OpContext<ConvParams>, ix: number, ixz: number, iw: number, iwz: number): mx.Array {
  const x = quantInput(ctx, ix);
  const wShape = ctx.shape(iw);
  const x0 = minusZeroPoint(x, optionalQuantInput(ctx, ixz), 1);
  const win = convWindow(ctx.params, x.shape, wShape);
  const group = ctx.params.group;
  const terms = wShape.slice(1).reduce((a, b) => a * b, 1);
  // The native channels-last product (as Conv's) for 1 or 2 spatial axes, the weight packed once.
  const [o, cg] = wShape;
  const native =
    x.size > 0 && o > 0 && win.out.every((n) => n > 0) && win.kernel.length <= 2 && x.shape[1] === group * cg && o % group === 0;
  const w = ctx.prepared([iw, iwz], `filter ${native}`, (): IntFilter => {
    const w0 = minusZeroPoint(quantInput(ctx, iw), optionalQuantInput(ctx, iwz), 0);
    const f = mx.astype(w0, 'float32');
    const sumAxes = w0.shape.slice(1).map((_, i) => i + 1);
    const b = intOperand(w0, native ? packGrouped(f, group) : f, sumAxes, zeroPointBound(ctx.elemType(iw)), terms);
    return { b, packed: native };
  });
  const product = (a: mx.Array, b: mx.Array) =>
    w.packed
      ? mx.ext.convGemm(a, b, o, null, null, win.strides, win.padsBegin, win.padsEnd, win.dilations, -Infinity, Infinity)
      : convLast(a, b, win, group);
  // Zero padding of (x - x_zp) is padding x with its zero point, as the spec asks.
  return exactIntProduct(product, toChannelsLast(x0), w.b, zeroPointBound(ctx.elemType(ix)), 0);
}

const convIntegerEntry = onnxOp('ConvInteger', 10, {
  note: 'exact int32 accumulation (float32 convolutions of 4-bit halves where a window sum could pass 2^24)',
  parse: parseConv,
  run: (ctx) => [toChannelsFirst(integerConv(ctx, 0, 2, 1, 3))],
});

function qlinearConv(ctx: OpContext<ConvParams>): OpResult[] {
  let acc = integerConv(ctx, 0, 2, 3, 5); // channels-last
  const bias = ctx.optional(8);
  if (bias) acc = mx.add(acc, mx.astype(bias, 'int32'));
  // w_scale is per tensor or per output channel (the last axis here).
  const multiplier = mx.astype(mx.divide(mx.multiply(ctx.input(1), ctx.input(4)), ctx.input(6)), 'float32');
  const yType = ctx.elemType(7);
  const y = mx.add(mx.multiply(mx.astype(acc, 'float32'), mx.reshape(multiplier, [-1])), mx.astype(quantInput(ctx, 7), 'float32'));
  return [typed(toChannelsFirst(saturateRound(y, yType)), yType)];
}

const qlinearConvEntry = onnxOp('QLinearConv', 10, {
  parse: parseConv,
  run: qlinearConv,
});

export const convOps: OpEntry[] = [convEntry, convTransposeEntry, convIntegerEntry, qlinearConvEntry];
