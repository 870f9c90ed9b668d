// Pow(x, 2) -> Mul(x, x) and Pow(x, 3) -> Mul(Mul(x, x), x): a multiply is one vectorized pass
// where MLX's CPU power is a scalar pow() per element. Integer x gives the same (wrapping) products.
import type { NodeIR } from '../../onnx/index.js';
import { type GraphView, isDefaultDomain } from './view.js';

export function powRewrite(view: GraphView): void {
  for (const n of view.graph.nodes) {
    if (view.isRemoved(n) || n.opType !== 'Pow' || !isDefaultDomain(n)) continue;
    const e = view.constant(n.inputs[1]);
    if (!e || e.data.length !== 1) continue;
    const p = Number(e.data[0]);
    if (p !== 2 && p !== 3) continue;
    const x = n.inputs[0];
    const mul = (inputs: string[], outputs: string[], k: number): NodeIR => ({
      name: view.name(`Mul${k}`, n),
      opType: 'Mul',
      domain: n.domain,
      inputs,
      outputs,
      attributes: new Map(),
    });
    if (p === 2) view.replace([n], mul([x, x], n.outputs, 0));
    else {
      const sq = `${n.outputs[0]}/square`;
      view.replaceMany([n], [mul([x, x], [sq], 0), mul([sq, x], n.outputs, 1)]);
    }
  }
}
