// Recurrent layers: RNN, GRU, LSTM. The sequence length is static (the input's shape), so each
// direction unrolls into one MLX op chain per step: the input projection of every step is one
// matmul up front, each step adds only the recurrent matmul and the gate math. sequence_lens
// masks padded steps as onnxruntime does: the state stops updating after a sequence's length
// (reverse directions start at its last valid step) and Y is zero there.
import * as mx from '@mlx/core';
import type { CheckContext, OpContext, OpEntry, OpResult } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { hostNumbers } from './helpers/util.js';

// ---------------------------------------------------------------------------------------------
// Activation functions named by the `activations` attribute, with alpha/beta consumed in order.

type Act = (x: mx.Array) => mx.Array;
interface ActSpec { alpha?: number; beta?: number; make: (alpha: number, beta: number) => Act }

// Defaults are those of the ONNX operator of the same name (onnxruntime uses 0 where it has no
// default; the spec says "the same as of corresponding ONNX operators").
const activationSpecs: Record<string, ActSpec> = {
  relu: { make: () => (x) => mx.maximum(x, 0) },
  tanh: { make: () => (x) => mx.tanh(x) },
  sigmoid: { make: () => (x) => mx.sigmoid(x) },
  affine: { alpha: 1, beta: 0, make: (a, b) => (x) => mx.add(mx.multiply(x, a), b) },
  leakyrelu: { alpha: 0.01, make: (a) => (x) => mx.where(mx.less(x, 0), mx.multiply(x, a), x) },
  thresholdedrelu: { alpha: 1, make: (a) => (x) => mx.where(mx.greater(x, a), x, mx.zerosLike(x)) },
  scaledtanh: { alpha: 1, beta: 1, make: (a, b) => (x) => mx.multiply(mx.tanh(mx.multiply(x, b)), a) },
  hardsigmoid: { alpha: 0.2, beta: 0.5, make: (a, b) => (x) => mx.clip(mx.add(mx.multiply(x, a), b), 0, 1) },
  elu: { alpha: 1, make: (a) => (x) => mx.where(mx.less(x, 0), mx.multiply(mx.expm1(x), a), x) },
  softsign: { make: () => (x) => mx.divide(x, mx.add(mx.abs(x), 1)) },
  softplus: { make: () => (x) => mx.logaddexp(x, mx.zerosLike(x)) },
};

interface Family {
  opType: 'RNN' | 'GRU' | 'LSTM';
  gates: number;
  defaults: string[]; // per direction
  step: StepFn;
}

function directionsOf(ctx: CheckContext): number {
  const d = ctx.attrs.string('direction', 'forward');
  return d === 'bidirectional' ? 2 : 1;
}

/** The activation names for every direction (a per-direction list is repeated for bidirectional). */
function activationNames(ctx: CheckContext, fam: Family): string[] {
  const dirs = directionsOf(ctx);
  const names = ctx.attrs.has('activations') ? ctx.attrs.strings('activations') : fam.defaults;
  return names.length === fam.defaults.length && dirs === 2 ? [...names, ...names] : names;
}

function buildActivations(ctx: CheckContext, fam: Family): Act[] {
  const alphas = ctx.attrs.floats('activation_alpha', []);
  const betas = ctx.attrs.floats('activation_beta', []);
  let ai = 0;
  let bi = 0;
  return activationNames(ctx, fam).map((name) => {
    const spec = activationSpecs[name.toLowerCase()];
    const a = spec.alpha === undefined ? 0 : ai < alphas.length ? alphas[ai++] : spec.alpha;
    const b = spec.beta === undefined ? 0 : bi < betas.length ? betas[bi++] : spec.beta;
    return spec.make(a, b);
  });
}

function rnnCheck(fam: Family) {
  return (ctx: CheckContext): string | undefined => {
    const dir = ctx.attrs.string('direction', 'forward');
    if (!['forward', 'reverse', 'bidirectional', 'foward'].includes(dir)) return `${fam.opType} direction '${dir}' is not forward, reverse or bidirectional`;
    const names = activationNames(ctx, fam);
    const unknown = names.find((n) => !activationSpecs[n.toLowerCase()]);
    if (unknown) return `${fam.opType} activation '${unknown}' is not one of ${Object.keys(activationSpecs).join(', ')}`;
    const want = fam.defaults.length * directionsOf(ctx);
    if (names.length !== want) return `${fam.opType} needs ${want} activations for direction '${dir}', got ${names.length}`;
    const layout = ctx.attrs.int('layout', 0);
    if (layout !== 0 && layout !== 1) return `${fam.opType} layout ${layout} is not 0 or 1`;
    return undefined;
  };
}

// ---------------------------------------------------------------------------------------------
// One direction's recurrence.

