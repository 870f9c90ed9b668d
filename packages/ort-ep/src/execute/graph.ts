// Planning and execution of one graph (the main graph or an If/Loop/Scan body).
// Plan once: look every node up in the registry, fold nodes whose inputs are all constant.
// Run: walk the nodes the requested outputs need, building MLX's lazy graph; host tensors carry
// shape math (Shape, Gather on shapes, Concat, ...) so Reshape/Expand/Slice see static arguments.
import * as mx from '@mlx/core';
import { OnnxDataType, type GraphIR, type HostTensor, type NodeIR } from '../onnx/index.js';
import { Attrs } from '../registry/attrs.js';
import { DEFAULT_DOMAIN, type OpRegistry } from '../registry/registry.js';
import type { CheckContext, OpContext, OpEntry, OpResult, Value } from '../registry/types.js';
import { download, onnxTypeOf, upload } from '../runtime/convert.js';
import { NodeExecutionError, type UnsupportedNode } from '../errors.js';

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

/** Values of one execution: this graph's, then the enclosing graph's. */
export class Env {
  readonly values = new Map<string, Value>();
  constructor(readonly plan: GraphPlan, readonly parent?: Env) {}
  get(name: string): Value | undefined {
    return this.values.get(name) ?? this.plan.constants.get(name) ?? this.parent?.get(name);
  }
}

// Host tensors are uploaded at most once per plan (initializers) or per run (everything else).
const uploads = new WeakMap<HostTensor, mx.Array>();
const persistent = new WeakSet<HostTensor>();

export function markPersistent(plan: GraphPlan): void {
  for (const v of plan.constants.values()) if (v.kind === 'host') persistent.add(v.tensor);
  for (const sp of plan.subplans.values()) markPersistent(sp);
}

/**
 * Frees what a plan holds natively: folded device constants and the persistent uploads of its
 * host constants (initializers), in subgraph plans too. The uploads live in `uploads`, not in
 * `plan.constants`, so disposing the device constants alone would leave every weight behind.
 */
export function releasePlan(plan: GraphPlan): void {
  for (const v of plan.constants.values()) {
    if (v.kind === 'device') v.array.dispose();
    else if (v.kind === 'host') {
      uploads.get(v.tensor)?.dispose();
      uploads.delete(v.tensor);
    }
  }
  for (const sp of plan.subplans.values()) releasePlan(sp);
}

export function asArray(v: Value, where: string): mx.Array {
  if (v.kind === 'device') return v.array;
  if (v.kind === 'host') {
    let a = uploads.get(v.tensor);
    if (!a || a.disposed) {
      a = upload(v.tensor);
      if (persistent.has(v.tensor)) mx.persist(a);
      uploads.set(v.tensor, a);
    }
    return a;
  }
  throw new Error(`${where}: expected a tensor, got a ${v.kind}`);
}

export function asHost(v: Value, where: string): HostTensor {
  if (v.kind === 'host') return v.tensor;
  if (v.kind === 'device') return download(v.array, v.onnxType);
  throw new Error(`${where}: expected a tensor, got a ${v.kind}`);
}

export function elemTypeOf(v: Value): number {
  if (v.kind === 'host') return v.tensor.dtype;
  if (v.kind === 'device') return v.onnxType;
  if (v.kind === 'sequence') return v.elemType;
  return OnnxDataType.UNDEFINED ?? 0;
}

function toValue(r: OpResult): Value {
  if (r === undefined) return { kind: 'none' };
  if (r instanceof mx.Array) return { kind: 'device', array: r, onnxType: onnxTypeOf(r.dtype) };
  if ('kind' in r) return r;
  return { kind: 'host', tensor: r };
}

type RunSub = (g: GraphIR, inputs: Value[], env: Env) => Value[];

