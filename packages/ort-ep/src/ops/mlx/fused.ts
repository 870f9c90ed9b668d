// The ops that plan-time rewrites (src/plan/rewrite/) put in place of the patterns exporters
// write: domain mlx.fused, never in a model file. Each computes what its pattern computed; on the
// CPU, float32 runs the native fused kernels, elsewhere MLX's own ops.
import * as mx from '@mlx/core';
import type { Attrs } from '../../registry/attrs.js';
import type { OpContext, OpEntry } from '../../registry/types.js';
import { gelu, layerNorm, rmsNorm, type GeluApproximation } from '@mlx/kernels';
import { convProduct, parseConv, type ConvParams } from '../conv.js';
import { kernelOffsets, parseWindow, toChannelsFirst, toChannelsLast, windowOf, type WindowAttrs } from '../helpers/spatial.js';
import { dtypeRange, hostNumbers, sameDims } from '../helpers/util.js';
import { reshapeDims } from '../shape.js';
import { fusedAttention, parseFusedAttention } from './attention.js';

export const FUSED_DOMAIN = 'mlx.fused';

const entry = <P>(opType: string, parse: (a: Attrs) => P, run: (ctx: OpContext<P>) => mx.Array, note: string): OpEntry<P> => ({
  domain: FUSED_DOMAIN,
  opType,
  since: 1,
  parse,
  run: (ctx) => [run(ctx)],
  note,
});

const epsilon = (a: Attrs) => a.float('epsilon');

/** A rewritten Gemm's rank check on A (attribute a_rank; 0: none), with the Gemm op's message. */
const parseARank = (a: Attrs): number => a.int('a_rank', 0);

function checkARank(ctx: OpContext<unknown>, rank: number): void {
  const r = ctx.shape(0).length;
  if (rank > 0 && r !== rank) throw new RangeError(`Gemm: input A must have rank ${rank}, got rank ${r}`);
}

/** smallMatmul's bias: the native small-row kernel's epilogue on the CPU, addmm's C term elsewhere. */
function matMulAdd(ctx: OpContext<number>): mx.Array {
  checkARank(ctx, ctx.params);
  return mx.ext.smallMatmul(ctx.input(0), ctx.input(1), ctx.input(2));
}

/**
 * x @ W (+ b) with W stored transposed ([N, K]) and read as a transposed view. A product of one row
 * keeps MLX's plain product (its matrix-vector kernel on CUDA) and adds the bias after it; more rows
 * go through addmm, the bias in the product's epilogue.
 */
function matMulTransposed(ctx: OpContext<number>): mx.Array {
  checkARank(ctx, ctx.params);
  const x = ctx.input(0);
  const w = mx.swapaxes(ctx.input(1), 0, 1);
  if (!ctx.has(2)) return mx.matmul(x, w);
  const rows = x.shape.slice(0, -1).reduce((a, d) => a * d, 1);
  return rows === 1 ? mx.add(mx.matmul(x, w), ctx.input(2)) : mx.ext.smallMatmul(x, w, ctx.input(2));
}

interface ConvEpilogueParams extends ConvParams {
  lo: number;
  hi: number;
  /** After the clamp: 0 nothing, 1 HardSigmoid, 2 HardSwish (mx.ext.convEpilogueAct's act). */
  act: number;
  alpha: number;
  beta: number;
}

const parseConvEpilogue = (a: Attrs): ConvEpilogueParams => ({
  ...parseConv(a),
  lo: a.float('lo', Number.NEGATIVE_INFINITY),
  hi: a.float('hi', Number.POSITIVE_INFINITY),
  act: a.int('act', 0),
  alpha: a.float('alpha', 1),
  beta: a.float('beta', 0),
});

/** Conv (+ residual) (+ Relu/Clip) (+ HardSigmoid/HardSwish): bias, residual, clamp and activation in one pass after the product. */
function convEpilogue(ctx: OpContext<ConvEpilogueParams>): mx.Array {
  const p = ctx.params;
  const residual = ctx.has(3) ? ctx.input(3) : undefined;
  const { y, channelsLast, biased, finished } = convProduct(ctx, {
    residual,
    lo: p.lo,
    hi: p.hi,
    act: p.act,
    alpha: p.alpha,
    beta: p.beta,
  });
  if (finished) return y;
  const bias = biased ? undefined : ctx.optional(2);
  return mx.ext.convEpilogueAct(y, bias ?? null, residual ?? null, p.lo, p.hi, p.act, p.alpha, p.beta, channelsLast);
}

