// Resize (opsets 10-19+) and Upsample (7-9). Interpolation is separable: for each resized axis the
// host computes, per output position, a few source indices and their weights (nearest: one tap;
// linear: 2; cubic: 4; antialias: a wider, normalised footprint), following the ONNX reference
// (onnx/reference/ops/op_resize.py): neighbours come from the edge-clamped input, exclude_outside
// drops the taps outside it and renormalises, tf_crop_and_resize puts extrapolation_value where
// the source coordinate falls outside. On MLX each axis is then a gather and a weighted sum.
import * as mx from '@mlx/core';
import type { Attrs } from '../registry/attrs.js';
import type { OpContext, OpEntry } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { hostNumbers, intsIfGiven, normAxes, optionalNumbers } from './helpers/util.js';

interface ResizeAttrs {
  mode: string;
  coord: string;
  nearest: string;
  cubicA: number;
  excludeOutside: boolean;
  extrapolation: number;
  antialias: boolean;
}

/** One axis's interpolation: `taps` (index, weight) pairs per output position. */
interface AxisPlan {
  axis: number;
  out: number;
  taps: number;
  index: Int32Array;
  weight: Float32Array;
  /** Output positions whose source falls outside the input (tf_crop_and_resize). */
  outside?: Uint8Array;
}

// ---------------------------------------------------------------------------------------------
// Geometry

/** The source coordinate of output position x (the reference's x_ori), or NaN when outside the ROI. */
function sourceCoord(a: ResizeAttrs, x: number, scale: number, inW: number, outInt: number, roi: [number, number]): number {
  const outW = scale * inW; // the reference uses the unrounded output length
  switch (a.coord) {
    case 'align_corners':
      return outW === 1 ? 0 : (x * (inW - 1)) / (outW - 1);
    case 'asymmetric':
      return x / scale;
    case 'pytorch_half_pixel':
      return outW === 1 ? -0.5 : (x + 0.5) / scale - 0.5;
    case 'half_pixel_symmetric': {
      const offset = (inW / 2) * (1 - outInt / outW);
      return offset + (x + 0.5) / scale - 0.5;
    }
    case 'tf_crop_and_resize': {
      const [r0, r1] = roi;
      const v = (outW === 1 ? ((r1 - r0) * (inW - 1)) / 2 : (x * (r1 - r0) * (inW - 1)) / (outW - 1)) + r0 * (inW - 1);
      return v < 0 || v > inW - 1 ? NaN : v;
    }
    default:
      return (x + 0.5) / scale - 0.5; // half_pixel
  }
}

function cubicKernel(x: number, A: number): number {
  const t = Math.abs(x);
  if (t <= 1) return ((A + 2) * t - (A + 3)) * t * t + 1;
  if (t < 2) return ((A * t - 5 * A) * t + 8 * A) * t - 4 * A;
  return 0;
}

/** Taps for source coordinate c: offsets i from base index x0 = ceil(c) - 1, with weights. */
function tapsFor(a: ResizeAttrs, c: number, scale: number): { base: number; offsets: number[]; weights: number[] } {
  // ratio in (0, 1]: an integer coordinate takes ratio 1 with the tap on its right, as the reference does.
  const ratio = Number.isInteger(c) ? 1 : c - Math.floor(c);
  const base = c - ratio;
  if (a.mode === 'nearest') {
    if (ratio === 1) return { base, offsets: [1], weights: [1] };
    const up =
      a.nearest === 'ceil' || (a.nearest === 'round_prefer_ceil' && ratio >= 0.5) || (a.nearest === 'round_prefer_floor' && ratio > 0.5);
    return { base, offsets: [up ? 1 : 0], weights: [1] };
  }
  const s = a.antialias ? Math.min(scale, 1) : 1;
  const offsets: number[] = [];
  const weights: number[] = [];
  if (a.mode === 'linear') {
    const start = Math.floor(-1 / s) + 1;
    for (let i = start; i < 2 - start; i++) {
      offsets.push(i);
      weights.push(Math.min(Math.max(1 - Math.abs((i - ratio) * s), 0), 1));
    }
  } else {
    const start = Math.floor(-2 / s) + 1;
    for (let i = start; i < 2 - start; i++) {
      offsets.push(i);
      weights.push(cubicKernel(s * (i - ratio), a.cubicA));
    }
  }
  if (a.antialias) normalise(weights);
  return { base, offsets, weights };
}

