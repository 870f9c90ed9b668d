// Gradients through a session (MlxSession.valueAndGrad): the plan is walked eagerly, node by node
// (the uncompiled path), inside MLX's valueAndGrad, with the chosen inputs and initializers as the
// traced arguments and everything else as constants. Nodes folded at plan time that depend on a
// differentiated initializer run again. What would silently give a wrong gradient is refused
// (NotDifferentiableError naming the nodes): a host read of a differentiated value's data, a
// fallback partition, a value that is not a floating-point scalar.
import * as mx from '@mlx/core';
import type { AttentionVjpOptions, AttentionVjpStrategy } from '@mlx/kernels';
import { OnnxDataType, dataTypeName, type HostTensor } from './onnx/index.js';
import type { GraphPlan } from './plan/graph-plan.js';
import type { Value } from './runtime/value.js';
import { elemTypeOf } from './runtime/value.js';
import { Analysis } from './execute/analysis.js';
import { Env, RunState } from './execute/env.js';
import { outputsOf, type GraphProgram } from './execute/run.js';
import { InvalidFeedError, NodeExecutionError, NotDifferentiableError, OrtMlxError } from './errors.js';

export interface ValueAndGradOptions {
  /**
   * What to differentiate: the name of an output holding a floating-point scalar (one element),
   * or a function of the outputs (MLX arrays, by name) that returns one, written with
   * `@mlx/core` ops (a loss against labels, a sum of several outputs).
   */
  output: string | ((outputs: Record<string, mx.Array>) => mx.Array);
  /** The graph inputs (fed) and initializers to differentiate with respect to, by name. */
  wrt: readonly string[];
  /**
   * The outputs to compute and return (and, for a function `output`, to pass to it): by default
   * the named output alone, or every output of the model for a function.
   */
  fetches?: readonly string[];
  /**
   * Leave the gradients and the outputs on the device: device Values whose arrays the caller
   * owns (and disposes), as MlxRunOptions.keepOnDevice does for a run.
   */
  keepOnDevice?: boolean;
  /**
   * Mixed precision: the walk computes in this dtype, every float32 value a node reads (the
   * float32 parameters and inputs differentiated, the other initializers, feeds and results) cast
   * to it, while the gradients come back float32, for the float32 values (d value / d the master
   * copy, through the casts). The outputs, given to a loss function and returned, are cast back to
   * float32, so that the loss itself is computed in float32. Ops that keep a wider accumulator for
   * low precision (norms, softmax, attention) still do. 'float16' may overflow or underflow in the
   * backward pass: trainStep scales the loss for it (TrainStepOptions.lossScaler).
   */
  mixedPrecision?: MixedPrecision;
  /**
   * Gradient checkpointing by layer: each layer's activations are recomputed in the backward pass
   * (MLX's checkpoint) instead of being kept from the forward pass, so that the peak memory holds
   * one layer's activations beside the layers' outputs, for about one more forward pass of
   * compute. 'layers' finds the layers from the node and initializer names (`layers.N`, `layer.N`,
   * `h.N`, `blocks.N`, `lN.`); a list of prefixes groups the nodes whose name, or the name of an
   * initializer they read, starts with one of them. A node matching none joins the layer of the
   * node that made its first input. Same gradients as without.
   */
  checkpoint?: 'layers' | readonly string[];
  /**
   * The backward pass of the attention nodes (com.microsoft Attention, MultiHeadAttention,
   * GroupQueryAttention, PagedAttention, ai.onnx Attention), which @mlx/kernels differentiates with
   * its own VJP: `workspaceBytes`, the bytes each attention node's backward pass may allocate
   * beyond its inputs (default 512 MiB; under it 'auto' takes the tiled strategy, blocks of
   * queries and keys, where the dense one's score buffers do not fit), and `strategy` ('auto',
   * 'dense', 'tiled' or 'autodiff'). Same gradients whatever the budget, to rounding.
   */
  attention?: AttentionGradOptions;
}

/** ValueAndGradOptions.attention: the attention nodes' backward pass. */
export interface AttentionGradOptions {
  /** Bytes one attention node's backward pass may allocate beyond its inputs (a positive integer; default 512 MiB). */
  workspaceBytes?: number;
  /** 'auto' (default: dense where its score buffers fit the workspace, else tiled), 'dense', 'tiled' or 'autodiff'. */
  strategy?: AttentionVjpStrategy;
}

