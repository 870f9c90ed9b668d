// GELU (exact and tanh approximation, with an optional bias added first), SiLU / swish-β and
// SwiGLU (with the clamped, shifted variant of gpt-oss), each with a closed-form pullback
// registered as its custom VJP. GELU's forward is the project's fused activation kernel
// (mx.ext.fusedActivation: one native pass for float32 on the CPU, MLX's ops elsewhere) except in
// float64, whose composite has exact constants. (In float64, exact GELU inherits MLX's
// float32-accurate erf: about 4e-7 absolute error on the CPU backend.)
import * as mx from '@mlx/core';
import {
  abs,
  add,
  clip,
  erf,
  lessEqual,
  less,
  minimum,
  multiply,
  scope,
  square,
  subtract,
  tanh,
  where,
  zerosLike,
  type Array,
} from '@mlx/core';
import { exp, sigmoid } from './accurate-math.js';
import { reduceToShape } from './broadcast.js';
import { defineCustomVjp } from './custom-vjp.js';

export type GeluApproximation = 'none' | 'tanh';

/**
 * Which forward runs. 'auto': the fused kernel, except float64 (the composite, exact there).
 * 'fused': the fused kernel always. 'composite': plain ops.
 */
export type ActivationImplementation = 'auto' | 'fused' | 'composite';

export interface GeluOptions {
  /** 'none' (default): x·Φ(x) with erf; 'tanh': 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))). */
  approximate?: GeluApproximation;
  /** Added to x first (a projection's bias; broadcast). A vector of x's last axis goes into the fused kernel. */
  bias?: Array | null;
  /** Which forward runs (default 'auto'). */
  implementation?: ActivationImplementation;
}

const SQRT_HALF = Math.SQRT1_2;
const SQRT_2_OVER_PI = Math.sqrt(2 / Math.PI);
const INV_SQRT_2PI = 1 / Math.sqrt(2 * Math.PI);
const TANH_CUBIC = 0.044715;

/** GELU from plain ops: x·Φ(x), or 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))) for 'tanh'. */
export function geluComposite(x: Array, approximate: GeluApproximation = 'none'): Array {
  return scope(() => {
    if (approximate === 'tanh') {
      const inner = multiply(add(x, multiply(multiply(square(x), x), TANH_CUBIC)), SQRT_2_OVER_PI);
      return multiply(multiply(x, 0.5), add(tanh(inner), 1));
    }
    return multiply(multiply(x, 0.5), add(erf(multiply(x, SQRT_HALF)), 1));
  });
}

/** d GELU/dx · dy: Φ(x) + x·φ(x) (exact), or the derivative of the tanh form. */
export function geluVjp(x: Array, gradOut: Array, approximate: GeluApproximation = 'none'): Array {
  return scope(() => {
    if (approximate === 'tanh') {
      const x2 = square(x);
      const t = tanh(multiply(add(x, multiply(multiply(x2, x), TANH_CUBIC)), SQRT_2_OVER_PI));
      const dInner = multiply(add(multiply(x2, 3 * TANH_CUBIC), 1), SQRT_2_OVER_PI);
      const slope = add(multiply(add(t, 1), 0.5), multiply(multiply(multiply(x, 0.5), subtract(1, square(t))), dInner));
      return multiply(gradOut, slope);
    }
    const cdf = multiply(add(erf(multiply(x, SQRT_HALF)), 1), 0.5);
    const pdf = multiply(exp(multiply(square(x), -0.5)), INV_SQRT_2PI);
    return multiply(gradOut, add(cdf, multiply(x, pdf)));
  });
}

interface GeluConfig {
  [key: string]: string | boolean;
  approximate: GeluApproximation;
  hasBias: boolean;
  implementation: ActivationImplementation;
}

const geluOp = defineCustomVjp<GeluConfig>(
  ([x, bias], c) => {
    const b = c.hasBias ? bias : undefined;
    if (c.implementation === 'composite' || (c.implementation === 'auto' && x.dtype === 'float64')) {
      if (!b) return [geluComposite(x, c.approximate)];
      using shifted = add(x, b);
      return [geluComposite(shifted, c.approximate)];
    }
    return [mx.ext.fusedActivation(x, b ?? null, c.approximate === 'tanh' ? 'gelu_tanh' : 'gelu')];
  },
  ([x, bias], [dy], _o, c) => {
    if (!c.hasBias) return [geluVjp(x, dy, c.approximate)];
    return scope(() => {
      const d = geluVjp(add(x, bias), dy, c.approximate);
      return [reduceToShape(d, x.shape), reduceToShape(d, bias.shape)];
    });
  },
);

/** GELU of x (+ bias), exact (erf) or with the tanh approximation. Differentiable in both (pullback: geluVjp). */
export function gelu(x: Array, options: GeluOptions = {}): Array {
  const bias = options.bias ?? undefined;
  const config: GeluConfig = {
    approximate: options.approximate ?? 'none',
    hasBias: !!bias,
    implementation: options.implementation ?? 'auto',
  };
  return geluOp(bias ? [x, bias] : [x], config)[0];
}

