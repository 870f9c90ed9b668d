// The OpContext of a planned node. One object per node and program, made once and pointed at the
// run's Env each time the node runs, so a run allocates nothing per node for its context.
import * as mx from '@mlx/core';
import type { AttentionVjpOptions } from '@mlx/kernels';
import type { GraphIR, HostTensor, NodeIR } from '../onnx/index.js';
import type { PlannedNode } from '../plan/graph-plan.js';
import type { Attrs } from '../registry/attrs.js';
import type { OpContext } from '../registry/types.js';
import { NONE, asHost, elemTypeOf, shapeOf, type Value } from '../runtime/value.js';
import type { Env, MemoryLimits } from './env.js';

export type RunSubgraph = (g: GraphIR, inputs: Value[], env: Env) => Value[];

let dataChecks = true;
/**
 * Measurement only, never for use: turns the device data checks (guard) off process-wide, so that
 * the benchmark can price them (bench/model-worker.ts engine `mlx-unchecked`). Indices are still
 * clamped, so memory stays safe; what is lost is the error for out-of-range data. Not exported
 * from the package.
 */
export function setDataChecksForMeasurement(on: boolean): void {
  dataChecks = on;
}

/**
 * Thrown by a top-level node that needs the data of arrays not yet computed, in a run that must
 * not block: the driver evaluates them off the JS thread, then runs the node again (nodes are
 * pure, so running one twice gives the same result).
 */
export class NeedsEval {
  constructor(readonly arrays: mx.Array[]) {}
}

/** Whether `v`, the value of `name` in `env`, is a constant of the plans (the same for every run of the session). */
function isSessionConstant(env: Env, name: string, v: Value): boolean {
  if (env.values.has(name)) return false;
  for (let e: Env | undefined = env; e; e = e.parent) {
    if (e.values.has(name) && e !== env) return false;
    const c = e.plan.constants.get(name);
    if (c) return c === v;
  }
  return false;
}

export class NodeContext implements OpContext {
  readonly node: NodeIR;
  readonly opset: number;
  readonly attrs: Attrs;
  readonly params: unknown;
  readonly inputCount: number;
  readonly where: string;
  /** The Env of the current execution; set by runNode before each call. */
  env!: Env;

