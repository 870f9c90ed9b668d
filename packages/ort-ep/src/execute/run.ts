// Execution of a planned graph: walk the nodes the requested outputs need, building MLX's lazy
// graph; host tensors carry shape math (Shape, Gather on shapes, Concat, ...) so that
// Reshape/Expand/Slice see static arguments.
import * as mx from '@mlx/core';
import type { GraphIR, HostTensor, NodeIR } from '../onnx/index.js';
import type { Attrs } from '../registry/attrs.js';
import type { OpContext, OpResult } from '../registry/types.js';
import { onnxTypeOf } from '../runtime/convert.js';
import { asArray, asHost, elemTypeOf, type Value } from '../runtime/value.js';
import { NodeExecutionError } from '../errors.js';
import { neededNodes, type GraphPlan, type PlannedNode } from '../plan/plan.js';
import { Env } from './env.js';

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


