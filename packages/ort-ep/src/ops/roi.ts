// Region pooling: RoiAlign and MaxRoiPool. Where each bin samples depends on the ROI values
// (RoiAlign's adaptive grid, MaxRoiPool's rounded windows), so the sampling plan is made on the
// host from the (small) ROI tensor, and MLX gathers and reduces the feature map with it.
import * as mx from '@mlx/core';
import type { Attrs } from '../registry/attrs.js';
import type { OpContext, OpEntry } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { RefusedNodeError } from '../errors.js';
import { hostNumbers } from './helpers/util.js';

/** Gather plan: for every output cell, `taps` (flat row of [N*H*W, C], weight) pairs; `valid` marks real samples. */
interface Plan {
  index: Int32Array;
  weight: Float32Array;
  valid: Uint8Array;
  taps: number;
}

/** Rows of x [N, C, H, W] as [N*H*W, C], gathered by the plan: [cells, taps, C]. */
function gather(x: mx.Array, plan: Plan, cells: number): mx.Array {
  const [n, c, h, w] = x.shape;
  const rows = mx.reshape(mx.transpose(x, [0, 2, 3, 1]), [n * h * w, c]);
  const idx = mx.Array.fromTypedArray(plan.index, [plan.index.length], 'int32');
  return mx.reshape(mx.take(rows, idx, 0), [cells, plan.taps, c]);
}

// ---------------------------------------------------------------------------------------------
// RoiAlign: bilinear samples on a grid per bin (adaptive: ceil(roi size / bins) unless
// sampling_ratio is set), averaged, or in 'max' mode the largest weighted corner (onnxruntime's rule).

interface AlignGeometry {
  h: number;
  w: number;
  oh: number;
  ow: number;
  scale: number;
  ratio: number;
  halfPixel: boolean;
}

/** The four weighted corners of a bilinear sample at (y, x), as the reference clamps them. */
function corners(y: number, x: number, h: number, w: number): [number, number][] {
  if (y < -1 || y > h || x < -1 || x > w)
    return [
      [0, 0],
      [0, 0],
      [0, 0],
      [0, 0],
    ];
  y = Math.max(y, 0);
  x = Math.max(x, 0);
  let y0 = Math.trunc(y),
    x0 = Math.trunc(x),
    y1: number,
    x1: number;
  if (y0 >= h - 1) {
    y0 = y1 = h - 1;
    y = y0;
  } else y1 = y0 + 1;
  if (x0 >= w - 1) {
    x0 = x1 = w - 1;
    x = x0;
  } else x1 = x0 + 1;
  const ly = y - y0,
    lx = x - x0,
    hy = 1 - ly,
    hx = 1 - lx;
  return [
    [y0 * w + x0, hy * hx],
    [y0 * w + x1, hy * lx],
    [y1 * w + x0, ly * hx],
    [y1 * w + x1, ly * lx],
  ];
}

/** The most sampling taps (cells x samples x 4) a plan may hold: a bigger one is an error, not an allocation. */
const MAX_TAPS = 1 << 26;

/** Batch indices must name a batch entry; rois must be finite (the plan is made from them on the host). */
function checkRois(rois: number[], batch: number[], n: number, perRoi: number): void {
  batch.forEach((b, i) => {
    if (!Number.isInteger(b) || b < 0 || b >= n) throw new RangeError(`batch index ${b} of roi ${i} is out of range [0, ${n - 1}]`);
  });
  for (let i = 0; i < rois.length; i++) {
    if (!Number.isFinite(rois[i])) throw new RangeError(`roi ${Math.floor(i / perRoi)} has a non-finite coordinate (${rois[i]})`);
  }
}

