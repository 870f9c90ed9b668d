// Optimizers over a record of named arrays (params and their gradients, as valueAndGrad gives
// them), with the update rules of torch.optim's SGD and AdamW, so that a training loop written
// against PyTorch gives the same numbers. The optimizer owns its state (momentum buffers, moments)
// and the step count; step() returns the new parameters, evaluated, and disposes the arrays they
// replace, so that a loop holds one copy of each parameter and of each state slot.
import { Array } from './array.js';
import { dispose, persist, scope } from './lifetime.js';
import { adamwStep } from './generated/ext.js';
import { add, copy, divide, minimum, multiply, sqrt, square, subtract, sum } from './ops.js';
import { defaultStream } from './stream.js';
import { evaluate } from './transforms.js';

/** Named arrays: the parameters of a model, their gradients, an optimizer's slots for one parameter. */
export type NamedArrays = Record<string, Array>;

/** A learning rate, or a schedule of it: the rate of step `t` (1 for the first step). */
export type LearningRate = number | ((t: number) => number);

/** What step() needs to carry on from where another optimizer of the same kind stopped. */
export interface OptimizerState {
  /** Steps taken so far. */
  step: number;
  /** Per parameter, its state arrays by slot name (SGD: `momentum`; AdamW: `m`, `v`). */
  slots: Record<string, NamedArrays>;
}

export interface Optimizer {
  /**
   * One update: the new value of every parameter that `grads` names (the others are returned as
   * they are). The new arrays are evaluated, a group of parameters at a time (groupBytes); the
   * parameters they replace and the state they outdate are disposed group by group. `grads` stay
   * the caller's. An evaluation that fails (memory) after some groups leaves those updated.
   */
  step(params: NamedArrays, grads: NamedArrays): NamedArrays;
  /** A copy of the state (arrays the caller owns and disposes). */
  state(): OptimizerState;
  /** Replaces the state by a copy of `state` (as state() returned it, e.g. from a saved run). */
  loadState(state: OptimizerState): void;
  /** The learning rate of step `t` (the next step's by default). */
  learningRate(t?: number): number;
  /** Frees the state. The optimizer can go on, from step 0 again. */
  dispose(): void;
}

function checkRate(lr: LearningRate, what: string): void {
  if (typeof lr === 'function') return;
  if (typeof lr !== 'number' || !Number.isFinite(lr) || lr < 0)
    throw new RangeError(`${what}: lr must be a non-negative number or a function of the step, got ${String(lr)}`);
}

function checkNumber(v: unknown, name: string, what: string, lo: number, hi: number, hiOpen = false): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < lo || (hiOpen ? v >= hi : v > hi))
    throw new RangeError(`${what}: ${name} must be a number in [${lo}, ${hi}${hiOpen ? ')' : ']'}, got ${String(v)}`);
  return v;
}

function checkRecord(r: unknown, what: string, arg: string): asserts r is NamedArrays {
  if (typeof r !== 'object' || r === null) throw new TypeError(`${what}: ${arg} must be a record of named arrays`);
  for (const [k, v] of Object.entries(r))
    if (!(v instanceof Array)) throw new TypeError(`${what}: ${arg}['${k}'] must be an mlx Array, got ${typeof v}`);
}

const sameShape = (a: Array, b: Array) => a.ndim === b.ndim && a.shape.every((d, i) => d === b.shape[i]);

/** The memory of a step (SGDOptions, AdamWOptions). */
export interface GroupOptions {
  /**
   * Parameter bytes updated per evaluation (default 64 MiB): step() computes a group of
   * parameters at a time and frees the arrays it replaces before the next, so a step needs about
   * this much memory (times the slots + 1) beyond the parameters, gradients and state. A larger
   * group means fewer evaluations.
   */
  groupBytes?: number;
}

const DEFAULT_GROUP_BYTES = 64 << 20;

/** The names of `names` in order, cut into runs of at most `limit` parameter bytes (a larger parameter alone). */
function groups(names: readonly string[], params: NamedArrays, limit: number): string[][] {
  const out: string[][] = [];
  let bytes = 0;
  for (const n of names) {
    const b = params[n].nbytes;
    if (!out.length || bytes + b > limit) {
      out.push([]);
      bytes = 0;
    }
    out.at(-1)!.push(n);
    bytes += b;
  }
  return out;
}

/** The common part of the optimizers: state keeping, checks, evaluation and disposal. */
abstract class Base implements Optimizer {
  protected t = 0;
  protected slots = new Map<string, NamedArrays>();

  /** Parameter bytes updated per evaluation (GroupOptions.groupBytes). */
  protected readonly groupBytes: number;

  constructor(
    protected readonly what: string,
    protected readonly lr: LearningRate,
    options?: GroupOptions,
  ) {
    checkRate(lr, what);
    this.groupBytes = checkNumber(options?.groupBytes ?? DEFAULT_GROUP_BYTES, 'groupBytes', what, 1, Number.MAX_VALUE);
  }

