// GridSample (opsets 16 and 20+), following the ONNX reference (onnx/reference/ops/op_grid_sample.py,
// itself PyTorch's grid_sampler): each spatial axis turns the grid's normalised coordinate into a
// few taps (index, weight); the taps of all axes combine into flat indices into X's spatial
// plane, gathered in one take_along_axis and summed with their weights. Everything stays on
// the device: the grid is data, so the taps are MLX arrays, not host tables.
import * as mx from '@mlx/core';
import type { Attrs } from '../registry/attrs.js';
import type { OpContext, OpEntry } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';

// Opset 16 named the modes after 2-D interpolation; opset 20 generalised them to N-D.
const modeNames: Record<string, 'linear' | 'nearest' | 'cubic'> = {
  bilinear: 'linear',
  bicubic: 'cubic',
  linear: 'linear',
  cubic: 'cubic',
  nearest: 'nearest',
};
const paddings = new Set(['zeros', 'border', 'reflection']);

interface GridAttrs {
  mode: 'linear' | 'nearest' | 'cubic';
  padding: string;
  alignCorners: boolean;
}

function gridAttrs(attrs: Attrs, opset: number): GridAttrs {
  const name = attrs.string('mode', opset >= 20 ? 'linear' : 'bilinear');
  const allowed = opset >= 20 ? ['linear', 'cubic', 'nearest'] : ['bilinear', 'bicubic', 'nearest'];
  const mode = modeNames[name];
  if (!mode || !allowed.includes(name)) throw new RangeError(`GridSample mode '${name}' is not defined at opset ${opset}`);
  const padding = attrs.string('padding_mode', 'zeros');
  if (!paddings.has(padding)) throw new RangeError(`GridSample padding_mode '${padding}' is not one of ${[...paddings].join(', ')}`);
  return { mode, padding, alignCorners: attrs.int('align_corners', 0) !== 0 };
}

/** A tap along one axis: source index (not yet made valid) and its weight. */
interface Tap {
  index: mx.Array;
  weight: mx.Array;
}

/** Folds x into [lo, hi] by reflecting at the nearer border, as often as needed. */
function reflect(x: mx.Array, lo: number, hi: number): mx.Array {
  const range = hi - lo;
  if (range <= 0) return mx.zerosLike(x); // a single position: every coordinate lands on it
  const fold = (dx: mx.Array, fromLo: boolean) => {
    const n = mx.floor(mx.divide(dx, range));
    const r = mx.subtract(dx, mx.multiply(n, range));
    const even = mx.equal(mx.remainder(n, 2), 0);
    const nearSide = fromLo ? mx.add(r, lo) : mx.subtract(hi, r);
    const farSide = fromLo ? mx.subtract(hi, r) : mx.add(r, lo);
    return mx.where(even, nearSide, farSide);
  };
  const below = fold(mx.subtract(lo, x), true);
  const above = fold(mx.subtract(x, hi), false);
  return mx.where(mx.less(x, lo), below, mx.where(mx.greater(x, hi), above, x));
}

/** The reference's outer borders: the extent of the pixels' centres or of their edges. */
const borders = (len: number, align: boolean): [number, number] => (align ? [0, len - 1] : [-0.5, len - 0.5]);

/** Source index valid for padding_mode, and a 0/1 weight factor (zeros padding reads 0 outside). */
function resolve(i: mx.Array, len: number, a: GridAttrs): { index: mx.Array; inside?: mx.Array } {
  if (a.padding === 'reflection') {
    const [lo, hi] = borders(len, a.alignCorners);
    return { index: mx.clip(mx.astype(reflect(i, lo, hi), 'int32'), 0, len - 1) };
  }
  const index = mx.astype(mx.clip(i, 0, len - 1), 'int32');
  if (a.padding === 'border') return { index };
  return { index, inside: mx.astype(mx.logicalAnd(mx.greaterEqual(i, 0), mx.less(i, len)), 'float32') };
}

/** Keys' cubic convolution weights (A = -0.75) of the four taps around fraction t. */
function cubicWeights(t: mx.Array): mx.Array[] {
  const A = -0.75;
  const near = (x: mx.Array) => mx.add(mx.multiply(mx.multiply(mx.subtract(mx.multiply(x, A + 2), A + 3), x), x), 1);
  const far = (x: mx.Array) => mx.subtract(mx.multiply(mx.add(mx.multiply(mx.subtract(mx.multiply(x, A), 5 * A), x), 8 * A), x), 4 * A);
  return [far(mx.add(t, 1)), near(t), near(mx.subtract(1, t)), far(mx.subtract(2, t))];
}

