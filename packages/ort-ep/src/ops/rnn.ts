// Recurrent layers: RNN, GRU, LSTM. The sequence length is static (the input's shape), so each
// direction unrolls into one MLX op chain per step: the input projection of every step is one
// matmul up front, each step adds only the recurrent matmul and the gate math. sequence_lens
// masks padded steps as onnxruntime does: the state stops updating after a sequence's length
// (reverse directions start at its last valid step) and Y is zero there. A float32 LSTM (any
// activations, clip, input_forget, peepholes, directions) runs one input-projection matmul and
// one native primitive for the whole recurrence of every direction instead (mx.ext.lstm): unrolled, a
// short sequence is hundreds of tiny scheduled ops. Weights laid out for the recurrence (per
// direction, transposed) are made once per session when they are constants (OpContext.prepared).
import * as mx from '@mlx/core';
import type { Attrs } from '../registry/attrs.js';
import type { OpContext, OpEntry, OpResult } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { hostNumbers } from './helpers/util.js';
import { elu, leakyRelu, softplus } from './activation.js';

// ---------------------------------------------------------------------------------------------
// Activation functions named by the `activations` attribute, with alpha/beta consumed in order.

type Act = (x: mx.Array) => mx.Array;
interface ActSpec {
  alpha?: number;
  beta?: number;
  make: (alpha: number, beta: number) => Act;
}

/** The native kernel's codes of the activations (mx.ext.lstm). */
const nativeCodes: Record<string, number> = {
  relu: 0,
  tanh: 1,
  sigmoid: 2,
  affine: 3,
  leakyrelu: 4,
  thresholdedrelu: 5,
  scaledtanh: 6,
  hardsigmoid: 7,
  elu: 8,
  softsign: 9,
  softplus: 10,
};
const bitsOf = (x: number): number => new Int32Array(Float32Array.of(x).buffer)[0];

// Defaults are those of the ONNX operator of the same name (onnxruntime uses 0 where it has no
// default; the spec says "the same as of corresponding ONNX operators").
const activationSpecs: Record<string, ActSpec> = {
  relu: { make: () => (x) => mx.maximum(x, 0) },
  tanh: { make: () => (x) => mx.tanh(x) },
  sigmoid: { make: () => (x) => mx.sigmoid(x) },
  affine: { alpha: 1, beta: 0, make: (a, b) => (x) => mx.add(mx.multiply(x, a), b) },
  leakyrelu: { alpha: 0.01, make: (a) => (x) => leakyRelu(x, a) },
  thresholdedrelu: { alpha: 1, make: (a) => (x) => mx.where(mx.greater(x, a), x, mx.zerosLike(x)) },
  scaledtanh: { alpha: 1, beta: 1, make: (a, b) => (x) => mx.multiply(mx.tanh(mx.multiply(x, b)), a) },
  hardsigmoid: { alpha: 0.2, beta: 0.5, make: (a, b) => (x) => mx.clip(mx.add(mx.multiply(x, a), b), 0, 1) },
  elu: { alpha: 1, make: (a) => (x) => elu(x, a) },
  softsign: { make: () => (x) => mx.divide(x, mx.add(mx.abs(x), 1)) },
  softplus: { make: () => softplus },
};

export interface Family {
  opType: 'RNN' | 'GRU' | 'LSTM';
  gates: number;
  defaults: string[]; // per direction
  step: StepFn;
}

/** The attributes of a recurrent node, read once with the spec's defaults. */
export interface RnnParams {
  directions: 1 | 2;
  reverse: boolean;
  /** fam.defaults.length activations per direction, directions after one another. */
  activations: Act[];
  /** The same as mx.ext.lstm's list: (code, alpha's float32 bits, beta's float32 bits) per activation. */
  nativeActivations: number[];
  /** hidden_size, where given (else R's last axis). */
  hidden?: number;
  clip?: number;
  /** 1: X, Y, initial and final states are batch-major (opset 14+; 0 before). */
  layout: 0 | 1;
  /** GRU (opset 3+): the reset gate applies after the recurrent matmul. */
  linearBeforeReset: boolean;
  /** LSTM: the forget gate is 1 - the input gate. */
  inputForget: boolean;
  /** Every direction uses the family's default activations (whose native kernel may apply). */
  defaultActivations: boolean;
}

// 'foward' is a typo in an old ONNX test model that onnxruntime accepts as forward.
const directionNames = ['forward', 'reverse', 'bidirectional', 'foward'];