interface ConvChannelsLastParams extends ConvEpilogueParams {
  xLast: boolean;
  residualLast: boolean;
  yLast: boolean;
  outChannels: number;
  /** The weight's panels hold their halves apart (attribute split_halves; 0, the interleaved layout, when absent). */
  split: boolean;
}

/**
 * A packed weight [P, ..., 32] (ext.densePackWeight's or ext.convPackWeight's panels) in the layout
 * this process's kernels read: a graph written by a process whose build split the panels' halves
 * (mx.convPanelsSplit) and run by one whose build does not, or the other way round (an optimized
 * model written on one machine and loaded on another), gets each panel's [depth, 32] and
 * [2, depth, 16] exchanged, once per trace.
 */
function panelsAsKernelsRead(w: mx.Array, split: boolean): mx.Array {
  if (split === mx.convPanelsSplit()) return w;
  const P = w.shape[0];
  const depth = w.size / Math.max(1, P * 32);
  const from = split ? [P, 2, depth, 16] : [P, depth, 2, 16];
  return mx.reshape(mx.transpose(mx.reshape(w, from), [0, 2, 1, 3]), w.shape);
}

/**
 * The channels-last convolution of the layout pass (plan/rewrite/channels-last.ts): x [N, C, ...]
 * or, with x_last, [N, ..., C]; the weight prepacked in panels, [ceil(O / 32), ...k, C, 32] with
 * out_channels O (grouped: [g * ceil(O / g / 32), ...k, C / g, 32], each group's panels in turn); bias, residual (NCHW, or channels-last with residual_last) and clamp as the
 * fused Conv's; the result channels-last with y_last, else in ONNX's layout. One native product
 * on the CPU (im2col rows packed per block, the epilogue in its store: mx.ext.convGemm); MLX's
 * conv_general on the unpacked weight elsewhere.
 */
function convChannelsLast(ctx: OpContext<ConvChannelsLastParams>): mx.Array {
  const p = ctx.params;
  const x = ctx.input(0);
  const w = panelsAsKernelsRead(ctx.input(1), p.split);
  const bias = ctx.optional(2);
  const residual = ctx.has(3) ? ctx.input(3) : undefined;
  const xl = p.xLast ? x : toChannelsLast(x);
  const rank = xl.ndim;
  if (w.ndim !== rank + 1) throw new RangeError(`${ctx.where}: input of rank ${rank} for a packed weight of rank ${w.ndim}`);
  const c = xl.shape[rank - 1];
  const g = p.group;
  if (w.shape[rank - 1] * g !== c)
    throw new RangeError(`${ctx.where}: input has ${c} channels, the weight ${w.shape[rank - 1]} per group of ${g}`);
  const kernel = w.shape.slice(1, -2);
  const win = windowOf(p, xl.shape.slice(1, -1), kernel);
  const conv = (r: mx.Array | null, lo: number, hi: number) =>
    mx.ext.convGemm(xl, w, p.outChannels, bias ?? null, r, win.strides, win.padsBegin, win.padsEnd, win.dilations, lo, hi);
  const [ninf, inf] = [Number.NEGATIVE_INFINITY, Number.POSITIVE_INFINITY];
  if (!p.yLast) {
    // Back to ONNX's layout in the epilogue's one pass (residual, clamp and activation with it).
    const r = residual && p.residualLast ? toChannelsFirst(residual) : residual;
    if (!r && p.lo === ninf && p.hi === inf && p.act === 0) return toChannelsFirst(conv(null, ninf, inf));
    return mx.ext.convEpilogueAct(conv(null, ninf, inf), null, r ?? null, p.lo, p.hi, p.act, p.alpha, p.beta, true);
  }
  // Channels-last result: the activation (elementwise, any layout) after the product's epilogue.
  // (The HardSigmoid kernel has no VJP: under a gradient, MlxSession.valueAndGrad, it is composed.)
  const act = (y: mx.Array) =>
    p.act === 0
      ? y
      : mx.differentiating()
        ? composedHardSigmoid(y, p.alpha, p.beta, p.act === 2)
        : mx.ext.hardSigmoid(y, p.alpha, p.beta, p.act === 2);
  const r = residual && !p.residualLast ? toChannelsLast(residual) : residual;
  // A residual of the result's shape is added in the product's store, with the clamp; one that
  // broadcasts (rare) afterwards, and the clamp with it.
  const shape = [xl.shape[0], ...win.out, p.outChannels];
  if (!r || sameDims(r.shape, shape)) return act(conv(r ?? null, p.lo, p.hi));
  let y = mx.add(conv(null, ninf, inf), r);
  if (p.lo > ninf) y = mx.maximum(y, mx.array(p.lo, y.dtype));
  if (p.hi < inf) y = mx.minimum(y, mx.array(p.hi, y.dtype));
  return act(y);
}