function normalise(w: number[]): void {
  const sum = w.reduce((p, q) => p + q, 0);
  if (sum !== 0) for (let i = 0; i < w.length; i++) w[i] /= sum;
}

function planAxis(a: ResizeAttrs, axis: number, inW: number, out: number, scale: number, roi: [number, number]): AxisPlan | undefined {
  // Antialiasing a strong downscale widens each tap window by 1/scale.
  const window = a.mode === 'nearest' ? 1 : Math.ceil((a.mode === 'cubic' ? 4 : 2) / (a.antialias ? Math.min(scale, 1) : 1)) + 1;
  if (out * window > MAX_TABLE) {
    throw new RangeError(
      `resizing axis ${axis} to ${out} positions with ${window} taps each needs a table of ${out * window} entries, over the limit of ${MAX_TABLE}`,
    );
  }
  const rows: { index: number[]; weight: number[] }[] = [];
  const outside = new Uint8Array(out);
  let identity = out === inW;
  for (let x = 0; x < out; x++) {
    const c = sourceCoord(a, x, scale, inW, out, roi);
    if (Number.isNaN(c)) {
      outside[x] = 1;
      identity = false;
      rows.push({ index: [0], weight: [0] });
      continue;
    }
    const { base, offsets, weights } = tapsFor(a, c, scale);
    const raw = offsets.map((o) => base + o);
    if (a.excludeOutside && a.mode !== 'nearest') {
      raw.forEach((r, i) => (r < 0 || r >= inW) && (weights[i] = 0));
      normalise(weights);
    }
    const index = raw.map((r) => Math.min(Math.max(r, 0), inW - 1));
    const used = index.filter((_, i) => weights[i] !== 0);
    const total = weights.reduce((p, q) => p + q, 0);
    if (!used.every((v) => v === x) || Math.abs(total - 1) > 1e-12) identity = false;
    rows.push({ index, weight: weights });
  }
  if (identity) return undefined;
  const taps = rows.reduce((m, r) => Math.max(m, r.index.length), 1);
  const index = new Int32Array(out * taps);
  const weight = new Float32Array(out * taps);
  rows.forEach((r, x) =>
    r.index.forEach((v, t) => {
      index[x * taps + t] = v;
      weight[x * taps + t] = r.weight[t];
    }),
  );
  return { axis, out, taps, index, weight, outside: outside.some((v) => v) ? outside : undefined };
}

// ---------------------------------------------------------------------------------------------
// Output sizes and scales (full rank), from scales or sizes (over `axes`), keep_aspect_ratio_policy.

function sizesAndScales(
  policy: string,
  dims: number[],
  axes: number[],
  scalesIn?: number[],
  sizesIn?: number[],
): { out: number[]; scales: number[] } {
  const out = [...dims];
  const scales = dims.map(() => 1);
  if (sizesIn) {
    axes.forEach((a, i) => (scales[a] = sizesIn[i] / dims[a]));
    if (policy === 'stretch') axes.forEach((a, i) => (out[a] = sizesIn[i]));
    else {
      const pick = policy === 'not_larger' ? Math.min : Math.max;
      const s = pick(...axes.map((a) => scales[a]));
      // The reference rounds half up: int(x + 0.5).
      for (const a of axes) [scales[a], out[a]] = [s, Math.floor(s * dims[a] + 0.5)];
    }
  } else if (scalesIn) {
    axes.forEach((a, i) => {
      scales[a] = scalesIn[i];
      out[a] = Math.floor(scalesIn[i] * dims[a]);
    });
  }
  // NaN, infinite, zero or negative scales and sizes, and outputs past MLX's int32 dimensions, are
  // errors (a NaN scale used to give an empty tensor).
  axes.forEach((a) => {
    if (!(scales[a] > 0) || !Number.isFinite(scales[a]))
      throw new RangeError(`scale ${scales[a]} of axis ${a} is not a finite positive number`);
    if (!Number.isSafeInteger(out[a]) || out[a] < 0 || out[a] > MAX_DIM)
      throw new RangeError(`the output size ${out[a]} of axis ${a} is not a dimension (0 to ${MAX_DIM})`);
  });
  return { out, scales };
}