export function parseRnn(fam: Family, attrs: Attrs, opset: number): RnnParams {
  const op = fam.opType;
  const direction = attrs.string('direction', 'forward');
  if (!directionNames.includes(direction)) throw new RangeError(`${op} direction '${direction}' is not forward, reverse or bidirectional`);
  const directions = direction === 'bidirectional' ? 2 : 1;
  // A list of one direction's activations is repeated for bidirectional.
  const given = attrs.has('activations') ? attrs.strings('activations') : fam.defaults;
  const names = given.length === fam.defaults.length && directions === 2 ? [...given, ...given] : given;
  // Own keys only ('constructor' is no activation), and an empty name is unknown too.
  const unknown = names.find((n) => !Object.hasOwn(activationSpecs, n.toLowerCase()));
  if (unknown !== undefined) throw new RangeError(`${op} activation '${unknown}' is not one of ${Object.keys(activationSpecs).join(', ')}`);
  const want = fam.defaults.length * directions;
  if (names.length !== want) throw new RangeError(`${op} needs ${want} activations for direction '${direction}', got ${names.length}`);
  const layout = attrs.int('layout', 0);
  if (layout !== 0 && layout !== 1) throw new RangeError(`${op} layout ${layout} is not 0 or 1`);
  // A threshold clips to [-clip, clip]: 0 or less (or NaN) is no interval.
  if (attrs.has('clip') && !(attrs.float('clip') > 0)) throw new RangeError(`${op} clip ${attrs.float('clip')} is not positive`);
  return {
    directions,
    reverse: direction === 'reverse',
    ...buildActivations(names, attrs.floats('activation_alpha', []), attrs.floats('activation_beta', [])),
    hidden: attrs.has('hidden_size') ? attrs.int('hidden_size') : undefined,
    clip: attrs.has('clip') ? attrs.float('clip') : undefined,
    layout: opset >= 14 ? layout : 0,
    linearBeforeReset: opset >= 3 && attrs.int('linear_before_reset', 0) !== 0,
    inputForget: attrs.int('input_forget', 0) !== 0,
    defaultActivations: names.every((n, i) => n.toLowerCase() === fam.defaults[i % fam.defaults.length].toLowerCase()),
  };
}

/** The functions `names` name, taking alpha/beta values in order where the function has them. */
function buildActivations(names: string[], alphas: number[], betas: number[]): { activations: Act[]; nativeActivations: number[] } {
  let ai = 0;
  let bi = 0;
  const nativeActivations: number[] = [];
  const activations = names.map((name) => {
    const spec = activationSpecs[name.toLowerCase()];
    const a = spec.alpha === undefined ? 0 : ai < alphas.length ? alphas[ai++] : spec.alpha;
    const b = spec.beta === undefined ? 0 : bi < betas.length ? betas[bi++] : spec.beta;
    nativeActivations.push(nativeCodes[name.toLowerCase()], bitsOf(a), bitsOf(b));
    return spec.make(a, b);
  });
  return { activations, nativeActivations };
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
  /** h · Rᵀ when the weights are not a plain float matrix (DynamicQuantizeLSTM); else matmul(h, rT). */
  recurrent?: (h: mx.Array) => mx.Array;
  acts: Act[];
  clip?: number;
  hidden: number;
  params: RnnParams;
}

interface State {
  h: mx.Array;
  c?: mx.Array;
}
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
  const rh = mx.matmul(s.h, mx.slice(d.rT, [0, 0], [H, 2 * H], [1, 1])); // z, r
  const z = f(clipped(mx.add(part(xt, 0, H), part(rh, 0, H)), d.clip));
  const r = f(clipped(mx.add(part(xt, 1, H), part(rh, 1, H)), d.clip));
  const rhT = mx.slice(d.rT, [0, 2 * H], [H, 3 * H], [1, 1]);
  let hin: mx.Array;
  if (d.params.linearBeforeReset) {
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
  const gates = mx.add(xt, d.recurrent ? d.recurrent(s.h) : mx.matmul(s.h, d.rT));
  const cPrev = s.c!;
  const peep = (k: number, c: mx.Array, x: mx.Array) => (d.p ? mx.add(x, mx.multiply(mx.slice(d.p, [k * H], [(k + 1) * H], [1]), c)) : x);
  const i = f(clipped(peep(0, cPrev, part(gates, 0, H)), d.clip));
  // input_forget couples the gates: f = 1 - i.
  const fg = d.params.inputForget ? mx.subtract(1, i) : f(clipped(peep(2, cPrev, part(gates, 2, H)), d.clip));
  const cc = g(clipped(part(gates, 3, H), d.clip));
  const c = mx.add(mx.multiply(fg, cPrev), mx.multiply(i, cc));
  const o = f(clipped(peep(1, c, part(gates, 1, H)), d.clip));
  return { h: mx.multiply(o, hAct(c)), c };
}

