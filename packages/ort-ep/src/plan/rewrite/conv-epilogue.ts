// Conv -> [Add(residual)] -> [Relu | Clip(constant bounds)] -> [HardSigmoid | HardSwish], at least
// one of them after the Conv, to one mlx.fused::Conv: the convolution, then bias, residual, clamp
// and activation (attribute act: 1 HardSigmoid, 2 HardSwish, with alpha and beta) in one pass over
// its output (@mlx/sys's conv epilogue, which also moves MLX's channels-last result to ONNX's layout; on
// other devices the same ops). ResNet's blocks end this way (Conv + Add + Relu), MobileNet's in
// Clip(0, 6), MobileNetV3's in HardSwish (and its squeeze-excite gate in HardSigmoid). The residual may have any shape that broadcasts (the op adds it as Add would).
import type { AttrValue, NodeIR } from '../../onnx/index.js';
import { type GraphView, floatAttr, fusedNode, isDefaultDomain } from './view.js';

const FLT_MAX = 3.4028234663852886e38;

/** The clamp of a Relu or Clip node, or undefined when its bounds are not constants. */
function bounds(view: GraphView, n: NodeIR): [number, number] | undefined {
  if (n.opType === 'Relu') return [0, Number.POSITIVE_INFINITY];
  if (n.opType !== 'Clip') return undefined;
  // Clip-6: attributes, defaulting to ±FLT_MAX; Clip-11+: optional scalar inputs, absent = no bound.
  // A Clip with neither is one or the other by opset (they differ at ±Inf): left as it is.
  const min = n.attributes.get('min');
  const max = n.attributes.get('max');
  if (min || max) {
    const attr = (a: AttrValue | undefined, def: number) => (a?.type === 'float' ? a.value : def);
    return [attr(min, -FLT_MAX), attr(max, FLT_MAX)];
  }
  if (n.inputs.length < 2) return undefined;
  const bound = (i: number, none: number): number | undefined => (n.inputs[i] ? view.floatScalar(n.inputs[i]) : none);
  const lo = bound(1, Number.NEGATIVE_INFINITY);
  const hi = bound(2, Number.POSITIVE_INFINITY);
  return lo === undefined || hi === undefined || Number.isNaN(lo) || Number.isNaN(hi) ? undefined : [lo, hi];
}

/** HardSigmoid [1, alpha, beta] (ONNX's defaults 0.2, 0.5) or HardSwish [2, 1/6, 0.5]; else undefined. */
function activation(n: NodeIR): [number, number, number] | undefined {
  if (n.opType === 'HardSwish') return [2, 1 / 6, 0.5];
  if (n.opType !== 'HardSigmoid') return undefined;
  const a = n.attributes.get('alpha');
  const b = n.attributes.get('beta');
  if ((a && a.type !== 'float') || (b && b.type !== 'float')) return undefined;
  return [1, a?.type === 'float' ? a.value : 0.2, b?.type === 'float' ? b.value : 0.5];
}

export function convEpilogueRewrite(view: GraphView): void {
  for (const conv of view.graph.nodes) {
    if (view.isRemoved(conv) || conv.opType !== 'Conv' || !isDefaultDomain(conv)) continue;
    const nodes: NodeIR[] = [conv];
    let out = conv.outputs[0];
    let residual = '';
    let next = view.soleReader(out);
    if (next && next.opType === 'Add' && isDefaultDomain(next) && !view.isRemoved(next) && next.inputs[0] !== next.inputs[1]) {
      residual = view.other(next, out)!;
      nodes.push(next);
      out = next.outputs[0];
      next = view.soleReader(out);
    }
    let clamp: [number, number] = [Number.NEGATIVE_INFINITY, Number.POSITIVE_INFINITY];
    const b = next && isDefaultDomain(next) && !view.isRemoved(next) ? bounds(view, next) : undefined;
    if (next && b) {
      clamp = b;
      nodes.push(next);
      out = next.outputs[0];
      next = view.soleReader(out);
    }
    const act = next && isDefaultDomain(next) && !view.isRemoved(next) ? activation(next) : undefined;
    if (next && act) {
      nodes.push(next);
      out = next.outputs[0];
    }
    if (nodes.length === 1) continue;
    const attrs: Record<string, AttrValue> = Object.fromEntries(conv.attributes);
    attrs.lo = floatAttr(clamp[0]);
    attrs.hi = floatAttr(clamp[1]);
    if (act) {
      attrs.act = { type: 'int', value: act[0] };
      attrs.alpha = floatAttr(act[1]);
      attrs.beta = floatAttr(act[2]);
    }
    view.replace(nodes, fusedNode(view, 'Conv', conv, [conv.inputs[0], conv.inputs[1], conv.inputs[2] ?? '', residual], [out], attrs));
  }
}
