// Mul(x, Sigmoid(x)) -> mlx.fused::Silu(x): SiLU (Swish) as exporters write it (the gate of a
// Llama/Qwen MLP, x * sigmoid(x) before it is multiplied by the up projection). One pass of the
// fused activation kernel (@mlx/core ext.fusedActivation 'silu') where there were two passes and
// two primitives (the sigmoid and the multiply). The Sigmoid's result must be read by that Mul
// alone; x may be read by anything else.
import { type GraphView, fusedNode, isDefaultDomain } from './view.js';

export function siluRewrite(view: GraphView): void {
  for (const sig of view.graph.nodes) {
    if (view.isRemoved(sig) || sig.opType !== 'Sigmoid' || !isDefaultDomain(sig) || sig.outputs.length !== 1) continue;
    const x = sig.inputs[0];
    const mul = view.soleReader(sig.outputs[0]);
    if (!mul || mul.opType !== 'Mul' || !isDefaultDomain(mul) || view.isRemoved(mul) || mul.inputs.length !== 2) continue;
    if (view.other(mul, sig.outputs[0]) !== x) continue;
    view.replace([sig, mul], fusedNode(view, 'Silu', mul, [x], mul.outputs));
  }
}
