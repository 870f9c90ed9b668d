// A QuantizeLinear read only by a DequantizeLinear of the same per-tensor scale and zero point (the
// pair a QDQ model puts after every activation: small-cnn-qdq has eight) becomes one
// mlx.fused::FakeQuantize node: (clamp(round(x / scale) + zp, lo, hi) - zp) * scale in one pass
// (the native kernel on the CPU, MLX's ops elsewhere), the pair's own float32 steps in their
// order, where the two ops are about a dozen small MLX ops. Only per-tensor constant scales
// (float32) and zero points of integer types up to 16 bits; the quantized value must not be seen
// anywhere else (a graph output, another reader). Runs after dequantize-constants.
import { OnnxDataType, type HostTensor, type NodeIR } from '../../onnx/index.js';
import { qRange } from '../../ops/helpers/quant-math.js';
import { type GraphView, floatAttr, fusedNode, isDefaultDomain } from './view.js';

const intAttr = (n: NodeIR, k: string, dflt: number): number | undefined => {
  const a = n.attributes.get(k);
  if (!a) return dflt;
  return a.type === 'int' ? a.value : undefined;
};

/** A one-element float32 constant's value. */
function scaleOf(view: GraphView, name: string | undefined): number | undefined {
  const t = view.constant(name);
  return t && t.dtype === OnnxDataType.FLOAT && t.data instanceof Float32Array && t.data.length === 1 ? t.data[0] : undefined;
}

/** A one-element integer constant (the zero point): its type and value. */
function zeroPointOf(view: GraphView, name: string | undefined): { type: number; value: number } | undefined {
  const t: HostTensor | undefined = view.constant(name);
  if (t?.data.length !== 1 || typeof t.data[0] !== 'number') return undefined;
  return { type: t.dtype, value: t.data[0] };
}

export function fakeQuantizeRewrite(view: GraphView): void {
  for (const q of view.graph.nodes) {
    if (q.opType !== 'QuantizeLinear' || !isDefaultDomain(q) || view.isRemoved(q) || q.outputs.length !== 1 || !q.outputs[0]) continue;
    const d = view.soleReader(q.outputs[0]);
    if (d?.opType !== 'DequantizeLinear' || !isDefaultDomain(d) || view.isRemoved(d) || d.inputs[0] !== q.outputs[0]) continue;
    if (d.outputs.length !== 1 || !d.outputs[0]) continue;
    // Per tensor only (block_size 0; the axis is then unused), the division in the default type.
    if (intAttr(q, 'block_size', 0) !== 0 || intAttr(d, 'block_size', 0) !== 0 || intAttr(q, 'precision', 0) !== 0) continue;
    const scale = scaleOf(view, q.inputs[1]);
    if (scale === undefined || scaleOf(view, d.inputs[1]) !== scale) continue;
    // The quantized type: the zero point's, else output_dtype, else uint8 (zero point 0).
    const outType = intAttr(q, 'output_dtype', 0);
    const zq = q.inputs[2] ? zeroPointOf(view, q.inputs[2]) : { type: outType || OnnxDataType.UINT8, value: 0 };
    if (!zq || outType === undefined || (outType !== 0 && outType !== zq.type)) continue;
    const zd = d.inputs[2] ? zeroPointOf(view, d.inputs[2]) : { type: zq.type, value: 0 };
    if (!zd || zd.type !== zq.type || zd.value !== zq.value) continue;
    const range = qRange(zq.type);
    if (!range || zq.type === OnnxDataType.INT32) continue;
    // DequantizeLinear's result in the scale's type, float32.
    const dType = intAttr(d, 'output_dtype', 0);
    if (dType !== 0 && dType !== OnnxDataType.FLOAT) continue;
    view.replace(
      [q, d],
      fusedNode(view, 'FakeQuantize', q, [q.inputs[0]], [d.outputs[0]], {
        scale: floatAttr(scale),
        zero_point: floatAttr(zq.value),
        lo: floatAttr(range[0]),
        hi: floatAttr(range[1]),
      }),
    );
  }
}