// ---------------------------------------------------------------------------------------------
// The layer: layout, per-direction weights, masking, outputs.

const dirSlice = (a: mx.Array, d: number) =>
  mx.squeeze(
    mx.slice(
      a,
      [d, ...a.shape.slice(1).map(() => 0)],
      [d + 1, ...a.shape.slice(1)],
      a.shape.map(() => 1),
    ),
    0,
  );

/**
 * sequence_lens as int32 [batch], or undefined when absent or every sequence is full length. A
 * length outside [0, seq] fails the run (the guard); the masks treat it as clamped meanwhile.
 */
function seqLens(ctx: OpContext<RnnParams>, seq: number, batch: number): mx.Array | undefined {
  if (!ctx.has(4)) return undefined;
  const dims = ctx.shape(4);
  if (dims.length !== 1 || dims[0] !== batch) throw new RangeError(`sequence_lens has shape [${dims}], not [${batch}]`);
  const known = ctx.hostIfKnown(4);
  if (known) {
    const ns = hostNumbers(known);
    const bad = ns.find((n) => n < 0 || n > seq);
    if (bad !== undefined) throw new RangeError(`sequence_lens holds ${bad}, outside [0, ${seq}] (the sequence length)`);
    if (ns.every((n) => n === seq)) return undefined;
  }
  const lens = mx.reshape(mx.astype(ctx.input(4), 'int32'), [-1]);
  if (!known && batch > 0)
    ctx.guard(
      mx.any(mx.logicalOr(mx.less(lens, 0), mx.greater(lens, seq))),
      ([lo, hi]) => `sequence_lens holds values from ${lo} to ${hi}, outside [0, ${seq}] (the sequence length)`,
      mx.stack([mx.min(lens), mx.max(lens)]),
    );
  return lens;
}

/** The shapes of every input against X, the hidden size and the directions (the composed steps would broadcast some). */
function checkShapes(ctx: OpContext<RnnParams>, fam: Family, seqBatch: number[], input: number, H: number, custom: boolean): void {
  const p = ctx.params;
  const D = p.directions;
  const G = fam.gates;
  const op = fam.opType;
  const want = (i: number, name: string, dims: number[]) => {
    if (!ctx.has(i)) return;
    const got = ctx.shape(i);
    if (got.length !== dims.length || got.some((d, k) => d !== dims[k]))
      throw new RangeError(`${op} ${name} has shape [${got.join(', ')}], not [${dims.join(', ')}]`);
  };
  if (!custom) {
    want(1, 'W', [D, G * H, input]);
    want(2, 'R', [D, G * H, H]);
  }
  want(3, 'B', [D, 2 * G * H]);
  const state = p.layout === 1 ? [seqBatch[1], D, H] : [D, seqBatch[1], H];
  want(5, 'initial_h', state);
  if (fam.opType === 'LSTM') {
    want(6, 'initial_c', state);
    want(7, 'P', [D, 3 * H]);
  }
}

/** Step validity masks [batch, 1] per step. */
function stepMasks(lens: mx.Array, seq: number, batch: number): mx.Array[] {
  const col = mx.reshape(lens, [batch, 1]);
  return Array.from({ length: seq }, (_, t) => mx.less(t, col));
}

/**
 * Whether the native LSTM kernel computes this layer: a float32 LSTM with float weights (every
 * activation, clip, input_forget and peephole setting). It runs the whole recurrence of every
 * direction as one primitive on the CPU (off the CPU it composes the same MLX ops as lstmStep).
 */
function nativeLstm(ctx: OpContext<RnnParams>, fam: Family, x: mx.Array): boolean {
  if (fam.opType !== 'LSTM' || x.dtype !== 'float32') return false;
  const c = ctx.params.clip;
  if (c !== undefined && !(c > 0)) return false;
  return [1, 2, 3, 5, 6, 7].every((i) => !ctx.has(i) || ctx.elemType(i) === 1);
}

/**
 * W, R and B of every direction as the native LSTM reads them: W as [I, D*4H] (`wT`), or on a CPU
 * stream packed once into @mlx/sys's dense panels (`wp`, [ceil(D*4H / 32), I, 32]: the input
 * projection then streams it once for a few rows and in register tiles for more, where a [1, 128] x
 * [128, 512] step through OpenBLAS's addmm cost ~47 us and through the small-row kernel ~30), R as
 * [D, H, 4H], B as [D*4H]. `k` and `n`: W's [I, D*4H].
 */
interface NativeWeights {
  wT?: mx.Array;
  wp?: mx.Array;
  k: number;
  n: number;
  rT: mx.Array;
  bias?: mx.Array;
}