const ATTENTION_STRATEGIES: readonly string[] = ['auto', 'dense', 'tiled', 'autodiff'];

/** Checks an `attention` option (undefined: the kernels' defaults); returns the kernels' vjp options. */
export function checkAttentionOptions(a: unknown, what: string): AttentionVjpOptions | undefined {
  if (a === undefined) return undefined;
  if (typeof a !== 'object' || a === null || Array.isArray(a))
    throw new TypeError(`${what}: attention must be an object { workspaceBytes?, strategy? }, got ${a === null ? 'null' : typeof a}`);
  const unknown = Object.keys(a).filter((k) => k !== 'workspaceBytes' && k !== 'strategy');
  if (unknown.length)
    throw new TypeError(
      `${what}: attention has unknown option(s) ${unknown.map((k) => `'${k}'`).join(', ')} (known: workspaceBytes, strategy)`,
    );
  const { workspaceBytes, strategy } = a as AttentionGradOptions;
  if (workspaceBytes !== undefined && (typeof workspaceBytes !== 'number' || !Number.isSafeInteger(workspaceBytes) || workspaceBytes <= 0))
    throw new RangeError(`${what}: attention.workspaceBytes must be a positive integer (bytes), got ${String(workspaceBytes)}`);
  if (strategy !== undefined && (typeof strategy !== 'string' || !ATTENTION_STRATEGIES.includes(strategy)))
    throw new TypeError(
      `${what}: attention.strategy must be one of ${ATTENTION_STRATEGIES.map((x) => `'${x}'`).join(', ')}, got ${typeof strategy === 'string' ? `'${strategy}'` : String(strategy)}`,
    );
  const out: AttentionVjpOptions = {};
  if (workspaceBytes !== undefined) out.workspaceBytes = workspaceBytes;
  if (strategy !== undefined) out.strategy = strategy;
  return out;
}

/** The low dtypes of mixed precision (ValueAndGradOptions.mixedPrecision). */
export type MixedPrecision = 'bfloat16' | 'float16';

/** Checks a mixedPrecision option (undefined: off). */
export function checkMixedPrecision(m: unknown, what: string): MixedPrecision | undefined {
  if (m === undefined || m === 'bfloat16' || m === 'float16') return m;
  throw new TypeError(
    `${what}: mixedPrecision must be 'bfloat16' or 'float16' (or left out for float32), got ${typeof m === 'string' ? `'${m}'` : String(m)}`,
  );
}

export interface ValueAndGradResult {
  /** The value differentiated. */
  value: number;
  /** d value / d name, for each name of `wrt`: the name's shape and element type. */
  grads: Record<string, HostTensor | Value>;
  /** The outputs computed on the way (`fetches`). */
  outputs: Record<string, HostTensor | Value>;
}

/** What valueAndGrad needs of a session. */
export interface GradTarget {
  modelName: string;
  program: GraphProgram;
  /** The model's (user) inputs: names of wrt that are fed. */
  inputNames: readonly string[];
  outputNames: readonly string[];
  /** The graph rewrites the session's plan applied, by name. */
  rewrites: Readonly<Record<string, number | undefined>>;
}

/**
 * Rewrites that replace initializers by ones derived from them (transposed, joined, folded,
 * dequantized, packed): an initializer they read is no longer what the nodes use.
 */
export const DERIVING_REWRITES = [
  'dequantize-constants',
  'matmul-add',
  'gemm',
  'sibling-matmul',
  'pack-matmul',
  'transpose-matmul',
  'conv-batch-norm',
  'channels-last',
];

/** The lazy results of one valueAndGrad: the caller evaluates them within the run and collects them. */
export interface GradBuilt {
  value: mx.Array;
  grads: Value[];
  outputs: Value[];
  fetches: string[];
}

const FLOATS: ReadonlySet<number> = new Set([OnnxDataType.FLOAT, OnnxDataType.DOUBLE, OnnxDataType.FLOAT16, OnnxDataType.BFLOAT16]);

/**
 * An Analysis that remembers the top-level nodes which read a differentiated value's data on the
 * host (the differentiated values are its "feeds"): their results are constants to MLX's VJP.
 */
class HostReads extends Analysis {
  readonly nodes: number[] = [];
  private depth = 0;
  private read = false;

