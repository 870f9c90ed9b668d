// Partitioning: the plan's nodes split into MLX partitions (nodes the registry takes) and fallback
// partitions (the rest, run by onnxruntime's CPU backend through a sub-model each).
//
// Every partition is convex (a path between two of its nodes never leaves it), so that the
// partitions themselves form an acyclic graph and can run one after the other. Each node gets a
// stage number: along every edge the stage never decreases, and it grows by one where the edge
// crosses from one kind to the other. A partition is the set of nodes of one stage and kind. A
// path that leaves a partition and comes back must cross kinds twice, so it ends two stages later:
// no partition can hold both its ends, which is convexity; and every edge between partitions goes
// to a later stage, which is acyclicity. Stages are counted from the inputs (as soon as possible)
// and from the outputs (as late as possible); the plan keeps whichever gives fewer partitions.
//
// A node claimed by the registry whose subgraphs (If/Loop/Scan bodies) hold a node it does not
// claim falls back whole, bodies included: subgraphs run synchronously inside their node, so a
// body cannot wait for onnxruntime.
import { DEFAULT_DOMAIN, type HostTensor, type ModelIR, type NodeIR } from '../onnx/index.js';
import { Attrs } from '../registry/attrs.js';
import { nonTensorValues, onnxruntimeKnows } from './boundary.js';
import { FallbackPartition, type GraphPlan, type ModelFacts, type PlannedNode } from './graph-plan.js';

export interface Partition {
  kind: 'mlx' | 'fallback';
  /** Indices into the plan's nodes, in graph order. */
  nodes: number[];
}

/**
 * Why each node runs on onnxruntime (undefined: on MLX): its own reason (fallbackReason), or that
 * it exchanges a sequence, optional or map value with a node that falls back. onnxruntime's
 * JavaScript API takes and returns tensors only, so such a value stays inside one partition: the
 * MLX node at the other end joins the fallback, repeatedly, until no such edge crosses (nodes of
 * the provider's private domains stay; their values cross in tensor form where they can).
 */
export function fallbackReasons(plan: GraphPlan): (string | undefined)[] {
  const reasons = plan.nodes.map((pn) => fallbackReason(pn, plan));
  if (!reasons.some((r) => r !== undefined)) return reasons;
  const kinds = nonTensorValues(plan);
  if (!kinds.size) return reasons;
  const readers = new Map<string, number[]>();
  plan.nodes.forEach((pn, i) => {
    for (const name of new Set([...pn.node.inputs, ...pn.outerReads]))
      if (name && kinds.has(name)) (readers.get(name) ?? readers.set(name, []).get(name)!).push(i);
  });
  for (let changed = true; changed; ) {
    changed = false;
    for (const [name, ends] of readers) {
      const p = plan.producer.get(name);
      const all = p === undefined ? ends : [p, ...ends];
      if (!all.some((i) => reasons[i] !== undefined)) continue;
      for (const i of all) {
        if (reasons[i] !== undefined || !onnxruntimeKnows(plan.nodes[i].node)) continue;
        reasons[i] =
          `it ${i === p ? 'makes' : 'reads'} ${kinds.get(name) === 'optional' ? 'optional' : kinds.get(name)} '${name}', which a node on onnxruntime ${i === p ? 'reads' : 'makes'} (only tensors cross to onnxruntime)`;
        changed = true;
      }
    }
  }
  return reasons;
}

/** Why a node does not run on MLX: its own reason, or that of a node in one of its subgraphs. Undefined: MLX runs it. */
export function fallbackReason(pn: PlannedNode, plan: GraphPlan): string | undefined {
  if (!pn.entry) return pn.reason ?? 'not taken by the MLX provider';
  for (const g of pn.subgraphs) {
    const sp = plan.subplans.get(g);
    if (!sp) continue;
    for (const inner of sp.nodes) {
      const why = fallbackReason(inner, sp);
      if (why) return `its subgraph '${g.name}' holds node '${inner.node.name}' (${inner.node.opType}), which falls back: ${why}`;
    }
  }
  return undefined;
}

/** For each node, the nodes it reads from (inputs and the outer-scope reads of its subgraphs). */
function predecessors(plan: GraphPlan): number[][] {
  return plan.nodes.map((pn) => {
    const out = new Set<number>();
    for (const name of [...pn.node.inputs, ...pn.outerReads]) {
      const p = name ? plan.producer.get(name) : undefined;
      if (p !== undefined) out.add(p);
    }
    return [...out];
  });
}

