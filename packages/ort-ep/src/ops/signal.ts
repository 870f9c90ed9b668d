// Signal processing: DFT (opsets 17 and 20), STFT (17), the Hann/Hamming/Blackman windows (17)
// and MelWeightMatrix (17). ONNX holds complex values as a trailing dimension of 2 (real, imag);
// a trailing 1 marks a real signal. MLX's FFTs take and return complex64, so the values are
// converted at the op's edges and every transform runs in float32/complex64 (float64 and float16
// inputs are computed in float32 and cast back, as MLX has no complex128).
// Semantics follow the ONNX reference (onnx/reference/ops/op_dft.py, op_stft.py,
// op_mel_weight_matrix.py) and the backend tests' numpy expectations.
import * as mx from '@mlx/core';
import { OnnxDataType, type HostTensor } from '../onnx/index.js';
import type { Attrs } from '../registry/attrs.js';
import type { CheckContext, OpContext, OpEntry, OpResult } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { checkHostElements } from './helpers/bounds.js';
import { hostOf, isFloatType, mxType, optionalNumbers } from './helpers/util.js';

// ---------------------------------------------------------------------------------------------
// Complex values in ONNX's layout

/** [..., 1|2] float -> complex64 [...]: real + i * imag. */
function toComplex(x: mx.Array): mx.Array {
  const f = x.dtype === 'float32' ? x : mx.astype(x, 'float32');
  const last = f.ndim - 1;
  if (f.shape[last] === 1) return mx.astype(mx.squeeze(f, last), 'complex64');
  const [re, im] = mx.split(f, 2, last).map((p) => mx.squeeze(p, last));
  const i = mx.Array.fromTypedArray(new Float32Array([0, 1]), [], 'complex64');
  return mx.add(mx.astype(re, 'complex64'), mx.multiply(mx.astype(im, 'complex64'), i));
}

/** complex64 [...] -> float32 [..., 2]. */
const fromComplex = (c: mx.Array): mx.Array => mx.stack([mx.real(c), mx.imag(c)], -1);

interface DftArgs {
  axis: number; // of the input, in [0, rank - 2]
  length?: number; // dft_length; undefined: the axis's length (irfft: 2 * (bins - 1))
  inverse: boolean;
  onesided: boolean;
}

/**
 * The DFT of x ([batch, ..., 1|2]) along args.axis, in ONNX's layout (float32).
 * inverse + onesided is the inverse of a onesided transform (numpy's irfft): a half spectrum in,
 * a real signal of dft_length (default 2 * (bins - 1)) out, with a trailing dimension of 1.
 */
function dftCore(x: mx.Array, a: DftArgs): mx.Array {
  const last = x.ndim - 1;
  const complexIn = x.shape[last] === 2;
  if (a.inverse && a.onesided) {
    const n = a.length ?? 2 * (x.shape[a.axis] - 1);
    return mx.expandDims(mx.fftIrfft(toComplex(x), n, a.axis), -1);
  }
  const n = a.length ?? x.shape[a.axis];
  if (a.onesided) {
    // The spec's shape inference (and onnxruntime) reject this; the Python reference would slice.
    if (complexIn) throw new RangeError('a one-sided transform needs a real input (last dimension 1), not a complex one');
    const real = mx.squeeze(x.dtype === 'float32' ? x : mx.astype(x, 'float32'), last);
    return fromComplex(mx.fftRfft(real, n, a.axis));
  }
  const c = toComplex(x);
  return fromComplex(a.inverse ? mx.fftIfft(c, n, a.axis) : mx.fftFft(c, n, a.axis));
}

const backTo = (y: mx.Array, like: mx.Array): mx.Array => (y.dtype === like.dtype ? y : mx.astype(y, like.dtype));

/** Names the node in the range errors of helpers that do not know it. */
function named<T>(ctx: OpContext, f: () => T): T {
  try {
    return f();
  } catch (e) {
    if (e instanceof RangeError && !e.message.startsWith(ctx.where)) throw new RangeError(`${ctx.where}: ${e.message}`, { cause: e });
    throw e;
  }
}

const scalarInput = (ctx: OpContext, i: number): number | undefined => optionalNumbers(ctx, i)?.[0];

// ---------------------------------------------------------------------------------------------
// DFT

function checkSignal<P>(ctx: CheckContext<P>): string | undefined {
  const t = ctx.inputType(0);
  if (t !== undefined && !isFloatType(t)) return `${ctx.node.opType} input of element type ${t} is not a float signal`;
  if (t === OnnxDataType.BFLOAT16) return `${ctx.node.opType} of bfloat16 is not supported (no complex bfloat16 in MLX)`;
  return undefined;
}

interface DftParams {
  /** DFT-17's axis attribute (an input from opset 20). */
  axis?: number;
  inverse: boolean;
  onesided: boolean;
}