  learningRate(t = this.t + 1): number {
    const lr = typeof this.lr === 'function' ? this.lr(t) : this.lr;
    if (typeof lr !== 'number' || !Number.isFinite(lr))
      throw new RangeError(`${this.what}: the schedule gave lr ${String(lr)} for step ${t}`);
    return lr;
  }

  /** The new parameter and slots of one parameter (lazy; `slots` undefined on its first step). */
  protected abstract update(
    p: Array,
    g: Array,
    slots: NamedArrays | undefined,
    lr: number,
    t: number,
  ): { param: Array; slots: NamedArrays };

  /** The slot names loadState requires of each parameter. */
  protected abstract readonly slotNames: readonly string[];

  step(params: NamedArrays, grads: NamedArrays): NamedArrays {
    checkRecord(params, this.what, 'params');
    checkRecord(grads, this.what, 'grads');
    for (const [name, g] of Object.entries(grads)) {
      const p = params[name];
      if (!p)
        throw new RangeError(`${this.what}: a gradient for '${name}', which is not among the params (${Object.keys(params).join(', ')})`);
      if (!sameShape(p, g))
        throw new RangeError(
          `${this.what}: the gradient of '${name}' has shape [${g.shape.join(', ')}], the parameter [${p.shape.join(', ')}]`,
        );
    }
    const t = this.t + 1;
    const lr = this.learningRate(t);
    const out: NamedArrays = { ...params };
    // A group at a time, its old parameters and slots freed before the next group is computed:
    // the step needs one group's new arrays beyond the parameters, gradients and state, not a
    // second copy of all of them (three times the parameters' size for AdamW).
    let done = 0;
    for (const names of groups(Object.keys(grads), params, this.groupBytes)) {
      const made = scope(() => names.map((name) => this.update(params[name], grads[name], this.slots.get(name), lr, t)));
      const fresh = made.flatMap((m) => [m.param, ...Object.values(m.slots)]);
      // The old slots are read by the new ones alone: released before the evaluation, their
      // buffers are MLX's to reuse for the results (the moments are updated in place).
      for (const name of names) {
        const old = this.slots.get(name);
        if (old) dispose(old);
      }
      try {
        evaluate(fresh);
      } catch (e) {
        dispose(fresh);
        // The group's old state is gone (its parameters restart their moments); the groups
        // before stay updated: the step counts as taken once one group was.
        for (const name of names) this.slots.delete(name);
        if (done) this.t = t;
        throw e;
      }
      names.forEach((name, i) => {
        for (const a of Object.values(made[i].slots)) persist(a);
        this.slots.set(name, made[i].slots);
        if (params[name] !== made[i].param) params[name].dispose();
        out[name] = made[i].param;
      });
      done += names.length;
    }
    this.t = t;
    return out;
  }

  state(): OptimizerState {
    const slots: Record<string, NamedArrays> = {};
    for (const [name, s] of this.slots) slots[name] = Object.fromEntries(Object.entries(s).map(([k, a]) => [k, copy(a)]));
    return { step: this.t, slots };
  }

  loadState(state: OptimizerState): void {
    if (typeof state !== 'object' || state === null) throw new TypeError(`${this.what}: loadState takes { step, slots }`);
    if (!Number.isInteger(state.step) || state.step < 0)
      throw new RangeError(`${this.what}: state.step must be a non-negative integer, got ${String(state.step)}`);
    for (const [name, s] of Object.entries(state.slots ?? {})) {
      checkRecord(s, this.what, `state.slots['${name}']`);
      const missing = this.slotNames.filter((k) => !(k in s));
      if (missing.length) throw new RangeError(`${this.what}: state.slots['${name}'] lacks ${missing.join(', ')}`);
    }
    this.dispose();
    this.t = state.step;
    for (const [name, s] of Object.entries(state.slots ?? {}))
      this.slots.set(name, Object.fromEntries(this.slotNames.map((k) => [k, persist(copy(s[k]))])));
  }

  dispose(): void {
    for (const s of this.slots.values()) dispose(s);
    this.slots.clear();
    this.t = 0;
  }
}

export interface SGDOptions extends GroupOptions {
  lr: LearningRate;
  /** Momentum factor (default 0: plain gradient descent). */
  momentum?: number;
  /** Dampening of the momentum (default 0). */
  dampening?: number;
  /** Nesterov momentum (needs momentum > 0 and dampening 0). */
  nesterov?: boolean;
  /** L2 penalty added to the gradient (default 0). */
  weightDecay?: number;
}

/**
 * Stochastic gradient descent as torch.optim.SGD: g = grad + weightDecay * p; with momentum,
 * b = g on the first step and momentum * b + (1 - dampening) * g after, and g = b (or
 * g + momentum * b with nesterov); p = p - lr * g.
 */