  constructor(
    pn: PlannedNode,
    private readonly runSub: RunSubgraph,
  ) {
    this.node = pn.node;
    this.opset = pn.opset;
    this.attrs = pn.attrs;
    this.params = pn.params;
    this.inputCount = pn.node.inputs.length;
    this.where = `node '${pn.node.name}' (${pn.node.opType})`;
  }
  /** Input i without recording a read (for placement and has()). */
  peek(i: number): Value {
    const name = this.node.inputs[i];
    if (!name) return NONE;
    const v = this.env.get(name);
    if (!v) throw new Error(`${this.where}: input '${name}' has no value`);
    return v;
  }
  value(i: number): Value {
    const v = this.peek(i);
    const a = this.env.run.analysis;
    if (a) v.kind === 'host' ? a.hostRead(v) : a.deviceUse(v);
    return v;
  }
  has(i: number): boolean {
    return !!this.node.inputs[i] && this.peek(i).kind !== 'none';
  }
  toArray(v: Value): mx.Array {
    this.env.run.analysis?.deviceUse(v);
    if (v.kind === 'device') return this.lowered(v.array);
    if (v.kind === 'host') return this.lowered(this.env.run.uploads.array(v.tensor));
    throw new Error(`${this.where}: expected a tensor, got a ${v.kind}`);
  }
  /**
   * `a` in the run's mixed-precision dtype where it is float32 (RunState.autocast), else `a`;
   * float16 through RunState.toFloat16 (saturating) where the run has it.
   */
  private lowered(a: mx.Array): mx.Array {
    const low = this.env.run.autocast;
    if (!low || a.dtype !== 'float32') return a;
    const run = this.env.run;
    return run.shared([a, low], () => (low === 'float16' && run.toFloat16 ? (run.toFloat16(a) as mx.Array) : mx.astype(a, low)));
  }
  input(i: number): mx.Array {
    return this.toArray(this.peek(i));
  }
  inputReshaped(i: number, dims: readonly number[]): mx.Array {
    const v = this.peek(i);
    if (v.kind === 'host' && dims.every((d) => d >= 0) && dims.reduce((a, b) => a * b, 1) === v.tensor.dims.reduce((a, b) => a * b, 1)) {
      const a = this.env.run.uploads.reshapedConstant(v.tensor, dims);
      if (a) {
        this.env.run.analysis?.deviceUse(v);
        return this.lowered(a);
      }
    }
    return mx.reshape(this.input(i), dims);
  }
  optional(i: number): mx.Array | undefined {
    return this.has(i) ? this.input(i) : undefined;
  }
  host(i: number): HostTensor {
    const v = this.peek(i);
    this.env.run.analysis?.hostRead(v);
    if (v.kind === 'device' && this.env.run.deferSyncs && this.env.depth === 0 && !v.array.isAvailable()) throw new NeedsEval([v.array]);
    return asHost(v, this.where);
  }
  hostIfKnown(i: number): HostTensor | undefined {
    const v = this.peek(i);
    if (v.kind !== 'host') return undefined;
    this.env.run.analysis?.hostRead(v);
    return v.tensor;
  }
  elemType(i: number): number {
    return elemTypeOf(this.peek(i));
  }
  shape(i: number): number[] {
    const v = this.peek(i);
    this.env.run.analysis?.shapeRead(v);
    return shapeOf(v, `${this.where}, input ${i}`);
  }
  wants(o: number): boolean {
    return !!this.node.outputs[o];
  }
  constantInput(i: number): HostTensor | undefined {
    return this.hostIfKnown(i);
  }
  inputType(i: number): number | undefined {
    return elemTypeOf(this.peek(i));
  }
  guard(bad: mx.Array, describe: (detail: number[]) => string, detail?: mx.Array): void {
    if (!dataChecks) return;
    this.env.run.guards.push({ bad, detail, describe, node: this.node.name, opType: this.node.opType });
  }
  shared<T>(parts: readonly unknown[], make: () => T): T {
    return this.env.run.shared(parts, make);
  }
  prepared<T>(inputs: readonly number[], tag: string, make: () => T): T {
    const env = this.env;
    const from = inputs.map((i) => this.peek(i));
    // Only values that are the session's constants (not a feed overriding an initializer, not
    // data of this run) are prepared once; anything else is made per run, once per run.
    const constant = from.every((v, k) => v.kind === 'none' || isSessionConstant(env, this.node.inputs[inputs[k]], v));
    // Inside a trace (mx.compile) nothing is evaluated: a value made before is a constant of the
    // trace, one not made yet is traced like the node's other ops.
    if (constant && env.run.tracing)
      return env.run.constants.preparedIfMade<T>(this, tag, from) ?? env.run.shared([this, tag, ...from], make);
    if (!constant) return env.run.shared([this, tag, ...from], make);
    return env.run.constants.prepared(this, tag, from, make);
  }
  runSubgraph(g: GraphIR, inputs: Value[]): Value[] {
    this.env.run.analysis?.markSubgraphInputs(inputs);
    return this.runSub(g, inputs, this.env);
  }
  traceSubgraph(g: GraphIR, inputs: Value[]): Value[] | undefined {
    const guards = this.env.run.guards;
    const kept = guards.length;
    try {
      return this.runSub(g, inputs, this.env);
    } catch {
      return undefined;
    } finally {
      guards.length = kept;
    }
  }
  get limits(): MemoryLimits {
    return this.env.run.limits;
  }
  get modelName(): string {
    return this.env.run.modelName;
  }
  get attentionVjp(): AttentionVjpOptions | undefined {
    return this.env.run.attentionVjp;
  }
  canPause(): boolean {
    const run = this.env.run;
    return run.deferSyncs && !run.tracing && this.env.depth === 0;
  }
  pause(arrays: mx.Array[], progress: unknown): void {
    if (!this.canPause()) return;
    this.env.run.progress.set(this, progress);
    throw new NeedsEval(arrays);
  }
  resume<T>(): T | undefined {
    const p = this.env.run.progress.get(this) as T | undefined;
    this.env.run.progress.delete(this);
    return p;
  }
}