/** The taps along one axis of length `len` for unnormalised coordinates x. */
function axisTaps(x: mx.Array, len: number, a: GridAttrs): Tap[] {
  const [lo, hi] = borders(len, a.alignCorners);
  if (a.mode === 'nearest') {
    // Half to even (nearbyint) on every rank: the backend tests' 3-D expectations use it too, although
    // the Python reference (and PyTorch's 3-D kernel) round half away from zero there.
    x = mx.round(x, 0);
  }
  // Coordinates beyond the borders are first clamped or reflected, and the taps resolved again.
  // Cubic skips the first step, as PyTorch and onnxruntime do (the Python reference clamps there
  // too; the backend tests only cover cubic with zeros padding, where both agree).
  if (a.mode !== 'cubic') {
    const outside = mx.logicalOr(mx.less(x, lo), mx.greater(x, hi));
    if (a.padding === 'border') x = mx.where(outside, mx.clip(x, 0, len - 1), x);
    else if (a.padding === 'reflection') x = mx.where(outside, reflect(x, lo, hi), x);
  }
  if (a.mode === 'nearest') return [{ index: x, weight: mx.onesLike(x) }];
  const x0 = mx.floor(x);
  const t = mx.subtract(x, x0);
  if (a.mode === 'linear')
    return [
      { index: x0, weight: mx.subtract(1, t) },
      { index: mx.add(x0, 1), weight: t },
    ];
  return cubicWeights(t).map((weight, k) => ({ index: mx.add(x0, k - 1), weight }));
}

function gridSample(ctx: OpContext, a: GridAttrs): mx.Array {
  const X = ctx.input(0);
  if (X.ndim < 3) throw new RangeError(`the input must be [N, C, spatial...] of rank 3 or more, got [${X.shape.join(', ')}]`);
  const dims = X.shape.slice(2);
  const K = dims.length;
  const [N, C] = X.shape;
  let grid = ctx.input(1);
  if (grid.ndim !== K + 2 || grid.shape[K + 1] !== K || grid.shape[0] !== N)
    throw new RangeError(`grid [${grid.shape.join(', ')}] does not match the ${K}-D input [${X.shape.join(', ')}]`);
  const outSpatial = grid.shape.slice(1, K + 1);
  const Q = outSpatial.reduce((p, d) => p * d, 1);
  grid = mx.reshape(mx.astype(grid, 'float32'), [N, Q, K]);
  let flat: mx.Array | undefined; // [N, Q, T] flat indices over X's spatial plane
  let weight: mx.Array | undefined; // [N, Q, T]
  let stride = 1;
  // The grid's last dimension lists coordinates innermost axis first (x, y[, z]).
  for (let d = K - 1; d >= 0; d--) {
    const len = dims[d];
    const n = mx.squeeze(mx.slice(grid, [0, 0, K - 1 - d], [N, Q, K - d], [1, 1, 1]), 2);
    const raw = a.alignCorners
      ? mx.multiply(mx.divide(mx.add(n, 1), 2), len - 1)
      : mx.divide(mx.subtract(mx.multiply(mx.add(n, 1), len), 1), 2);
    // NaN and infinite coordinates become finite ones outside the input (NaN below it), so every
    // tap index below stays a real position: NaN cast to an integer indexed wild memory.
    const far = 4 * len + 8;
    const x = mx.where(mx.isnan(raw), -far, mx.clip(raw, -far, far));
    const taps = axisTaps(x, len, a).map((tap) => {
      const r = resolve(tap.index, len, a);
      return { index: mx.multiply(r.index, stride), weight: r.inside ? mx.multiply(tap.weight, r.inside) : tap.weight };
    });
    const idx = mx.stack(
      taps.map((t) => t.index),
      2,
    ); // [N, Q, taps]
    const w = mx.stack(
      taps.map((t) => t.weight),
      2,
    );
    // Outer product with the taps so far: T grows to taps^(axes done).
    flat = flat ? mx.flatten(mx.add(mx.expandDims(idx, 3), mx.expandDims(flat, 2)), 2, 3) : idx;
    weight = weight ? mx.flatten(mx.multiply(mx.expandDims(w, 3), mx.expandDims(weight, 2)), 2, 3) : w;
    stride *= len;
  }
  const T = flat!.shape[2];
  const P = stride;
  const xf = mx.reshape(X.dtype === 'float32' ? X : mx.astype(X, 'float32'), [N, C, P]);
  const index = mx.broadcastTo(mx.reshape(flat!, [N, 1, Q * T]), [N, C, Q * T]);
  const taken = mx.reshape(mx.takeAlongAxis(xf, index, 2), [N, C, Q, T]);
  const y = mx.sum(mx.multiply(taken, mx.expandDims(weight!, 1)), 3);
  const out = mx.reshape(y, [N, C, ...outSpatial]);
  return out.dtype === X.dtype ? out : mx.astype(out, X.dtype);
}

export const gridSampleOps: OpEntry[] = [
  onnxOp('GridSample', 16, { parse: gridAttrs, run: (ctx) => [gridSample(ctx, ctx.params)], note: 'computed in float32' }),
];
