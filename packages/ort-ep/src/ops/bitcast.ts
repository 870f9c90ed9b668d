// BitCast (opset 26): the same bytes read as another element type of the same width.
import * as mx from '@mlx/core';
import { OnnxDataType, bitsPerElement, fromRawBytes, toRawBytes, type HostTensor } from '../onnx/index.js';
import type { CheckContext, OpContext, OpEntry } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { mxDtypeOf } from '../runtime/convert.js';
import { sizeOf } from './helpers/util.js';

// ---------------------------------------------------------------------------------------------
// BitCast: the same bytes (little endian, as the spec requires) read as another type of equal width.

/**
 * Types whose MLX dtype has their exact width and layout, so mx.view reinterprets them without a
 * host copy. int4/int2 are held unpacked (one per byte), float8 and complex128 have no dtype.
 */
const viewable = (t: number): boolean => {
  const d = mxDtypeOf(t);
  return !!d && (bitsPerElement(t) ?? 0) >= 8 && t !== OnnxDataType.COMPLEX64;
};

function checkBitCast(ctx: CheckContext<number>): string | undefined {
  const to = ctx.params;
  if (to === OnnxDataType.STRING) return 'BitCast to string is not defined';
  const toBits = bitsPerElement(to);
  if (toBits === undefined) return `BitCast to element type ${to} is not supported`;
  const from = ctx.inputType(0);
  if (from === undefined) return undefined;
  if (from === OnnxDataType.STRING) return 'BitCast from string is not defined';
  const fromBits = bitsPerElement(from);
  if (fromBits !== toBits) return `BitCast needs types of one width: element type ${from} has ${fromBits} bits, ${to} has ${toBits}`;
  return undefined;
}

/** Reinterprets on the host through the raw_data layout (sub-byte types packed, little endian). */
function bitCastHost(t: HostTensor, to: number, where: string): HostTensor {
  if (bitsPerElement(t.dtype) !== bitsPerElement(to)) throw new TypeError(`${where}: element types ${t.dtype} and ${to} differ in width`);
  const n = sizeOf(t.dims);
  let data = fromRawBytes(toRawBytes(t.dtype, t.data), to, n);
  // A bool is 0 or 1 everywhere downstream (MLX, onnxruntime-common); other bytes read as true.
  if (to === OnnxDataType.BOOL) data = Uint8Array.from(data as Uint8Array, (b) => (b ? 1 : 0));
  return { dtype: to, dims: [...t.dims], data };
}

function bitCast(ctx: OpContext<number>): [mx.Array | HostTensor] {
  const to = ctx.params;
  const from = ctx.elemType(0);
  const known = ctx.hostIfKnown(0);
  if (!known && viewable(from) && viewable(to) && from !== OnnxDataType.BOOL && to !== OnnxDataType.BOOL) {
    return [mx.view(ctx.input(0), mxDtypeOf(to)!)];
  }
  return [bitCastHost(ctx.host(0), to, ctx.where)];
}

const bitCastEntry = onnxOp('BitCast', 26, {
  parse: (attrs) => attrs.int('to'),
  check: checkBitCast,
  host: (ctx) => [bitCastHost(ctx.host(0), ctx.params, ctx.where)],
  run: bitCast,
  note: 'MLX views for types MLX holds at their width; a host copy for bool, int4/int2, float8/float4 and complex',
});

export const bitCastOps: OpEntry[] = [bitCastEntry];