function group(stage: number[], fallback: boolean[]): Partition[] {
  const byKey = new Map<number, number[]>();
  stage.forEach((s, i) => {
    const key = s * 2 + (fallback[i] ? 1 : 0);
    (byKey.get(key) ?? byKey.set(key, []).get(key)!).push(i);
  });
  return [...byKey.keys()].sort((a, b) => a - b).map((k) => ({ kind: k % 2 ? 'fallback' : 'mlx', nodes: byKey.get(k)! }) as Partition);
}

/** The partitions of a plan, in an order they can run in. One MLX partition when MLX takes every node. */
export function findPartitions(plan: GraphPlan): Partition[] {
  const n = plan.nodes.length;
  if (!n) return [];
  const fallback = fallbackReasons(plan).map((r) => r !== undefined);
  if (!fallback.some((f) => f)) return [{ kind: 'mlx', nodes: plan.nodes.map((_, i) => i) }];
  const preds = predecessors(plan);
  const cross = (a: number, b: number) => (fallback[a] !== fallback[b] ? 1 : 0);
  // As soon as possible: nodes are in topological order.
  const asap = new Array<number>(n).fill(0);
  for (let i = 0; i < n; i++) for (const p of preds[i]) asap[i] = Math.max(asap[i], asap[p] + cross(p, i));
  // As late as possible: the distance to the outputs, counted in crossings.
  const down = new Array<number>(n).fill(0);
  for (let i = n - 1; i >= 0; i--) for (const p of preds[i]) down[p] = Math.max(down[p], down[i] + cross(p, i));
  const top = Math.max(...down);
  const a = group(asap, fallback);
  const b = group(
    down.map((d) => top - d),
    fallback,
  );
  return b.length < a.length ? b : a;
}

export interface PartitionedPlan {
  partitions: Partition[];
  fallbacks: FallbackPartition[];
}

/**
 * Replaces each fallback partition's nodes in `plan` by one node standing for it (PlannedNode.fallback),
 * puts the nodes in partition order, and drops the initializers and subgraph plans that only
 * fallback partitions use (onnxruntime holds those). Call before constant folding.
 */
export function contractFallback(plan: GraphPlan, model: ModelIR, partitions: Partition[]): FallbackPartition[] {
  const original = plan.nodes;
  const member = new Map<number, number>(); // node index -> fallback partition index
  partitions.forEach((p, k) => {
    if (p.kind === 'fallback') for (const i of p.nodes) member.set(i, k);
  });
  const readsOf = (pn: PlannedNode) => [...pn.node.inputs, ...pn.outerReads].filter((n) => n);
  const graphOutputs = new Set(plan.graph.outputs.map((o) => o.name));
  const facts: ModelFacts = {
    irVersion: model.irVersion,
    opsets: model.opsetImports,
    graph: plan.graph,
    kinds: nonTensorValues(plan),
    elementTypes: plan.elementTypes ?? new Map(),
  };
  const reasons = fallbackReasons(plan);
  const nodes: PlannedNode[] = [];
  const fallbacks: FallbackPartition[] = [];
  partitions.forEach((p, k) => {
    if (p.kind === 'mlx') {
      for (const i of p.nodes) nodes.push(original[i]);
      return;
    }
    const members = p.nodes.map((i) => original[i]);
    const made = new Set(members.flatMap((pn) => pn.node.outputs.filter((o) => o)));
    const inputs: string[] = [];
    const initializers = new Map<string, HostTensor>();
    for (const pn of members) {
      for (const name of readsOf(pn)) {
        if (made.has(name) || inputs.includes(name) || initializers.has(name)) continue;
        const init = plan.graph.initializers.get(name);
        if (init && !plan.overridable.has(name)) initializers.set(name, init);
        else inputs.push(name);
      }
    }
    const readOutside = new Set<string>();
    original.forEach((pn, i) => {
      if (member.get(i) !== k) for (const name of readsOf(pn)) readOutside.add(name);
    });
    const outputs = [...made].filter((o) => readOutside.has(o) || graphOutputs.has(o));
    // Nodes nothing reads (dead code) never run: no sub-model for them.
    if (!outputs.length) return;
    const fb = new FallbackPartition(
      fallbacks.length,
      members,
      inputs,
      outputs,
      initializers,
      p.nodes.map((i) => reasons[i]!),
      facts,
    );
    fallbacks.push(fb);
    const node: NodeIR = {
      name: `onnxruntime partition ${fb.index}`,
      opType: 'OnnxRuntimeFallback',
      domain: 'mlx.fallback',
      inputs,
      outputs,
      attributes: new Map(),
    };
    nodes.push({
      node,
      entry: undefined,
      opset: 1,
      attrs: new Attrs(node),
      params: undefined,
      subgraphs: [],
      outerReads: [],
      fallback: fb,
    });
    for (const pn of members) for (const g of pn.subgraphs) plan.subplans.delete(g);
  });
  plan.nodes.splice(0, plan.nodes.length, ...nodes);
  plan.producer.clear();
  nodes.forEach((pn, i) => {
    for (const o of pn.node.outputs) if (o) plan.producer.set(o, i);
  });
  // Initializers only onnxruntime reads stay out of MLX.
  const keep = new Set<string>([...graphOutputs, ...plan.overridable]);
  for (const pn of nodes) if (!pn.fallback) for (const name of readsOf(pn)) keep.add(name);
  for (const fb of fallbacks) for (const pn of fb.nodes) for (const name of readsOf(pn)) if (!keep.has(name)) plan.constants.delete(name);
  return fallbacks;
}

