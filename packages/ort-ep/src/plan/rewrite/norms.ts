// Normalisations as exporters decompose them, over the last axis, to one fused node:
//   RMSNorm (Llama, T5):   x * (1 / Sqrt(ReduceMean(Pow(x, 2)) + eps)) [* w]   (also x / Sqrt(...),
//                          Reciprocal, x * x, and a no-op Cast before the weight)
//   LayerNorm (opset < 17): d = x - ReduceMean(x); d / Sqrt(ReduceMean(d^2) + eps) [* w] [+ b]
// -> mlx.fused::RMSNorm / mlx.fused::LayerNorm (the fused CPU kernels; MLX's fast norms elsewhere).
import type { NodeIR } from '../../onnx/index.js';
import { type GraphView, floatAttr, fusedNode, meanOverLast } from './view.js';

/** y = v^2 as Pow(v, 2) or Mul(v, v). */
function squareOf(view: GraphView, y: string): { v: string; node: NodeIR } | undefined {
  const p = view.made(y, 'Pow');
  if (p) return view.isScalar(p.inputs[1], 2) ? { v: p.inputs[0], node: p } : undefined;
  const m = view.made(y, 'Mul');
  return m && m.inputs[0] === m.inputs[1] ? { v: m.inputs[0], node: m } : undefined;
}

/** sqrt(ReduceMean(sq) + eps) above `s` (the Sqrt's output): the nodes and eps. */
function rootMeanPlusEps(view: GraphView, s: string): { sq: string; eps: number; nodes: NodeIR[] } | undefined {
  const sqrt = view.made(s, 'Sqrt');
  const add = sqrt && view.made(sqrt.inputs[0], 'Add');
  if (!sqrt || !add || view.soleReader(add.outputs[0]) !== sqrt) return undefined;
  for (const [m, e] of [
    [add.inputs[0], add.inputs[1]],
    [add.inputs[1], add.inputs[0]],
  ]) {
    const mean = view.made(m, 'ReduceMean');
    const eps = view.floatScalar(e);
    if (mean && eps !== undefined && eps >= 0 && meanOverLast(view, mean) && view.soleReader(m) === add)
      return { sq: mean.inputs[0], eps, nodes: [mean, add, sqrt] };
  }
  return undefined;
}

/** The weight multiply after `y` (optionally through a Cast that changes nothing), if any. */
function weightAfter(view: GraphView, y: string, xCastTo: number | undefined): { w: string; out: string; nodes: NodeIR[] } | undefined {
  let r = view.soleReader(y);
  const nodes: NodeIR[] = [];
  let from = y;
  if (r?.opType === 'Cast' && !view.isRemoved(r)) {
    const to = r.attributes.get('to');
    if (to?.type !== 'int' || to.value !== xCastTo) return undefined;
    nodes.push(r);
    from = r.outputs[0];
    r = view.soleReader(from);
  }
  if (!r || r.opType !== 'Mul' || view.isRemoved(r)) return undefined;
  const w = view.other(r, from);
  const wt = view.constant(w);
  if (!wt || wt.dims.length !== 1 || (xCastTo !== undefined && wt.dtype !== xCastTo)) return undefined;
  return { w: w!, out: r.outputs[0], nodes: [...nodes, r] };
}

function rmsNorm(view: GraphView, mean: NodeIR): void {
  const sq = squareOf(view, mean.inputs[0]);
  if (!sq || view.soleReader(mean.inputs[0]) !== mean) return;
  const x = sq.v;
  const add = view.soleReader(mean.outputs[0]);
  const sqrt = add && view.soleReader(add.outputs[0]);
  if (!sqrt || sqrt.opType !== 'Sqrt') return;
  const root = rootMeanPlusEps(view, sqrt.outputs[0]);
  if (!root || root.sq !== mean.inputs[0]) return;
  // x * (1 / s), x * Reciprocal(s), or x / s
  const s = sqrt.outputs[0];
  const r = view.soleReader(s);
  if (!r) return;
  let scaled: NodeIR | undefined;
  const nodes: NodeIR[] = [sq.node, ...root.nodes];
  if (r.opType === 'Div' && r.inputs[1] === s && r.inputs[0] === x) scaled = r;
  else if ((r.opType === 'Div' && r.inputs[1] === s && view.isScalar(r.inputs[0], 1)) || r.opType === 'Reciprocal') {
    const m = view.soleReader(r.outputs[0]);
    if (m?.opType === 'Mul' && view.other(m, r.outputs[0]) === x) {
      nodes.push(r);
      scaled = m;
    }
  }
  if (!scaled) return;
  nodes.push(scaled);
  const xCast = view.made(x, 'Cast')?.attributes.get('to');
  const weight = weightAfter(view, scaled.outputs[0], xCast?.type === 'int' ? xCast.value : undefined);
  const inputs = weight ? [x, weight.w] : [x];
  const out = weight ? weight.out : scaled.outputs[0];
  view.replace(
    weight ? [...nodes, ...weight.nodes] : nodes,
    fusedNode(view, 'RMSNorm', mean, inputs, [out], { epsilon: floatAttr(root.eps) }),
  );
}

function layerNorm(view: GraphView, sub: NodeIR): void {
  const [x, m] = sub.inputs;
  const mean = view.made(m, 'ReduceMean');
  if (!mean || mean.inputs[0] !== x || !meanOverLast(view, mean) || view.soleReader(m) !== sub) return;
  const d = sub.outputs[0];
  // d feeds the square and the division, nothing else
  let div: NodeIR | undefined;
  let sqNode: NodeIR | undefined;
  for (const n of view.readersOf(d)) {
    if (n.opType === 'Div' && n.inputs[0] === d) div = n;
    else if ((n.opType === 'Pow' && view.isScalar(n.inputs[1], 2)) || (n.opType === 'Mul' && n.inputs[0] === d && n.inputs[1] === d))
      sqNode = n;
  }
  if (!div || !sqNode || !view.readOnlyBy(d, [div, sqNode])) return;
  const root = rootMeanPlusEps(view, div.inputs[1]);
  if (
    !root ||
    root.sq !== sqNode.outputs[0] ||
    view.soleReader(sqNode.outputs[0]) !== root.nodes[0] ||
    view.soleReader(div.inputs[1]) !== div
  )
    return;
  const nodes = [mean, sub, sqNode, ...root.nodes, div];
  let out = div.outputs[0];
  const inputs = [x];
  const w = weightAfter(view, out, undefined);
  if (w) {
    nodes.push(...w.nodes);
    out = w.out;
    inputs.push(w.w);
    const a = view.soleReader(out);
    const b = a?.opType === 'Add' && !view.isRemoved(a) ? view.other(a, out) : undefined;
    const bt = view.constant(b);
    if (a && bt && bt.dims.length === 1) {
      nodes.push(a);
      out = a.outputs[0];
      inputs.push(b!);
    }
  }
  view.replace(nodes, fusedNode(view, 'LayerNorm', sub, inputs, [out], { epsilon: floatAttr(root.eps) }));
}

export function rmsNormRewrite(view: GraphView): void {
  for (const n of view.graph.nodes) if (!view.isRemoved(n) && n.opType === 'ReduceMean') rmsNorm(view, n);
}

export function layerNormRewrite(view: GraphView): void {
  for (const n of view.graph.nodes) if (!view.isRemoved(n) && n.opType === 'Sub') layerNorm(view, n);
}
