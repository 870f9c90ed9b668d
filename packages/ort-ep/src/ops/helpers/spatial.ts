// Window geometry shared by convolutions and pooling: kernel, strides, dilations, pads (explicit
// or auto_pad), output sizes, and the channels-first <-> channels-last moves MLX's conv needs.
import * as mx from '@mlx/core';
import type { Attrs } from '../../registry/attrs.js';
import { intsIfGiven } from './util.js';
import { invalidNode } from '../../registry/op.js';

export interface Window {
  kernel: number[];
  strides: number[];
  dilations: number[];
  /** Padding before and after each spatial axis (may exceed the explicit pads in ceil mode). */
  padsBegin: number[];
  padsEnd: number[];
  /** Output spatial sizes. */
  out: number[];
}

const autoPads = ['NOTSET', 'SAME_UPPER', 'SAME_LOWER', 'VALID'] as const;
type AutoPad = (typeof autoPads)[number];

/**
 * The window attributes convolutions and pools share, as the node gives them. The int lists'
 * defaults depend on the spatial rank, which only the input knows: windowOf() fills them in.
 */
export interface WindowAttrs {
  autoPad: AutoPad;
  strides?: number[];
  dilations?: number[];
  pads?: number[];
  kernelShape?: number[];
}

/** Reads the shared window attributes; an auto_pad outside the spec's four values throws. */
export function parseWindow(attrs: Attrs): WindowAttrs {
  const autoPad = attrs.string('auto_pad', 'NOTSET');
  if (!(autoPads as readonly string[]).includes(autoPad)) throw invalidNode(`auto_pad '${autoPad}' is not one of ${autoPads.join(', ')}`);
  const w: WindowAttrs = {
    autoPad: autoPad as AutoPad,
    strides: intsIfGiven(attrs, 'strides'),
    dilations: intsIfGiven(attrs, 'dilations'),
    pads: intsIfGiven(attrs, 'pads'),
    kernelShape: intsIfGiven(attrs, 'kernel_shape'),
  };
  // Zero strides, dilations or kernel sizes divide by zero in the window arithmetic (a SIGFPE in
  // the kernels); negative pads are not defined for these ops. All break the spec: invalid nodes,
  // refused at create() and never handed to onnxruntime.
  const positive = (name: string, v: number[] | undefined) => {
    const bad = v?.find((x) => !(x > 0));
    if (bad !== undefined) throw invalidNode(`${name} must be positive, got ${bad} in [${v!.join(', ')}]`);
  };
  positive('strides', w.strides);
  positive('dilations', w.dilations);
  positive('kernel_shape', w.kernelShape);
  const negPad = w.pads?.find((p) => p < 0);
  if (negPad !== undefined) throw invalidNode(`pads must not be negative, got ${negPad} in [${w.pads!.join(', ')}]`);
  if (w.pads && w.kernelShape && w.pads.length !== 2 * w.kernelShape.length) {
    throw invalidNode(`pads [${w.pads.join(', ')}] need 2 entries per spatial axis (${w.kernelShape.length} axes)`);
  }
  return w;
}

export const ones = (n: number): number[] => new Array<number>(n).fill(1);
export const zeros = (n: number): number[] => new Array<number>(n).fill(0);

/** The explicit pads, [begin..., end...] over n spatial axes (zeros when not given). */
export const padsOf = (a: WindowAttrs, n: number): number[] => a.pads ?? zeros(2 * n);

/**
 * The window of a conv or pool node over `spatial` input sizes. `ceil` is pooling's ceil_mode:
 * sizes round up, a last window that would start in the end padding is dropped (as onnxruntime and
 * PyTorch do), and padsEnd grows to cover the last window.
 */
