// Structural checks before planning: every edge has a producer; nodes in topological order.
import { OnnxLoadError, type GraphIR, type NodeIR } from './ir.js';

function subgraphs(n: NodeIR): GraphIR[] {
  const out: GraphIR[] = [];
  for (const a of n.attributes.values()) {
    if (a.type === 'graph') out.push(a.value);
    else if (a.type === 'graphs') out.push(...a.value);
  }
  return out;
}

/** Validates (and if needed topologically sorts, in place) a graph and its subgraphs. */
export function validateGraph(g: GraphIR, outer: ReadonlySet<string> = new Set()): void {
  const known = new Set<string>([...outer, ...g.inputs.map((i) => i.name), ...g.initializers.keys()]);
  const producedBy = new Map<string, NodeIR>();
  for (const n of g.nodes) for (const o of n.outputs) if (o) producedBy.set(o, n);
  const ordered: NodeIR[] = [];
  const state = new Map<NodeIR, 'visiting' | 'done'>();
  const visit = (n: NodeIR) => {
    const s = state.get(n);
    if (s === 'done') return;
    if (s === 'visiting') throw new OnnxLoadError(`graph '${g.name}' has a cycle through node '${n.name}' (${n.opType})`);
    state.set(n, 'visiting');
    for (const i of n.inputs) {
      if (!i || known.has(i)) continue;
      const p = producedBy.get(i);
      if (!p) throw new OnnxLoadError(`graph '${g.name}': input '${i}' of node '${n.name}' (${n.opType}) is not produced by any node, graph input or initializer`);
      visit(p);
    }
    state.set(n, 'done');
    ordered.push(n);
  };
  for (const n of g.nodes) visit(n);
  g.nodes = ordered;
  const visible = new Set(known);
  for (const n of g.nodes) {
    for (const sg of subgraphs(n)) validateGraph(sg, new Set([...visible, ...producedBy.keys()]));
    for (const o of n.outputs) if (o) visible.add(o);
  }
  for (const o of g.outputs) {
    if (!visible.has(o.name) && !producedBy.has(o.name)) throw new OnnxLoadError(`graph '${g.name}': output '${o.name}' is not produced by any node, input or initializer`);
  }
}