const parseDft = (attrs: Attrs, opset: number): DftParams => ({
  axis: opset < 20 ? attrs.int('axis', 1) : undefined,
  inverse: attrs.int('inverse', 0) !== 0,
  onesided: attrs.int('onesided', 0) !== 0,
});

function dft(ctx: OpContext<DftParams>): mx.Array {
  const x = ctx.input(0);
  const rank = x.ndim;
  const last = x.shape[rank - 1];
  if (last !== 1 && last !== 2) throw new RangeError(`${ctx.where}: the last dimension must be 1 (real) or 2 (complex), got ${last}`);
  // Opset 20 moved axis from an attribute (default 1) to an input (default -2); both count
  // negative values against the input's rank, the trailing complex dimension included.
  const raw = ctx.params.axis ?? scalarInput(ctx, 2) ?? -2;
  const axis = raw < 0 ? raw + rank : raw;
  if (axis < 0 || axis > rank - 2) throw new RangeError(`${ctx.where}: axis ${raw} is outside [-${rank}, -2] and [0, ${rank - 2}]`);
  const length = scalarInput(ctx, 1);
  if (length !== undefined && length < 1) throw new RangeError(`dft_length ${length} must be positive`);
  const args = { axis, length, inverse: ctx.params.inverse, onesided: ctx.params.onesided };
  return backTo(dftCore(x, args), x);
}

// ---------------------------------------------------------------------------------------------
// STFT

/** Frames of a [batch, length, c] signal: [batch, frames, frameLength, c] (a gather of start + k). */
function frames(x: mx.Array, step: number, frameLength: number): mx.Array {
  const count = 1 + Math.floor((x.shape[1] - frameLength) / step);
  if (count < 1) throw new RangeError(`signal of length ${x.shape[1]} is shorter than a frame (${frameLength})`);
  checkHostElements(count * frameLength, `the frame table of ${count} frames of ${frameLength}`);
  const idx = new Int32Array(count * frameLength);
  for (let f = 0; f < count; f++) for (let k = 0; k < frameLength; k++) idx[f * frameLength + k] = f * step + k;
  const taken = mx.take(x, mx.array(idx, { shape: [count * frameLength], dtype: 'int32' }), 1);
  return mx.reshape(taken, [x.shape[0], count, frameLength, x.shape[2]]);
}

function stft(ctx: OpContext<boolean>): mx.Array {
  const x = ctx.input(0);
  if (x.ndim !== 3) throw new RangeError(`${ctx.where}: signal must be [batch, length, 1|2], got rank ${x.ndim}`);
  const step = scalarInput(ctx, 1)!;
  if (!(step >= 1)) throw new RangeError(`${ctx.where}: frame_step ${step} must be positive`);
  if (!Number.isInteger(step)) throw new RangeError(`${ctx.where}: frame_step ${step} must be an integer`);
  const window = ctx.optional(2);
  if (window && window.ndim !== 1) throw new RangeError(`${ctx.where}: the window must be 1-D, got [${window.shape.join(', ')}]`);
  const frameLength = window?.shape[0] ?? scalarInput(ctx, 3) ?? x.shape[1];
  if (!Number.isInteger(frameLength) || frameLength < 1)
    throw new RangeError(`${ctx.where}: frame_length ${frameLength} must be a positive integer`);
  const given = scalarInput(ctx, 3);
  if (window && given !== undefined && given !== frameLength)
    throw new RangeError(`${ctx.where}: frame_length ${given} differs from the window's length ${frameLength}`);
  let framed = frames(x.dtype === 'float32' ? x : mx.astype(x, 'float32'), step, frameLength);
  if (window) framed = mx.multiply(framed, mx.reshape(mx.astype(window, 'float32'), [1, 1, frameLength, 1]));
  const onesided = ctx.params;
  return backTo(dftCore(framed, { axis: 2, length: frameLength, inverse: false, onesided }), x);
}

// ---------------------------------------------------------------------------------------------
// Windows and the mel filter bank: small, data-dependent sizes, computed on the host

/** A host tensor of `output_datatype` (default float) from float64 values; device cast for the rest. */
function emit(values: Float64Array, dims: number[], to: number, where: string): HostTensor | mx.Array {
  if (to === OnnxDataType.DOUBLE) return { dtype: to, dims, data: values };
  if (to === OnnxDataType.FLOAT) return { dtype: to, dims, data: Float32Array.from(values) };
  if (to === OnnxDataType.INT32 || to === OnnxDataType.INT64) return hostOf(to, Array.from(values), dims);
  return mx.astype(mx.array(Float32Array.from(values), { shape: dims, dtype: 'float32' }), mxType(to, where));
}

