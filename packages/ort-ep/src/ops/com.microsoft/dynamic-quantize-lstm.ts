// com.microsoft DynamicQuantizeLSTM: an LSTM (ops/rnn.ts's recurrence) whose W [dirs, input, 4H]
// and R [dirs, H, 4H] are 8-bit, with scales and zero points per direction or per gate column.
// As onnxruntime's kernel does, each product quantizes its float operand to uint8 from its own
// range first: the inputs of every step at once, the hidden state at each step and batch row; the
// integer products are exact and scaled back to float. sequence_lens must be the full length.
import * as mx from '@mlx/core';
import type { OpContext, OpEntry, OpResult } from '../../registry/types.js';
import { msOp } from '../../registry/op.js';
import { exactIntMatmul, type IntOperand, intOperand, zeroPointBound } from '../helpers/quant-math.js';
import { hostNumbers } from '../helpers/util.js';
import { lstmFamily, parseRnn, runLayer, type LayerWeights, type RnnParams } from '../rnn.js';
import { dynamicQuantizeU8 } from './quant-matmul.js';

const dirRow = (a: mx.Array, d: number) =>
  mx.squeeze(
    mx.slice(
      a,
      [d, ...a.shape.slice(1).map(() => 0)],
      [d + 1, ...a.shape.slice(1)],
      a.shape.map(() => 1),
    ),
    0,
  );

interface QuantWeight {
  /** The direction's matrix [K, 4H] minus its zero point, as float32 with its bounds. */
  b: IntOperand;
  /** The float scale, [] or [4H]. */
  scale: mx.Array;
}

/**
 * One direction's 8-bit matrix minus its zero point and its float scale: made once per session
 * for constant weights, the bounds of the exact product from the data.
 */
function weightOf(ctx: OpContext<RnnParams>, wi: number, si: number, zi: number, d: number, cols: number): QuantWeight {
  return ctx.prepared([wi, si, zi], `input ${wi} direction ${d}`, () => {
    const w = ctx.input(wi);
    const scale = ctx.input(si);
    const zp = ctx.input(zi);
    for (const [name, t] of [
      ['scale', scale],
      ['zero point', zp],
    ] as const)
      if (!(t.ndim === 1 || (t.ndim === 2 && t.shape[1] === cols)) || t.shape[0] !== w.shape[0])
        throw new RangeError(
          `${ctx.where}: a ${name} of shape [${t.shape.join(', ')}] is neither [${w.shape[0]}] nor [${w.shape[0]}, ${cols}]`,
        );
    const s = mx.astype(scale.ndim === 1 ? mx.reshape(dirRow(mx.reshape(scale, [scale.shape[0], 1]), d), []) : dirRow(scale, d), 'float32');
    const z = zp.ndim === 1 ? mx.reshape(dirRow(mx.reshape(zp, [zp.shape[0], 1]), d), []) : dirRow(zp, d);
    const centred = mx.subtract(mx.astype(dirRow(w, d), 'int32'), mx.astype(z, 'int32'));
    const terms = centred.shape[0];
    return { b: intOperand(centred, mx.astype(centred, 'float32'), [0], zeroPointBound(ctx.elemType(wi)), terms), scale: s };
  });
}

/** float x [..., K] · (8-bit W) -> float [..., 4H]. */
function quantizedProduct(x: mx.Array, w: QuantWeight, perRow = false): mx.Array {
  const shape = x.shape;
  const rows = mx.reshape(x, [-1, shape[shape.length - 1]]);
  const q = dynamicQuantizeU8(rows, perRow);
  const y = mx.multiply(mx.astype(exactIntMatmul(q.centred, w.b, 255), 'float32'), mx.multiply(q.scale, w.scale));
  return mx.reshape(y, [...shape.slice(0, -1), y.shape[1]]);
}

function dynamicQuantizeLstm(ctx: OpContext<RnnParams>): OpResult[] {
  // With sequence_lens onnxruntime walks the batch row by row, each row with its own quantization
  // ranges: reproduced for one row at full length only.
  if (ctx.has(4)) {
    const seq = ctx.shape(0)[ctx.params.layout === 1 ? 1 : 0];
    const lens = hostNumbers(ctx.host(4));
    const short = lens.find((n) => n !== seq);
    if (short !== undefined)
      throw new RangeError(
        `${ctx.where}: a sequence length of ${short} (the input has ${seq} steps) is not supported; lengths must be the full sequence`,
      );
    if (lens.length > 1)
      throw new RangeError(`${ctx.where}: sequence_lens with a batch of ${lens.length} is not supported (omit it for full-length batches)`);
  }
  const r = ctx.shape(2);
  const H = ctx.params.hidden ?? r[1];
  const weights: LayerWeights = {
    hidden: H,
    project: (x, d) => quantizedProduct(x, weightOf(ctx, 1, 8, 9, d, 4 * H)),
    recurrent: (d) => {
      const w = weightOf(ctx, 2, 10, 11, d, 4 * H);
      return (h) => quantizedProduct(h, w, true);
    },
  };
  return runLayer(lstmFamily, ctx, weights);
}

export const dynamicQuantizeLstmOps: OpEntry[] = [
  msOp('DynamicQuantizeLSTM', 1, {
    parse: (attrs, opset) => parseRnn(lstmFamily, attrs, opset),
    // sequence_lens that may be ragged or cover several rows: onnxruntime's row-by-row quantization
    // is not reproduced, so such a node falls back (a constant single full-length row stays).
    check: (ctx) => {
      if (!ctx.node.inputs[4]) return undefined;
      const lens = ctx.constantInput(4);
      if (lens && lens.dims.reduce((a, b) => a * b, 1) <= 1) return undefined;
      return lens
        ? 'sequence_lens covers several batch rows: onnxruntime quantizes each row on its own, which MLX does not reproduce'
        : 'sequence_lens is only known when the graph runs (it may be ragged or cover several rows, which onnxruntime quantizes row by row and MLX does not reproduce)';
    },
    run: dynamicQuantizeLstm,
    note: 'sequence_lens only as a constant single full-length row (other sequence_lens fall back); the hidden state is quantized per batch row (onnxruntime groups rows by thread beyond two)',
  }),
];