/** The OpContext of one node in one run: a class, so a run allocates one object per node, not a closure per method. */
class NodeContext implements OpContext {
  readonly node: NodeIR;
  readonly opset: number;
  readonly attrs: Attrs;
  readonly inputCount: number;
  constructor(pn: PlannedNode, private readonly env: Env, private readonly runSub: RunSub) {
    this.node = pn.node;
    this.opset = pn.opset;
    this.attrs = pn.attrs;
    this.inputCount = pn.node.inputs.length;
  }
  get where(): string {
    return `node '${this.node.name}' (${this.node.opType})`;
  }
  value(i: number): Value {
    const name = this.node.inputs[i];
    if (!name) return NONE;
    const v = this.env.get(name);
    if (!v) throw new Error(`${this.where}: input '${name}' has no value`);
    return v;
  }
  has(i: number): boolean {
    return !!this.node.inputs[i] && this.value(i).kind !== 'none';
  }
  input(i: number): mx.Array {
    return asArray(this.value(i), this.where);
  }
  host(i: number): HostTensor {
    return asHost(this.value(i), this.where);
  }
  hostIfKnown(i: number): HostTensor | undefined {
    const v = this.value(i);
    return v.kind === 'host' ? v.tensor : undefined;
  }
  elemType(i: number): number {
    return elemTypeOf(this.value(i));
  }
  shape(i: number): number[] {
    const v = this.value(i);
    if (v.kind === 'host') return v.tensor.dims;
    if (v.kind === 'device') return v.array.shape;
    throw new Error(`${this.where}: input ${i} is not a tensor`);
  }
  constantInput(i: number): HostTensor | undefined {
    return this.hostIfKnown(i);
  }
  inputType(i: number): number | undefined {
    return elemTypeOf(this.value(i));
  }
  runSubgraph(g: GraphIR, inputs: Value[]): Value[] {
    return this.runSub(g, inputs, this.env);
  }
}
const NONE: Value = Object.freeze({ kind: 'none' }) as Value;

function makeContext(pn: PlannedNode, env: Env, runSub: RunSub): OpContext {
  return new NodeContext(pn, env, runSub);
}

/** Host execution is for small tensors only: shape math, not data. */
const HOST_LIMIT = 4096;
function smallHostInputs(ctx: OpContext): boolean {
  for (let i = 0; i < ctx.inputCount; i++) {
    const v = ctx.value(i);
    if (v.kind === 'none') continue;
    if (v.kind !== 'host') return false;
    if (v.tensor.data.length > HOST_LIMIT) return false;
  }
  return true;
}

export function runNode(pn: PlannedNode, env: Env, plan: GraphPlan, runSub: (g: GraphIR, inputs: Value[], env: Env) => Value[]): void {
  const ctx = makeContext(pn, env, runSub);
  let results: OpResult[] | undefined;
  try {
    if (pn.entry.host && smallHostInputs(ctx)) results = pn.entry.host(ctx);
    results ??= pn.entry.run(ctx);
  } catch (e) {
    throw new NodeExecutionError(plan.modelName, pn.node.name, pn.node.opType, e);
  }
  pn.node.outputs.forEach((name, i) => {
    if (name) env.values.set(name, toValue(results![i]));
  });
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

/** Runs a graph's needed nodes in `env` and returns the values of `outputs`. */
export function executeGraph(plan: GraphPlan, env: Env, outputs: string[]): Value[] {
  const runSub = (g: GraphIR, inputs: Value[], outer: Env): Value[] => {
    const sp = plan.subplans.get(g);
    if (!sp) throw new Error('internal error: subgraph was not planned');
    const subEnv = new Env(sp, outer);
    g.inputs.forEach((inp, i) => {
      if (i < inputs.length) subEnv.values.set(inp.name, inputs[i]);
    });
    return executeGraph(sp, subEnv, g.outputs.map((o) => o.name));
  };
  for (const idx of neededNodes(plan, outputs)) runNode(plan.nodes[idx], env, plan, runSub);
  return outputs.map((name) => {
    const v = env.get(name);
    if (!v) throw new Error(`graph output '${name}' was not computed`);
    return v;
  });
}

/** Folds nodes whose inputs are all constants, once, at plan time. Returns how many were folded. */
export function foldConstants(plan: GraphPlan): number {
  let folded = 0;
  const env = new Env(plan);
  const runSub = () => {
    throw new Error('subgraphs are not folded');
  };
  // Initializers that are also graph inputs are defaults a feed may override: not constants.
  const overridable = new Set(plan.graph.inputs.map((i) => i.name));
  for (const pn of plan.nodes) {
    if (!pn.entry || pn.attrs.graphs().length) continue;
    const ins = pn.node.inputs.filter((i) => i);
    if (!ins.every((i) => plan.constants.has(i) && !overridable.has(i))) continue;
    if (nondeterministic.has(pn.node.opType)) continue;
    try {
      runNode(pn, env, plan, runSub);
    } catch {
      continue; // leave it to run time, where the error names the run
    }
    for (const o of pn.node.outputs) {
      const v = o ? env.values.get(o) : undefined;
      if (!v) continue;
      if (v.kind === "device") mx.persist(v.array);
      plan.constants.set(o, v);
    }
    folded++;
  }
  return folded;
}

const nondeterministic = new Set(['RandomNormal', 'RandomUniform', 'RandomNormalLike', 'RandomUniformLike', 'Multinomial', 'Bernoulli', 'Dropout']);