function alignPlan(rois: number[], batch: number[], g: AlignGeometry): { plan: Plan; counts: Float32Array } {
  const r = batch.length;
  const off = g.halfPixel ? 0.5 : 0;
  const boxes = Array.from({ length: r }, (_, i) => {
    const [x1, y1, x2, y2] = rois.slice(4 * i, 4 * i + 4).map((v) => v * g.scale - off);
    let rw = x2 - x1,
      rh = y2 - y1;
    if (!g.halfPixel) {
      rw = Math.max(rw, 1);
      rh = Math.max(rh, 1);
    }
    const gh = g.ratio > 0 ? g.ratio : Math.ceil(rh / g.oh);
    const gw = g.ratio > 0 ? g.ratio : Math.ceil(rw / g.ow);
    return { x1, y1, bh: rh / g.oh, bw: rw / g.ow, gh, gw };
  });
  const samples = boxes.reduce((m, b) => Math.max(m, b.gh * b.gw), 1);
  const taps = samples * 4;
  const cells = r * g.oh * g.ow;
  if (!(cells * taps <= MAX_TAPS)) {
    throw new RangeError(
      `the rois need ${samples} samples per bin (${cells} bins): over the limit of ${MAX_TAPS} sampling taps; give sampling_ratio or smaller rois`,
    );
  }
  const plan: Plan = {
    index: new Int32Array(cells * taps),
    weight: new Float32Array(cells * taps),
    valid: new Uint8Array(cells * samples),
    taps,
  };
  const counts = new Float32Array(r);
  boxes.forEach((b, i) => {
    counts[i] = Math.max(b.gh * b.gw, 1);
    const base = batch[i] * g.h * g.w;
    for (let ph = 0; ph < g.oh; ph++)
      for (let pw = 0; pw < g.ow; pw++) {
        const cell = (i * g.oh + ph) * g.ow + pw;
        let s = 0;
        for (let iy = 0; iy < b.gh; iy++)
          for (let ix = 0; ix < b.gw; ix++, s++) {
            const y = b.y1 + ph * b.bh + ((iy + 0.5) * b.bh) / b.gh;
            const x = b.x1 + pw * b.bw + ((ix + 0.5) * b.bw) / b.gw;
            plan.valid[cell * samples + s] = 1;
            corners(y, x, g.h, g.w).forEach(([pos, wt], k) => {
              plan.index[(cell * samples + s) * 4 + k] = base + pos;
              plan.weight[(cell * samples + s) * 4 + k] = wt;
            });
          }
      }
  });
  return { plan, counts };
}

/** RoiAlign's attributes: everything of AlignGeometry but the input's size, and the mode. */
interface RoiAlignParams extends Omit<AlignGeometry, 'h' | 'w'> {
  max: boolean;
}

function parseRoiAlign(attrs: Attrs, opset: number): RoiAlignParams {
  // Opset 10 had no attribute and behaved as 'output_half_pixel'.
  const coord = attrs.string('coordinate_transformation_mode', opset >= 16 ? 'half_pixel' : 'output_half_pixel');
  if (coord !== 'half_pixel' && coord !== 'output_half_pixel')
    throw new RangeError(`RoiAlign coordinate_transformation_mode '${coord}' is not half_pixel or output_half_pixel`);
  const mode = attrs.string('mode', 'avg');
  if (mode !== 'avg' && mode !== 'max') throw new RangeError(`RoiAlign mode '${mode}' is not avg or max`);
  const [oh, ow, ratio] = [attrs.int('output_height', 1), attrs.int('output_width', 1), attrs.int('sampling_ratio', 0)];
  // The plan's tables are sized by these: onnxruntime's CPU kernel does not check them.
  if (!(oh >= 1 && ow >= 1)) throw new RefusedNodeError(`RoiAlign output_height ${oh} and output_width ${ow} must be positive`);
  if (!(ratio >= 0)) throw new RefusedNodeError(`RoiAlign sampling_ratio ${ratio} must not be negative`);
  return {
    oh,
    ow,
    scale: attrs.float('spatial_scale', 1),
    ratio,
    halfPixel: coord === 'half_pixel',
    max: mode === 'max',
  };
}

function roiAlign(ctx: OpContext<RoiAlignParams>): mx.Array {
  const x = ctx.input(0);
  const [, c, h, w] = x.shape;
  const rois = hostNumbers(ctx.host(1));
  const batch = hostNumbers(ctx.host(2));
  checkRois(rois, batch, x.shape[0], 4);
  if (rois.length !== 4 * batch.length)
    throw new RangeError(`rois [${ctx.shape(1).join(', ')}] and batch_indices [${ctx.shape(2).join(', ')}] do not describe the same rois`);
  const g: AlignGeometry = { ...ctx.params, h, w };
  const r = batch.length;
  const cells = r * g.oh * g.ow;
  const { plan, counts } = alignPlan(rois, batch, g);
  const samples = plan.taps / 4;
  const vals = mx.reshape(gather(mx.astype(x, 'float32'), plan, cells), [cells, samples, 4, c]);
  const weights = mx.reshape(mx.Array.fromTypedArray(plan.weight, [plan.weight.length], 'float32'), [cells, samples, 4, 1]);
  const weighted = mx.multiply(vals, weights);
  let y: mx.Array;
  if (ctx.params.max) {
    const valid = mx.reshape(mx.Array.fromTypedArray(plan.valid, [plan.valid.length], 'uint8'), [cells, samples, 1]);
    y = mx.max(mx.where(mx.astype(valid, 'bool'), mx.max(weighted, 2), -Infinity), 1);
  } else {
    const perRoi = mx.Array.fromTypedArray(counts, [r], 'float32');
    const perCell = mx.reshape(mx.broadcastTo(mx.reshape(perRoi, [r, 1]), [r, g.oh * g.ow]), [cells, 1]);
    y = mx.divide(mx.sum(weighted, [1, 2]), perCell);
  }
  return mx.astype(mx.transpose(mx.reshape(y, [r, g.oh, g.ow, c]), [0, 3, 1, 2]), x.dtype);
}