  override begin(): void {
    if (this.depth++ === 0) this.read = false;
    super.begin();
  }
  override abort(): void {
    this.depth--;
    super.abort();
  }
  override hostRead(v: Value): void {
    if (this.isDynamic(v)) this.read = true;
    super.hostRead(v);
  }
  override end(outputs: Value[], index?: number): void {
    super.end(outputs, index);
    this.depth--;
    if (index !== undefined && this.read) this.nodes.push(index);
  }
}

/** `name (OpType)` of a planned node, for messages. */
const nodeLabel = (plan: GraphPlan, idx: number) => `'${plan.nodes[idx].node.name}' (${plan.nodes[idx].node.opType})`;

/**
 * The nodes `fetches` need when the values `wrt` change: as neededNodes, except that a node folded
 * at plan time runs again when it depends on one of `wrt`.
 */
function gradOrder(plan: GraphPlan, fetches: readonly string[], wrt: ReadonlySet<string>): number[] {
  const tainted = new Set(wrt);
  for (const pn of plan.nodes) {
    if (pn.node.inputs.some((i) => i && tainted.has(i)) || pn.outerReads.some((i) => tainted.has(i)))
      for (const o of pn.node.outputs) if (o) tainted.add(o);
  }
  const need = new Set<number>();
  const stack = [...fetches];
  while (stack.length) {
    const n = stack.pop()!;
    if (wrt.has(n) || (plan.constants.has(n) && !tainted.has(n))) continue;
    const idx = plan.producer.get(n);
    if (idx === undefined || need.has(idx)) continue;
    need.add(idx);
    const pn = plan.nodes[idx];
    for (const i of pn.node.inputs) if (i) stack.push(i);
    for (const i of pn.outerReads) stack.push(i);
  }
  return [...need].sort((a, b) => a - b);
}

/**
 * Builds value and gradients (lazily, their arrays collected into `run.arrays`) on the calling
 * thread: the graph is walked once, inside MLX's valueAndGrad. Host reads of data not computed yet
 * block (shape math on constants is cheap; the walk never defers). With `lossScale` (trainStep's
 * float16 loss scaling) the gradients are those of value * lossScale, for the caller to divide;
 * the value is the unscaled one.
 */