export class SGD extends Base {
  readonly momentum: number;
  readonly dampening: number;
  readonly nesterov: boolean;
  readonly weightDecay: number;
  protected readonly slotNames: readonly string[];

  constructor(options: SGDOptions) {
    super('SGD', options?.lr, options);
    this.momentum = checkNumber(options.momentum ?? 0, 'momentum', 'SGD', 0, Number.MAX_VALUE);
    this.dampening = checkNumber(options.dampening ?? 0, 'dampening', 'SGD', 0, 1);
    this.weightDecay = checkNumber(options.weightDecay ?? 0, 'weightDecay', 'SGD', 0, Number.MAX_VALUE);
    this.nesterov = options.nesterov === true;
    if (this.nesterov && (this.momentum <= 0 || this.dampening !== 0))
      throw new RangeError('SGD: nesterov momentum needs a momentum > 0 and dampening 0');
    this.slotNames = this.momentum ? ['momentum'] : [];
  }

  protected update(p: Array, grad: Array, slots: NamedArrays | undefined, lr: number): { param: Array; slots: NamedArrays } {
    let g = this.weightDecay ? add(grad, multiply(p, this.weightDecay)) : grad;
    if (!this.momentum) return { param: subtract(p, multiply(g, lr)), slots: {} };
    const prev = slots?.momentum;
    const b = prev ? add(multiply(prev, this.momentum), this.dampening ? multiply(g, 1 - this.dampening) : g) : copy(g);
    g = this.nesterov ? add(g, multiply(b, this.momentum)) : b;
    return { param: subtract(p, multiply(g, lr)), slots: { momentum: b } };
  }
}

export interface AdamWOptions extends GroupOptions {
  lr?: LearningRate;
  /** Decay rates of the first and second moments (default [0.9, 0.999]). */
  betas?: readonly [number, number];
  /** Added to the denominator (default 1e-8). */
  eps?: number;
  /** Decoupled weight decay (default 0.01, as torch.optim.AdamW). */
  weightDecay?: number;
  /**
   * The library's fused AdamW kernel (mx.ext.adamwStep: one multithreaded pass over param, grad and
   * moments, the moments updated in place) where the default stream is the CPU's and the parameter,
   * gradient and moments are float32 (default true); false composes MLX's ops, as do other dtypes
   * and devices. Both give the same numbers within float32 rounding.
   */
  fused?: boolean;
}

/**
 * Adam with decoupled weight decay as torch.optim.AdamW: p = p * (1 - lr * weightDecay);
 * m = b1 * m + (1 - b1) * g; v = b2 * v + (1 - b2) * g^2; with the bias corrections
 * c1 = 1 - b1^t and c2 = 1 - b2^t, p = p - (lr / c1) * m / (sqrt(v) / sqrt(c2) + eps).
 */
export class AdamW extends Base {
  readonly betas: readonly [number, number];
  readonly eps: number;
  readonly weightDecay: number;
  readonly fused: boolean;
  protected readonly slotNames: readonly string[] = ['m', 'v'];

  constructor(options: AdamWOptions = {}) {
    super('AdamW', options.lr ?? 1e-3, options);
    const [b1, b2] = options.betas ?? [0.9, 0.999];
    this.betas = [checkNumber(b1, 'betas[0]', 'AdamW', 0, 1, true), checkNumber(b2, 'betas[1]', 'AdamW', 0, 1, true)];
    this.eps = checkNumber(options.eps ?? 1e-8, 'eps', 'AdamW', 0, Number.MAX_VALUE);
    this.weightDecay = checkNumber(options.weightDecay ?? 0.01, 'weightDecay', 'AdamW', 0, Number.MAX_VALUE);
    if (options.fused !== undefined && typeof options.fused !== 'boolean')
      throw new TypeError(`AdamW: fused must be true or false, got ${String(options.fused)}`);
    this.fused = options.fused !== false;
  }

  protected update(p: Array, g: Array, slots: NamedArrays | undefined, lr: number, t: number): { param: Array; slots: NamedArrays } {
    const [b1, b2] = this.betas;
    const f32 = (a: Array | undefined) => !a || a.dtype === 'float32';
    if (this.fused && p.dtype === 'float32' && f32(g) && f32(slots?.m) && f32(slots?.v) && defaultStream().device.type === 'cpu') {
      // One pass, the moments' buffers reused for the new ones (step() releases the old slots
      // before evaluating).
      const [param, m, v] = adamwStep(p, g, slots?.m, slots?.v, lr, b1, b2, this.eps, this.weightDecay, t);
      return { param, slots: { m, v } };
    }
    const decayed = this.weightDecay ? multiply(p, 1 - lr * this.weightDecay) : p;
    const m = slots ? add(multiply(slots.m, b1), multiply(g, 1 - b1)) : multiply(g, 1 - b1);
    const v = slots ? add(multiply(slots.v, b2), multiply(square(g), 1 - b2)) : multiply(square(g), 1 - b2);
    const c1 = 1 - b1 ** t;
    const c2 = 1 - b2 ** t;
    const denom = add(divide(sqrt(v), Math.sqrt(c2)), this.eps);
    return { param: subtract(decayed, multiply(divide(m, denom), lr / c1)), slots: { m, v } };
  }
}