export function windowOf(a: WindowAttrs, spatial: readonly number[], kernel: readonly number[], ceil = false): Window {
  const n = spatial.length;
  const strides = a.strides ?? ones(n);
  const dilations = a.dilations ?? ones(n);
  const autoPad = a.autoPad;
  const pads = padsOf(a, n);
  const padsBegin = pads.slice(0, n);
  const padsEnd = pads.slice(n, 2 * n);
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const span = dilations[i] * (kernel[i] - 1) + 1;
    if (autoPad === 'SAME_UPPER' || autoPad === 'SAME_LOWER') {
      // Output ceil(in / stride); the padding that needs, the odd unit at the end (UPPER) or start (LOWER).
      out.push(Math.ceil(spatial[i] / strides[i]));
      const total = Math.max(0, (out[i] - 1) * strides[i] + span - spatial[i]);
      const small = Math.floor(total / 2);
      padsBegin[i] = autoPad === 'SAME_UPPER' ? small : total - small;
      padsEnd[i] = total - padsBegin[i];
      continue;
    }
    if (autoPad === 'VALID') padsBegin[i] = padsEnd[i] = 0;
    const room = spatial[i] + padsBegin[i] + padsEnd[i] - span;
    let o = (ceil ? Math.ceil(room / strides[i]) : Math.floor(room / strides[i])) + 1;
    if (ceil && (o - 1) * strides[i] >= spatial[i] + padsBegin[i]) o--;
    out.push(Math.max(o, 0));
    const needed = (out[i] - 1) * strides[i] + span - (spatial[i] + padsBegin[i] + padsEnd[i]);
    if (needed > 0) padsEnd[i] += needed;
  }
  return { kernel: [...kernel], strides, dilations, padsBegin, padsEnd, out };
}

/** The kernel's spatial shape: the attribute, else the weight's trailing dims. */
export function kernelOf(a: WindowAttrs, weightShape: readonly number[]): number[] {
  const fromW = weightShape.slice(2);
  const k = a.kernelShape;
  // A kernel_shape that disagrees with the weight names no window the weight can fill.
  if (k && (k.length !== fromW.length || k.some((v, i) => v !== fromW[i])))
    throw new RangeError(`kernel_shape [${k.join(', ')}] does not match the weight's spatial dims [${fromW.join(', ')}]`);
  return k ?? fromW;
}

/** [N, C, d1..dn] -> [N, d1..dn, C] */
export function toChannelsLast(x: mx.Array): mx.Array {
  const r = x.ndim;
  return mx.transpose(x, [0, ...Array.from({ length: r - 2 }, (_, i) => i + 2), 1]);
}

/** [N, d1..dn, C] -> [N, C, d1..dn] */
export function toChannelsFirst(x: mx.Array): mx.Array {
  const r = x.ndim;
  return mx.transpose(x, [0, r - 1, ...Array.from({ length: r - 2 }, (_, i) => i + 1)]);
}

/** Every kernel offset tuple, in row-major order (the order onnxruntime scans a window). */
export function kernelOffsets(kernel: readonly number[]): number[][] {
  let acc: number[][] = [[]];
  for (const k of kernel) acc = acc.flatMap((p) => Array.from({ length: k }, (_, j) => [...p, j]));
  return acc;
}

/**
 * The strided view of a padded [N, C, ...] array that kernel offset `off` sees, one element per
 * output position.
 */
export function windowSlice(padded: mx.Array, w: Window, off: readonly number[]): mx.Array {
  const lead = padded.ndim - w.kernel.length;
  const start = padded.shape.map(() => 0);
  const stop = [...padded.shape];
  const strides = padded.shape.map(() => 1);
  w.kernel.forEach((_, i) => {
    start[lead + i] = off[i] * w.dilations[i];
    stop[lead + i] = start[lead + i] + (w.out[i] - 1) * w.strides[i] + 1;
    strides[lead + i] = w.strides[i];
  });
  return mx.slice(padded, start, stop, strides);
}

/** Pads the trailing spatial axes of `x` as the window says, with `value`. */
export function padSpatial(x: mx.Array, w: Window, value: number | bigint | boolean): mx.Array {
  const lead = x.ndim - w.kernel.length;
  if (w.padsBegin.every((p) => p === 0) && w.padsEnd.every((p) => p === 0)) return x;
  const axes = w.kernel.map((_, i) => lead + i);
  return mx.pad(x, axes, w.padsBegin, w.padsEnd, mx.array(value as number, { dtype: x.dtype }), 'constant');
}
