// Trainable sessions: the initializers of a session read as MLX arrays (parameters) and replaced
// in place (setParameters), so that the next run and the next valueAndGrad use the new values.
// A new value replaces the plan's constant; the nodes folded at plan time that depend on it run
// again; the caller (the session) drops its compiled signatures, which captured the old arrays.
import * as mx from '@mlx/core';
import { DERIVING_REWRITES, checkAttentionOptions, checkMixedPrecision, type MixedPrecision, type ValueAndGradOptions } from './grad.js';
import { dataTypeName, type HostTensor } from './onnx/index.js';
import type { GraphPlan } from './plan/graph-plan.js';
import { mxDtypeOf } from './runtime/convert.js';
import type { ConstantStore } from './runtime/uploads.js';
import { elemTypeOf, type Value } from './runtime/value.js';
import { Env, RunState } from './execute/env.js';
import type { GraphProgram } from './execute/run.js';
import { ParameterMismatchError, UnknownParameterError } from './errors.js';

/** What parameters and setParameters need of a session. */
export interface ParameterTarget {
  modelName: string;
  program: GraphProgram;
  constants: ConstantStore;
  /** The graph rewrites the session's plan applied, by name. */
  rewrites: Readonly<Record<string, number | undefined>>;
}

const FLOAT_DTYPES: ReadonlySet<mx.Dtype> = new Set(['float32', 'float16', 'bfloat16', 'float64']);

/** Whether `name` is an initializer of the main graph (held on the host, or by MLX since the session was made). */
const isInitializer = (plan: GraphPlan, name: string) => plan.graph.initializers.has(name) || plan.residentInitializers?.has(name) === true;

/** The floating-point initializers of the main graph, in the file's order where known: the trainable parameters. */
export function parameterNames(target: ParameterTarget): string[] {
  const plan = target.program.plan;
  const names = [...plan.graph.initializers.keys(), ...(plan.residentInitializers ?? [])];
  return [...new Set(names)].filter((n) => {
    const v = plan.constants.get(n);
    const d = v && (v.kind === 'host' || v.kind === 'device') ? mxDtypeOf(elemTypeOf(v)) : undefined;
    return d !== undefined && FLOAT_DTYPES.has(d);
  });
}

/** The plan's value of parameter `name`, checked: an initializer, floating-point, not replaced by a rewrite. */
function parameterValue(target: ParameterTarget, name: string, what: string): Value & { kind: 'host' | 'device' } {
  const plan = target.program.plan;
  const model = target.modelName;
  if (typeof name !== 'string') throw new TypeError(`${what}: parameter names are strings, got ${typeof name}`);
  // First: under such rewrites, the initializer may be gone (packed, joined) or no longer read.
  const deriving = DERIVING_REWRITES.filter((r) => target.rewrites[r]).map((r) => `${r} x${target.rewrites[r]}`);
  if (deriving.length)
    throw new UnknownParameterError(
      `model ${model}: ${what}: the session's graph rewrites (${deriving.join(', ')}) replaced initializers by values derived from them, so '${name}' may no longer be what the nodes read: create the session with graphRewrites: false to train it`,
    );
  const v = plan.constants.get(name);
  if (!isInitializer(plan, name) || !v || (v.kind !== 'host' && v.kind !== 'device')) {
    const some = parameterNames(target).slice(0, 8);
    throw new UnknownParameterError(
      `model ${model}: ${what}: '${name}' is not an initializer of the model${some.length ? ` (its parameters include ${some.map((n) => `'${n}'`).join(', ')})` : ' (it has no floating-point initializers)'}`,
    );
  }
  const d = mxDtypeOf(elemTypeOf(v));
  if (!d || !FLOAT_DTYPES.has(d))
    throw new UnknownParameterError(
      `model ${model}: ${what}: initializer '${name}' is ${dataTypeName(elemTypeOf(v))}: only floating-point initializers are parameters`,
    );
  return v;
}

/** Checks that every name is a parameter the session can update (throws UnknownParameterError). */
export function checkParameters(target: ParameterTarget, names: readonly string[], what: string): void {
  for (const n of names) parameterValue(target, n, what);
}