const MAX_DIM = 2 ** 31 - 1;
/** The most entries (output positions x taps) one axis's host-made index table may have. */
const MAX_TABLE = 1 << 26;

function resizeAttrs(at: Attrs, opset: number, legacy: boolean): ResizeAttrs {
  const mode = at.string('mode', 'nearest');
  if (legacy) {
    // Upsample and Resize-10 are asymmetric; for nearest onnxruntime floors when upsampling and
    // ceils when downsampling (its 'simple' mode); 'legacy' marks that rule in tapsFor's caller.
    return {
      mode: mode === 'bilinear' ? 'linear' : mode,
      coord: 'asymmetric',
      nearest: 'legacy',
      cubicA: -0.75,
      excludeOutside: false,
      extrapolation: 0,
      antialias: false,
    };
  }
  return {
    mode,
    coord: at.string('coordinate_transformation_mode', 'half_pixel'),
    nearest: at.string('nearest_mode', 'round_prefer_floor'),
    cubicA: at.float('cubic_coeff_a', -0.75),
    excludeOutside: at.int('exclude_outside', 0) !== 0,
    extrapolation: at.float('extrapolation_value', 0),
    antialias: opset >= 18 && at.int('antialias', 0) !== 0,
  };
}

interface ResizeParams extends ResizeAttrs {
  /** Resize-10 and Upsample: the old rules (asymmetric, onnxruntime's nearest). */
  legacy: boolean;
  /** Upsample-7's scales attribute (an input from Upsample-9 and in Resize). */
  scales?: number[];
  /** Resize-18's axes (every axis when absent). */
  axes?: number[];
  keepAspectRatioPolicy: string;
}

const modes = new Set(['nearest', 'linear', 'cubic']);
const coords = new Set(['half_pixel', 'half_pixel_symmetric', 'pytorch_half_pixel', 'align_corners', 'asymmetric', 'tf_crop_and_resize']);
const nearestModes = new Set(['round_prefer_floor', 'round_prefer_ceil', 'floor', 'ceil']);
const policies = new Set(['stretch', 'not_larger', 'not_smaller']);

/** The attributes of Resize (opset 11+ unless `legacy`) or Upsample, checked against the values the opset defines. */
function parseResize(opType: 'Resize' | 'Upsample', legacy: boolean) {
  return (attrs: Attrs, opset: number): ResizeParams => {
    const a = resizeAttrs(attrs, opset, legacy);
    if (legacy ? !['nearest', 'linear'].includes(a.mode) : !modes.has(a.mode))
      throw new RangeError(`${opType} mode '${a.mode}' is not supported`);
    const keepAspectRatioPolicy = opset >= 18 ? attrs.string('keep_aspect_ratio_policy', 'stretch') : 'stretch';
    const p: ResizeParams = {
      ...a,
      legacy,
      keepAspectRatioPolicy,
      scales: opType === 'Upsample' && opset < 9 ? attrs.floats('scales') : undefined,
      axes: opset >= 18 ? intsIfGiven(attrs, 'axes') : undefined,
    };
    if (legacy) return p;
    if (!coords.has(a.coord) || (a.coord === 'half_pixel_symmetric' && opset < 19))
      throw new RangeError(`Resize coordinate_transformation_mode '${a.coord}' is not defined at opset ${opset}`);
    // nearest_mode only matters to mode nearest; onnxruntime ignores it otherwise, and so do we.
    if (a.mode === 'nearest' && !nearestModes.has(a.nearest)) throw new RangeError(`Resize nearest_mode '${a.nearest}' is not supported`);
    if (a.antialias && a.mode === 'nearest') throw new RangeError('Resize antialias is not defined for mode nearest');
    if (!policies.has(keepAspectRatioPolicy))
      throw new RangeError(`Resize keep_aspect_ratio_policy '${keepAspectRatioPolicy}' is not one of ${[...policies].join(', ')}`);
    return p;
  };
}