export function buildValueAndGrad(
  target: GradTarget,
  run: RunState,
  feeds: Record<string, HostTensor | Value>,
  options: ValueAndGradOptions,
  lossScale?: number,
): GradBuilt {
  const { modelName: model, program } = target;
  const plan = program.plan;
  if (typeof options !== 'object' || options === null) throw new TypeError('valueAndGrad: options { output, wrt } are required');
  const { output, wrt } = options;
  if (typeof output !== 'string' && typeof output !== 'function')
    throw new TypeError(`valueAndGrad: output must be an output's name or a function of the outputs, got ${typeof output}`);
  if (!Array.isArray(wrt) || wrt.length === 0 || wrt.some((w) => typeof w !== 'string'))
    throw new TypeError('valueAndGrad: wrt must be a non-empty list of input or initializer names');
  if (new Set(wrt).size !== wrt.length) throw new TypeError(`valueAndGrad: wrt names a value twice: ${wrt.join(', ')}`);
  const low = checkMixedPrecision(options.mixedPrecision, 'valueAndGrad');
  const layerOf = checkpointKeys(options.checkpoint);
  const attentionVjp = checkAttentionOptions(options.attention, 'valueAndGrad');
  const fetches = [...(options.fetches ?? (typeof output === 'string' ? [output] : target.outputNames))];
  if (typeof output === 'string' && !fetches.includes(output)) fetches.unshift(output);
  for (const f of fetches)
    if (!target.outputNames.includes(f) && !plan.producer.has(f))
      throw new InvalidFeedError(`model ${model}: unknown output '${f}' (outputs are: ${target.outputNames.join(', ')})`);

  // The differentiated values: fed inputs (their feeds) and initializers (the plan's constants).
  const primals: mx.Array[] = [];
  const types: number[] = [];
  for (const name of wrt) {
    const fed = feeds[name];
    const isInitializer = plan.graph.initializers.has(name) || plan.residentInitializers?.has(name) === true;
    let v: Value | undefined;
    if (fed !== undefined) v = 'kind' in fed ? (fed as Value) : { kind: 'host', tensor: fed as HostTensor };
    else if (isInitializer) v = plan.constants.get(name);
    if (!v) {
      const what = target.inputNames.includes(name)
        ? `input '${name}' is not fed`
        : `'${name}' is neither an input nor an initializer of the model`;
      throw new InvalidFeedError(
        `model ${model}: valueAndGrad: ${what}${target.inputNames.includes(name) ? '' : ' as planned (a graph rewrite may have folded it away: create the session with graphRewrites: false)'}`,
      );
    }
    if (v.kind !== 'host' && v.kind !== 'device')
      throw new NotDifferentiableError(
        `model ${model}: valueAndGrad: '${name}' is a ${v.kind}: gradients are taken with respect to tensors`,
      );
    const t = elemTypeOf(v);
    if (!FLOATS.has(t))
      throw new NotDifferentiableError(
        `model ${model}: valueAndGrad: '${name}' is ${dataTypeName(t)}: only floating-point tensors have gradients`,
      );
    types.push(t);
    primals.push(run.toArray(v, name));
  }

  const initializers = wrt.filter((name) => feeds[name] === undefined);
  const deriving = DERIVING_REWRITES.filter((r) => target.rewrites[r]).map((r) => `${r} x${target.rewrites[r]}`);
  if (initializers.length && deriving.length)
    throw new NotDifferentiableError(
      `model ${model}: valueAndGrad: the session's graph rewrites (${deriving.join(', ')}) replaced initializers by values derived from them, so the gradient with respect to ${initializers.map((n) => `'${n}'`).join(', ')} could miss the nodes that read them: create the session with graphRewrites: false to differentiate with respect to initializers`,
    );

  const wrtSet = new Set(wrt);
  const order = gradOrder(plan, fetches, wrtSet);
  const fallbacks = order.filter((idx) => program.fallbacks.has(idx));
  if (fallbacks.length) {
    const names = fallbacks.flatMap((idx) => plan.nodes[idx].fallback!.nodes.map((pn) => pn.node.name));
    const ops = fallbacks.flatMap((idx) => plan.nodes[idx].fallback!.nodes.map((pn) => `'${pn.node.name}' (${pn.node.opType})`));
    throw new NotDifferentiableError(
      `model ${model}: valueAndGrad: ${ops.length} node(s) run on onnxruntime (a fallback partition), which MLX cannot differentiate through: ${ops.join(', ')}`,
      { nodes: names },
    );
  }

  const steps = layerOf ? layerSteps(plan, order, layerOf, model) : undefined;
  const closures: mx.CompiledFunction[] = [];
  // float16: a cast that saturates at its largest finite value. Masks written as float32's lowest
  // (-3.4e38, -1e9) would become -inf, and 0 * -inf in the mask arithmetic NaN. Its derivative is
  // the plain cast's (a custom VJP, so that the backward pass keeps nothing of the clip).
  const toFloat16 =
    low === 'float16'
      ? mx.customVjp(
          (x) => mx.astype(mx.clip(x, -F16_MAX, F16_MAX), 'float16'),
          (primals, cotangents) => [mx.astype(cotangents[0], primals[0].dtype)],
        )
      : undefined;
  if (toFloat16) closures.push(toFloat16);

  let outputs: Value[] = [];
  const reads = new HostReads();
  const body = (...xs: mx.Array[]): mx.Array[] =>
    mx.collect(run.arrays, () => {
      const env = new Env(plan, run);
      for (const [name, f] of Object.entries(feeds))
        if (!wrtSet.has(name)) env.values.set(name, 'kind' in f ? (f as Value) : { kind: 'host', tensor: f as HostTensor });
      wrt.forEach((name, i) => {
        const v: Value = { kind: 'device', array: xs[i], onnxType: types[i] };
        env.values.set(name, v);
        reads.markFeed(v);
      });
      run.analysis = reads;
      run.autocast = low;
      run.toFloat16 = toFloat16;
      run.attentionVjp = attentionVjp;
      try {
        if (steps) runCheckpointed(program, steps, env, fetches, reads, closures);
        else {
          // Never deferring, a walk yields nothing: each node runs once, in order.
          const gen = program.runNodes(order, env);
          for (let r = gen.next(); !r.done; r = gen.next())
            if (r.value.wait) throw new OrtMlxError(`model ${model}: internal error: a fallback partition in a gradient`);
        }
      } finally {
        run.analysis = undefined;
        run.autocast = undefined;
        run.toFloat16 = undefined;
        run.attentionVjp = undefined;
      }
      if (reads.nodes.length)
        throw new NotDifferentiableError(
          `model ${model}: valueAndGrad: ${reads.nodes.length} node(s) read the data of a differentiated value on the host, which has no gradient: ${reads.nodes.map((i) => nodeLabel(plan, i)).join(', ')}`,
          { nodes: reads.nodes.map((i) => plan.nodes[i].node.name) },
        );
      outputs = outputsOf(env, fetches);
      // Mixed precision: the outputs the walk made in the low dtype back in float32 (unless the
      // model declares them so), for the loss and the caller.
      if (low)
        outputs = outputs.map((v, i) => {
          if (v.kind !== 'device' || v.array.dtype !== low) return v;
          const info = plan.graph.outputs.find((o) => o.name === fetches[i]) ?? plan.graph.valueInfo.get(fetches[i]);
          if (info?.type.kind === 'tensor' && info.type.elemType !== OnnxDataType.FLOAT) return v;
          return { kind: 'device', array: mx.astype(v.array, 'float32'), onnxType: OnnxDataType.FLOAT };
        });
      const arrayOf = (name: string, v: Value): mx.Array => {
        if (v.kind === 'device') return v.array;
        if (v.kind === 'host' && v.tensor.dtype !== OnnxDataType.STRING) return run.toArray(v, name);
        throw new NotDifferentiableError(
          `model ${model}: valueAndGrad: output '${name}' is a ${v.kind === 'host' ? 'string tensor' : v.kind}`,
        );
      };
      let value: mx.Array;
      if (typeof output === 'string') {
        const v = outputs[fetches.indexOf(output)];
        const producer = plan.producer.get(output);
        const by = producer === undefined ? '' : ` (made by node ${nodeLabel(plan, producer)})`;
        if ((v.kind === 'host' || v.kind === 'device') && !FLOATS.has(elemTypeOf(v)))
          throw new NotDifferentiableError(
            `model ${model}: valueAndGrad: output '${output}'${by} is ${dataTypeName(elemTypeOf(v))}: only a floating-point value has a gradient`,
            { nodes: producer === undefined ? [] : [plan.nodes[producer].node.name] },
          );
        value = arrayOf(output, v);
      } else {
        const named: Record<string, mx.Array> = {};
        fetches.forEach((name, i) => {
          const v = outputs[i];
          if (v.kind === 'device' || (v.kind === 'host' && v.tensor.dtype !== OnnxDataType.STRING)) named[name] = arrayOf(name, v);
        });
        value = output(named);
        if (!(value instanceof mx.Array))
          throw new TypeError(`valueAndGrad: the output function must return an MLX array, got ${typeof value}`);
        if (!mx.isFloating(value.dtype))
          throw new NotDifferentiableError(
            `model ${model}: valueAndGrad: the output function returned a ${value.dtype} array: only a floating-point value has a gradient`,
          );
      }
      if (value.size !== 1)
        throw new NotDifferentiableError(
          `model ${model}: valueAndGrad: ${typeof output === 'string' ? `output '${output}'` : 'the output function'} has shape [${value.shape.join(', ')}]: the value differentiated must be a scalar (one element); pass a function, e.g. output: (o) => mx.sum(o['${fetches[0]}'])`,
        );
      if (low && value.dtype !== 'float32') value = mx.astype(value, 'float32');
      // Loss scaling (trainStep, float16): the gradients of value * lossScale (the value unscaled below).
      if (lossScale !== undefined) value = mx.multiply(value, lossScale);
      // The outputs on the device come back as values of the transform, beside the one differentiated.
      return [mx.reshape(value, []), ...outputs.flatMap((v) => (v.kind === 'device' ? [v.array] : []))];
    });

  const [values, grads] = mx.collect(run.arrays, () => {
    try {
      return mx.valueAndGrad(
        body,
        wrt.map((_, i) => i),
      )(...primals) as [mx.Array[], mx.Array[]];
    } catch (e) {
      throw vjpError(e, model, plan, order);
    } finally {
      // The backward graph is built: the layers' recomputation is in it, their JS bodies are done.
      for (const c of closures) c.dispose();
    }
  });
  let k = 1;
  // Loss scaling: the value unscaled here, the gradients by the caller (trainStep), lazily in the
  // optimizer's step, so that an unscaled copy of every gradient is never held beside them.
  return {
    value: lossScale === undefined ? values[0] : mx.collect(run.arrays, () => mx.divide(values[0], lossScale)),
    grads: grads.map((g, i) => ({ kind: 'device', array: g, onnxType: types[i] })),
    outputs: outputs.map((v) => (v.kind === 'device' ? { kind: 'device', array: values[k++], onnxType: v.onnxType } : v)),
    fetches,
  };
}