/** The current values of parameters `names` (default: every one): new arrays the caller owns. */
export function readParameters(target: ParameterTarget, names?: readonly string[], what = 'parameters'): Record<string, mx.Array> {
  const list = names ?? parameterNames(target);
  if (!Array.isArray(list)) throw new TypeError(`${what}: names must be a list of initializer names`);
  const values = list.map((n) => parameterValue(target, n, what));
  const out: Record<string, mx.Array> = {};
  list.forEach((n, i) => {
    const v = values[i];
    // A copy of the store's upload, never the upload itself: the caller disposes what it gets.
    out[n] = mx.copy(v.kind === 'device' ? v.array : target.constants.array(v.tensor));
  });
  return out;
}

/**
 * Replaces parameters by new values (copies: `record` stays the caller's), checked against each
 * initializer's shape and element type before anything changes, then runs again the nodes folded
 * at plan time that read them. The arrays replaced go into `stale`, for the caller to free once no
 * run in flight can read them; it also drops what captured them (compiled signatures).
 */
export function writeParameters(
  target: ParameterTarget,
  record: Record<string, mx.Array | HostTensor>,
  stale: mx.Array[],
  what = 'setParameters',
): string[] {
  const plan = target.program.plan;
  const model = target.modelName;
  if (typeof record !== 'object' || record === null) throw new TypeError(`${what}: takes a record of parameter name -> MLX array`);
  const names = Object.keys(record);
  const olds = names.map((n) => parameterValue(target, n, what));
  const arrays = names.map((n, i) => {
    const given = record[n];
    const old = olds[i];
    const want = mxDtypeOf(elemTypeOf(old))!;
    const dims = old.kind === 'device' ? old.array.shape : old.tensor.dims;
    let got: { dtype: string; shape: readonly number[] };
    if (given instanceof mx.Array) got = { dtype: given.dtype, shape: given.shape };
    else if (given && typeof given === 'object' && 'dims' in given && 'dtype' in given)
      got = { dtype: mxDtypeOf(given.dtype) ?? dataTypeName(given.dtype), shape: given.dims };
    else throw new TypeError(`${what}: the value of '${n}' must be an MLX array or a host tensor, got ${typeof given}`);
    if (got.dtype !== want)
      throw new ParameterMismatchError(`model ${model}: ${what}: '${n}' is ${want} in the model, the new value is ${got.dtype}`);
    if (got.shape.length !== dims.length || got.shape.some((d, k) => d !== dims[k]))
      throw new ParameterMismatchError(
        `model ${model}: ${what}: '${n}' has shape [${dims.join(', ')}] in the model, the new value [${got.shape.join(', ')}]`,
      );
    return given;
  });
  const fresh = mx.scope(() => arrays.map((a) => (a instanceof mx.Array ? mx.copy(a) : target.constants.array(a))));
  // Host tensors came from the store's uploads: a copy of each, so that the store keeps its own.
  const owned = fresh.map((a, i) => (arrays[i] instanceof mx.Array ? a : mx.copy(a)));
  mx.evaluate(owned);
  names.forEach((n, i) => {
    const old = olds[i];
    mx.persist(owned[i]);
    plan.constants.set(n, { kind: 'device', array: owned[i], onnxType: elemTypeOf(old) });
    // Held by MLX from now on (as makeConstantsResident does): a re-plan and a save read it back.
    if (plan.graph.initializers.delete(n)) (plan.residentInitializers ??= new Set()).add(n);
    if (old.kind === 'device') stale.push(old.array);
  });
  refold(target, new Set(names), stale);
  return names;
}

