// Layer normalisation and RMS normalisation over trailing axes, shared by ONNX's
// LayerNormalization (every opset) and onnxruntime's fused and simplified norms: MLX's fused
// kernels where the shapes fit and no statistics are wanted, else the statistics spelled out.
import * as mx from '@mlx/core';

/** float16/bfloat16 widen to float32 for statistics (ONNX's stash_type 1); float32/float64 stay. */
export const stash = (x: mx.Array): mx.Array => (x.dtype === 'float16' || x.dtype === 'bfloat16' ? mx.astype(x, 'float32') : x);

export interface NormSpec {
  axis: number;
  eps: number;
  /** RMSNorm: no mean subtraction and no beta. */
  simplified: boolean;
  /** Statistics in float32 for half inputs (stash_type 1, and onnxruntime's fused ops always). */
  stashFloat: boolean;
  /** Whether the Mean / InvStdDev outputs are wanted (forces the unfused path). */
  stats: boolean;
}

export interface NormOut {
  y: mx.Array;
  mean?: mx.Array;
  invStd: mx.Array | undefined;
}

/** Normalises over axes [axis, rank), then scales by gamma and shifts by beta. */
export function normalize(x: mx.Array, gamma: mx.Array, beta: mx.Array | undefined, spec: NormSpec): NormOut {
  const r = x.ndim;
  const last = r - 1;
  const fused =
    !spec.stats &&
    spec.axis === last &&
    gamma.ndim === 1 &&
    gamma.shape[0] === x.shape[last] &&
    (!beta || (beta.ndim === 1 && beta.shape[0] === x.shape[last]));
  if (fused) {
    // The fused CPU kernels for float32 on the CPU, else MLX's fast norms (both accumulate in float32).
    const y = spec.simplified ? mx.ext.fusedRmsNorm(x, gamma, spec.eps) : mx.ext.fusedLayerNorm(x, gamma, beta ?? null, spec.eps);
    return { y, invStd: undefined };
  }
  const xs = spec.stashFloat ? stash(x) : x;
  const axes = Array.from({ length: r - spec.axis }, (_, i) => spec.axis + i);
  let y: mx.Array;
  let mean: mx.Array | undefined;
  let invStd: mx.Array;
  if (spec.simplified) {
    invStd = mx.rsqrt(mx.add(mx.mean(mx.square(xs), axes, { keepdims: true }), spec.eps));
    y = mx.multiply(mx.multiply(xs, invStd), gamma);
  } else {
    mean = mx.mean(xs, axes, { keepdims: true });
    const centered = mx.subtract(xs, mean);
    invStd = mx.rsqrt(mx.add(mx.mean(mx.square(centered), axes, { keepdims: true }), spec.eps));
    y = mx.multiply(mx.multiply(centered, invStd), gamma);
    if (beta) y = mx.add(y, beta);
  }
  return { y: mx.astype(y, x.dtype), mean, invStd };
}