/** The spatial dims of channels-last x [N, ...spatial, C], one per entry of the pool's kernel_shape. */
function poolSpatial(ctx: OpContext<{ kernel: number[] }>, x: mx.Array): number[] {
  const spatial = x.shape.slice(1, -1);
  const k = ctx.params.kernel;
  if (k.length !== spatial.length)
    throw new RangeError(`${ctx.where}: kernel_shape [${k}] has ${k.length} entries for ${spatial.length} spatial axes`);
  return spatial;
}

interface MaxPoolChannelsLastParams extends WindowAttrs {
  kernel: number[];
  ceil: boolean;
  yLast: boolean;
}

/**
 * MaxPool (no Indices) of channels-last data x [N, ...spatial, C], from the layout pass: for
 * float32 @mlx/sys's maxPoolChannelsLast (on the CPU one pass reading each window's taps, C
 * contiguous floats each), else the padded input's strided window slices folded with maximum (one
 * fused kernel under compile); the result channels-last with y_last, else in ONNX's layout.
 */
function maxPoolChannelsLast(ctx: OpContext<MaxPoolChannelsLastParams>): mx.Array {
  const p = ctx.params;
  const x = ctx.input(0);
  const spatial = poolSpatial(ctx, x);
  const w = windowOf(p, spatial, p.kernel, p.ceil);
  if (x.dtype === 'float32' && spatial.length <= 2) {
    // @mlx/sys's one pass over the windows on the CPU (the composition below elsewhere).
    const y = mx.ext.maxPoolChannelsLast(x, w.kernel, w.strides, w.padsBegin, w.padsEnd, w.dilations);
    return p.yLast ? y : toChannelsFirst(y);
  }
  const axes = spatial.map((_, i) => 1 + i);
  // Padding with the dtype's lowest value never wins a max.
  const padded =
    w.padsBegin.some((q) => q > 0) || w.padsEnd.some((q) => q > 0)
      ? mx.pad(x, axes, w.padsBegin, w.padsEnd, mx.array(dtypeRange(x.dtype)[0], { dtype: x.dtype }), 'constant')
      : x;
  let y: mx.Array | undefined;
  for (const off of kernelOffsets(w.kernel)) {
    const start = padded.shape.map(() => 0);
    const stop = [...padded.shape];
    const strides = padded.shape.map(() => 1);
    axes.forEach((ax, i) => {
      start[ax] = off[i] * w.dilations[i];
      stop[ax] = start[ax] + (w.out[i] - 1) * w.strides[i] + 1;
      strides[ax] = w.strides[i];
    });
    const v = mx.slice(padded, start, stop, strides);
    y = y ? mx.maximum(y, v) : v;
  }
  return p.yLast ? y! : toChannelsFirst(y!);
}

interface AveragePoolChannelsLastParams extends MaxPoolChannelsLastParams {
  countIncludePad: boolean;
}

/**
 * AveragePool of channels-last data x [N, ...spatial, C], from the layout pass: @mlx/sys's
 * avgPoolChannelsLast (on the CPU for float32 one pass reading each window's taps, C contiguous
 * floats each, divided by the window's count; elsewhere MLX's padded slices summed and divided by
 * the same counts): the explicit (or auto_pad's) pads count with count_include_pad, ceil_mode's
 * overhang past them never; the result channels-last with y_last, else in ONNX's layout.
 */
function averagePoolChannelsLast(ctx: OpContext<AveragePoolChannelsLastParams>): mx.Array {
  const p = ctx.params;
  const x = ctx.input(0);
  const spatial = poolSpatial(ctx, x);
  // The pads as written (or auto_pad's); ceil_mode's overhang is the native op's own to add.
  const w = windowOf(p, spatial, p.kernel, false);
  const same = p.autoPad === 'SAME_UPPER' || p.autoPad === 'SAME_LOWER';
  const y = mx.ext.avgPoolChannelsLast(x, w.kernel, w.strides, w.padsBegin, w.padsEnd, w.dilations, p.ceil && !same, p.countIncludePad);
  return p.yLast ? y : toChannelsFirst(y);
}

