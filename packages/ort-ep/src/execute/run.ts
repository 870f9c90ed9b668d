// Execution of a planned graph: walk the nodes the requested outputs need, building MLX's lazy
// graph; host tensors carry shape math (Shape, Gather on shapes, Concat, ...) so that
// Reshape/Expand/Slice see static arguments.
import { appendKv, kvAppendNodes } from './kv-append.js';
import * as mx from '@mlx/core';
import { dataTypeName, type GraphIR } from '../onnx/index.js';
import type { GraphPlan, PlannedNode } from '../plan/graph-plan.js';
import { neededNodes } from '../plan/plan.js';
import type { FallbackPartition } from '../plan/graph-plan.js';
import type { CheckContext, OpEntry, OpResult } from '../registry/types.js';
import { onnxTypeOf } from '../runtime/convert.js';
import type { CpuBackend } from '../runtime/onnxruntime.js';
import type { Value } from '../runtime/value.js';
import {
  NodeExecutionError,
  OrtMlxError,
  ResourceLimitError,
  RuntimeTypeRefusal,
  UnholdableTypeError,
  allocationError,
  isAllocationFailure,
} from '../errors.js';
import { NeedsEval, NodeContext } from './context.js';
import { Env } from './env.js';
import { FallbackRunner } from './fallback.js';
import { FallbackHost } from '../runtime/fallback-host.js';
import { computesInFloat64, placeNode } from './placement.js';
import { CPU_PROVIDER, MLX_PROVIDER, typeShapes, type Profiler } from './profiler.js';

function toValue(r: OpResult): Value {
  if (r === undefined) return { kind: 'none' };
  if (r instanceof mx.Array) return { kind: 'device', array: r, onnxType: onnxTypeOf(r.dtype) };
  if ('kind' in r) return r;
  return { kind: 'host', tensor: r };
}

/**
 * A request from a run to the driver: evaluate these arrays (off the JS thread), then continue; or,
 * with `wait`, wait for onnxruntime to run a fallback partition (only asynchronous drivers can).
 */
export interface EvalRequest {
  arrays: mx.Array[];
  /** `cancel`: the run was terminated while waiting (the partition's process may be stopped). */
  wait?: { promise: Promise<void>; what: string; cancel?(): void };
}

/**
 * The executable form of a plan: one NodeContext per node, the programs of its subgraphs, and the
 * needed-node order of each set of requested outputs, all made once.
 */
export class GraphProgram {
  readonly contexts: NodeContext[];
  readonly subprograms = new Map<GraphIR, GraphProgram>();
  /** The onnxruntime side of each fallback partition, by node index. */
  readonly fallbacks = new Map<number, FallbackRunner>();
  private readonly orders = new Map<string, number[]>();

  /** Concat nodes that append a fed KV cache (kv-append.ts). */
  private readonly kvAppend: Set<number>;
  /** The process that runs the fallback partitions (runtime/fallback-host.ts), where there are any. */
  private host?: FallbackHost;

  constructor(
    readonly plan: GraphPlan,
    cpu?: CpuBackend,
  ) {
    this.kvAppend = kvAppendNodes(plan);
    const runSub = (g: GraphIR, inputs: Value[], outer: Env): Value[] => {
      const sub = this.subprograms.get(g);
      if (!sub) throw new Error('internal error: subgraph was not planned');
      const subEnv = new Env(sub.plan, outer.run, outer);
      g.inputs.forEach((inp, i) => {
        if (i < inputs.length) subEnv.values.set(inp.name, inputs[i]);
      });
      return sub.execute(
        subEnv,
        g.outputs.map((o) => o.name),
      );
    };
    this.contexts = plan.nodes.map((pn) => new NodeContext(pn, runSub));
    for (const [g, sp] of plan.subplans) this.subprograms.set(g, new GraphProgram(sp));
    plan.nodes.forEach((pn, idx) => {
      if (!pn.fallback) return;
      if (!cpu) throw new Error('internal error: a fallback partition without a CPU backend');
      // The partitions run in a child process (off the JS thread, and stoppable), except with a
      // module handed in rather than resolved (it has no path a child could load).
      let backend = cpu;
      if (cpu.modulePath) {
        this.host ??= new FallbackHost({ ...cpu, modulePath: cpu.modulePath }, `model ${plan.modelName}`);
        backend = { ...cpu, ort: this.host.module };
      }
      const host = this.host;
      this.fallbacks.set(idx, new FallbackRunner(pn.fallback, backend, `${pn.node.name} (${opList(pn.fallback)})`, () => host?.cancel()));
    });
  }

  /** The indices of the nodes `outputs` need, in graph order (computed once per set). */
  order(outputs: readonly string[]): number[] {
    const key = outputs.join('\0');
    let o = this.orders.get(key);
    if (!o) this.orders.set(key, (o = neededNodes(this.plan, outputs)));
    return o;
  }

