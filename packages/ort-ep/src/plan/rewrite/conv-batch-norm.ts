// Conv -> BatchNormalization (inference) folded into the Conv, as onnxruntime's ConvBNFusion does:
// per output channel o, with t = scale / sqrt(var + epsilon),
//   W'[o] = W[o] * t,   B'[o] = (B[o] - mean) * t + bias   (B = 0 without a bias),
// each step rounded to float32 as onnxruntime computes it. PaddlePaddle's exports and older
// converters keep BatchNormalization after every convolution; evaluating it on each run cost a
// third of a MobileNet's time. Only where everything is a constant float32 tensor, the Conv's one
// output is read by the BatchNormalization alone, and the BatchNormalization is inference (one
// output; no training_mode; spatial=1 before opset 9).
import { OnnxDataType, type AttrValue, type HostTensor, type NodeIR } from '../../onnx/index.js';
import { type GraphView, isDefaultDomain } from './view.js';

const f = Math.fround;

function float32(view: GraphView, name: string | undefined, length?: number): Float32Array | undefined {
  const t: HostTensor | undefined = view.constant(name);
  if (!t || t.dtype !== OnnxDataType.FLOAT || !(t.data instanceof Float32Array)) return undefined;
  if (length !== undefined && (t.dims.length !== 1 || t.data.length !== length)) return undefined;
  return t.data;
}

const intAttr = (n: NodeIR, k: string): number | undefined => {
  const a: AttrValue | undefined = n.attributes.get(k);
  return a?.type === 'int' ? a.value : undefined;
};

export function convBatchNormRewrite(view: GraphView): void {
  const graph = view.graph;
  for (const bn of graph.nodes) {
    if (view.isRemoved(bn) || bn.opType !== 'BatchNormalization' || !isDefaultDomain(bn)) continue;
    if (bn.outputs.filter(Boolean).length !== 1 || !bn.outputs[0]) continue;
    if (intAttr(bn, 'training_mode') || intAttr(bn, 'spatial') === 0 || bn.attributes.has('is_test')) continue;
    const conv = view.made(bn.inputs[0], 'Conv');
    if (!conv || conv.outputs.length !== 1 || view.soleReader(conv.outputs[0]) !== bn) continue;
    const w = view.constant(conv.inputs[1]);
    if (!w || w.dtype !== OnnxDataType.FLOAT || !(w.data instanceof Float32Array) || w.dims.length < 3) continue;
    const out = w.dims[0];
    const size = w.dims.reduce((a, b) => a * b, 1);
    if (out === 0 || w.data.length !== size) continue;
    const bias = conv.inputs[2] ? float32(view, conv.inputs[2], out) : new Float32Array(out);
    const [scale, shift, mean, variance] = [1, 2, 3, 4].map((i) => float32(view, bn.inputs[i], out));
    if (!bias || !scale || !shift || !mean || !variance) continue;
    const epsAttr = bn.attributes.get('epsilon');
    const eps = f(epsAttr?.type === 'float' ? epsAttr.value : 1e-5);
    const per = size / out;
    const w2 = new Float32Array(size);
    const b2 = new Float32Array(out);
    for (let o = 0; o < out; o++) {
      const t = f(scale[o] / f(Math.sqrt(f(variance[o] + eps))));
      for (let k = o * per; k < (o + 1) * per; k++) w2[k] = f(w.data[k] * t);
      b2[o] = f(f(f(bias[o] - mean[o]) * t) + shift[o]);
    }
    const wName = view.name('W', conv);
    const bName = view.name('B', conv);
    graph.initializers.set(wName, { dtype: OnnxDataType.FLOAT, dims: [...w.dims], data: w2 });
    graph.initializers.set(bName, { dtype: OnnxDataType.FLOAT, dims: [out], data: b2 });
    const folded: NodeIR = {
      ...conv,
      name: view.name('ConvBatchNorm', conv),
      inputs: [conv.inputs[0], wName, bName],
      outputs: [bn.outputs[0]],
    };
    view.replace([conv, bn], folded);
    // The weights and statistics it replaced, when nothing else reads them, are not kept twice.
    for (const name of [conv.inputs[1], conv.inputs[2], ...bn.inputs.slice(1)])
      if (name && graph.initializers.has(name) && view.readOnlyBy(name, [conv, bn])) graph.initializers.delete(name);
  }
}
