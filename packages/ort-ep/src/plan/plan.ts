// Planning of one graph (the main graph or an If/Loop/Scan body): every node looked up in the
// registry and checked once, subgraph attributes planned with the graph, and the analysis that
// runs need (which nodes produce which values, which nodes a set of outputs needs).
import type { GraphIR, NodeIR } from '../onnx/index.js';
import { Attrs } from '../registry/attrs.js';
import { DEFAULT_DOMAIN, type OpRegistry } from '../registry/registry.js';
import type { CheckContext, OpEntry } from '../registry/types.js';
import { markPersistentTensor, releaseUpload, type Value } from '../runtime/value.js';
import type { UnsupportedNode } from '../errors.js';

export interface PlannedNode {
  node: NodeIR;
  entry: OpEntry;
  opset: number;
  attrs: Attrs;
}

export interface GraphPlan {
  graph: GraphIR;
  nodes: PlannedNode[];
  /** Values known before any run: initializers and folded nodes. */
  constants: Map<string, Value>;
  /** Node index producing each value name. */
  producer: Map<string, number>;
  /** Plans of subgraph attributes, by graph object. */
  subplans: Map<GraphIR, GraphPlan>;
  modelName: string;
}

export interface PlanOptions {
  registry: OpRegistry;
  opsets: Map<string, number>;
  modelName: string;
  /** Names visible from an enclosing graph (for subgraphs). */
  outerNames?: Set<string>;
}

function opsetFor(node: NodeIR, opsets: Map<string, number>): number {
  const override = (node as NodeIR & { opsetOverride?: number }).opsetOverride;
  if (override !== undefined) return override;
  return opsets.get(node.domain || DEFAULT_DOMAIN) ?? (node.domain === DEFAULT_DOMAIN ? 1 : 1);
}

/** Plans a graph; unsupported nodes (including those inside subgraphs) are appended to `unsupported`. */
export function planGraph(graph: GraphIR, opts: PlanOptions, unsupported: UnsupportedNode[]): GraphPlan {
  const constants = new Map<string, Value>();
  for (const [name, t] of graph.initializers) constants.set(name, { kind: 'host', tensor: t });
  const nodes: PlannedNode[] = [];
  const producer = new Map<string, number>();
  const subplans = new Map<GraphIR, GraphPlan>();
  const visible = new Set<string>([...(opts.outerNames ?? []), ...graph.inputs.map((i) => i.name), ...graph.initializers.keys()]);
  for (const node of graph.nodes) {
    const domain = node.domain || DEFAULT_DOMAIN;
    const opset = opsetFor(node, opts.opsets);
    const attrs = new Attrs(node);
    const entry = opts.registry.lookup(domain, node.opType, opset);
    const fail = (reason: string) => unsupported.push({ opType: node.opType, domain, opset, nodeName: node.name, reason });
    if (!entry) fail(opts.registry.explainMissing(domain, node.opType, opset));
    else {
      const check: CheckContext = {
        node, opset, attrs,
        constantInput: (i) => {
          const v = constants.get(node.inputs[i] ?? '');
          return v?.kind === 'host' ? v.tensor : undefined;
        },
        inputType: (i) => {
          const v = constants.get(node.inputs[i] ?? '');
          return v?.kind === 'host' ? v.tensor.dtype : undefined;
        },
      };
      let reason: string | undefined;
      try {
        reason = entry.check?.(check);
      } catch (e) {
        reason = `invalid node: ${(e as Error).message}`;
      }
      if (reason) fail(reason);
    }
    for (const g of attrs.graphs()) {
      subplans.set(g, planGraph(g, { ...opts, outerNames: new Set([...visible, ...node.outputs]) }, unsupported));
    }
    for (const o of node.outputs) if (o) {
      producer.set(o, nodes.length);
      visible.add(o);
    }
    nodes.push({ node, entry: entry!, opset, attrs });
  }
  return { graph, nodes, constants, producer, subplans, modelName: opts.modelName };
}



export function markPersistent(plan: GraphPlan): void {
  for (const v of plan.constants.values()) if (v.kind === 'host') markPersistentTensor(v.tensor);
  for (const sp of plan.subplans.values()) markPersistent(sp);
}

/**
 * Frees what a plan holds natively: folded device constants and the persistent uploads of its
 * host constants (initializers), in subgraph plans too. The uploads live in the upload cache, not
 * in `plan.constants`, so disposing the device constants alone would leave every weight behind.
 */
export function releasePlan(plan: GraphPlan): void {
  for (const v of plan.constants.values()) {
    if (v.kind === 'device') v.array.dispose();
    else if (v.kind === 'host') releaseUpload(v.tensor);
  }
  for (const sp of plan.subplans.values()) releasePlan(sp);
}

/** The indices of the nodes needed to compute `names`, in graph order. */
export function neededNodes(plan: GraphPlan, names: Iterable<string>): number[] {
  const need = new Set<number>();
  const stack = [...names];
  while (stack.length) {
    const n = stack.pop()!;
    if (plan.constants.has(n)) continue; // initializer or folded at plan time
    const idx = plan.producer.get(n);
    if (idx === undefined || need.has(idx)) continue;
    need.add(idx);
    const pn = plan.nodes[idx];
    for (const i of pn.node.inputs) if (i) stack.push(i);
    // Subgraphs may read outer values by name.
    for (const g of pn.attrs.graphs()) for (const name of outerReferences(g)) stack.push(name);
  }
  return [...need].sort((a, b) => a - b);
}

/** Names a subgraph reads from enclosing scopes. */
export function outerReferences(g: GraphIR): Set<string> {
  const defined = new Set<string>([...g.inputs.map((i) => i.name), ...g.initializers.keys()]);
  const refs = new Set<string>();
  for (const n of g.nodes) {
    for (const i of n.inputs) if (i && !defined.has(i)) refs.add(i);
    for (const sg of new Attrs(n).graphs()) for (const r of outerReferences(sg)) if (!defined.has(r)) refs.add(r);
    for (const o of n.outputs) if (o) defined.add(o);
  }
  return refs;
}


