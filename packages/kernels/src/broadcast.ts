// broadcastAdjoint: the VJP of broadcasting. When an operand of shape `shape` was broadcast to the
// shape of `grad`, its cotangent is `grad` summed over the dimensions that broadcasting created
// (leading ones) or stretched (size-1 ones).
import { broadcastTo, reshape, sum, type Array } from '@mlx/core';
import { defineCustomVjp } from './custom-vjp.js';

/** The axes of `gradShape` that broadcasting `shape` to it created or stretched. */
export function broadcastAxes(shape: readonly number[], gradShape: readonly number[]): number[] {
  const extra = gradShape.length - shape.length;
  if (extra < 0) throw new RangeError(`cannot reduce a gradient of shape [${gradShape}] to the larger rank of [${shape}]`);
  const axes: number[] = [];
  for (let i = 0; i < extra; i++) axes.push(i);
  for (let i = 0; i < shape.length; i++) {
    const g = gradShape[extra + i];
    if (shape[i] === g) continue;
    if (shape[i] !== 1) throw new RangeError(`shape [${shape}] does not broadcast to [${gradShape}] (dimension ${i}: ${shape[i]} vs ${g})`);
    axes.push(extra + i);
  }
  return axes;
}

/** Sums `grad` back to `shape`, with no custom VJP (used inside other kernels' backward passes). */
export function reduceToShape(grad: Array, shape: readonly number[]): Array {
  const axes = broadcastAxes(shape, grad.shape);
  if (axes.length === 0) return reshape(grad, shape);
  using summed = sum(grad, axes, { keepdims: true });
  return reshape(summed, shape);
}

const broadcastAdjointOp = defineCustomVjp<{ shape: readonly number[] }>(
  ([grad], { shape }) => [reduceToShape(grad, shape)],
  // The adjoint of a sum over broadcast axes is the broadcast itself.
  ([grad], [cot]) => [broadcastTo(cot, grad.shape)],
);

/**
 * Sums a gradient back to the shape an operand was broadcast from: `broadcastAdjoint(g, [1, 4])`
 * for a `[3, 5, 4]` gradient sums over axes 0 and 1 and returns shape `[1, 4]`.
 * Differentiable (its VJP broadcasts the cotangent back to `grad.shape`).
 */
export function broadcastAdjoint(grad: Array, shape: readonly number[]): Array {
  return broadcastAdjointOp([grad], { shape: [...shape] })[0];
}