interface DirInputs {
  /** Input projection of every step plus the biases that sit outside the recurrence: [seq][batch, G*H]. */
  xw: mx.Array[];
  /** R^T: [H, G*H]. */
  rT: mx.Array;
  /** The recurrent bias, [G*H] (GRU keeps it apart for linear_before_reset). */
  rb?: mx.Array;
  /** LSTM peepholes [3H] (i, o, f). */
  p?: mx.Array;
  acts: Act[];
  clip?: number;
  hidden: number;
  ctx: OpContext;
}

interface State { h: mx.Array; c?: mx.Array }
type StepFn = (xt: mx.Array, s: State, d: DirInputs) => State;

const clipped = (x: mx.Array, clip?: number) => (clip === undefined ? x : mx.clip(x, -clip, clip));
const part = (a: mx.Array, i: number, h: number) => mx.slice(a, [0, i * h], [a.shape[0], (i + 1) * h], [1, 1]);

function rnnStep(xt: mx.Array, s: State, d: DirInputs): State {
  const [f] = d.acts;
  return { h: f(clipped(mx.add(xt, mx.matmul(s.h, d.rT)), d.clip)) };
}

function gruStep(xt: mx.Array, s: State, d: DirInputs): State {
  const [f, g] = d.acts;
  const H = d.hidden;
  const lbr = d.ctx.opset >= 3 && d.ctx.attrs.int('linear_before_reset', 0) !== 0;
  const rh = mx.matmul(s.h, mx.slice(d.rT, [0, 0], [H, 2 * H], [1, 1])); // z, r
  const z = f(clipped(mx.add(part(xt, 0, H), part(rh, 0, H)), d.clip));
  const r = f(clipped(mx.add(part(xt, 1, H), part(rh, 1, H)), d.clip));
  const rhT = mx.slice(d.rT, [0, 2 * H], [H, 3 * H], [1, 1]);
  let hin: mx.Array;
  if (lbr) {
    let hr = mx.matmul(s.h, rhT);
    if (d.rb) hr = mx.add(hr, mx.slice(d.rb, [2 * H], [3 * H], [1]));
    hin = mx.add(part(xt, 2, H), mx.multiply(r, hr));
  } else {
    hin = mx.add(part(xt, 2, H), mx.matmul(mx.multiply(r, s.h), rhT));
    if (d.rb) hin = mx.add(hin, mx.slice(d.rb, [2 * H], [3 * H], [1]));
  }
  const hh = g(clipped(hin, d.clip));
  // Ht = (1 - z) * h~ + z * Ht-1
  return { h: mx.add(mx.multiply(mx.subtract(1, z), hh), mx.multiply(z, s.h)) };
}

function lstmStep(xt: mx.Array, s: State, d: DirInputs): State {
  const [f, g, hAct] = d.acts;
  const H = d.hidden;
  const gates = mx.add(xt, mx.matmul(s.h, d.rT));
  const cPrev = s.c!;
  const peep = (k: number, c: mx.Array, x: mx.Array) => (d.p ? mx.add(x, mx.multiply(mx.slice(d.p, [k * H], [(k + 1) * H], [1]), c)) : x);
  const i = f(clipped(peep(0, cPrev, part(gates, 0, H)), d.clip));
  // input_forget couples the gates: f = 1 - i.
  const fg = d.ctx.attrs.int('input_forget', 0) ? mx.subtract(1, i) : f(clipped(peep(2, cPrev, part(gates, 2, H)), d.clip));
  const cc = g(clipped(part(gates, 3, H), d.clip));
  const c = mx.add(mx.multiply(fg, cPrev), mx.multiply(i, cc));
  const o = f(clipped(peep(1, c, part(gates, 1, H)), d.clip));
  return { h: mx.multiply(o, hAct(c)), c };
}

// ---------------------------------------------------------------------------------------------
// The layer: layout, per-direction weights, masking, outputs.

const dirSlice = (a: mx.Array, d: number) => mx.squeeze(mx.slice(a, [d, ...a.shape.slice(1).map(() => 0)], [d + 1, ...a.shape.slice(1)], a.shape.map(() => 1)), 0);

/** Step validity masks [batch, 1] per step, or undefined when every sequence is full length. */
function stepMasks(ctx: OpContext, seq: number, batch: number): mx.Array[] | undefined {
  if (!ctx.has(4)) return undefined;
  const known = ctx.hostIfKnown(4);
  if (known && hostNumbers(known).every((n) => n === seq)) return undefined;
  const lens = mx.reshape(mx.astype(ctx.input(4), 'int32'), [batch, 1]);
  return Array.from({ length: seq }, (_, t) => mx.less(t, lens));
}

/** initial_h / initial_c as [dirs, batch, H] (layout 1 holds them as [batch, dirs, H]). */
function initialState(ctx: OpContext, i: number, layout: number, shape: number[], dtype: mx.Dtype): mx.Array {
  if (!ctx.has(i)) return mx.zeros(shape, dtype);
  const v = ctx.input(i);
  return layout === 1 ? mx.transpose(v, [1, 0, 2]) : v;
}