function nativeWeights(ctx: OpContext<RnnParams>, dirs: number, H: number): NativeWeights {
  return ctx.prepared([1, 2, 3], 'lstm', () => {
    const w = ctx.input(1); // [D, 4H, I]
    const r = ctx.input(2); // [D, 4H, H]
    const G = 4 * H;
    if (w.ndim !== 3 || w.shape[0] !== dirs || w.shape[1] !== G)
      throw new RangeError(`LSTM W has shape [${w.shape.join(', ')}], not [${dirs}, ${G}, input_size]`);
    if (r.ndim !== 3 || r.shape[0] !== dirs || r.shape[1] !== G || r.shape[2] !== H)
      throw new RangeError(`LSTM R has shape [${r.shape.join(', ')}], not [${dirs}, ${G}, ${H}]`);
    const wT = mx.contiguous(mx.transpose(mx.reshape(w, [dirs * G, w.shape[2]])), false);
    const rT = mx.contiguous(mx.transpose(r, [0, 2, 1]), false);
    const b = ctx.optional(3); // [D, 8H]: Wb, Rb
    if (b && (b.ndim !== 2 || b.shape[0] !== dirs || b.shape[1] !== 2 * G))
      throw new RangeError(`LSTM B has shape [${b.shape.join(', ')}], not [${dirs}, ${2 * G}]`);
    const bias = b && mx.reshape(mx.add(mx.slice(b, [0, 0], [dirs, G], [1, 1]), mx.slice(b, [0, G], [dirs, 2 * G], [1, 1])), [dirs * G]);
    const [k, n] = wT.shape;
    if (mx.defaultStream().device.type === 'cpu') return { wp: mx.ext.densePackWeight(wT), k, n, rT, bias };
    return { wT, k, n, rT, bias };
  });
}

/** The float32 LSTM layer as one input-projection matmul and the native recurrence of every direction. */
function runNativeLstm(ctx: OpContext<RnnParams>, x: mx.Array, H: number, lens: mx.Array | undefined): OpResult[] {
  const p = ctx.params;
  const [, batch, input] = x.shape;
  const dirs = p.directions;
  const { wT, wp, k, n, rT, bias } = nativeWeights(ctx, dirs, H);
  if (k !== input) throw new RangeError(`LSTM W's input size ${k} is not X's ${input}`);
  // [seq, batch, D*4H]: the packed product on the CPU, elsewhere MLX's matmul (smallMatmul's).
  const proj = wp ? mx.ext.denseGemm(x, wp, n, bias ?? null) : mx.ext.smallMatmul(x, wT!, bias ?? null);
  const h0 = initialState(ctx, 5, [dirs, batch, H], x.dtype);
  const c0 = initialState(ctx, 6, [dirs, batch, H], x.dtype);
  const direction = dirs === 2 ? 2 : p.reverse ? 1 : 0;
  const [y, hT, cT] = mx.ext.lstm(
    proj,
    rT,
    h0,
    c0,
    lens ?? null,
    ctx.optional(7) ?? null,
    p.nativeActivations,
    p.clip ?? Number.POSITIVE_INFINITY,
    p.inputForget,
    direction,
  );
  const layout = p.layout;
  const state = (s: mx.Array) => (layout === 1 ? mx.transpose(s, [1, 0, 2]) : s);
  return [
    ctx.wants(0) ? (layout === 1 ? mx.transpose(y, [2, 0, 1, 3]) : y) : undefined,
    ctx.wants(1) ? state(hT) : undefined,
    ctx.wants(2) ? state(cT) : undefined,
  ];
}

/** initial_h / initial_c as [dirs, batch, H] (layout 1 holds them as [batch, dirs, H]). */
function initialState(ctx: OpContext<RnnParams>, i: number, shape: number[], dtype: mx.Dtype): mx.Array {
  const v = ctx.optional(i);
  if (!v) return mx.zeros(shape, dtype);
  return ctx.params.layout === 1 ? mx.transpose(v, [1, 0, 2]) : v;
}

/**
 * Weights that are not float matrices (DynamicQuantizeLSTM's 8-bit ones): the input projection of
 * every step and the recurrent product of each direction, and the hidden size.
 */
export interface LayerWeights {
  hidden: number;
  project(x: mx.Array, dir: number): mx.Array;
  recurrent(dir: number): (h: mx.Array) => mx.Array;
}

