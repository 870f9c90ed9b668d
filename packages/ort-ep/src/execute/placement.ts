// The one placement rule: whether a node runs its host code or its MLX translation, from its
// entry's declaration (registry/types.ts, Placement) and what its inputs are right now.
import { elementCount, OnnxDataType } from '../onnx/index.js';
import type { OpEntry } from '../registry/types.js';
import { mxDtypeOf } from '../runtime/convert.js';
import { elemTypeOf } from '../runtime/value.js';
import type { NodeContext } from './context.js';

/**
 * Host execution is for shape math: the largest tensor, in elements, that a host twin takes as
 * an input or makes as a result. Larger data goes to MLX.
 */
export const HOST_LIMIT = 4096;

/** 'host' to call entry.host (which may still decline), 'device' for entry.run. */
export function placeNode(entry: OpEntry, ctx: NodeContext): 'host' | 'device' {
  if (entry.placement === 'host' || !entry.run) return 'host';
  if (!entry.host) return 'device';
  let allSmallHost = true;
  for (let i = 0; i < ctx.inputCount; i++) {
    const v = ctx.peek(i);
    if (v.kind === 'none') continue;
    // Element types MLX cannot hold (strings, float8, complex128, 2-bit) have only the host;
    // float8 codes a quantizer left on the device come back to it here.
    if ((v.kind === 'host' || v.kind === 'device') && !mxDtypeOf(elemTypeOf(v))) return 'host';
    // Counted from the dims: reading .data of a large constant would decode it.
    if (v.kind !== 'host' || elementCount(v.tensor.dims) > HOST_LIMIT) allSmallHost = false;
  }
  if (!allSmallHost) return 'device';
  if (entry.hostSize && entry.hostSize(ctx) > HOST_LIMIT) return 'device';
  return 'host';
}

/**
 * Whether a node computes in float64: an input of that type, or an attribute that asks for it
 * (Cast's `to`, the `dtype` of EyeLike and the random generators, ConstantOfShape's `value`). MLX's
 * GPU backends have no float64, so on a GPU session such a node runs on the session's CPU stream.
 */
export function computesInFloat64(ctx: NodeContext): boolean {
  for (let i = 0; i < ctx.inputCount; i++) {
    const v = ctx.peek(i);
    if (v.kind !== 'none' && elemTypeOf(v) === OnnxDataType.DOUBLE) return true;
  }
  const a = ctx.attrs;
  if (a.has('to') && a.int('to') === OnnxDataType.DOUBLE) return true;
  if (a.has('dtype') && a.int('dtype') === OnnxDataType.DOUBLE) return true;
  return a.has('value') && a.tensor('value')?.dtype === OnnxDataType.DOUBLE;
}