  /**
   * Runs node `idx` in `env`, storing its outputs there. Throws NeedsEval (from a top-level node
   * of a run that defers syncs) before storing anything; any other failure is a NodeExecutionError.
   */
  runNode(idx: number, env: Env): void {
    const pn = this.plan.nodes[idx];
    const entry = pn.entry;
    if (!entry) throw new NodeExecutionError(this.plan.modelName, pn.node.name, pn.node.opType, new Error('the node was not planned'));
    const ctx = this.contexts[idx];
    ctx.env = env;
    const analysis = env.run.analysis;
    const profiler = env.depth === 0 ? env.run.profiler : undefined;
    const inputsSeen = profiler ? pn.node.inputs.map((n) => (n ? env.get(n) : undefined)) : undefined;
    // (inputs read before the node runs: a node may consume a donated feed)
    const t0 = profiler ? performance.now() : 0;
    analysis?.begin();
    let results: OpResult[] | undefined;
    try {
      if (this.kvAppend.has(idx) && !env.run.tracing && env.depth === 0) {
        const v = appendKv(ctx);
        if (v) results = [v];
      }
      if (!results && placeNode(entry, ctx) === 'host') results = entry.host!(ctx);
      if (!results) {
        if (!entry.run) throw new Error(`internal error: ${pn.node.opType} runs on the host only, and its host() gave no result`);
        const run = entry.run;
        // float64 on a GPU session: the session's CPU stream (MLX's GPU backends have none).
        results = mx.defaultStream().device.type === 'gpu' && computesInFloat64(ctx) ? mx.withStream('cpu', () => run(ctx)) : run(ctx);
      }
    } catch (e) {
      analysis?.abort();
      if (e instanceof NeedsEval || e instanceof ResourceLimitError || e instanceof RuntimeTypeRefusal) throw e;
      if (isAllocationFailure(e)) throw allocationError(e, this.plan.modelName, `node '${pn.node.name}' (${pn.node.opType})`);
      const refused = refusalAtRunTime(entry, ctx, e);
      if (refused) throw new RuntimeTypeRefusal(this.plan.modelName, pn.node.name, pn.node.opType, pn.node, refused, e);
      throw new NodeExecutionError(this.plan.modelName, pn.node.name, pn.node.opType, e);
    }
    const values = storeOutputs(pn, env, results);
    if (profiler) this.profileNode(profiler, idx, env, inputsSeen!, values, t0);
    analysis?.end(values, env.depth === 0 ? idx : undefined);
    const limit = env.run.limits.maxTensorBytes;
    if (limit) for (const v of values) if (v.kind === 'device') checkTensorBytes(v.array, limit, this.plan.modelName, pn);
    if (DEBUG_SYNC) debugSync(pn, values);
  }

  /**
   * A profiled node's event: its outputs are evaluated here, on their own, so that the event's
   * time is the node's compute (see profiler.ts).
   */
  private profileNode(profiler: Profiler, idx: number, env: Env, inputs: (Value | undefined)[], values: Value[], t0: number): void {
    const pn = this.plan.nodes[idx];
    const arrays = values.flatMap((v) => (v.kind === 'device' && !v.array.isAvailable() ? [v.array] : []));
    const limits = env.run.limits;
    if (arrays.length) mx.evaluateWithin(arrays, { maxArrayBytes: limits.maxTensorBytes, maxTotalBytes: limits.maxSessionBytes });
    const end = performance.now();
    // As onnxruntime's: the model's initializers are parameters, not inputs (Constant nodes' values are inputs).
    const isParam = (name: string) => this.plan.graph.initializers.has(name) || this.plan.residentInitializers?.has(name) === true;
    const names = pn.node.inputs;
    const activations = inputs.filter((v, k) => v && names[k] && !isParam(names[k])) as Value[];
    const params = inputs.filter((v, k) => v && names[k] && isParam(names[k])) as Value[];
    profiler.add('Node', `${pn.node.name}_kernel_time`, t0, end, {
      op_name: pn.node.opType,
      provider: MLX_PROVIDER,
      node_index: String(idx),
      placement: placeNode(pn.entry!, this.contexts[idx]),
      input_type_shape: typeShapes(activations.map(typeShapeOf)),
      output_type_shape: typeShapes(values.map(typeShapeOf)),
      activation_size: String(activations.reduce((n, v) => n + byteSizeOf(v), 0)),
      parameter_size: String(params.reduce((n, v) => n + byteSizeOf(v), 0)),
      output_size: String(values.reduce((n, v) => n + byteSizeOf(v), 0)),
    });
  }

