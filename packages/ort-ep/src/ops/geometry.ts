// Geometry: AffineGrid (20), Col2Im (18) and NonMaxSuppression
// (10, 11). Index tables that depend only on shapes and attributes are built on the host; the
// data moves on MLX. NonMaxSuppression is greedy and data-dependent with a data-dependent
// output size, so it runs on the host (a sync point) like onnxruntime's CPU kernel.
import * as mx from '@mlx/core';
import { OnnxDataType, type HostTensor } from '../onnx/index.js';
import type { Attrs } from '../registry/attrs.js';
import type { OpContext, OpEntry } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { checkHostElements, MAX_HOST_ELEMENTS } from './helpers/bounds.js';
import { hostInt64, hostNumbers, intsIfGiven, optionalNumbers, sizeOf } from './helpers/util.js';

// ---------------------------------------------------------------------------------------------
// AffineGrid

/** Normalised pixel positions along an axis of `len`: centres (align_corners) or cell middles. */
function axisPositions(len: number, align: boolean): number[] {
  return Array.from({ length: len }, (_, i) => (align ? (len === 1 ? -1 : -1 + (2 * i) / (len - 1)) : (2 * i + 1) / len - 1));
}

/** [1, prod(spatial), K + 1] homogeneous base grid, innermost axis first in each row (x, y[, z], 1). */
function baseGrid(spatial: number[], align: boolean): mx.Array {
  const K = spatial.length;
  const pos = spatial.map((len) => axisPositions(len, align));
  const Q = sizeOf(spatial);
  const out = new Float32Array(Q * (K + 1));
  for (let q = 0; q < Q; q++) {
    let rest = q;
    for (let d = K - 1; d >= 0; d--) {
      out[q * (K + 1) + (K - 1 - d)] = pos[d][rest % spatial[d]];
      rest = Math.floor(rest / spatial[d]);
    }
    out[q * (K + 1) + K] = 1;
  }
  return mx.array(out, { shape: [1, Q, K + 1], dtype: 'float32' });
}

function affineGrid(ctx: OpContext<boolean>): mx.Array {
  const theta = ctx.input(0);
  const size = hostNumbers(ctx.host(1));
  const spatial = size.slice(2);
  const K = spatial.length;
  if ((K !== 2 && K !== 3) || theta.ndim !== 3 || theta.shape[1] !== K || theta.shape[2] !== K + 1) {
    throw new RangeError(
      `${ctx.where}: theta [${theta.shape.join(', ')}] and size [${size.join(', ')}] are not a 2-D or 3-D affine transform`,
    );
  }
  const bad = size.find((d) => !Number.isSafeInteger(d) || d < 0);
  if (bad !== undefined) throw new RangeError(`size [${size.join(', ')}] has a dim ${bad} that is not a non-negative integer`);
  if (size[0] !== theta.shape[0]) throw new RangeError(`size's batch ${size[0]} differs from theta's ${theta.shape[0]}`);
  checkHostElements(sizeOf(spatial) * (K + 1), `the base grid of size [${size.join(', ')}]`);
  const work = theta.dtype === 'float64' ? theta : mx.astype(theta, 'float32');
  const base = baseGrid(spatial, ctx.params);
  const grid = mx.matmul(base, mx.transpose(work, [0, 2, 1])); // [N, Q, K]
  const out = mx.reshape(grid, [size[0], ...spatial, K]);
  return out.dtype === theta.dtype ? out : mx.astype(out, theta.dtype);
}

// ---------------------------------------------------------------------------------------------
// Col2Im

/**
 * Where each column entry lands in the flattened image: for block offset b and block position l,
 * the image index, or `P` (a slot past the end, dropped afterwards) when it falls in the padding.
 */
