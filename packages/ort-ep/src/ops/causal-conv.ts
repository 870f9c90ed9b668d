// CausalConvWithState (ai.onnx 27, and onnxruntime's com.microsoft op of the same contract): the
// depthwise causal conv1d of gated linear-attention layers (Qwen3.5, Mamba-style blocks), with its
// rolling state. input [B, C, L], weight [C, 1, K], bias [C]?, past_state [B, C, K-1]? (zeros
// when absent): padded = past_state ++ input along time, output[b, c, t] = Σ_k w[c, k] ·
// padded[b, c, t + k] (+ bias), then the activation (silu/swish, computed in float32); the present
// state is the last K-1 columns of padded.
import * as mx from '@mlx/core';
import { silu } from '@mlx/kernels';
import type { Attrs } from '../registry/attrs.js';
import type { OpContext, OpEntry, OpResult } from '../registry/types.js';
import { msOp, onnxOp } from '../registry/op.js';

type Activation = 'none' | 'silu';

function parseActivation(attrs: Attrs): Activation {
  const a = attrs.string('activation', 'none').toLowerCase();
  if (a === 'silu' || a === 'swish') return 'silu';
  if (a === 'none' || a === '') return 'none';
  throw new RangeError(`CausalConvWithState activation '${a}' is not silu, swish or none`);
}

function causalConv(ctx: OpContext<Activation>): OpResult[] {
  const x = ctx.input(0);
  const w = ctx.input(1);
  if (x.ndim !== 3 || w.ndim !== 3) throw new RangeError(`${ctx.where}: input must be [B, C, L] and weight [C, 1, K]`);
  const [B, C, L] = x.shape;
  const K = w.shape[2];
  if (w.shape[0] !== C || w.shape[1] !== 1)
    throw new RangeError(`${ctx.where}: weight of shape [${w.shape.join(', ')}] is not [${C}, 1, K]`);
  const past = ctx.optional(3);
  if (past && (past.ndim !== 3 || past.shape[0] !== B || past.shape[1] !== C || past.shape[2] !== K - 1))
    throw new RangeError(`${ctx.where}: past_state of shape [${past.shape.join(', ')}] is not [${B}, ${C}, ${K - 1}]`);
  const state = past ?? mx.zeros([B, C, K - 1], x.dtype);
  const padded = K > 1 ? mx.concatenate([state, x], 2) : x;
  const wf = mx.astype(mx.reshape(w, [1, C, K]), 'float32');
  const pf = mx.astype(padded, 'float32');
  let y: mx.Array | undefined;
  for (let k = 0; k < K; k++) {
    const window = mx.slice(pf, [0, 0, k], [B, C, k + L], [1, 1, 1]);
    const term = mx.multiply(window, mx.slice(wf, [0, 0, k], [1, C, k + 1], [1, 1, 1]));
    y = y ? mx.add(y, term) : term;
  }
  let out = y ?? mx.zeros([B, C, L], 'float32');
  const bias = ctx.optional(2);
  if (bias) out = mx.add(out, mx.reshape(mx.astype(bias, 'float32'), [1, C, 1]));
  if (ctx.params === 'silu') out = silu(out);
  const present = ctx.wants(1) ? mx.slice(padded, [0, 0, L], [B, C, L + K - 1], [1, 1, 1]) : undefined;
  return [mx.astype(out, x.dtype), present];
}

export const causalConvOps: OpEntry[] = [
  onnxOp('CausalConvWithState', 27, { parse: parseActivation, run: causalConv }),
  msOp('CausalConvWithState', 1, { parse: parseActivation, run: causalConv }),
];
