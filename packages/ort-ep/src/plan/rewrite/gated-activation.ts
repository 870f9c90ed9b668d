// A gated feed-forward's activation, act(gate) * up, to one mlx.fused::GatedActivation node (one
// pass of @mlx/sys's gated kernel on the CPU; MLX's ops elsewhere):
//   SwiGLU: Mul(Mul(g, Sigmoid(g)), u)     (every operand order)
//   GeGLU:  Mul(Gelu(g), u)                 (the fused Gelu of the gelu rewrite, either form)
// where each intermediate is read by the next node alone. When g and u are the two equal halves
// of a SplitLast (sibling-matmul's joined gate and up projections) read by nothing else, gate
// first, the node takes the joined product itself and the split goes too: a Llama layer's
// feed-forward is then one product, one gated pass and the down projection. Runs after gelu and
// sibling-matmul, whose nodes it takes.
import type { AttrValue, NodeIR } from '../../onnx/index.js';
import { fusedGeluKind } from './gelu.js';
import { type GraphView, fusedNode, isDefaultDomain, stringAttr } from './view.js';

/** The Mul reading `name` alone, with its other operand. */
function mulAfter(view: GraphView, name: string): { mul: NodeIR; other: string } | undefined {
  const m = view.soleReader(name);
  if (!m || m.opType !== 'Mul' || !isDefaultDomain(m) || view.isRemoved(m) || m.inputs[0] === m.inputs[1] || !m.outputs[0])
    return undefined;
  const other = view.other(m, name);
  return other ? { mul: m, other } : undefined;
}

/** The gate's activation node and kind: a Sigmoid times its own input (silu), or a fused Gelu. */
function activation(view: GraphView, n: NodeIR): { kind: string; gate: string; nodes: NodeIR[]; out: string } | undefined {
  if (view.isRemoved(n) || !n.outputs[0]) return undefined;
  if (n.opType === 'Sigmoid' && isDefaultDomain(n)) {
    const gate = n.inputs[0];
    const m = mulAfter(view, n.outputs[0]);
    if (!m || m.other !== gate) return undefined;
    return { kind: 'silu', gate, nodes: [n, m.mul], out: m.mul.outputs[0] };
  }
  // A fused Gelu of its input alone (one with a bias input is not act(gate)).
  const kind = n.inputs.length === 1 ? fusedGeluKind(n) : undefined;
  return kind ? { kind, gate: n.inputs[0], nodes: [n], out: n.outputs[0] } : undefined;
}

export function gatedActivationRewrite(view: GraphView): void {
  for (const n of view.graph.nodes) {
    const act = activation(view, n);
    if (!act) continue;
    const times = mulAfter(view, act.out);
    if (!times || times.other === act.gate || times.other === act.out) continue;
    const nodes = [...act.nodes, times.mul];
    const up = times.other;
    const attrs: Record<string, AttrValue> = { kind: stringAttr(act.kind) };
    // The halves of one joined product (gate first), which nothing else reads: the product itself.
    const split = view.madeFused(act.gate, 'SplitLast');
    const sizes = split?.attributes.get('sizes');
    const halves =
      split &&
      split.outputs[0] === act.gate &&
      split.outputs.length === 2 &&
      split.outputs[1] === up &&
      sizes?.type === 'ints' &&
      sizes.value.length === 2 &&
      sizes.value[0] === sizes.value[1] &&
      view.readOnlyBy(act.gate, nodes) &&
      view.readOnlyBy(up, nodes);
    if (halves)
      view.replace([split, ...nodes], fusedNode(view, 'GatedActivation', split, [split.inputs[0]], [times.mul.outputs[0]], attrs));
    else view.replace(nodes, fusedNode(view, 'GatedActivation', times.mul, [act.gate, up], [times.mul.outputs[0]], attrs));
  }
}
