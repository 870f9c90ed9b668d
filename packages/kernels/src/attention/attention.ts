// scaledDotProductAttention: the public forward, registered with its own pullback as MLX's custom
// VJP, so that vjp / valueAndGrad of any function that calls it run attentionVjp's strategies.
import { defaultStream, zerosLike, type Array } from '@mlx/core';
import { defineCustomVjp } from '../custom-vjp.js';
import {
  attentionConfig,
  DEFAULT_WORKSPACE_BYTES,
  type AttentionConfig,
  type AttentionImplementation,
  type AttentionOptions,
  type AttentionVjpStrategy,
} from './config.js';
import { attentionComposite, attentionFused, attentionNativeCpu, fusedSupports, nativeCpuSupports } from './forward.js';
import { attentionVjpResolved } from './vjp.js';

interface AttentionOpConfig extends AttentionConfig {
  implementation: AttentionImplementation;
  strategy: AttentionVjpStrategy;
  workspaceBytes: number;
}

function forward(q: Array, k: Array, v: Array, mask: Array | null, c: AttentionOpConfig): Array {
  // On the CPU MLX's fused op is itself a composition whose softmax evaluates exp one float at a
  // time: float32 takes the native kernel (one primitive, its scores kept in cache; for one query
  // row too, where it measured twice as fast as attentionFewRows' three primitives), else the
  // composite (OpenBLAS products around the project's fused softmax row kernel).
  if (c.implementation === 'auto' && nativeCpuSupports(q, k, v, c)) return attentionNativeCpu(q, k, v, mask, c);
  const cpuComposite = c.implementation === 'auto' && q.dtype === 'float32' && defaultStream().device.type === 'cpu';
  const fused = c.implementation === 'fused' || (c.implementation === 'auto' && !cpuComposite && fusedSupports(c, q.dtype));
  return fused ? attentionFused(q, k, v, mask, c) : attentionComposite(q, k, v, mask, c);
}

const attentionOp = defineCustomVjp<AttentionOpConfig>(
  ([q, k, v, mask], c) => [forward(q, k, v, mask ?? null, c)],
  ([q, k, v, mask], [gradOut], [out], c) => {
    const { dq, dk, dv, dmask } = attentionVjpResolved({ q, k, v, out, gradOut, mask }, c, {
      strategy: c.strategy,
      workspaceBytes: c.workspaceBytes,
    });
    // A boolean mask has no gradient; an additive one gets the masked scores' (dmask).
    return mask ? [dq, dk, dv, dmask ?? zerosLike(mask)] : [dq, dk, dv];
  },
);

/**
 * Attention over q [b, hq, sq, d], k [b, hk, sk, d], v [b, hk, sk, dv] → [b, hq, sq, dv], with
 * grouped-query heads (hq a multiple of hk), scale, causal masking, boolean or additive masks
 * (shorter than sk: padded with −∞), softcap; rows with no visible key give zeros. See
 * AttentionOptions. Differentiable: its VJP is attentionVjp (strategy from options.vjp), with
 * respect to q, k, v and an additive mask.
 */
export function scaledDotProductAttention(q: Array, k: Array, v: Array, options: AttentionOptions = {}): Array {
  const config: AttentionOpConfig = {
    ...attentionConfig(options),
    implementation: options.implementation ?? 'auto',
    strategy: options.vjp?.strategy ?? 'auto',
    workspaceBytes: options.vjp?.workspaceBytes ?? DEFAULT_WORKSPACE_BYTES,
  };
  const mask = options.mask ?? null;
  return attentionOp(mask ? [q, k, v, mask] : [q, k, v], config)[0];
}