// ---- the summary `mlx-ort check` prints ----

export interface PartitionSummary {
  /** In run order. */
  partitions: { kind: 'mlx' | 'fallback'; nodes: number; ops: string[]; inputs?: string[]; outputs?: string[] }[];
  mlx: number;
  fallback: number;
  /** The nodes that run on onnxruntime, and why. */
  fallbackNodes: { name: string; op: string; reason: string }[];
  /** Set when fallback splits the graph into many pieces (each boundary copies tensors between MLX and onnxruntime). */
  warning?: string;
}

/** More partitions than this, and `mlx-ort check` warns. */
export const MANY_PARTITIONS = 4;

const opKey = (n: NodeIR) => (n.domain === DEFAULT_DOMAIN ? n.opType : `${n.domain}::${n.opType}`);

/** The partitions of a planned (not contracted) graph, as `mlx-ort check` prints them. */
export function summarizePartitions(plan: GraphPlan): PartitionSummary {
  const partitions = findPartitions(plan);
  const reasons = fallbackReasons(plan);
  const summary: PartitionSummary = { partitions: [], mlx: 0, fallback: 0, fallbackNodes: [] };
  for (const p of partitions) {
    const ops = [...new Set(p.nodes.map((i) => opKey(plan.nodes[i].node)))].sort();
    summary.partitions.push({ kind: p.kind, nodes: p.nodes.length, ops });
    summary[p.kind]++;
    if (p.kind === 'fallback') {
      for (const i of p.nodes) {
        const pn = plan.nodes[i];
        summary.fallbackNodes.push({ name: pn.node.name, op: opKey(pn.node), reason: reasons[i]! });
      }
    }
  }
  if (partitions.length > MANY_PARTITIONS) {
    summary.warning = `fallback splits the graph into ${partitions.length} partitions (${summary.fallback} on onnxruntime): every boundary copies tensors between MLX and onnxruntime on each run, and each fallback partition ends a compiled segment`;
  }
  return summary;
}

/**
 * The summary as `mlx-ort check` prints it: one line per partition, the fallback nodes with their
 * reasons, the warning. `backend`: the CPU backend that would run the fallback partitions, if any resolves.
 */
export function formatPartitions(s: PartitionSummary, backend: string | undefined): string[] {
  if (!s.fallback) return ['partitions: 1 (MLX takes every node)'];
  const lines = [`partitions: ${s.partitions.length} (${s.mlx} on MLX, ${s.fallback} on onnxruntime through ${backend ?? 'nothing'})`];
  if (!backend) lines.push('  neither onnxruntime-node nor onnxruntime-web resolves: create() refuses this model (install one to run it)');
  let k = 0;
  s.partitions.forEach((p, i) => {
    lines.push(`  ${i + 1}. ${p.kind === 'mlx' ? 'MLX' : 'onnxruntime'}: ${p.nodes} node(s) (${p.ops.join(', ')})`);
    if (p.kind !== 'fallback') return;
    for (const n of s.fallbackNodes.slice(k, k + p.nodes)) lines.push(`       ${n.op} '${n.name}': ${n.reason}`);
    k += p.nodes;
  });
  if (s.warning) lines.push(`warning: ${s.warning}`);
  return lines;
}