  /** Runs the needed nodes in `env` synchronously and returns the values of `outputs`. */
  execute(env: Env, outputs: readonly string[]): Value[] {
    for (const idx of this.order(outputs)) this.runNode(idx, env);
    return outputsOf(env, outputs);
  }

  /**
   * Runs nodes `indices` in `env`, yielding an EvalRequest whenever a node needs data that is not
   * computed yet (the run's deferSyncs must be set); the node then runs again.
   */
  *runNodes(indices: readonly number[], env: Env): Generator<EvalRequest, void, void> {
    // In run(), graph building gives the event loop a turn every SLICE_MS (a long eager plan).
    const sliced = env.run.deferSyncs;
    let slice = sliced ? performance.now() : 0;
    for (const idx of indices) {
      if (sliced && performance.now() - slice > SLICE_MS) {
        yield { arrays: [] };
        slice = performance.now();
      }
      const fallback = this.fallbacks.get(idx);
      if (fallback) {
        yield* this.runFallback(idx, fallback, env);
        continue;
      }
      for (;;) {
        try {
          this.runNode(idx, env);
          break;
        } catch (e) {
          if (!(e instanceof NeedsEval)) throw e;
          yield { arrays: e.arrays };
        }
      }
    }
  }

  /**
   * Runs a fallback partition: its inputs are read on the host (MLX arrays evaluated first, off
   * the JS thread), onnxruntime runs the sub-model, and its outputs become host values. For the
   * compiled path's analysis it is a node that reads its inputs on the host: a step between
   * segments (or a static value when none of its inputs depends on the feeds).
   */
  private *runFallback(idx: number, runner: FallbackRunner, env: Env): Generator<EvalRequest, void, void> {
    const pn = this.plan.nodes[idx];
    const fb = runner.partition;
    const fail = (e: unknown) => new NodeExecutionError(this.plan.modelName, pn.node.name, `onnxruntime: ${opList(fb)}`, e);
    if (!env.run.deferSyncs)
      throw new OrtMlxError(
        `model ${this.plan.modelName}: ${pn.node.name} (${fb.nodes.length} node(s)) runs on onnxruntime, whose runs are asynchronous: use run(), not runSync()`,
      );
    const values = fb.inputs.map((name) => {
      const v = env.get(name);
      if (!v) throw fail(new Error(`input '${name}' has no value`));
      return v;
    });
    const onDevice = (v: Value): mx.Array[] =>
      v.kind === 'device' ? (v.array.isAvailable() ? [] : [v.array]) : v.kind === 'sequence' ? v.items.flatMap(onDevice) : [];
    const pending = values.flatMap(onDevice);
    if (pending.length && env.run.deferSyncs) yield { arrays: pending };
    let outputs: Value[] | undefined;
    let error: unknown;
    const profiler = env.depth === 0 ? env.run.profiler : undefined;
    const t0 = performance.now();
    const promise = runner.run(values).then(
      (o) => void (outputs = o),
      (e: unknown) => void (error = e),
    );
    yield { arrays: [], wait: { promise, what: `${pn.node.name} (${fb.nodes.length} node(s))`, cancel: () => runner.cancel() } };
    profiler?.add('Node', `${pn.node.name}_kernel_time`, t0, performance.now(), {
      op_name: opList(fb),
      provider: CPU_PROVIDER,
      node_index: String(idx),
      nodes: fb.nodes.map((n) => n.node.name),
      input_type_shape: typeShapes(values.map(typeShapeOf)),
      output_type_shape: typeShapes((outputs ?? []).map(typeShapeOf)),
      ...(error ? { error: String((error as Error).message ?? error).split('\n')[0] } : {}),
    });
    if (!outputs) throw fail(error ?? new Error('onnxruntime gave no result'));
    const analysis = env.run.analysis;
    analysis?.begin();
    for (const v of values) analysis?.hostRead(v);
    const stored: Value[] = outputs.map((v, k) => {
      env.values.set(fb.outputs[k], v);
      return v;
    });
    analysis?.end(stored, env.depth === 0 ? idx : undefined);
  }

  /** Ends the fallback partitions' process now (a partition running there is stopped, its run fails). */
  stopFallbacks(): void {
    this.host?.close();
  }

  /** Closes the onnxruntime sessions of the fallback partitions. */
  releaseFallbacks(): void {
    for (const r of this.fallbacks.values()) r.release();
    this.host?.close();
  }
}

/** The op types of a fallback partition, for messages: 'Softmax, Gelu x2'. */
function opList(fb: FallbackPartition): string {
  const counts = new Map<string, number>();
  for (const pn of fb.nodes) counts.set(pn.node.opType, (counts.get(pn.node.opType) ?? 0) + 1);
  return [...counts].map(([op, n]) => (n > 1 ? `${op} x${n}` : op)).join(', ');
}