/** float16's largest finite value. */
const F16_MAX = 65504;

/** The layer key of a name under a checkpoint option (undefined: none), or undefined when the option is off. */
type LayerKey = (name: string) => string | undefined;

/** `layers.3`, `layer.0`, `h.11`, `blocks.2`, `l0`: a layer's index in a node or initializer name. */
const LAYER_NAME = /(?:^|[/._:])((?:layers?|blocks?|h|l)[._]?\d+)(?=[/._:]|$)/i;

function checkpointKeys(c: unknown): LayerKey | undefined {
  if (c === undefined) return undefined;
  if (c === 'layers') return (name) => LAYER_NAME.exec(name)?.[1];
  if (Array.isArray(c) && c.length > 0 && c.every((p) => typeof p === 'string' && p.length > 0)) {
    const prefixes = c as string[];
    return (name) => prefixes.find((p) => name.startsWith(p));
  }
  throw new TypeError(
    `valueAndGrad: checkpoint must be 'layers' or a non-empty list of node-name prefixes, got ${Array.isArray(c) ? `[${c.map(String).join(', ')}]` : typeof c === 'string' ? `'${c}'` : String(c)}`,
  );
}

/** One step of a checkpointed walk: a node run as it is, or a layer's nodes (consecutive in the walk) recomputed in the backward pass. */
type WalkStep = { node: number } | { layer: string; nodes: number[] };