function col2imTable(image: number[], block: number[], dil: number[], pads: number[], strides: number[]): { index: Int32Array; L: number } {
  const K = image.length;
  const counts = image.map((len, d) => Math.floor((len + pads[d] + pads[K + d] - (dil[d] * (block[d] - 1) + 1)) / strides[d]) + 1);
  if (counts.some((c) => c < 1))
    throw new RangeError(`Col2Im: blocks [${block.join(', ')}] do not fit image [${image.join(', ')}] with these pads and dilations`);
  const B = sizeOf(block);
  const L = sizeOf(counts);
  const P = sizeOf(image);
  const index = new Int32Array(B * L);
  const unravel = (i: number, shape: number[]) => {
    const out = new Array<number>(shape.length);
    for (let d = shape.length - 1; d >= 0; d--) {
      out[d] = i % shape[d];
      i = Math.floor(i / shape[d]);
    }
    return out;
  };
  for (let b = 0; b < B; b++) {
    const off = unravel(b, block);
    for (let l = 0; l < L; l++) {
      const at = unravel(l, counts);
      let flat = 0;
      let inside = true;
      for (let d = 0; d < K; d++) {
        const p = at[d] * strides[d] - pads[d] + off[d] * dil[d];
        if (p < 0 || p >= image[d]) inside = false;
        flat = flat * image[d] + p;
      }
      index[b * L + l] = inside ? flat : P;
    }
  }
  return { index, L };
}

/** The window lists' lengths and ranges, and the size of the host table they make. */
function checkCol2ImShapes(image: number[], block: number[], dil: number[], pads: number[], strides: number[]): void {
  const K = image.length;
  const list = (name: string, xs: number[], n: number, min: number) => {
    if (xs.length !== n) throw new RangeError(`Col2Im: ${name} has ${xs.length} values, the ${K}-D image needs ${n}`);
    const bad = xs.find((d) => !Number.isSafeInteger(d) || d < min);
    if (bad !== undefined) throw new RangeError(`Col2Im: ${name} must be integers >= ${min}, got [${xs.join(', ')}]`);
  };
  list('image_shape', image, K, 0);
  list('block_shape', block, K, 1);
  list('dilations', dil, K, 1);
  list('pads', pads, 2 * K, 0);
  list('strides', strides, K, 1);
  const B = sizeOf(block);
  if (B > MAX_HOST_ELEMENTS)
    throw new RangeError(`Col2Im: a block of [${block.join(', ')}] has ${B} positions, over the ${MAX_HOST_ELEMENTS} computed on the host`);
  const counts = image.map((len, d) => Math.floor((len + pads[d] + pads[K + d] - (dil[d] * (block[d] - 1) + 1)) / strides[d]) + 1);
  const table = B * sizeOf(counts.map((c) => Math.max(c, 0)));
  if (table > MAX_HOST_ELEMENTS)
    throw new RangeError(
      `Col2Im: blocks [${block.join(', ')}] over image [${image.join(', ')}] make a table of ${table} entries, over the ${MAX_HOST_ELEMENTS} computed on the host`,
    );
}

/** Col2Im's window lists; their defaults (ones, zeros) need the image's rank, an input. */
interface Col2ImParams {
  dilations?: number[];
  pads?: number[];
  strides?: number[];
}

const parseCol2Im = (attrs: Attrs): Col2ImParams => ({
  dilations: intsIfGiven(attrs, 'dilations'),
  pads: intsIfGiven(attrs, 'pads'),
  strides: intsIfGiven(attrs, 'strides'),
});

function col2im(ctx: OpContext<Col2ImParams>): mx.Array {
  const x = ctx.input(0);
  const image = hostNumbers(ctx.host(1));
  const block = hostNumbers(ctx.host(2));
  const K = image.length;
  const dil = ctx.params.dilations ?? Array(K).fill(1);
  const pads = ctx.params.pads ?? Array(2 * K).fill(0);
  const strides = ctx.params.strides ?? Array(K).fill(1);
  checkCol2ImShapes(image, block, dil, pads, strides);
  const [N, CB, Lx] = x.shape;
  const B = sizeOf(block);
  if (x.ndim !== 3 || CB % B !== 0) throw new RangeError(`${ctx.where}: input [${x.shape.join(', ')}] is not [N, C * ${B}, L]`);
  const { index, L } = col2imTable(image, block, dil, pads, strides);
  if (L !== Lx) throw new RangeError(`${ctx.where}: input has ${Lx} blocks, image and attributes give ${L}`);
  const C = CB / B;
  const P = sizeOf(image);
  // Overlapping blocks add up (the adjoint of Im2Col): a scatter-add into one extra dump slot.
  const work = x.dtype === 'float64' || x.dtype === 'float32' ? x : mx.astype(x, 'float32');
  const values = mx.reshape(work, [N, C, B * L]);
  const idx = mx.broadcastTo(mx.array(index, { shape: [1, 1, B * L], dtype: 'int32' }), [N, C, B * L]);
  const summed = mx.scatterAddAxis(mx.zeros([N, C, P + 1], work.dtype), idx, values, 2);
  const out = mx.reshape(mx.slice(summed, [0, 0, 0], [N, C, P], [1, 1, 1]), [N, C, ...image]);
  return out.dtype === x.dtype ? out : mx.astype(out, x.dtype);
}