// ---------------------------------------------------------------------------------------------
// MaxRoiPool: ROIs [R, 5] = (batch, x1, y1, x2, y2), rounded to the grid; each bin is the max of
// its window, 0 where the window is empty.

function maxRoiPool(ctx: OpContext<{ pooledShape: number[]; scale: number }>): mx.Array {
  const x = ctx.input(0);
  const [, c, h, w] = x.shape;
  const ps = ctx.params.pooledShape;
  if (ps.length !== 2 || ps.some((d) => !Number.isSafeInteger(d) || d < 1))
    throw new RangeError(`pooled_shape must be two positive integers (height, width), got [${ps.join(', ')}]`);
  const [oh, ow] = ps;
  const rs = ctx.shape(1);
  if (rs.length !== 2 || rs[1] !== 5) throw new RangeError(`rois must have shape [R, 5], got [${rs.join(', ')}]`);
  if (x.ndim !== 4) throw new RangeError(`X must be 4-D [N, C, H, W], got shape [${x.shape.join(', ')}]`);
  const rois = hostNumbers(ctx.host(1));
  const scale = ctx.params.scale;
  const r = rs[0];
  // Every bin is visited on the host, even over an empty input.
  if (r * oh * ow > MAX_TAPS)
    throw new RangeError(`${r} rois of ${oh}x${ow} bins exceed the limit of ${MAX_TAPS} bins computed on the host`);
  checkRois(
    rois,
    Array.from({ length: r }, (_, i) => rois[5 * i]),
    x.shape[0],
    5,
  );
  if (r * oh * ow * h * w > MAX_TAPS)
    throw new RangeError(`${r} rois of ${oh}x${ow} bins over a ${h}x${w} input exceed the limit of ${MAX_TAPS} sampling taps`);
  const windows: number[][] = [];
  for (let i = 0; i < r; i++) {
    const [b, x1, y1, x2, y2] = rois.slice(5 * i, 5 * i + 5);
    const sw = Math.round(x1 * scale),
      sh = Math.round(y1 * scale);
    const rh = Math.max(Math.round(y2 * scale) - sh + 1, 1),
      rw = Math.max(Math.round(x2 * scale) - sw + 1, 1);
    for (let ph = 0; ph < oh; ph++)
      for (let pw = 0; pw < ow; pw++) {
        const clampH = (v: number) => Math.min(Math.max(v + sh, 0), h);
        const clampW = (v: number) => Math.min(Math.max(v + sw, 0), w);
        const hs = clampH(Math.floor((ph * rh) / oh)),
          he = clampH(Math.ceil(((ph + 1) * rh) / oh));
        const ws = clampW(Math.floor((pw * rw) / ow)),
          we = clampW(Math.ceil(((pw + 1) * rw) / ow));
        const cell: number[] = [];
        for (let yy = hs; yy < he; yy++) for (let xx = ws; xx < we; xx++) cell.push((b * h + yy) * w + xx);
        windows.push(cell);
      }
  }
  const taps = windows.reduce((m, win) => Math.max(m, win.length), 1);
  const plan: Plan = {
    index: new Int32Array(windows.length * taps),
    weight: new Float32Array(0),
    valid: new Uint8Array(windows.length * taps),
    taps,
  };
  windows.forEach((win, i) =>
    win.forEach((pos, k) => {
      plan.index[i * taps + k] = pos;
      plan.valid[i * taps + k] = 1;
    }),
  );
  const vals = gather(x, plan, windows.length);
  const valid = mx.reshape(mx.astype(mx.Array.fromTypedArray(plan.valid, [plan.valid.length], 'uint8'), 'bool'), [windows.length, taps, 1]);
  const best = mx.max(mx.where(valid, vals, -Infinity), 1);
  const empty = mx.reshape(mx.logicalNot(mx.any(valid, 1)), [windows.length, 1]);
  const y = mx.where(empty, 0, best);
  return mx.astype(mx.transpose(mx.reshape(y, [r, oh, ow, c]), [0, 3, 1, 2]), x.dtype);
}

export const roiOps: OpEntry[] = [
  onnxOp('RoiAlign', 10, {
    note: 'reads rois and batch_indices on the host (a sync point)',
    parse: parseRoiAlign,
    run: (ctx) => [roiAlign(ctx)],
  }),
  onnxOp('MaxRoiPool', 1, {
    note: 'reads rois on the host (a sync point)',
    parse: (attrs) => ({ pooledShape: attrs.ints('pooled_shape'), scale: attrs.float('spatial_scale', 1) }),
    run: (ctx) => [maxRoiPool(ctx)],
  }),
];