/**
 * Scales the gradients so that their global L2 norm (over every array, as one vector) is at most
 * `maxNorm`, as torch.nn.utils.clip_grad_norm_: each is multiplied by min(1, maxNorm / (norm +
 * 1e-6)). Returns new arrays (lazy) and the norm before clipping; the inputs stay the caller's.
 */
export function clipGradNorm(grads: NamedArrays, maxNorm: number): { grads: NamedArrays; norm: Array } {
  checkRecord(grads, 'clipGradNorm', 'grads');
  checkNumber(maxNorm, 'maxNorm', 'clipGradNorm', 0, Number.MAX_VALUE);
  return scope(() => {
    const names = Object.keys(grads);
    if (!names.length) return { grads: {}, norm: copy(0) };
    const squares = names.map((n) => sum(square(grads[n].dtype === 'float32' ? grads[n] : grads[n].astype('float32'))));
    const norm = sqrt(squares.reduce((a, b) => add(a, b)));
    const coef = minimum(divide(maxNorm, add(norm, 1e-6)), 1);
    const out: NamedArrays = {};
    for (const n of names) out[n] = multiply(grads[n], coef.astype(grads[n].dtype));
    return { grads: out, norm };
  });
}

/**
 * Sums gradients over micro-batches (gradient accumulation): add() each micro-batch's gradients,
 * then take() their sum (or mean), with which to step once. Each add is evaluated, so that the
 * graph stays one micro-batch deep; the arrays given to add() stay the caller's.
 */
export class GradientAccumulator {
  #sum: NamedArrays | undefined;
  #count = 0;

  /** Micro-batches added since the last take(). */
  get count(): number {
    return this.#count;
  }

  add(grads: NamedArrays): void {
    checkRecord(grads, 'GradientAccumulator', 'grads');
    const prev = this.#sum;
    if (prev) {
      const a = Object.keys(prev).sort().join(', ');
      const b = Object.keys(grads).sort().join(', ');
      if (a !== b)
        throw new RangeError(`GradientAccumulator: micro-batch ${this.#count + 1} has gradients for ${b}, the earlier ones for ${a}`);
      for (const [k, g] of Object.entries(grads))
        if (!sameShape(g, prev[k]))
          throw new RangeError(
            `GradientAccumulator: the gradient of '${k}' changed shape: [${g.shape.join(', ')}], was [${prev[k].shape.join(', ')}]`,
          );
    }
    const next = scope(() => Object.fromEntries(Object.entries(grads).map(([k, g]) => [k, prev ? add(prev[k], g) : copy(g)])));
    evaluate(Object.values(next));
    for (const a of Object.values(next)) persist(a);
    if (prev) dispose(prev);
    this.#sum = next;
    this.#count++;
  }

  /** The sum (or, with mean, the average) of what was added, yours to dispose; the accumulator starts over. */
  take(options: { mean?: boolean } = {}): NamedArrays {
    const s = this.#sum;
    if (!s) throw new RangeError('GradientAccumulator: take() before any add()');
    const n = this.#count;
    this.#sum = undefined;
    this.#count = 0;
    if (!options.mean) return s;
    const out = scope(() => Object.fromEntries(Object.entries(s).map(([k, g]) => [k, divide(g, n)])));
    evaluate(Object.values(out));
    dispose(s);
    return out;
  }

  /** Frees what was added and not taken. */
  dispose(): void {
    if (this.#sum) dispose(this.#sum);
    this.#sum = undefined;
    this.#count = 0;
  }
}

/**
 * Gradient accumulation in one call: the sum (or mean) of `microStep(i)`'s gradients for i = 0 ..
 * k-1. Each micro-step's gradients are disposed once added.
 */
export function accumulateGradients(k: number, microStep: (i: number) => NamedArrays, options: { mean?: boolean } = {}): NamedArrays {
  if (!Number.isInteger(k) || k < 1) throw new RangeError(`accumulateGradients: k must be a positive integer, got ${String(k)}`);
  const acc = new GradientAccumulator();
  try {
    for (let i = 0; i < k; i++) {
      const g = microStep(i);
      try {
        acc.add(g);
      } finally {
        dispose(g);
      }
    }
    return acc.take(options);
  } catch (e) {
    acc.dispose();
    throw e;
  }
}