// MLX_ORT_DEBUG_SYNC=1: evaluate every node's results as soon as it runs and name it on stderr,
// to find the node behind a failure deep in MLX (a crash names no node). Slow; for debugging.
const DEBUG_SYNC = process.env.MLX_ORT_DEBUG_SYNC === '1';
/** Longest stretch of graph building in run() before the event loop gets a turn (ms). */
const SLICE_MS = 8;
function debugSync(pn: PlannedNode, values: Value[]): void {
  process.stderr.write(`[mlx-ort] ${pn.node.opType} '${pn.node.name}'\n`);
  const arrays = values.flatMap((v) => (v.kind === 'device' ? [v.array] : []));
  if (arrays.length) mx.evaluate(arrays);
}

/** Refuses, before it is evaluated, a node result larger than the per-tensor limit. */
function checkTensorBytes(a: mx.Array, limit: number, model: string, pn: PlannedNode): void {
  const shape = a.shape;
  let bytes = a.itemsize;
  for (const d of shape) bytes *= d;
  if (bytes > limit) {
    throw new ResourceLimitError(
      `model ${model}, node '${pn.node.name}' (${pn.node.opType}): its result of shape [${shape.join(', ')}] ${a.dtype} needs ${bytes} bytes, over the limit of ${limit} bytes per tensor (maxTensorBytes)`,
    );
  }
}

export function outputsOf(env: Env, outputs: readonly string[]): Value[] {
  return outputs.map((name) => {
    const v = env.get(name);
    if (!v) throw new Error(`graph output '${name}' was not computed`);
    return v;
  });
}

function storeOutputs(pn: PlannedNode, env: Env, results: OpResult[]): Value[] {
  const outs = pn.node.outputs;
  const values: Value[] = [];
  for (let i = 0; i < outs.length; i++) {
    if (!outs[i]) continue;
    const v = toValue(results[i]);
    env.values.set(outs[i], v);
    values.push(v);
  }
  return values;
}

/**
 * Why MLX refuses a node that failed, judged by its check on the element types it was fed (the
 * plan may not have known them): undefined when the check takes them (the failure is the node's own).
 */
function refusalAtRunTime(entry: OpEntry, ctx: NodeContext, e: unknown): string | undefined {
  let reason: string | undefined;
  // An input MLX cannot hold (a string tensor where the kernel uploads it).
  for (let c = e; c instanceof Error; c = c.cause)
    if (c instanceof UnholdableTypeError) reason = `${dataTypeName(c.elemType)} tensors cannot go to MLX`;
  try {
    if (!reason && entry.check?.(ctx)) {
      // Only a refusal the types cause: one the check makes knowing no type at all (a missing
      // optional package, an attribute) is the node's own error.
      const blind: CheckContext = {
        node: ctx.node,
        opset: ctx.opset,
        attrs: ctx.attrs,
        params: ctx.params,
        constantInput: () => undefined,
        inputType: () => undefined,
      };
      if (!entry.check(blind)) reason = entry.check(ctx);
    }
  } catch {
    // the check itself fails on these inputs: the node's own error stands
  }
  if (!reason) return undefined;
  const types = ctx.node.inputs.map((name, i) => {
    if (!name) return '-';
    try {
      return dataTypeName(ctx.elemType(i));
    } catch {
      return '?';
    }
  });
  return `${reason} (inputs: ${types.join(', ')})`;
}

/** onnxruntime's names of element types in its profiles (C++ type names). */
const ortTypeNames: Record<string, string> = {
  float32: 'float',
  float64: 'double',
  float16: 'MLFloat16',
  bfloat16: 'BFloat16',
  string: 'std::string',
};

/** A value's element type (as onnxruntime's profiles name it) and dims; sequences and maps by their kind. */
function typeShapeOf(v: Value): { type: string; dims: number[] } {
  const name = (t: number) => ortTypeNames[dataTypeName(t)] ?? dataTypeName(t);
  switch (v.kind) {
    case 'host':
      return { type: name(v.tensor.dtype), dims: [...v.tensor.dims] };
    case 'device':
      return { type: name(v.onnxType), dims: [...v.array.shape] };
    case 'sequence':
      return { type: `seq(${name(v.elemType)})`, dims: [v.items.length] };
    case 'map':
      return { type: `map(${name(v.keys.dtype)},${name(v.values.dtype)})`, dims: [...v.keys.dims] };
    default:
      return { type: 'none', dims: [] };
  }
}

function byteSizeOf(v: Value): number {
  if (v.kind === 'device') return v.array.nbytes;
  if (v.kind === 'host') {
    const d = v.tensor.data as { byteLength?: number; length: number };
    return d.byteLength ?? d.length;
  }
  if (v.kind === 'sequence') return v.items.reduce((n, x) => n + byteSizeOf(x), 0);
  return 0;
}
