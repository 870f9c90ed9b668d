// ai.onnx.preview.training optimizers (opset 1): Momentum, Adagrad, Adam. Each node updates n
// tensors at once: inputs R (learning rate), T (step count), then n X's, n G's and n (or 2n) state
// tensors; outputs the n new X's, then the new states, in the same grouping.
// T > 0 decisions (bias correction, first-step momentum) are mx.where on the device, so a training
// step does not have to read T back to the host.
import * as mx from '@mlx/core';
import type { CheckContext, OpContext, OpEntry } from '../../registry/types.js';
import { trainingOp } from '../../registry/op.js';

/** Scalars R and T in X's dtype, and whether T > 0. */
function step(ctx: OpContext, x: mx.Array): { r: mx.Array; t: mx.Array; started: mx.Array } {
  const t = mx.astype(mx.reshape(ctx.input(1), []), x.dtype);
  return { r: mx.astype(mx.reshape(ctx.input(0), []), x.dtype), t, started: mx.greater(t, 0) };
}

/** g + λ·x: the gradient of the loss plus that of the L2 regularizer. */
const regularized = (g: mx.Array, x: mx.Array, norm: number): mx.Array => (norm ? mx.add(mx.multiply(x, norm), g) : g);

function groups(ctx: CheckContext, states: number): string | undefined {
  const rest = ctx.node.inputs.length - 2;
  const n = rest / (2 + states);
  if (!Number.isInteger(n) || n < 1) return `expects R, T and ${2 + states} inputs per optimized tensor, got ${ctx.node.inputs.length} inputs`;
  if (ctx.node.outputs.length !== n * (1 + states)) return `expects ${n * (1 + states)} outputs for ${n} tensors, got ${ctx.node.outputs.length}`;
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

function momentum(ctx: OpContext): mx.Array[] {
  const alpha = ctx.attrs.float('alpha'), beta = ctx.attrs.float('beta'), norm = ctx.attrs.float('norm_coefficient');
  const nesterov = ctx.attrs.string('mode') === 'nesterov';
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

function adagrad(ctx: OpContext): mx.Array[] {
  const decay = ctx.attrs.float('decay_factor', 0), eps = ctx.attrs.float('epsilon', 0), norm = ctx.attrs.float('norm_coefficient', 0);
  return perTensor(ctx, 1, (x, g, [h]) => {
    const { r, t } = step(ctx, x);
    const rate = mx.divide(r, mx.add(mx.multiply(t, decay), 1));
    const gr = regularized(g, x, norm);
    const hNew = mx.add(h, mx.square(gr));
    return [mx.subtract(x, mx.divide(mx.multiply(rate, gr), mx.add(mx.sqrt(hNew), eps))), hNew];
  });
}

function adam(ctx: OpContext): mx.Array[] {
  const alpha = ctx.attrs.float('alpha', 0.9), beta = ctx.attrs.float('beta', 0.999), eps = ctx.attrs.float('epsilon', 0);
  const norm = ctx.attrs.float('norm_coefficient', 0), post = ctx.attrs.float('norm_coefficient_post', 0);
  return perTensor(ctx, 2, (x, g, [v, h]) => {
    const { r, t, started } = step(ctx, x);
    const gr = regularized(g, x, norm);
    const vNew = mx.add(mx.multiply(v, alpha), mx.multiply(gr, 1 - alpha));
    const hNew = mx.add(mx.multiply(h, beta), mx.multiply(mx.square(gr), 1 - beta));
    // Bias correction r·sqrt(1 − βᵗ)/(1 − αᵗ) from the first counted step on (T > 0).
    const a = mx.scalar(alpha, x.dtype), b = mx.scalar(beta, x.dtype);
    const corrected = mx.divide(mx.multiply(r, mx.sqrt(mx.subtract(1, mx.power(b, t)))), mx.subtract(1, mx.power(a, t)));
    const rate = mx.where(started, corrected, r);
    const xNew = mx.subtract(x, mx.multiply(rate, mx.divide(vNew, mx.add(mx.sqrt(hNew), eps))));
    return [post ? mx.multiply(xNew, 1 - post) : xNew, vNew, hNew];
  });
}

function checkMomentum(ctx: CheckContext): string | undefined {
  const mode = ctx.attrs.string('mode');
  if (mode !== 'standard' && mode !== 'nesterov') return `mode '${mode}' is not one of standard, nesterov`;
  return groups(ctx, 1);
}

export const trainingOps: OpEntry[] = [
  trainingOp('Momentum', 1, { check: checkMomentum, run: momentum }),
  trainingOp('Adagrad', 1, { check: (ctx) => groups(ctx, 1), run: adagrad }),
  trainingOp('Adam', 1, { check: (ctx) => groups(ctx, 2), run: adam }),
];