/** GlobalAveragePool of channels-last data x [N, ...spatial, C], from the layout pass: [N, C, 1, ...] in ONNX's layout. */
function globalAveragePoolChannelsLast(ctx: OpContext<undefined>): mx.Array {
  const x = ctx.input(0);
  if (x.ndim < 3) throw new RangeError(`${ctx.where}: input of rank ${x.ndim}, expected [N, ...spatial, C]`);
  const axes = Array.from({ length: x.ndim - 2 }, (_, i) => 1 + i);
  const m = mx.mean(x, axes);
  return mx.reshape(m, [x.shape[0], x.shape[x.ndim - 1], ...axes.map(() => 1)]);
}

function rmsNormOp(ctx: OpContext<number>): mx.Array {
  const x = ctx.input(0);
  if (x.ndim === 0) throw new RangeError('RMSNorm of a scalar');
  return rmsNorm(x, ctx.optional(1), { eps: ctx.params });
}

function layerNormOp(ctx: OpContext<number>): mx.Array {
  const x = ctx.input(0);
  if (x.ndim === 0) throw new RangeError('LayerNorm of a scalar');
  return layerNorm(x, ctx.optional(1), ctx.optional(2), { eps: ctx.params });
}

/** x split along its last axis into parts of the given sizes (views of x). */
const splitLast: OpEntry<number[]> = {
  domain: FUSED_DOMAIN,
  opType: 'SplitLast',
  since: 1,
  parse: (a) => a.ints('sizes'),
  run: (ctx) => {
    const x = ctx.input(0);
    const sizes = ctx.params;
    const total = sizes.reduce((s, n) => s + n, 0);
    if (x.ndim === 0 || x.shape[x.ndim - 1] !== total)
      throw new RangeError(`SplitLast of [${x.shape.join(', ')}] into parts of ${sizes.join(' + ')}`);
    if (sizes.length === 1) return [x];
    const at: number[] = [];
    for (let i = 0, s = 0; i < sizes.length - 1; i++) at.push((s += sizes[i]));
    return mx.split(x, at, -1);
  },
  note: 'a split of the last axis, from the rewrite of sibling projections (one product by joined weights)',
};

interface FakeQuantizeParams {
  scale: number;
  zeroPoint: number;
  lo: number;
  hi: number;
}

/** HardSigmoid (or, with `swish`, x times it) in MLX's ops. */
function composedHardSigmoid(y: mx.Array, alpha: number, beta: number, swish: boolean): mx.Array {
  const h = mx.clip(mx.add(mx.multiply(y, alpha), beta), 0, 1);
  return swish ? mx.multiply(y, h) : h;
}

interface MatMulPackedParams {
  n: number;
  aRank: number;
  split: boolean;
  activation: string;
  allowzero: boolean;
}

/**
 * x @ w (+ bias), the activation and the residual in the product's epilogue (one native call for
 * every form: denseGemm is denseGemmAct with 'identity' and no residual). With a Reshape's target
 * (input 4, from the matmul-epilogue rewrite) the result is reshaped to it, as the Reshape that
 * came between the product and the activation did; a residual of the reshaped shape is read in the
 * product's shape, one of another shape (it broadcasts) is added after the reshape, as Add would.
 */
function matMulPacked(ctx: OpContext<MatMulPackedParams>): mx.Array {
  const { n, activation, allowzero } = ctx.params;
  checkARank(ctx, ctx.params.aRank);
  const w = panelsAsKernelsRead(ctx.input(1), ctx.params.split);
  const x = ctx.input(0);
  const bias = ctx.optional(2) ?? null;
  const residual = ctx.optional(3) ?? null;
  if (!ctx.has(4)) return mx.ext.denseGemmAct(x, w, n, bias, activation, residual);
  const shape = [...x.shape.slice(0, -1), n];
  const target = reshapeDims(shape, hostNumbers(ctx.host(4)), allowzero);
  if (residual && !sameDims(residual.shape, target))
    return mx.add(mx.reshape(mx.ext.denseGemmAct(x, w, n, bias, activation, null), target), residual);
  return mx.reshape(mx.ext.denseGemmAct(x, w, n, bias, activation, residual && mx.reshape(residual, shape)), target);
}