// ---------------------------------------------------------------------------------------------
// NonMaxSuppression

type Box = [y1: number, x1: number, y2: number, x2: number];

/** Corners with min < max, from either corner order or the centre-point format. */
function corners(d: ArrayLike<number>, i: number, centre: boolean): Box {
  const [a, b, c, e] = [d[4 * i], d[4 * i + 1], d[4 * i + 2], d[4 * i + 3]];
  if (centre) return [b - e / 2, a - c / 2, b + e / 2, a + c / 2]; // [x_c, y_c, w, h]
  return [Math.min(a, c), Math.min(b, e), Math.max(a, c), Math.max(b, e)];
}

function iou(p: Box, q: Box): number {
  const area = (r: Box) => (r[2] - r[0]) * (r[3] - r[1]);
  const ap = area(p);
  const aq = area(q);
  if (ap <= 0 || aq <= 0) return 0;
  const h = Math.max(0, Math.min(p[2], q[2]) - Math.max(p[0], q[0]));
  const w = Math.max(0, Math.min(p[3], q[3]) - Math.max(p[1], q[1]));
  const inter = h * w;
  return inter / (ap + aq - inter);
}

function floatData(t: HostTensor): ArrayLike<number> {
  return t.dtype === OnnxDataType.FLOAT || t.dtype === OnnxDataType.DOUBLE ? (t.data as ArrayLike<number>) : hostNumbers(t);
}

function nonMaxSuppression(ctx: OpContext<boolean>): HostTensor {
  const boxes = ctx.host(0);
  const scores = ctx.host(1);
  const [B, S] = boxes.dims;
  const Cl = scores.dims[1];
  if (boxes.dims.length !== 3 || boxes.dims[2] !== 4 || scores.dims[0] !== B || scores.dims[2] !== S) {
    throw new RangeError(
      `${ctx.where}: boxes [${boxes.dims.join(', ')}] and scores [${scores.dims.join(', ')}] are not [B, S, 4] and [B, C, S]`,
    );
  }
  // An empty tensor counts as not given.
  const optional = (i: number) => optionalNumbers(ctx, i)?.[0];
  const maxPerClass = optional(2) ?? 0;
  const iouThreshold = optional(3) ?? 0;
  const scoreThreshold = optional(4);
  const centre = ctx.params;
  const bd = floatData(boxes);
  const sd = floatData(scores);
  const picked: number[] = [];
  for (let b = 0; b < B && maxPerClass > 0; b++) {
    const all = Array.from({ length: S }, (_, i) => corners(bd, b * S + i, centre));
    for (let c = 0; c < Cl; c++) {
      const base = (b * Cl + c) * S;
      // Candidates above the score threshold, best first; equal scores keep the lower index first.
      const order = Array.from({ length: S }, (_, i) => i)
        .filter((i) => scoreThreshold === undefined || sd[base + i] > scoreThreshold)
        .sort((i, j) => sd[base + j] - sd[base + i] || i - j);
      const kept: number[] = [];
      for (const i of order) {
        if (kept.length >= maxPerClass) break;
        if (kept.every((k) => iou(all[i], all[k]) <= iouThreshold)) kept.push(i);
      }
      for (const i of kept) picked.push(b, c, i);
    }
  }
  return hostInt64(picked, [picked.length / 3, 3]);
}

export const geometryOps: OpEntry[] = [
  onnxOp('AffineGrid', 20, { parse: (attrs) => attrs.int('align_corners', 0) !== 0, run: (ctx) => [affineGrid(ctx)] }),
  onnxOp('Col2Im', 18, { parse: parseCol2Im, run: (ctx) => [col2im(ctx)] }),
  onnxOp('NonMaxSuppression', 10, {
    // center_point_box 1: boxes are [x_center, y_center, width, height].
    parse: (attrs) => attrs.zeroOrOne('center_point_box', 0),
    run: (ctx) => [nonMaxSuppression(ctx)],
    note: 'runs on the host (data-dependent output size)',
  }),
];