/**
 * The walk `order` cut into layers: each node's key from its name, else from an initializer it
 * reads, else from the producer of its first input; consecutive nodes of one key make a step.
 */
function layerSteps(plan: GraphPlan, order: readonly number[], keyOf: LayerKey, model: string): WalkStep[] {
  const keys = new Map<number, string | undefined>();
  const isInit = (n: string) => plan.graph.initializers.has(n) || plan.residentInitializers?.has(n) === true;
  for (const idx of order) {
    const node = plan.nodes[idx].node;
    let key = keyOf(node.name);
    if (key === undefined) for (const i of node.inputs) if (i && isInit(i) && (key = keyOf(i)) !== undefined) break;
    if (key === undefined) {
      const first = node.inputs.find((i) => i && plan.producer.has(i));
      if (first) key = keys.get(plan.producer.get(first)!);
    }
    keys.set(idx, key);
  }
  const steps: WalkStep[] = [];
  for (const idx of order) {
    const key = keys.get(idx);
    const last = steps.at(-1);
    if (key === undefined) steps.push({ node: idx });
    else if (last && 'layer' in last && last.layer === key) last.nodes.push(idx);
    else steps.push({ layer: key, nodes: [idx] });
  }
  if (!steps.some((s) => 'layer' in s))
    throw new TypeError(
      `model ${model}: valueAndGrad: checkpoint found no layer among the nodes (by their names and the initializers they read): pass the layers' node-name prefixes`,
    );
  return steps;
}

/**
 * Runs a checkpointed walk: nodes outside layers as they are; each layer through mx.checkpoint,
 * its inputs the device values it reads from before it (differentiated ones included, so that their
 * gradients flow), its outputs the values read after it. Its body runs its nodes in a run state of
 * its own (uploads, memo), whose arrays the checkpoint's scope frees when it returns, so that
 * nothing but the layer's outputs outlives the forward pass; MLX calls it again to recompute the
 * layer in the backward pass. The forward call's data checks (guards) join the walk's run.
 */