/** roi, scales, sizes: an empty tensor counts as not given. */
const nonEmpty = (v: number[] | undefined): number[] | undefined => (v?.length ? v : undefined);

function resize(ctx: OpContext<ResizeParams>): mx.Array {
  const x = ctx.input(0);
  const dims = x.shape;
  const r = dims.length;
  const attrs = ctx.params;
  let axes = dims.map((_, i) => i);
  let scalesIn: number[] | undefined, sizesIn: number[] | undefined, roi: number[] | undefined;
  if (attrs.scales) scalesIn = attrs.scales;
  else if (attrs.legacy) scalesIn = hostNumbers(ctx.host(1));
  else {
    if (attrs.axes) axes = normAxes(attrs.axes, r);
    roi = nonEmpty(optionalNumbers(ctx, 1));
    scalesIn = nonEmpty(optionalNumbers(ctx, 2));
    sizesIn = nonEmpty(optionalNumbers(ctx, 3));
  }
  if (!scalesIn && !sizesIn) throw new RangeError('Resize: neither scales nor sizes given');
  const n = axes.length;
  if ((sizesIn ?? scalesIn)!.length !== n) throw new RangeError(`Resize: ${(sizesIn ?? scalesIn)!.length} scales/sizes for ${n} axes`);
  const { out, scales } = sizesAndScales(attrs.keepAspectRatioPolicy, dims, axes, scalesIn, sizesIn);
  const plans: AxisPlan[] = [];
  for (let d = 0; d < r; d++) {
    const k = axes.indexOf(d);
    const box: [number, number] = roi && k >= 0 ? [roi[k], roi[n + k]] : [0, 1];
    const a = attrs.nearest === 'legacy' ? { ...attrs, nearest: scales[d] < 1 ? 'ceil' : 'floor' } : attrs;
    const p = planAxis(a, d, dims[d], out[d], scales[d], box);
    if (p) plans.push(p);
  }
  return applyPlans(x, plans, attrs.extrapolation);
}

function applyPlans(x: mx.Array, plans: AxisPlan[], extrapolation: number): mx.Array {
  const work: mx.Dtype = x.dtype === 'float64' ? 'float64' : 'float32';
  let y = plans.some((p) => p.taps > 1) && x.dtype !== work ? mx.astype(x, work) : x;
  for (const p of plans) {
    y = mx.take(y, mx.array(p.index, 'int32'), p.axis);
    if (p.taps > 1) {
      const shape = y.shape;
      const pre = shape.slice(0, p.axis);
      const post = shape.slice(p.axis + 1);
      y = mx.reshape(y, [...pre, p.out, p.taps, ...post]);
      const w = mx.reshape(mx.array(p.weight, work), [p.out, p.taps, ...post.map(() => 1)]);
      y = mx.sum(mx.multiply(y, w), p.axis + 1);
    }
  }
  const masks = plans
    .filter((p) => p.outside)
    .map((p) => {
      const shape = y.shape.map((d, i) => (i === p.axis ? d : 1));
      return mx.reshape(mx.array(p.outside!, 'bool'), shape);
    });
  if (masks.length)
    y = mx.where(
      masks.reduce((m, q) => mx.logicalOr(m, q)),
      mx.scalar(extrapolation, y.dtype),
      y,
    );
  return y.dtype === x.dtype ? y : mx.astype(y, x.dtype);
}

const legacyNote = 'asymmetric coordinates; nearest floors when upsampling and ceils when downsampling, as onnxruntime does';

export const resizeOps: OpEntry[] = [
  onnxOp('Resize', 10, { until: 10, parse: parseResize('Resize', true), run: (ctx) => [resize(ctx)], note: `opset 10: ${legacyNote}` }),
  onnxOp('Resize', 11, {
    parse: parseResize('Resize', false),
    run: (ctx) => [resize(ctx)],
    note: 'opset 11+ follows the ONNX reference: align_corners and pytorch_half_pixel use the unrounded output length (onnxruntime rounds it when scale × size is fractional); computed in float32 (float64 for double)',
  }),
  onnxOp('Upsample', 7, { until: 9, parse: parseResize('Upsample', true), run: (ctx) => [resize(ctx)], note: legacyNote }),
];