/** Runs again the nodes folded at plan time that depend on `changed`, replacing their results in the plan's constants. */
function refold(target: ParameterTarget, changed: ReadonlySet<string>, stale: mx.Array[]): void {
  const { program, constants } = target;
  const plan = program.plan;
  const tainted = new Set(changed);
  const rerun: number[] = [];
  plan.nodes.forEach((pn, idx) => {
    if (!pn.node.inputs.some((i) => i && tainted.has(i)) && !pn.outerReads.some((i) => tainted.has(i))) return;
    for (const o of pn.node.outputs) if (o) tainted.add(o);
    // A node whose outputs are constants was folded: it runs again; the others run with each run.
    if (pn.node.outputs.some((o) => o && plan.constants.has(o))) rerun.push(idx);
  });
  if (!rerun.length) return;
  const env = new Env(plan, new RunState(constants, plan.modelName));
  const made = mx.scope(() => {
    for (const idx of rerun) program.runNode(idx, env);
    const out: mx.Array[] = [];
    for (const idx of rerun)
      for (const o of plan.nodes[idx].node.outputs) {
        const v = o ? env.values.get(o) : undefined;
        if (v?.kind === 'device') out.push(v.array);
      }
    return out;
  });
  mx.evaluate(made);
  for (const idx of rerun)
    for (const o of plan.nodes[idx].node.outputs) {
      const v = o ? env.values.get(o) : undefined;
      if (!o || !v) continue;
      const old = plan.constants.get(o);
      if (v.kind === 'device') mx.persist(v.array);
      else if (v.kind === 'host') constants.add(v.tensor);
      plan.constants.set(o, v);
      if (old?.kind === 'device' && old.array !== (v.kind === 'device' ? v.array : undefined)) stale.push(old.array);
    }
}

export interface LossScalerOptions {
  /** The first scale (default 2^16, as torch.amp.GradScaler). */
  initScale?: number;
  /** The scale is multiplied by this after `growthInterval` steps in a row with finite gradients (default 2). */
  growthFactor?: number;
  /** ... and by this on a step whose gradients hold an inf or NaN, which is skipped (default 0.5). */
  backoffFactor?: number;
  /** Steps with finite gradients in a row before the scale grows (default 2000). */
  growthInterval?: number;
}

/**
 * Dynamic loss scaling for float16 mixed precision (TrainStepOptions.lossScaler), as
 * torch.amp.GradScaler: the loss is multiplied by `scale` before the backward pass, so that small
 * gradients do not flush to zero in float16, and the gradients divided by it before the step. A
 * step whose gradients hold an inf or NaN (the scale overflowed float16) is skipped and the scale
 * multiplied by backoffFactor; after growthInterval good steps in a row it is multiplied by
 * growthFactor.
 */
export class LossScaler {
  /** The scale the next step multiplies the loss by. */
  scale: number;
  /** Steps with finite gradients since the scale last changed. */
  goodSteps = 0;
  readonly growthFactor: number;
  readonly backoffFactor: number;
  readonly growthInterval: number;

  constructor(options: LossScalerOptions = {}) {
    if (typeof options !== 'object' || options === null) throw new TypeError('LossScaler: options must be an object');
    const num = (v: unknown, name: string, ok: (x: number) => boolean, want: string): number => {
      if (typeof v !== 'number' || !Number.isFinite(v) || !ok(v))
        throw new RangeError(`LossScaler: ${name} must be ${want}, got ${String(v)}`);
      return v;
    };
    this.scale = num(options.initScale ?? 2 ** 16, 'initScale', (x) => x > 0, 'a positive number');
    this.growthFactor = num(options.growthFactor ?? 2, 'growthFactor', (x) => x > 1, 'a number above 1');
    this.backoffFactor = num(options.backoffFactor ?? 0.5, 'backoffFactor', (x) => x > 0 && x < 1, 'a number in (0, 1)');
    this.growthInterval = num(options.growthInterval ?? 2000, 'growthInterval', (x) => Number.isInteger(x) && x >= 1, 'a positive integer');
  }

  /** After a step: `finite` whether its gradients were all finite (the step was taken). */
  update(finite: boolean): void {
    if (!finite) {
      this.scale *= this.backoffFactor;
      this.goodSteps = 0;
    } else if (++this.goodSteps >= this.growthInterval) {
      this.scale *= this.growthFactor;
      this.goodSteps = 0;
    }
  }
}