export const mlxFusedOps: OpEntry[] = [
  splitLast,
  entry(
    'FakeQuantize',
    (a): FakeQuantizeParams => ({ scale: a.float('scale'), zeroPoint: a.float('zero_point'), lo: a.float('lo'), hi: a.float('hi') }),
    (ctx) => {
      const { scale, zeroPoint, lo, hi } = ctx.params;
      return mx.ext.fakeQuantize(ctx.input(0), scale, zeroPoint, lo, hi);
    },
    'QuantizeLinear then DequantizeLinear of one per-tensor scale and zero point, in one pass, from the rewrite of that pair',
  ),
  entry(
    'Gelu',
    (a) => (a.string('approximate', 'none') === 'tanh' ? 'tanh' : 'none') as GeluApproximation,
    (ctx) => gelu(ctx.input(0), { approximate: ctx.params, bias: ctx.optional(1) }),
    'GELU (erf or tanh form) of x (+ bias), from the rewrite of its decomposition',
  ),
  entry(
    'GatedActivation',
    (a) => a.string('kind'),
    (ctx) => mx.ext.gatedActivation(ctx.input(0), ctx.optional(1) ?? null, ctx.params),
    'act(gate) * up in one pass (SwiGLU: silu; GeGLU: gelu, gelu_tanh), from the rewrite of that chain; with one input, the two halves of a joined gate and up product, gate first',
  ),
  entry('MatMulAdd', parseARank, matMulAdd, 'MatMul with a constant matrix and a constant bias vector, as one addmm'),
  entry(
    'MatMulPacked',
    (a) => ({
      n: a.int('n'),
      aRank: parseARank(a),
      split: a.int('split_halves', 0) === 1,
      activation: a.string('activation', 'identity'),
      allowzero: a.int('allowzero', 0) === 1,
    }),
    matMulPacked,
    'MatMul (+ bias) (+ activation: gelu, gelu_tanh, relu, sigmoid, tanh) (+ residual) by a constant float32 matrix packed once in panels of 32 columns: one native product at every row count, the activation and the residual applied to each block of the output as it is finished (CPU, AVX2 or AVX-512); with a fifth input, the target of a Reshape of the result that came between the product and its epilogue',
  ),
  entry(
    'MatMulTransposed',
    parseARank,
    matMulTransposed,
    'MatMul (+ bias) by a constant matrix stored transposed once, [N, K], read as a transposed view: the layout MLX reads for a one-row product (GPU sessions)',
  ),
  entry(
    'Attention',
    parseFusedAttention,
    fusedAttention,
    "MatMul(Softmax(masks(MatMul(q, kᵀ) × scale)), v), from the rewrite of decomposed attention: MLX's fused attention where it takes the shapes",
  ),
  entry(
    'Conv',
    parseConvEpilogue,
    convEpilogue,
    'Conv (+ residual Add) (+ Relu/Clip) (+ HardSigmoid/HardSwish), from the rewrite of that chain: bias, residual, clamp and activation in one pass after the product',
  ),
  entry(
    'ConvChannelsLast',
    (a) => ({
      ...parseConvEpilogue(a),
      xLast: a.int('x_last', 0) === 1,
      residualLast: a.int('residual_last', 0) === 1,
      yLast: a.int('y_last', 0) === 1,
      outChannels: a.int('out_channels'),
      split: a.int('split_halves', 0) === 1,
    }),
    convChannelsLast,
    'Conv (+ residual) (+ clamp) (+ HardSigmoid/HardSwish) with a weight prepacked in panels of 32 output channels and channels-last data between such convs, from the layout pass',
  ),
  entry(
    'MaxPoolChannelsLast',
    (a) => ({ ...parseWindow(a), kernel: a.ints('kernel_shape'), ceil: a.int('ceil_mode', 0) !== 0, yLast: a.int('y_last', 0) === 1 }),
    maxPoolChannelsLast,
    'MaxPool (no Indices) of channels-last data between channels-last convs, from the layout pass',
  ),
  entry(
    'AveragePoolChannelsLast',
    (a) => ({
      ...parseWindow(a),
      kernel: a.ints('kernel_shape'),
      ceil: a.int('ceil_mode', 0) !== 0,
      countIncludePad: a.int('count_include_pad', 0) !== 0,
      yLast: a.int('y_last', 0) === 1,
    }),
    averagePoolChannelsLast,
    'AveragePool of channels-last data after a channels-last conv, from the layout pass',
  ),
  entry(
    'GlobalAveragePoolChannelsLast',
    () => undefined,
    globalAveragePoolChannelsLast,
    "GlobalAveragePool of channels-last data after a channels-last conv, from the layout pass: the mean over the spatial axes, in ONNX's layout",
  ),
  entry('RMSNorm', epsilon, rmsNormOp, 'RMS normalisation over the last axis (× weight), from the rewrite of its decomposition'),
  entry(
    'LayerNorm',
    epsilon,
    layerNormOp,
    'layer normalisation over the last axis (× weight + bias), from the rewrite of its decomposition',
  ),
];
