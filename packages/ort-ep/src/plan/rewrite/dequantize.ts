// Constant dequantization, folded once: a DequantizeLinear whose inputs are all constants (a QDQ
// model's int8 weights and int32 biases, with their scales and zero points) becomes a float32
// initializer holding its result, computed as the op computes it (float(x - zero point) * scale, the
// difference in int32, each step rounded to float32). The passes after it then see the convolutions' and
// products' weights as the constants they are: the layout pass packs them, and nothing
// dequantizes them again on every run. Per tensor and per axis, 8-, 16- and 32-bit integers, a
// float32 scale; blocked scales, other element types and other output types stay as written.
import { OnnxDataType, type HostTensor, type NodeIR } from '../../onnx/index.js';
import { type GraphView, isDefaultDomain } from './view.js';

const INTEGERS = new Set<number>([OnnxDataType.INT8, OnnxDataType.UINT8, OnnxDataType.INT16, OnnxDataType.UINT16, OnnxDataType.INT32]);

const intAttr = (n: NodeIR, k: string, dflt: number): number | undefined => {
  const a = n.attributes.get(k);
  if (!a) return dflt;
  return a.type === 'int' ? a.value : undefined;
};

/** The folded result, or undefined when the node is not one this pass folds. */
function fold(view: GraphView, n: NodeIR): HostTensor | undefined {
  const x = view.constant(n.inputs[0]);
  const scale = view.constant(n.inputs[1]);
  const zp = n.inputs[2] ? view.constant(n.inputs[2]) : undefined;
  if (!x || !scale || (n.inputs[2] && !zp)) return undefined;
  if (!INTEGERS.has(x.dtype) || scale.dtype !== OnnxDataType.FLOAT || !(scale.data instanceof Float32Array)) return undefined;
  if (zp && zp.dtype !== x.dtype) return undefined;
  if ((intAttr(n, 'block_size', 0) ?? 1) !== 0) return undefined;
  const outType = intAttr(n, 'output_dtype', 0);
  if (outType !== 0 && outType !== OnnxDataType.FLOAT) return undefined;
  const axisAttr = intAttr(n, 'axis', 1);
  if (axisAttr === undefined) return undefined;
  const size = x.dims.reduce((a, b) => a * b, 1);
  if (x.data.length !== size || size === 0) return undefined;
  const xs = x.data as ArrayLike<number>;
  const s = scale.data;
  const out = new Float32Array(size);
  const f = Math.fround;
  // x - zero point as the op computes it: in int32, wrapping for int32 inputs (onnxruntime's
  // kernel subtracts in the input's type), then to float32.
  const wraps = x.dtype === OnnxDataType.INT32;
  const centred = (v: number, z: number) => f(wraps ? (v - z) | 0 : v - z);
  if (s.length === 1) {
    // Per tensor (a one-element scale, of any rank).
    if (zp && zp.data.length !== 1) return undefined;
    const z = zp ? Number(zp.data[0]) : 0;
    for (let i = 0; i < size; i++) out[i] = f(centred(xs[i], z) * s[0]);
  } else {
    // Per axis: a 1-D scale (and zero point) along the axis.
    const r = x.dims.length;
    const axis = axisAttr < 0 ? axisAttr + r : axisAttr;
    if (axis < 0 || axis >= r || scale.dims.length !== 1 || s.length !== x.dims[axis]) return undefined;
    if (zp && (zp.dims.length !== 1 || zp.data.length !== s.length)) return undefined;
    const inner = x.dims.slice(axis + 1).reduce((a, b) => a * b, 1);
    const count = x.dims[axis];
    for (let i = 0; i < size; i++) {
      const c = Math.floor(i / inner) % count;
      const z = zp ? Number(zp.data[c]) : 0;
      out[i] = f(centred(xs[i], z) * s[c]);
    }
  }
  return { dtype: OnnxDataType.FLOAT, dims: [...x.dims], data: out };
}

export function dequantizeRewrite(view: GraphView): void {
  const graph = view.graph;
  for (const n of graph.nodes) {
    if (n.opType !== 'DequantizeLinear' || !isDefaultDomain(n) || n.outputs.length !== 1 || !n.outputs[0]) continue;
    const name = n.outputs[0];
    // A graph output keeps its node (the output is computed as written).
    if (graph.outputs.some((o) => o.name === name) || graph.initializers.has(name)) continue;
    const t = fold(view, n);
    if (!t) continue;
    graph.initializers.set(name, t);
    view.replaceMany([n], []);
  }
}