/** output_datatype of the windows and the mel matrix. */
const outputTypeOf = (attrs: Attrs): number => attrs.int('output_datatype', OnnxDataType.FLOAT);

interface WindowParams {
  periodic: boolean;
  outputType: number;
}

const parseWindow = (attrs: Attrs): WindowParams => ({ periodic: attrs.int('periodic', 1) !== 0, outputType: outputTypeOf(attrs) });

/** Generalised cosine window: sum_k (-1)^k a_k cos(2 pi k n / N), N = size (periodic) or size - 1. */
function cosineWindow(coeffs: readonly number[]) {
  return (ctx: OpContext<WindowParams>): OpResult[] => {
    const sizes = optionalNumbers(ctx, 0) ?? [];
    if (sizes.length !== 1) throw new RangeError(`size must be a scalar, got ${sizes.length} values`);
    const size = sizes[0];
    if (!Number.isInteger(size) || size < 0) throw new RangeError(`${ctx.where}: size ${size} must be a non-negative integer`);
    checkHostElements(size, `a window of size ${size}`);
    const N = ctx.params.periodic ? size : size - 1;
    const w = new Float64Array(size);
    for (let n = 0; n < size; n++) {
      let v = 0;
      coeffs.forEach((a, k) => {
        v += (k % 2 ? -a : a) * Math.cos((2 * Math.PI * k * n) / N);
      });
      w[n] = N === 0 ? 1 : v;
    }
    return [emit(w, [size], ctx.params.outputType, ctx.where)];
  };
}

/** Triangular filters between mel-spaced points, rounded to DFT bins as the reference does. */
function melWeightMatrix(ctx: OpContext<number>): OpResult[] {
  const [bins, dftLength, rate, lo, hi] = [0, 1, 2, 3, 4].map((i) => scalarInput(ctx, i)!);
  if (!Number.isInteger(bins) || bins < 0) throw new RangeError(`num_mel_bins ${bins} must be a non-negative integer`);
  if (!Number.isInteger(dftLength) || dftLength < 1) throw new RangeError(`dft_length ${dftLength} must be a positive integer`);
  if (!(rate > 0)) throw new RangeError(`sample_rate ${rate} must be positive`);
  if (!(lo >= 0 && hi >= lo && Number.isFinite(hi)))
    throw new RangeError(`the edges ${lo}..${hi} Hz must satisfy 0 <= lower <= upper and be finite`);
  const spectrum = Math.floor(dftLength / 2) + 1;
  checkHostElements(spectrum * (bins + 2), `a [${spectrum}, ${bins}] filter bank`);
  const mel = (hz: number) => 2595 * Math.log10(1 + hz / 700);
  const lowMel = mel(lo);
  const step = (mel(hi) - lowMel) / (bins + 2);
  const points = Array.from({ length: bins + 2 }, (_, i) => {
    const hz = 700 * (10 ** ((i * step + lowMel) / 2595) - 1);
    return Math.trunc(Math.floor(((dftLength + 1) * hz) / rate));
  });
  const out = new Float64Array(spectrum * bins);
  const put = (j: number, i: number, v: number) => {
    if (j >= 0 && j < spectrum) out[j * bins + i] = v;
  };
  for (let i = 0; i < bins; i++) {
    const [left, center, right] = [points[i], points[i + 1], points[i + 2]];
    // Only bins inside the spectrum are written: the loops stay within it whatever the edges.
    const [from, to] = [(a: number) => Math.max(a, 0), (b: number) => Math.min(b, spectrum - 1)];
    if (center === left) put(center, i, 1);
    else for (let j = from(left); j <= to(center); j++) put(j, i, (j - left) / (center - left));
    for (let j = from(center); j <= to(right - 1); j++) put(j, i, (right - j) / (right - center));
  }
  return [emit(out, [spectrum, bins], ctx.params, ctx.where)];
}

export const signalOps: OpEntry[] = [
  onnxOp('DFT', 17, {
    parse: parseDft,
    check: checkSignal,
    run: (ctx) => [named(ctx, () => dft(ctx))],
    note: 'float64 and float16 are transformed in float32 (MLX has no complex128)',
  }),
  onnxOp('STFT', 17, { parse: (attrs) => attrs.int('onesided', 1) !== 0, check: checkSignal, run: (ctx) => [named(ctx, () => stft(ctx))] }),
  onnxOp('HannWindow', 17, { parse: parseWindow, run: cosineWindow([0.5, 0.5]) }),
  onnxOp('HammingWindow', 17, { parse: parseWindow, run: cosineWindow([25 / 46, 21 / 46]) }),
  onnxOp('BlackmanWindow', 17, { parse: parseWindow, run: cosineWindow([0.42, 0.5, 0.08]) }),
  onnxOp('MelWeightMatrix', 17, { parse: outputTypeOf, run: melWeightMatrix }),
];
