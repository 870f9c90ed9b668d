// DeformConv (2-D): each kernel tap samples the input at its regular position plus a learned
// offset, by bilinear interpolation with zeros outside (GridSample, align_corners=1), scaled by
// the optional mask; the samples are then contracted with the weights as a grouped matmul.
import * as mx from '@mlx/core';
import type { Attrs } from '../registry/attrs.js';
import type { OpContext, OpEntry } from '../registry/types.js';
import { onnxOp, invalidNode } from '../registry/op.js';
import { intsIfGiven } from './helpers/util.js';

/** Regular sampling positions along one axis: [k, o] = -pad + stride * o + dilation * k. */
function basePositions(k: number, o: number, pad: number, stride: number, dilation: number): mx.Array {
  const taps = mx.multiply(mx.arange(0, k, 1, 'float32'), dilation);
  const outs = mx.subtract(mx.multiply(mx.arange(0, o, 1, 'float32'), stride), pad);
  return mx.add(mx.expandDims(taps, 1), mx.expandDims(outs, 0));
}

/** Bilinear samples of xg [n, og, c, h*w] at (y, x) [n, og, K, oh, ow] -> [n, og, c, K*oh*ow]. */
function bilinear(xg: mx.Array, y: mx.Array, x: mx.Array, h: number, w: number): mx.Array {
  const [n, og, c] = xg.shape;
  // NaN and infinite positions (from the offsets) become finite ones outside the input, where
  // the weight is 0: NaN cast to an integer index read wild memory.
  const far = (len: number) => 2 * len + 4;
  y = mx.where(mx.isnan(y), -far(h), mx.clip(y, -far(h), far(h)));
  x = mx.where(mx.isnan(x), -far(w), mx.clip(x, -far(w), far(w)));
  const y0 = mx.floor(y);
  const x0 = mx.floor(x);
  const fy = mx.subtract(y, y0);
  const fx = mx.subtract(x, x0);
  let acc: mx.Array | undefined;
  for (const [dy, dx] of [
    [0, 0],
    [0, 1],
    [1, 0],
    [1, 1],
  ]) {
    const yc = mx.add(y0, dy);
    const xc = mx.add(x0, dx);
    const wy = dy ? fy : mx.subtract(1, fy);
    const wx = dx ? fx : mx.subtract(1, fx);
    const inside = mx.logicalAnd(
      mx.logicalAnd(mx.greaterEqual(yc, 0), mx.less(yc, h)),
      mx.logicalAnd(mx.greaterEqual(xc, 0), mx.less(xc, w)),
    );
    const weight = mx.where(inside, mx.multiply(wy, wx), 0);
    const idx = mx.astype(mx.add(mx.multiply(mx.clip(yc, 0, h - 1), w), mx.clip(xc, 0, w - 1)), 'int32');
    const flatIdx = mx.reshape(idx, [n, og, 1, -1]);
    const vals = mx.takeAlongAxis(xg, mx.broadcastTo(flatIdx, [n, og, c, flatIdx.shape[3]]), 3);
    const term = mx.multiply(vals, mx.reshape(weight, [n, og, 1, -1]));
    acc = acc ? mx.add(acc, term) : term;
  }
  return acc!;
}

interface DeformConvParams {
  group: number;
  offsetGroup: number;
  strides: number[];
  dilations: number[];
  /** [top, left, bottom, right] */
  pads: number[];
  kernelShape?: number[];
}

function parseDeformConv(attrs: Attrs): DeformConvParams {
  const p: DeformConvParams = {
    group: attrs.int('group', 1),
    offsetGroup: attrs.int('offset_group', 1),
    strides: attrs.ints('strides', [1, 1]),
    dilations: attrs.ints('dilations', [1, 1]),
    pads: attrs.ints('pads', [0, 0, 0, 0]),
    kernelShape: intsIfGiven(attrs, 'kernel_shape'),
  };
  const positive = [
    ['group', [p.group]],
    ['offset_group', [p.offsetGroup]],
    ['strides', p.strides],
    ['dilations', p.dilations],
    ['kernel_shape', p.kernelShape ?? []],
  ] as const;
  for (const [name, v] of positive) {
    const bad = v.find((x) => !(x > 0));
    if (bad !== undefined) throw invalidNode(`${name} must be positive, got ${bad}`);
  }
  const neg = p.pads.find((x) => x < 0);
  if (neg !== undefined) throw invalidNode(`pads must not be negative, got ${neg}`);
  return p;
}

function deformConv(ctx: OpContext<DeformConvParams>): mx.Array {
  const x = ctx.input(0);
  const wt = ctx.input(1);
  const offset = ctx.input(2);
  const [n, ic, h, w] = x.shape;
  const [oc, icg, kh, kw] = wt.shape;
  const [oh, ow] = offset.shape.slice(2);
  const { group, offsetGroup: og, pads } = ctx.params;
  const [sh, sw] = ctx.params.strides;
  const [dh, dw] = ctx.params.dilations;
  const K = kh * kw;
  const off = mx.reshape(mx.astype(offset, 'float32'), [n, og, K, 2, oh, ow]);
  const take = (i: number) => mx.squeeze(mx.slice(off, [0, 0, 0, i, 0, 0], [n, og, K, i + 1, oh, ow], [1, 1, 1, 1, 1, 1]), 3);
  // Tap (i, j) of the kernel is row i (height positions) and column j (width positions).
  const rows = mx.reshape(mx.broadcastTo(mx.expandDims(basePositions(kh, oh, pads[0], sh, dh), 1), [kh, kw, oh]), [K, oh, 1]);
  const cols = mx.reshape(mx.broadcastTo(mx.expandDims(basePositions(kw, ow, pads[1], sw, dw), 0), [kh, kw, ow]), [K, 1, ow]);
  const y = mx.add(rows, take(0));
  const xs = mx.add(cols, take(1));
  const xg = mx.reshape(mx.astype(x, 'float32'), [n, og, ic / og, h * w]);
  let samples = bilinear(xg, y, xs, h, w); // [n, og, ic/og, K*oh*ow]
  const mask = ctx.optional(4);
  if (mask) samples = mx.multiply(samples, mx.reshape(mx.astype(mask, 'float32'), [n, og, 1, K * oh * ow]));
  // [n, ic, K, oh*ow] -> per group [n, g, icg*K, oh*ow], contracted with W [g, oc/g, icg*K].
  const colsByGroup = mx.reshape(samples, [n, group, icg * K, oh * ow]);
  const wg = mx.reshape(mx.astype(wt, 'float32'), [group, oc / group, icg * K]);
  let out = mx.reshape(mx.matmul(wg, colsByGroup), [n, oc, oh, ow]);
  const bias = ctx.optional(3);
  if (bias) out = mx.add(out, mx.reshape(bias, [1, oc, 1, 1]));
  return mx.astype(out, x.dtype);
}

const deformConvEntry = onnxOp('DeformConv', 19, {
  note: '2-D (NCHW) inputs only',
  parse: parseDeformConv,
  check: (ctx) => {
    const k = ctx.params.kernelShape;
    if (k && k.length !== 2) return `DeformConv is implemented for 2-D inputs only, not ${k.length}-D`;
    return undefined;
  },
  run: (ctx) => {
    if (ctx.shape(0).length !== 4) throw new TypeError(`${ctx.where}: DeformConv is implemented for 2-D (NCHW) inputs only`);
    return [deformConv(ctx)];
  },
});

export const deformConvOps: OpEntry[] = [deformConvEntry];