export interface SiluOptions {
  /** The slope inside the sigmoid: x·σ(β·x) (default 1: SiLU; 1.702: QuickGELU). */
  beta?: number;
}

const scaled = (x: Array, beta: number) => (beta === 1 ? x : multiply(x, beta));

/** SiLU (swish-β) from plain ops: x·σ(β·x). */
export function siluComposite(x: Array, options: SiluOptions = {}): Array {
  return scope(() => multiply(x, sigmoid(scaled(x, options.beta ?? 1))));
}

/** d SiLU/dx · dy = s·(1 + β·x·(1 − s)) · dy with s = σ(β·x). */
export function siluVjp(x: Array, gradOut: Array, options: SiluOptions = {}): Array {
  return scope(() => {
    const bx = scaled(x, options.beta ?? 1);
    const s = sigmoid(bx);
    return multiply(gradOut, multiply(s, add(multiply(bx, subtract(1, s)), 1)));
  });
}

const siluOp = defineCustomVjp<{ beta: number }>(
  ([x], c) => [siluComposite(x, c)],
  ([x], [dy], _o, c) => [siluVjp(x, dy, c)],
);

/** SiLU (swish): x·σ(β·x), β = 1 by default. Differentiable (pullback: siluVjp). */
export function silu(x: Array, options: SiluOptions = {}): Array {
  return siluOp([x], { beta: options.beta ?? 1 })[0];
}

export interface SwigluOptions {
  /** The sigmoid's slope: silu(gate) is gate·σ(β·gate) (default 1). */
  beta?: number;
  /** Clamps gate to at most `limit` and up to [−limit, limit] first (default: no clamp), as gpt-oss does. */
  limit?: number;
  /** Added to the (clamped) up operand: gpt-oss's `up + 1` (default: nothing added). */
  upShift?: number;
}

interface SwigluConfig {
  [key: string]: number | null;
  beta: number;
  limit: number | null;
  upShift: number | null;
}

function swigluConfig(options: SwigluOptions): SwigluConfig {
  const limit = options.limit ?? Number.POSITIVE_INFINITY;
  // Infinity is not JSON: no limit is null in the closure's key.
  return { beta: options.beta ?? 1, limit: Number.isFinite(limit) ? limit : null, upShift: options.upShift ?? null };
}

/** The operands as the product sees them: gate ≤ limit, up in [−limit, limit] plus upShift. */
function swigluOperands(gate: Array, up: Array, c: SwigluConfig): [Array, Array] {
  const g = c.limit === null ? gate : minimum(gate, c.limit);
  const u = c.limit === null ? up : clip(up, -c.limit, c.limit);
  return [g, c.upShift === null ? u : add(u, c.upShift)];
}

/** SwiGLU from plain ops: silu(gate)·up (gate and up broadcast together), clamped and shifted as the options say. */
export function swigluComposite(gate: Array, up: Array, options: SwigluOptions = {}): Array {
  const c = swigluConfig(options);
  return scope(() => {
    const [g, u] = swigluOperands(gate, up, c);
    return multiply(siluComposite(g, c), u);
  });
}

/**
 * The SwiGLU pullback: dgate = dy·up·silu′(gate), dup = dy·silu(gate), each summed to its shape
 * (and zero where the clamp held the operand at the limit).
 */
export function swigluVjp(gate: Array, up: Array, gradOut: Array, options: SwigluOptions = {}): { dgate: Array; dup: Array } {
  const c = swigluConfig(options);
  return scope(() => {
    const [g, u] = swigluOperands(gate, up, c);
    let dg = siluVjp(g, multiply(gradOut, u), c);
    let du = multiply(gradOut, siluComposite(g, c));
    if (c.limit !== null) {
      dg = where(less(gate, c.limit), dg, zerosLike(dg));
      du = where(lessEqual(abs(up), c.limit), du, zerosLike(du));
    }
    return { dgate: reduceToShape(dg, gate.shape), dup: reduceToShape(du, up.shape) };
  });
}

const swigluOp = defineCustomVjp<SwigluConfig>(
  ([gate, up], c) => [swigluComposite(gate, up, optionsOf(c))],
  ([gate, up], [dy], _o, c) => {
    const { dgate, dup } = swigluVjp(gate, up, dy, optionsOf(c));
    return [dgate, dup];
  },
);

const optionsOf = (c: SwigluConfig): SwigluOptions => ({ beta: c.beta, limit: c.limit ?? undefined, upShift: c.upShift ?? undefined });

/**
 * SwiGLU: silu(gate)·up, the gated unit of LLaMA-style MLPs; with `limit` and `upShift`, gpt-oss's
 * clamp(gate)·σ(β·clamp(gate))·(clamp(up) + shift). Differentiable (pullback: swigluVjp).
 */
export function swiglu(gate: Array, up: Array, options: SwigluOptions = {}): Array {
  return swigluOp([gate, up], swigluConfig(options))[0];
}