export interface TrainStepOptions {
  /** What to minimise: a scalar output's name, or a loss of the outputs (as valueAndGrad's `output`). */
  output: ValueAndGradOptions['output'];
  /** The optimizer that turns gradients into new parameters (`@mlx/core`'s optim.SGD, optim.AdamW, ...). */
  optimizer: mx.optim.Optimizer;
  /** The parameters to train, by name (default: every floating-point initializer). The others stay frozen. */
  wrt?: readonly string[];
  /** Clip the gradients to this global L2 norm before the step (optim.clipGradNorm). */
  clipGradNorm?: number;
  /** The outputs to return (as valueAndGrad's `fetches`). */
  fetches?: readonly string[];
  /** Leave the returned outputs on the device (Values whose arrays the caller disposes). */
  keepOnDevice?: boolean;
  /**
   * Mixed precision (ValueAndGradOptions.mixedPrecision): forward and backward in bfloat16 or
   * float16 from the float32 parameters (the master weights, which the optimizer updates with
   * float32 gradients and which stay float32 in the session). 'float16' scales the loss (lossScaler).
   */
  mixedPrecision?: MixedPrecision;
  /** Gradient checkpointing by layer (ValueAndGradOptions.checkpoint): less memory for a second forward pass of compute. */
  checkpoint?: ValueAndGradOptions['checkpoint'];
  /** The attention nodes' backward pass: workspace budget and strategy (ValueAndGradOptions.attention). */
  attention?: ValueAndGradOptions['attention'];
  /**
   * The loss scaling of 'float16' mixed precision (its state carries over steps): by default the
   * session's own, made on its first float16 step with LossScaler's defaults.
   */
  lossScaler?: LossScaler;
}

export interface TrainStepResult {
  /** The loss before the step. */
  loss: number;
  /** The global norm of the gradients before clipping (with clipGradNorm). */
  gradNorm?: number;
  /**
   * float16 mixed precision: true when the gradients held an inf or NaN, so that the parameters
   * and the optimizer were left as they were and the loss scale lowered.
   */
  skipped?: boolean;
  /** float16 mixed precision: the loss scale this step used. */
  lossScale?: number;
  /** The outputs computed on the way (`fetches`), before the step. */
  outputs: Record<string, HostTensor | Value>;
}

/** Checks trainStep's options before anything runs. */
export function checkTrainStep(options: TrainStepOptions): void {
  if (typeof options !== 'object' || options === null) throw new TypeError('trainStep: options { output, optimizer } are required');
  const o = options.optimizer as Partial<mx.optim.Optimizer> | undefined;
  if (!o || typeof o.step !== 'function')
    throw new TypeError('trainStep: optimizer must be an optimizer (e.g. new mx.optim.AdamW({ lr }))');
  const c = options.clipGradNorm;
  if (c !== undefined && (typeof c !== 'number' || !(c > 0)))
    throw new RangeError(`trainStep: clipGradNorm must be a positive number, got ${String(c)}`);
  const low = checkMixedPrecision(options.mixedPrecision, 'trainStep');
  checkAttentionOptions(options.attention, 'trainStep');
  if (options.lossScaler !== undefined) {
    if (!(options.lossScaler instanceof LossScaler))
      throw new TypeError('trainStep: lossScaler must be a LossScaler (new LossScaler({ initScale }))');
    if (low !== 'float16')
      throw new TypeError(`trainStep: lossScaler is for mixedPrecision 'float16', and this step's is ${low ? `'${low}'` : 'float32'}`);
  }
}

/** Whether every element of every gradient is finite (one scalar read back). */
export function allFinite(grads: readonly mx.Array[]): boolean {
  if (!grads.length) return true;
  return mx.scope(() => {
    const flags = grads.map((g) => mx.reshape(mx.all(mx.isfinite(g)), [1]));
    return Boolean(mx.all(mx.concatenate(flags)).item());
  });
}

/**
 * The update of one training step, once valueAndGrad gave the gradients of `names` (device
 * arrays, the caller's): clipped if asked, stepped by the optimizer, written into the session.
 */
export function applyStep(
  target: ParameterTarget,
  names: readonly string[],
  grads: readonly mx.Array[],
  options: TrainStepOptions,
  stale: mx.Array[],
): { gradNorm?: number } {
  const record: Record<string, mx.Array> = {};
  names.forEach((n, i) => {
    record[n] = grads[i];
  });
  let gradNorm: number | undefined;
  let clipped: Record<string, mx.Array> | undefined;
  if (options.clipGradNorm !== undefined) {
    const c = mx.optim.clipGradNorm(record, options.clipGradNorm);
    clipped = c.grads;
    gradNorm = Number(c.norm.item());
    c.norm.dispose();
  }
  const params = readParameters(target, names, 'trainStep');
  let next: Record<string, mx.Array> | undefined;
  try {
    next = options.optimizer.step(params, clipped ?? record);
    writeParameters(target, next, stale, 'trainStep');
  } finally {
    mx.dispose([next ?? params, clipped]);
  }
  return { gradNorm };
}