export function runLayer(fam: Family, ctx: OpContext<RnnParams>, weights?: LayerWeights): OpResult[] {
  const p = ctx.params;
  const layout = p.layout;
  const xIn = ctx.input(0);
  if (xIn.ndim !== 3) throw new RangeError(`${fam.opType} X has rank ${xIn.ndim}, not 3`);
  const x = layout === 1 ? mx.transpose(xIn, [1, 0, 2]) : xIn; // [seq, batch, input]
  const [seq, batch] = x.shape;
  const r = ctx.input(2);
  const dirs = p.directions;
  const H = weights?.hidden ?? p.hidden ?? r.shape[2];
  const G = fam.gates;
  const per = fam.defaults.length;
  checkShapes(ctx, fam, [seq, batch], x.shape[2], H, !!weights);
  const lens = seqLens(ctx, seq, batch);
  // Custom weights (DynamicQuantizeLSTM: quantized R in its own layout) keep the composed step.
  // The native recurrence has no VJP: under a gradient (MlxSession.valueAndGrad) the composed steps run.
  if (!weights && seq > 0 && !mx.differentiating() && nativeLstm(ctx, fam, x)) return runNativeLstm(ctx, x, H, lens);
  const h0 = initialState(ctx, 5, [dirs, batch, H], x.dtype);
  const c0 = fam.opType === 'LSTM' ? initialState(ctx, 6, [dirs, batch, H], x.dtype) : undefined;
  const bias = ctx.optional(3);
  const peepholes = fam.opType === 'LSTM' ? ctx.optional(7) : undefined;
  const masks = lens ? stepMasks(lens, seq, batch) : undefined;

  const ys: mx.Array[] = [];
  const hs: mx.Array[] = [];
  const cs: mx.Array[] = [];
  for (let d = 0; d < dirs; d++) {
    // Per-direction transposed weights, made once per session for constant weights.
    const dw = weights
      ? undefined
      : ctx.prepared([1, 2], `direction ${d}`, () => ({
          wT: mx.transpose(dirSlice(ctx.input(1), d)),
          rT: mx.transpose(dirSlice(ctx.input(2), d)),
        }));
    let proj = weights ? weights.project(x, d) : mx.matmul(x, dw!.wT); // [seq, batch, G*H]
    let rb: mx.Array | undefined;
    if (bias) {
      const b = dirSlice(bias, d);
      const wb = mx.slice(b, [0], [G * H], [1]);
      rb = mx.slice(b, [G * H], [2 * G * H], [1]);
      // GRU's hidden-gate recurrent bias depends on linear_before_reset: its step adds it.
      const outside = fam.opType === 'GRU' ? mx.concatenate([mx.slice(rb, [0], [2 * H], [1]), mx.zeros([H], rb.dtype)], 0) : rb;
      proj = mx.add(proj, mx.add(wb, outside));
    }
    const backwards = d === 1 || p.reverse;
    const dir: DirInputs = {
      xw: seq > 0 ? mx.split(proj, seq, 0).map((a) => mx.squeeze(a, 0)) : [],
      rT: weights ? r : dw!.rT,
      recurrent: weights?.recurrent(d),
      rb: fam.opType === 'GRU' ? rb : undefined,
      p: peepholes && dirSlice(peepholes, d),
      acts: p.activations.slice(d * per, (d + 1) * per),
      clip: p.clip,
      hidden: H,
      params: p,
    };
    let s: State = { h: dirSlice(h0, d), c: c0 && dirSlice(c0, d) };
    const out: mx.Array[] = new Array(seq);
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
  const state = (list: mx.Array[]) => {
    const s = mx.stack(list, 0); // [dirs, batch, H]
    return layout === 1 ? mx.transpose(s, [1, 0, 2]) : s;
  };
  let y: mx.Array | undefined;
  if (ctx.wants(0)) {
    y = mx.stack(ys, 1); // [seq, dirs, batch, H]
    if (layout === 1) y = mx.transpose(y, [2, 0, 1, 3]);
  }
  return [y, ctx.wants(1) ? state(hs) : undefined, ctx.wants(2) && cs.length ? state(cs) : undefined];
}

function family(fam: Family): OpEntry {
  return onnxOp(fam.opType, 1, {
    parse: (attrs, opset) => parseRnn(fam, attrs, opset),
    run: (ctx) => runLayer(fam, ctx),
  });
}

export const lstmFamily: Family = { opType: 'LSTM', gates: 4, defaults: ['Sigmoid', 'Tanh', 'Tanh'], step: lstmStep };

export const rnnOps: OpEntry[] = [
  family({ opType: 'RNN', gates: 1, defaults: ['Tanh'], step: rnnStep }),
  family({ opType: 'GRU', gates: 3, defaults: ['Sigmoid', 'Tanh'], step: gruStep }),
  family(lstmFamily),
];
