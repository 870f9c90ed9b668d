// ai.onnx.preview.training optimizers (opset 1): Momentum, Adagrad, Adam. Each node updates n
// tensors at once: inputs R (learning rate), T (step count), then n X's, n G's and n (or 2n) state
// tensors; outputs the n new X's, then the new states, in the same grouping.
// T > 0 decisions (bias correction, first-step momentum) are mx.where on the device, so a training
// step does not have to read T back to the host.
import * as mx from '@mlx/core';
import type { Attrs } from '../../registry/attrs.js';
import type { CheckContext, OpContext, OpEntry } from '../../registry/types.js';
import { trainingOp } from '../../registry/op.js';

/** Scalars R and T in X's dtype, and whether T > 0. */
function step(ctx: OpContext, x: mx.Array): { r: mx.Array; t: mx.Array; started: mx.Array } {
  const t = mx.astype(mx.reshape(ctx.input(1), []), x.dtype);
  return { r: mx.astype(mx.reshape(ctx.input(0), []), x.dtype), t, started: mx.greater(t, 0) };
}

/** g + λ·x: the gradient of the loss plus that of the L2 regularizer. */
const regularized = (g: mx.Array, x: mx.Array, norm: number): mx.Array => (norm ? mx.add(mx.multiply(x, norm), g) : g);

function groups<P>(ctx: CheckContext<P>, states: number): string | undefined {
  const rest = ctx.node.inputs.length - 2;
  const n = rest / (2 + states);
  if (!Number.isInteger(n) || n < 1)
    return `expects R, T and ${2 + states} inputs per optimized tensor, got ${ctx.node.inputs.length} inputs`;
  if (ctx.node.outputs.length !== n * (1 + states))
    return `expects ${n * (1 + states)} outputs for ${n} tensors, got ${ctx.node.outputs.length}`;
  return undefined;
}

/** Applies `update` to each of the n tensor groups and lays the results out as the op's outputs. */
function perTensor(ctx: OpContext, states: number, update: (x: mx.Array, g: mx.Array, s: mx.Array[]) => mx.Array[]): mx.Array[] {
  const n = (ctx.inputCount - 2) / (2 + states);
  const out: mx.Array[][] = Array.from({ length: 1 + states }, () => []);
  for (let i = 0; i < n; i++) {
    const s = Array.from({ length: states }, (_, k) => ctx.input(2 + (2 + k) * n + i));
    update(ctx.input(2 + i), ctx.input(2 + n + i), s).forEach((r, k) => out[k].push(r));
  }
  return out.flat();
}

interface MomentumParams {
  alpha: number;
  beta: number;
  norm: number;
  nesterov: boolean;
}

function parseMomentum(attrs: Attrs): MomentumParams {
  const mode = attrs.string('mode');
  if (mode !== 'standard' && mode !== 'nesterov') throw new RangeError(`mode '${mode}' is not one of standard, nesterov`);
  return { alpha: attrs.float('alpha'), beta: attrs.float('beta'), norm: attrs.float('norm_coefficient'), nesterov: mode === 'nesterov' };
}

function momentum(ctx: OpContext<MomentumParams>): mx.Array[] {
  const { alpha, beta, norm, nesterov } = ctx.params;
  return perTensor(ctx, 1, (x, g, [v]) => {
    const { r, started } = step(ctx, x);
    const gr = regularized(g, x, norm);
    // The gradient's coefficient is 1 on the first step (T = 0), beta afterwards.
    const b = mx.where(started, mx.scalar(beta, x.dtype), mx.scalar(1, x.dtype));
    const vNew = mx.add(mx.multiply(v, alpha), mx.multiply(b, gr));
    const dir = nesterov ? mx.add(gr, mx.multiply(vNew, alpha)) : vNew;
    return [mx.subtract(x, mx.multiply(r, dir)), vNew];
  });
}

interface AdagradParams {
  decay: number;
  eps: number;
  norm: number;
}

const parseAdagrad = (attrs: Attrs): AdagradParams => ({
  decay: attrs.float('decay_factor', 0),
  eps: attrs.float('epsilon', 0),
  norm: attrs.float('norm_coefficient', 0),
});

function adagrad(ctx: OpContext<AdagradParams>): mx.Array[] {
  const { decay, eps, norm } = ctx.params;
  return perTensor(ctx, 1, (x, g, [h]) => {
    const { r, t } = step(ctx, x);
    const rate = mx.divide(r, mx.add(mx.multiply(t, decay), 1));
    const gr = regularized(g, x, norm);
    const hNew = mx.add(h, mx.square(gr));
    return [mx.subtract(x, mx.divide(mx.multiply(rate, gr), mx.add(mx.sqrt(hNew), eps))), hNew];
  });
}

interface AdamParams {
  alpha: number;
  beta: number;
  eps: number;
  norm: number;
  post: number;
}

const parseAdam = (attrs: Attrs): AdamParams => ({
  alpha: attrs.float('alpha', 0.9),
  beta: attrs.float('beta', 0.999),
  eps: attrs.float('epsilon', 0),
  norm: attrs.float('norm_coefficient', 0),
  post: attrs.float('norm_coefficient_post', 0),
});

function adam(ctx: OpContext<AdamParams>): mx.Array[] {
  const { alpha, beta, eps, norm, post } = ctx.params;
  return perTensor(ctx, 2, (x, g, [v, h]) => {
    const { r, t, started } = step(ctx, x);
    const gr = regularized(g, x, norm);
    const vNew = mx.add(mx.multiply(v, alpha), mx.multiply(gr, 1 - alpha));
    const hNew = mx.add(mx.multiply(h, beta), mx.multiply(mx.square(gr), 1 - beta));
    // Bias correction r·sqrt(1 − βᵗ)/(1 − αᵗ) from the first counted step on (T > 0).
    const a = mx.scalar(alpha, x.dtype),
      b = mx.scalar(beta, x.dtype);
    const corrected = mx.divide(mx.multiply(r, mx.sqrt(mx.subtract(1, mx.power(b, t)))), mx.subtract(1, mx.power(a, t)));
    const rate = mx.where(started, corrected, r);
    const xNew = mx.subtract(x, mx.multiply(rate, mx.divide(vNew, mx.add(mx.sqrt(hNew), eps))));
    return [post ? mx.multiply(xNew, 1 - post) : xNew, vNew, hNew];
  });
}

export const trainingOps: OpEntry[] = [
  trainingOp('Momentum', 1, { parse: parseMomentum, check: (ctx) => groups(ctx, 1), run: momentum }),
  trainingOp('Adagrad', 1, { parse: parseAdagrad, check: (ctx) => groups(ctx, 1), run: adagrad }),
  trainingOp('Adam', 1, { parse: parseAdam, check: (ctx) => groups(ctx, 2), run: adam }),
];