function runCheckpointed(
  program: GraphProgram,
  steps: readonly WalkStep[],
  env: Env,
  fetches: readonly string[],
  reads: HostReads,
  closures: mx.CompiledFunction[],
): void {
  const plan = program.plan;
  const run = env.run;
  const readsOf = (idx: number) => [...plan.nodes[idx].node.inputs.filter((i): i is string => !!i), ...plan.nodes[idx].outerReads];
  // The last step that reads each name (fetches: past the end).
  const lastRead = new Map<string, number>();
  steps.forEach((st, k) => {
    for (const idx of 'node' in st ? [st.node] : st.nodes) for (const n of readsOf(idx)) lastRead.set(n, k);
  });
  for (const f of fetches) lastRead.set(f, steps.length);
  steps.forEach((st, k) => {
    if ('node' in st) {
      program.runNode(st.node, env);
      return;
    }
    const made = new Set(st.nodes.flatMap((idx) => plan.nodes[idx].node.outputs.filter((o) => !!o)));
    const inNames = [...new Set(st.nodes.flatMap(readsOf))].filter((n) => !made.has(n) && env.values.get(n)?.kind === 'device');
    const outNames = [...made].filter((n) => (lastRead.get(n) ?? -1) > k);
    if (!inNames.length) {
      for (const idx of st.nodes) program.runNode(idx, env);
      return;
    }
    const outer = inNames.map((n) => env.values.get(n) as Value & { kind: 'device' });
    let first = true;
    const kept = new Map<string, Value>();
    // Read now: the backward pass calls the layer again after the walk has reset the run's.
    const { autocast, toFloat16, attentionVjp } = run;
    const layer = mx.checkpoint((...xs: mx.Array[]) => {
      const inner = new RunState(run.constants, run.modelName, run.limits);
      inner.autocast = autocast;
      inner.toFloat16 = toFloat16;
      inner.attentionVjp = attentionVjp;
      inner.analysis = run.analysis;
      const ienv = new Env(plan, inner);
      for (const [n, v] of env.values) ienv.values.set(n, v);
      inNames.forEach((n, i) => {
        const v: Value = { kind: 'device', array: xs[i], onnxType: outer[i].onnxType };
        if (reads.isDynamic(outer[i])) reads.markFeed(v);
        ienv.values.set(n, v);
      });
      for (const idx of st.nodes) program.runNode(idx, ienv);
      const arrays: mx.Array[] = [];
      for (const n of outNames) {
        const v = ienv.values.get(n)!;
        if (v.kind === 'device') arrays.push(v.array);
        if (first) kept.set(n, v);
      }
      if (first) {
        for (const g of inner.guards) {
          for (const a of [g.bad, g.detail]) if (a) run.arrays.add(mx.persist(a));
          run.guards.push(g);
        }
        first = false;
      }
      return arrays;
    });
    closures.push(layer);
    const res = layer(...outer.map((v) => v.array));
    const list = Array.isArray(res) ? res : [res];
    let j = 0;
    for (const n of outNames) {
      const v = kept.get(n)!;
      env.values.set(n, v.kind === 'device' ? { kind: 'device', array: list[j++], onnxType: v.onnxType } : v);
    }
  });
}

/**
 * An MLX primitive without a VJP (a project kernel used outside a gradient's fallbacks) as a
 * NotDifferentiableError naming the nodes of the walk whose op could have made it.
 */
function vjpError(e: unknown, model: string, plan: GraphPlan, order: readonly number[]): unknown {
  if (e instanceof OrtMlxError && !(e instanceof NodeExecutionError)) return e;
  const msg = e instanceof mx.MlxError ? e.mlxMessage : e instanceof Error ? e.message : String(e);
  const m = /not implemented for (\w+)/i.exec(msg);
  if (!m || !/vjp/i.test(msg)) return e;
  const primitive = m[1];
  const ops = [...new Set(order.map((i) => plan.nodes[i].node.opType))];
  return new NotDifferentiableError(
    `model ${model}: valueAndGrad: MLX has no VJP for the primitive ${primitive}, which a node of these op types made: ${ops.join(', ')}`,
    { cause: e },
  );
}

/**
 * MLX's "There is no Stream(cpu, N) in current thread" from a valueAndGrad evaluated on the
 * session's own thread: the output function used an array the caller made lazily on this thread's
 * stream (labels built with ops outside it), which no other thread can evaluate. Said so, with the fix.
 */
export function capturedArrayError(e: unknown, model: string): unknown {
  const msg = e instanceof mx.MlxError ? e.mlxMessage : undefined;
  if (!msg || !/no Stream\(.*\) in current thread/i.test(msg)) return e;
  return new OrtMlxError(
    `model ${model}: valueAndGrad: the output function used an array made lazily outside it (an op's result not evaluated yet, such as labels built with @mlx/core ops), which the session's evaluation thread cannot compute: evaluate it first (labels.eval()) or build it inside the function`,
    { cause: e },
  );
}