function runLayer(fam: Family, ctx: OpContext): OpResult[] {
  const layout = ctx.opset >= 14 ? ctx.attrs.int('layout', 0) : 0;
  const xIn = ctx.input(0);
  const x = layout === 1 ? mx.transpose(xIn, [1, 0, 2]) : xIn; // [seq, batch, input]
  const [seq, batch] = x.shape;
  const w = ctx.input(1);
  const r = ctx.input(2);
  const dirs = directionsOf(ctx);
  const H = ctx.attrs.int('hidden_size', r.shape[2]);
  const G = fam.gates;
  const acts = buildActivations(ctx, fam);
  const per = fam.defaults.length;
  const clip = ctx.attrs.has('clip') ? ctx.attrs.float('clip') : undefined;
  const masks = stepMasks(ctx, seq, batch);
  const h0 = initialState(ctx, 5, layout, [dirs, batch, H], x.dtype);
  const c0 = fam.opType === 'LSTM' ? initialState(ctx, 6, layout, [dirs, batch, H], x.dtype) : undefined;
  const reverse = ctx.attrs.string('direction', 'forward') === 'reverse';

  const ys: mx.Array[] = [];
  const hs: mx.Array[] = [];
  const cs: mx.Array[] = [];
  for (let d = 0; d < dirs; d++) {
    let proj = mx.matmul(x, mx.transpose(dirSlice(w, d))); // [seq, batch, G*H]
    let rb: mx.Array | undefined;
    if (ctx.has(3)) {
      const b = dirSlice(ctx.input(3), d);
      const wb = mx.slice(b, [0], [G * H], [1]);
      rb = mx.slice(b, [G * H], [2 * G * H], [1]);
      // GRU's hidden-gate recurrent bias depends on linear_before_reset: its step adds it.
      const outside = fam.opType === 'GRU' ? mx.concatenate([mx.slice(rb, [0], [2 * H], [1]), mx.zeros([H], rb.dtype)], 0) : rb;
      proj = mx.add(proj, mx.add(wb, outside));
    }
    const dir: DirInputs = {
      xw: seq > 0 ? mx.split(proj, seq, 0).map((a) => mx.squeeze(a, 0)) : [],
      rT: mx.transpose(dirSlice(r, d)),
      rb: fam.opType === 'GRU' ? rb : undefined,
      p: fam.opType === 'LSTM' && ctx.has(7) ? dirSlice(ctx.input(7), d) : undefined,
      acts: acts.slice(d * per, (d + 1) * per),
      clip, hidden: H, ctx,
    };
    let s: State = { h: dirSlice(h0, d), c: c0 && dirSlice(c0, d) };
    const out: mx.Array[] = new Array(seq);
    const backwards = d === 1 || reverse;
    for (let k = 0; k < seq; k++) {
      const t = backwards ? seq - 1 - k : k;
      const next = fam.step(dir.xw[t], s, dir);
      if (masks) {
        const m = masks[t];
        out[t] = mx.where(m, next.h, mx.zerosLike(next.h));
        s = { h: mx.where(m, next.h, s.h), c: next.c && mx.where(m, next.c, s.c!) };
      } else {
        out[t] = next.h;
        s = next;
      }
    }
    ys.push(seq > 0 ? mx.stack(out, 0) : mx.zeros([0, batch, H], x.dtype));
    hs.push(s.h);
    if (s.c) cs.push(s.c);
  }
  return outputs(ctx, layout, ys, hs, cs);
}

function outputs(ctx: OpContext, layout: number, ys: mx.Array[], hs: mx.Array[], cs: mx.Array[]): OpResult[] {
  const want = (i: number) => !!ctx.node.outputs[i];
  const state = (list: mx.Array[]) => {
    const s = mx.stack(list, 0); // [dirs, batch, H]
    return layout === 1 ? mx.transpose(s, [1, 0, 2]) : s;
  };
  let y: mx.Array | undefined;
  if (want(0)) {
    y = mx.stack(ys, 1); // [seq, dirs, batch, H]
    if (layout === 1) y = mx.transpose(y, [2, 0, 1, 3]);
  }
  return [y, want(1) ? state(hs) : undefined, want(2) && cs.length ? state(cs) : undefined];
}

function family(fam: Family): OpEntry {
  return onnxOp(fam.opType, 1, {
    check: rnnCheck(fam),
    run: (ctx) => runLayer(fam, ctx),
  });
}

export const rnnOps: OpEntry[] = [
  family({ opType: 'RNN', gates: 1, defaults: ['Tanh'], step: rnnStep }),
  family({ opType: 'GRU', gates: 3, defaults: ['Sigmoid', 'Tanh'], step: gruStep }),
  family({ opType: 'LSTM', gates: 4, defaults: ['Sigmoid', 'Tanh', 'Tanh'], step: lstmStep }),
];
