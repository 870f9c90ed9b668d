// Structural checks before planning: every edge has a producer, every value one definition, and
// nodes run in topological order. The spec requires files to be sorted already; exporters that
// do not get sorted here (a stable order: nodes stay in file order where dependencies allow).
import { OnnxLoadError } from '../errors.js';
import type { GraphIR, NodeIR } from './ir.js';

const label = (n: NodeIR) => `node '${n.name}' (${n.opType})`;

export function subgraphsOf(n: NodeIR): { attr: string; graph: GraphIR }[] {
  const out: { attr: string; graph: GraphIR }[] = [];
  for (const [attr, a] of n.attributes) {
    if (a.type === 'graph') out.push({ attr, graph: a.value });
    else if (a.type === 'graphs') a.value.forEach((graph, i) => out.push({ attr: `${attr}[${i}]`, graph }));
  }
  return out;
}

/** Names a graph reads from enclosing scopes (its own subgraphs' reads included). */
export function outerReferences(g: GraphIR): Set<string> {
  const defined = new Set<string>([...g.inputs.map((i) => i.name), ...g.initializers.keys()]);
  for (const n of g.nodes) for (const o of n.outputs) if (o) defined.add(o);
  const refs = new Set<string>();
  for (const n of g.nodes) {
    for (const i of n.inputs) if (i && !defined.has(i)) refs.add(i);
    for (const { graph } of subgraphsOf(n)) for (const r of outerReferences(graph)) if (!defined.has(r)) refs.add(r);
  }
  for (const o of g.outputs) if (!defined.has(o.name)) refs.add(o.name);
  return refs;
}

/**
 * Checks a graph and its subgraphs, and sorts their nodes topologically in place where needed.
 * `outerNames` are the values visible from enclosing graphs (for a subgraph checked on its own).
 * Throws OnnxLoadError naming the node, its op and the value for a dangling edge, a value
 * defined twice, or a cycle.
 */
export function validateGraph(g: GraphIR, outerNames?: Iterable<string>): GraphIR {
  const outer = new Set(outerNames);
  const isSub = outerNames !== undefined;
  const gname = `graph '${g.name || '<unnamed>'}'`;
  const scope = new Set<string>();
  for (const i of g.inputs) {
    if (scope.has(i.name)) throw new OnnxLoadError(`${gname}: input '${i.name}' is declared twice`);
    scope.add(i.name);
  }
  for (const k of g.initializers.keys()) scope.add(k);
  const producer = new Map<string, number>();
  g.nodes.forEach((n, idx) => {
    for (const o of n.outputs) {
      if (!o) continue;
      const p = producer.get(o);
      if (p !== undefined) throw new OnnxLoadError(`${gname}: value '${o}' is produced by both ${label(g.nodes[p])} and ${label(n)}`);
      if (scope.has(o)) throw new OnnxLoadError(`${gname}: ${label(n)} produces '${o}', which is already a graph input or initializer`);
      producer.set(o, idx);
    }
    if (n.refAttrs?.size) {
      const [attr, ref] = [...n.refAttrs][0];
      throw new OnnxLoadError(
        `${gname}: ${label(n)} has attribute '${attr}' referring to '${ref}' of a calling function, but it is not in a function body (expandFunctions binds these)`,
      );
    }
  });
  const missing = (n: NodeIR, name: string) =>
    new OnnxLoadError(
      `${gname}: ${label(n)} reads '${name}', which is not a graph input, an initializer, ` +
        `${isSub ? 'a value of an enclosing graph, ' : ''}or an output of any node (dangling edge)`,
    );
  // Dependencies of each node: producers of its inputs and of the outer values its subgraphs read.
  const deps: number[][] = g.nodes.map((n) => {
    const d: number[] = [];
    const need = (name: string, via?: string) => {
      if (!name || scope.has(name)) return;
      const p = producer.get(name);
      if (p !== undefined) d.push(p);
      // A subgraph's unresolved read is reported by its own check below, naming the inner node.
      else if (!outer.has(name) && !via) throw missing(n, name);
    };
    for (const i of n.inputs) need(i);
    for (const { attr, graph } of subgraphsOf(n)) for (const r of outerReferences(graph)) need(r, attr);
    return d;
  });
  if (deps.some((d, idx) => d.some((p) => p >= idx))) g.nodes = topologicalOrder(g.nodes, deps, gname);
  for (const o of g.outputs) {
    if (!scope.has(o.name) && !producer.has(o.name) && !outer.has(o.name)) {
      throw new OnnxLoadError(
        `${gname}: output '${o.name}' is not produced by any node, nor a graph input or initializer${isSub ? ' or a value of an enclosing graph' : ''}`,
      );
    }
  }
  const visible = [...outer, ...scope, ...producer.keys()];
  for (const n of g.nodes) for (const { graph } of subgraphsOf(n)) validateGraph(graph, visible);
  return g;
}

/** Depth-first, in file order; iterative so that long chains do not exhaust the stack. */
function topologicalOrder(nodes: NodeIR[], deps: number[][], gname: string): NodeIR[] {
  const state = new Uint8Array(nodes.length); // 0 new, 1 on the path, 2 placed
  const order: NodeIR[] = [];
  for (let start = 0; start < nodes.length; start++) {
    if (state[start]) continue;
    const path: number[] = [start];
    const next: number[] = [0];
    state[start] = 1;
    while (path.length) {
      const top = path[path.length - 1];
      const k = next[next.length - 1]++;
      if (k < deps[top].length) {
        const d = deps[top][k];
        if (state[d] === 2) continue;
        if (state[d] === 1) {
          // path runs from consumers to producers; the message follows the data instead.
          const cycle = [d, ...path.slice(path.indexOf(d) + 1).reverse(), d];
          throw new OnnxLoadError(`${gname} has a cycle: ${cycle.map((i) => label(nodes[i])).join(' -> ')} (each feeds the next)`);
        }
        state[d] = 1;
        path.push(d);
        next.push(0);
      } else {
        state[top] = 2;
        order.push(nodes[top]);
        path.pop();
        next.pop();
      }
    }
  }
  return order;
}
