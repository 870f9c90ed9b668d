// valueAndGrad's VJPs op by op, over the ONNX node suite's float cases (the ones passing.txt lists):
// for each case whose first output is float32/float64 and which has float32/float64 inputs, the
// loss sum(output_0 * r) (r fixed, seeded; 0 where the expected output is not finite) is
// differentiated with respect to every float input at the case's own test_data_set_0 inputs, and
// the gradient's directional derivatives along 4 seeded directions (all elements, the odd, the
// even, every third) are checked against central finite differences of the same loss.
//
// The differences come, in order of preference, from: onnxruntime-node on a float64 copy of the
// model ('ort-f64': float types, Cast targets, tensor attributes and initializers made double),
// this provider's eager session on that copy ('mlx-f64', where onnxruntime has no double kernel),
// onnxruntime-node on the float32 model ('ort-f32'), the provider's float32 eager run ('mlx-f32',
// where onnxruntime cannot load the model). A reference is used only if it reproduces the case's
// expected output. Steps are relative to the inputs' size: 1e-6 first where the reference sees a
// move of 1e-9 (truly float64), else 1e-3, growing to 1e-2 while the estimates at h and h/2
// disagree; the result is Richardson's extrapolation of the two. Where the one-sided slopes keep
// their gap as the step halves (a kink crossed: Relu at an exact 0, Max ties, a piecewise-constant
// op) the direction is left out; a case with no direction left counts as skipped. Comparison:
// |<g, d> - fd| <= rtol * (|fd| + sum |g_i d_i|) + 1e-6, rtol 2e-3 (float64 steps) or 5e-3.
//
// Outcome (all 1145 float cases of 1754 listed, ~25 s on one core): 1105 match (817 ort-f64,
// 204 mlx-f64, 48 ort-f32, 36 mlx-f32; 135 ops checked alone, 147 counting the ops of expanded
// functions). 6 non-differentiable cases (Floor, Ceil, Round, Sign) must give zero gradients (or a
// NotDifferentiableError; so would RandomNormalLike, RandomUniformLike, Bernoulli, Multinomial,
// which have no float case here); integer and bool outputs (ArgMax, comparisons, Shape, NonZero,
// TopK's indices) are not float cases. 16 refused with a NotDifferentiableError (REFUSED below:
// TreeEnsemble, Det, Loop, Range, MelWeightMatrix, Unique, Scatter with reduction 'mul',
// LinearAttention's Scan expansion). 18 skipped, every direction crossing a kink: DeformConv (4),
// GridSample nearest and align-corners (8), MaxPool with dilations (2), Hardmax, L1
// normalization, OneHot (2). Float inputs that are parameters read on the host (Resize's scales,
// RoiAlign's rois, OneHot's depth, Dropout's ratio) are refused by valueAndGrad, and such a case
// is checked with respect to its other inputs.
//
// Bugs it found, fixed with regression tests in grad.test.ts: Pad's value input (crashed),
// NegativeLogLikelihoodLoss/SoftmaxCrossEntropyLoss class weights (zero gradient), Attention's
// additive mask and RotaryEmbedding's caches (zero gradients), strided ConvTranspose with an
// output window (wrong gradient shape; covered here by test_convtranspose_kernel_shape and others).
//
// GRADCHECK_ONLY=<regexp> runs the matching cases; GRADCHECK_REPORT=1 prints the table;
// GRADCHECK_OUT=<file> writes the outcomes (and <file>.jsonl as they come); GRADCHECK_WRT=<name>
// differentiates that input alone; GRADCHECK_REF=<kind> forces the reference.
import { appendFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fromBinary, toBinary } from '@bufbuild/protobuf';
import * as mx from '@mlx/core';
import { type AttributeProto, type GraphProto, ModelProtoSchema, type TensorProto, type TypeProto, type ValueInfoProto } from 'onnx-buf';
import { describe, expect, it } from 'vitest';
import { MlxSession, NotDifferentiableError, type HostTensor } from '../../src/index.js';
import { readTestCase, type TestValue } from '../../src/onnx/index.js';
import { hostToTensor } from '../../src/internal.js';
import { expectShared, sharedPath } from '../helpers/shared.js';
import { ort, seeded } from '../helpers/ort.js';

const FLOAT = 1;
const DOUBLE = 11;
const suite = sharedPath('onnx-node-tests/v1.22.0');
const DIRECTIONS = 4;

/** Ops whose gradient is zero (or refused) by definition: the check is that, not finite differences. */
const NON_DIFFERENTIABLE = new Set([
  'RandomNormal',
  'RandomNormalLike',
  'RandomUniform',
  'RandomUniformLike',
  'Bernoulli',
  'Multinomial',
  'Floor',
  'Ceil',
  'Round',
  'Sign',
]);

/**
 * Cases known not to check, and why (a listed case that starts checking fails the test, so the
 * list only shrinks).
 */
const KNOWN: Record<string, string> = {};

/**
 * Cases whose reference is chosen: the provider's float64 run of the copy (a grouped 1-D Conv)
 * gives differences inconsistent with its float32 run, which agrees with the gradient; onnxruntime
 * cannot load these (their opset is newer than it knows).
 */
const REFERENCE: Record<string, Reference['kind']> = {
  test_causal_conv_with_state_basic_expanded: 'mlx-f32',
  test_causal_conv_with_state_with_bias_expanded: 'mlx-f32',
  // MLX's float64 erf is a float32-accurate approximation (its differences are off by 3%).
  test_gelu_default_2: 'ort-f32',
  test_gelu_default_2_expanded: 'ort-f32',
};

/**
 * Ops valueAndGrad refuses (a NotDifferentiableError naming the node), and why: their cases must
 * be refused, not differentiated wrongly.
 */
const REFUSED: Record<string, string> = {
  'ai.onnx.ml.TreeEnsemble': 'piecewise constant in its input; the trees are walked on the host',
  Det: 'MLX has no VJP for its LU factorization (primitive LUF)',
  Loop: "a float loop-carried value that the body's condition or trip count reads on the host",
  Range: 'its float start/limit/delta fix the output length (read on the host)',
  MelWeightMatrix: 'its float frequencies build the matrix on the host',
  Unique: 'sorts and deduplicates on the host',
  ScatterElements: "reduction 'mul': MLX has no VJP for scatter_prod",
  ScatterND: "reduction 'mul': MLX has no VJP for scatter_prod",
  Scan: "LinearAttention's expansion: a Scan whose body reads a differentiated value on the host",
};

const isTensor = (v: TestValue): v is HostTensor => 'dims' in v && 'dtype' in v;

// ---------------------------------------------------------------------------------------------
// A float64 copy of a float32 model.

function typeToDouble(t: TypeProto | undefined): void {
  const v = t?.value;
  if (!v) return;
  if (v.case === 'tensorType' && v.value.elemType === FLOAT) v.value.elemType = DOUBLE;
  else if (v.case === 'sequenceType') typeToDouble(v.value.elemType);
  else if (v.case === 'optionalType') typeToDouble(v.value.elemType);
}

function tensorToDouble(t: TensorProto): void {
  if (t.dataType !== FLOAT) return;
  let data: number[];
  if (t.rawData.length) {
    const raw = Uint8Array.from(t.rawData);
    data = Array.from(new Float32Array(raw.buffer, 0, raw.byteLength / 4));
  } else data = t.floatData;
  t.dataType = DOUBLE;
  // (proto2: an empty raw_data that was set is still written, so raw data stays raw.)
  if (t.rawData.length) t.rawData = new Uint8Array(Float64Array.from(data).buffer);
  else {
    t.floatData = [];
    t.doubleData = data;
  }
}

function graphToDouble(g: GraphProto): void {
  const infos: ValueInfoProto[] = [...g.input, ...g.output, ...g.valueInfo];
  for (const i of infos) typeToDouble(i.type);
  for (const t of g.initializer) tensorToDouble(t);
  for (const n of g.node)
    for (const a of n.attribute) {
      attrToDouble(n.opType, a);
    }
}

function attrToDouble(opType: string, a: AttributeProto): void {
  if ((a.name === 'to' || a.name === 'dtype') && Number(a.i) === FLOAT) a.i = BigInt(DOUBLE);
  if (a.t) tensorToDouble(a.t);
  for (const t of a.tensors) tensorToDouble(t);
  if (a.g) graphToDouble(a.g);
  for (const g of a.graphs) graphToDouble(g);
  if (a.tp) typeToDouble(a.tp);
  void opType;
}

function doubleModel(bytes: Uint8Array): Uint8Array {
  const m = fromBinary(ModelProtoSchema, bytes);
  if (m.graph) graphToDouble(m.graph);
  return toBinary(ModelProtoSchema, m);
}

const toF64 = (t: HostTensor): HostTensor =>
  t.dtype === FLOAT ? { dtype: DOUBLE, dims: t.dims, data: Float64Array.from(t.data as Float32Array) } : t;
const toF32 = (t: HostTensor): HostTensor =>
  t.dtype === DOUBLE ? { dtype: FLOAT, dims: t.dims, data: Float32Array.from(t.data as Float64Array) } : t;

// ---------------------------------------------------------------------------------------------
// A case.

interface Prepared {
  name: string;
  ops: string[];
  bytes: Uint8Array;
  inputs: string[];
  feeds: Record<string, HostTensor>;
  wrt: string[];
  output: string;
  expected: HostTensor;
}

/** The case as a gradient check, or why it is not one. */
function prepare(name: string): Prepared | string {
  const tc = readTestCase(join(suite, name));
  const g = tc.model.graph;
  const inputs = g.inputs.filter((i) => !g.initializers.has(i.name)).map((i) => i.name);
  const ds = tc.datasets[0];
  if (!ds) return 'no data set';
  if (!ds.inputs.every(isTensor) || !ds.outputs.every(isTensor)) return 'sequence or optional data';
  const feeds: Record<string, HostTensor> = {};
  (ds.inputs as HostTensor[]).forEach((t, i) => (feeds[inputs[i]] = t));
  const wrt = inputs.filter((n) => feeds[n] && (feeds[n].dtype === FLOAT || feeds[n].dtype === DOUBLE) && feeds[n].data.length > 0);
  if (process.env.GRADCHECK_WRT) wrt.splice(0, wrt.length, ...wrt.filter((n) => n === process.env.GRADCHECK_WRT));
  if (!wrt.length) return 'no float input';
  const expected = ds.outputs[0] as HostTensor;
  if (expected.dtype !== FLOAT && expected.dtype !== DOUBLE) return 'first output not float32/float64';
  if (!expected.data.length) return 'empty output';
  const ops = [...new Set(g.nodes.map((n) => (n.domain && n.domain !== 'ai.onnx' ? `${n.domain}.${n.opType}` : n.opType)))].sort();
  return { name, ops, bytes: tc.modelBytes, inputs, feeds, wrt, output: g.outputs[0].name, expected };
}

/** Elements beyond this size (Cast's 3.4e38) are not moved: a step on their scale dwarfs the others. */
const LARGE = 1e6;

/**
 * Direction k for the j-th differentiated input x: seeded, zero where x is not finite or beyond LARGE, and over
 * all elements (k = 0), the odd ones, the even ones, every third: the sparse ones miss a kink the
 * full one crosses (an example's exact 0 under Relu).
 */
function directionOf(x: ArrayLike<number>, k: number, j: number): number[] {
  const keep = [() => true, (i: number) => i % 2 === 1, (i: number) => i % 2 === 0, (i: number) => i % 3 === 0][k];
  return seeded(x.length, 300 + 17 * k + j).map((d, i) => (keep(i) && Math.abs(x[i]) <= LARGE ? d : 0));
}

/** The loss's weights r: seeded, zero where the expected output is not finite (Cast's NaN and inf). */
function lossWeights(p: Prepared): Float64Array {
  const e = p.expected.data as ArrayLike<number>;
  return Float64Array.from(seeded(e.length, 1000), (r, i) => (Number.isFinite(e[i]) ? r : 0));
}

/** The loss sum(y * r) in float64, on a host output (the elements of weight 0 left out). */
function lossOf(y: ArrayLike<number>, r: Float64Array): number {
  let l = 0;
  for (let i = 0; i < y.length; i++) if (r[i] !== 0) l += y[i] * r[i];
  return l;
}

function closeToExpected(y: ArrayLike<number>, want: HostTensor, dims: readonly number[]): boolean {
  if (dims.join(',') !== want.dims.join(',')) return false;
  const e = want.data as ArrayLike<number>;
  for (let i = 0; i < e.length; i++) {
    if (Number.isNaN(e[i]) && Number.isNaN(y[i])) continue;
    if (e[i] === y[i]) continue;
    if (!(Math.abs(y[i] - e[i]) <= 1e-4 + 1e-3 * Math.abs(e[i]))) return false;
  }
  return true;
}

type Runner = (feeds: Record<string, HostTensor>) => Promise<ArrayLike<number>>;
interface Reference {
  kind: 'ort-f64' | 'mlx-f64' | 'ort-f32' | 'mlx-f32';
  run: Runner;
  release: () => Promise<void>;
}

async function ortRunner(bytes: Uint8Array, output: string, f64: boolean): Promise<Reference> {
  const s = await ort.InferenceSession.create(bytes);
  return {
    kind: f64 ? 'ort-f64' : 'ort-f32',
    run: async (feeds) => {
      const f: Record<string, import('onnxruntime-node').Tensor> = {};
      for (const [k, t] of Object.entries(feeds)) f[k] = hostToTensor(ort as never, f64 ? toF64(t) : toF32(t)) as never;
      const r = await s.run(f);
      const y = r[output];
      return y.data as Float32Array | Float64Array;
    },
    release: () => s.release(),
  };
}

async function mlxRunner(bytes: Uint8Array, output: string, f64 = true): Promise<Reference> {
  const s = MlxSession.createSync(bytes, { device: 'cpu', compiled: false, graphRewrites: false });
  return {
    kind: f64 ? 'mlx-f64' : 'mlx-f32',
    run: async (feeds) => {
      const f: Record<string, HostTensor> = {};
      for (const [k, t] of Object.entries(feeds)) f[k] = f64 ? toF64(t) : toF32(t);
      const r = s.runSync(f, [output]);
      return (r[output] as HostTensor).data as Float64Array | Float32Array;
    },
    release: async () => s.release(),
  };
}

/** The first reference that runs the model and reproduces its expected output. */
async function referenceFor(p: Prepared): Promise<Reference | string> {
  const why: string[] = [];
  let dbl: Uint8Array | undefined;
  try {
    dbl = doubleModel(p.bytes);
  } catch (e) {
    why.push(`float64 copy: ${(e as Error).message}`);
  }
  const makers: [string, () => Promise<Reference>][] = [];
  if (dbl) makers.push(['ort-f64', () => ortRunner(dbl, p.output, true)], ['mlx-f64', () => mlxRunner(dbl, p.output)]);
  makers.push(['ort-f32', () => ortRunner(p.bytes, p.output, false)], ['mlx-f32', () => mlxRunner(p.bytes, p.output, false)]);
  for (const [kind, make] of makers) {
    const only = process.env.GRADCHECK_REF ?? REFERENCE[p.name];
    if (only && kind !== only) continue;
    trace(`  try ${kind}`);
    let ref: Reference | undefined;
    try {
      ref = await make();
      const y = await ref.run(p.feeds);
      if (y.length === p.expected.data.length && closeToExpected(y, p.expected, p.expected.dims)) return ref;
      why.push(`${kind}: output differs from the expected one`);
    } catch (e) {
      why.push(`${kind}: ${(e as Error).message.split('\n')[0].slice(0, 120)}`);
    }
    await ref?.release();
  }
  return why.join('; ');
}

interface Outcome {
  status: 'ok' | 'mismatch' | 'refused' | 'error' | 'zero' | 'nonzero' | 'skipped';
  reference?: string;
  detail?: string;
  checked?: number;
  kinks?: number;
}

async function mlxGradient(p: Prepared): Promise<Record<string, Float64Array>> {
  const s = await MlxSession.create(p.bytes, { device: 'cpu', graphRewrites: false });
  try {
    const r = await s.valueAndGrad(p.feeds, {
      wrt: p.wrt,
      fetches: [p.output],
      output: (o) => {
        const y = o[p.output];
        const w = lossWeights(p);
        const rw = y.dtype === mx.float64 ? w : Float32Array.from(w);
        const r = mx.Array.fromTypedArray(rw, y.shape);
        return mx.sum(mx.multiply(mx.where(mx.notEqual(r, mx.scalar(0, r.dtype)), y, mx.scalar(0, y.dtype)), r));
      },
    });
    const out: Record<string, Float64Array> = {};
    for (const n of p.wrt) {
      const g = r.grads[n] as HostTensor;
      expect(g.dims, `${p.name}: d/d${n} shape`).toEqual(p.feeds[n].dims);
      out[n] = Float64Array.from(g.data as Float32Array);
    }
    return out;
  } finally {
    s.release();
  }
}

const trace = (msg: string) => process.env.GRADCHECK_TRACE && appendFileSync(process.env.GRADCHECK_TRACE, `${msg}\n`);

async function check(q: Prepared): Promise<Outcome> {
  trace(`${q.name}: grad`);
  let p = q;
  let grads: Record<string, Float64Array>;
  let dropped = '';
  try {
    try {
      grads = await mlxGradient(p);
    } catch (e) {
      // A float input that is a parameter read on the host (Resize's scales, RoiAlign's boxes,
      // Dropout's ratio): refused as it should be; the others are differentiated without it.
      if (!(e instanceof NotDifferentiableError) || !/on the host/.test(e.message) || p.wrt.length < 2) throw e;
      const kept: string[] = [];
      for (const n of p.wrt)
        await mlxGradient({ ...p, wrt: [n] }).then(
          () => kept.push(n),
          (e2) => {
            if (!(e2 instanceof NotDifferentiableError)) throw e2;
          },
        );
      if (!kept.length) throw e;
      dropped = ` (refused, read on the host: ${p.wrt.filter((n) => !kept.includes(n)).join(', ')})`;
      p = { ...p, wrt: kept };
      grads = await mlxGradient(p);
    }
  } catch (e) {
    if (e instanceof NotDifferentiableError) return { status: 'refused', detail: e.message };
    return { status: 'error', detail: (e as Error).message.split('\n')[0].slice(0, 300) };
  }
  if (p.ops.some((o) => NON_DIFFERENTIABLE.has(o)) && p.ops.every((o) => NON_DIFFERENTIABLE.has(o) || o === 'Identity')) {
    const nonzero = Object.values(grads).some((g) => g.some((x) => x !== 0));
    return { status: nonzero ? 'nonzero' : 'zero' };
  }
  trace(`${p.name}: reference`);
  const ref = await referenceFor(p);
  trace(`${p.name}: fd ${typeof ref === 'string' ? ref : ref.kind}`);
  if (typeof ref === 'string') return { status: 'skipped', detail: `no reference: ${ref}` };
  try {
    const f64 = ref.kind === 'ort-f64' || ref.kind === 'mlx-f64';
    let checked = 0;
    let kinks = 0;
    const r = lossWeights(p);
    const base = lossOf(await ref.run(p.feeds), r);
    const bad: string[] = [];
    let amp = 0;
    for (const n of p.wrt) for (const x of p.feeds[n].data as ArrayLike<number>) if (Math.abs(x) <= LARGE) amp = Math.max(amp, Math.abs(x));
    for (let k = 0; k < DIRECTIONS; k++) {
      const dirs = p.wrt.map((n, j) => directionOf(p.feeds[n].data as ArrayLike<number>, k, j));
      const at = async (step: number) => {
        const f = { ...p.feeds };
        p.wrt.forEach((n, j) => {
          const x = p.feeds[n].data as ArrayLike<number>;
          const d = dirs[j];
          f[n] = { dtype: DOUBLE, dims: p.feeds[n].dims, data: Float64Array.from(x, (v, i) => v + step * d[i]) };
        });
        return lossOf(await ref.run(f), r);
      };
      let dot = 0;
      let mag = 0;
      p.wrt.forEach((n, j) => {
        const g = grads[n];
        const d = dirs[j];
        for (let i = 0; i < g.length; i++) {
          if (d[i] === 0) continue;
          dot += g[i] * d[i];
          mag += Math.abs(g[i] * d[i]);
        }
      });
      // The first step whose estimates agree: the central differences at h and h/2 within 1e-3 of
      // the scale, and the one-sided ones closing in as the step halves (at a kink they keep their
      // gap, the jump in slope; noise doubles it). fd: Richardson's extrapolation of the two.
      // Steps relative to the inputs' size: the smallest a float64 reference allows first (it tells
      // a kink best), larger ones where its noise shows. A float64 copy whose kernel computes in
      // float32 (onnxruntime's double Shrink, MLX's float64 Erf) does not see a move of 1e-9: the
      // differences then start at float32's steps.
      const eps = 1e-9 * Math.max(1, amp);
      const precise = f64 && (await at(eps)) !== (await at(-eps));
      const steps = (precise ? [1e-6, 1e-4, 1e-2] : [1e-3, 1e-2]).map((h) => h * Math.max(1, amp));
      let fd: number | undefined;
      let stepUsed = 0;
      for (const h of steps) {
        const [p1, m1, p2, m2] = [await at(h), await at(-h), await at(h / 2), await at(-h / 2)];
        const c1 = (p1 - m1) / (2 * h);
        const c2 = (p2 - m2) / h;
        const gap1 = Math.abs((p1 - base) / h - (base - m1) / h);
        const gap2 = Math.abs((p2 - base) / (h / 2) - (base - m2) / (h / 2));
        const scale = Math.abs(c2) + mag + 1e-6;
        if (!Number.isFinite(c1) || !Number.isFinite(c2)) break;
        if (Math.abs(c1 - c2) <= 1e-3 * scale && gap2 <= 1e-3 * scale + 0.75 * gap1) {
          fd = (4 * c2 - c1) / 3;
          stepUsed = h;
          break;
        }
      }
      if (fd === undefined) {
        kinks++;
        continue;
      }
      checked++;
      const rtol = precise && stepUsed < 1e-2 * Math.max(1, amp) ? 2e-3 : 5e-3;
      if (!(Math.abs(dot - fd) <= rtol * (Math.abs(fd) + mag) + 1e-6))
        bad.push(`direction ${k}: <g, d> = ${dot}, fd = ${fd} (step ${stepUsed})`);
    }
    if (bad.length) return { status: 'mismatch', reference: ref.kind, detail: bad.join('; ') + dropped, checked, kinks };
    if (!checked) return { status: 'skipped', reference: ref.kind, detail: `no direction without a kink${dropped}`, checked, kinks };
    return { status: 'ok', reference: ref.kind, checked, kinks, detail: dropped || undefined };
  } finally {
    await ref.release();
  }
}

// ---------------------------------------------------------------------------------------------
// The cases: every listed case with float data (about 25 s on one core).

const listed = readFileSync(new URL('../conformance/passing.txt', import.meta.url), 'utf8')
  .split('\n')
  .map((l) => l.trim())
  .filter((l) => l && !l.startsWith('#'));

describe('valueAndGrad over the ONNX node suite: directional derivatives against central differences', () => {
  it('the suite is there', () => expectShared(suite));
  let prepared: Prepared[] = [];
  const skipped: Record<string, string> = {};
  try {
    for (const name of listed) {
      const p = prepare(name);
      if (typeof p === 'string') skipped[name] = p;
      else prepared.push(p);
    }
  } catch {
    prepared = [];
  }
  const groups = new Map<string, Prepared[]>();
  for (const p of prepared) {
    const key = p.ops.join('+');
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key)!.push(p);
  }
  const only = process.env.GRADCHECK_ONLY ? new RegExp(process.env.GRADCHECK_ONLY) : undefined;
  const chosen = only ? prepared.filter((p) => only.test(p.name)) : prepared;
  const results = new Map<string, Outcome>();
  for (const p of chosen)
    it(p.name, async () => {
      const o = await check(p);
      results.set(p.name, o);
      if (process.env.GRADCHECK_OUT)
        appendFileSync(`${process.env.GRADCHECK_OUT}.jsonl`, `${JSON.stringify({ name: p.name, ops: p.ops, ...o })}\n`);
      const known = KNOWN[p.name];
      const refusedOp = p.ops.find((op) => REFUSED[op]);
      const good = o.status === 'ok' || o.status === 'zero' || o.status === 'skipped' || (o.status === 'refused' && !!refusedOp);
      if (known) expect(o.status, `${p.name} is listed as known (${known}) but gave ${o.status}`).not.toBe('ok');
      else expect(good ? 'good' : `${o.status} (${o.reference ?? ''}): ${o.detail}`).toBe('good');
    }, 30_000);
  it('report', () => {
    const by = new Map<string, string[]>();
    for (const [name, o] of results) {
      const k = `${o.status}${o.reference ? ` ${o.reference}` : ''}`;
      if (!by.has(k)) by.set(k, []);
      by.get(k)!.push(name);
    }
    const okCases = chosen.filter((p) => results.get(p.name)?.status === 'ok');
    const ops = new Set(okCases.flatMap((p) => p.ops));
    // The op a case is about: its one node's (beside Constant/Identity), for the cases of one op.
    const trivial = new Set(['Constant', 'Identity']);
    const direct = new Set(okCases.map((p) => p.ops.filter((o) => !trivial.has(o))).flatMap((o) => (o.length === 1 ? o : [])));
    const lines = [
      `${prepared.length} float cases of ${listed.length} listed (${Object.keys(skipped).length} without float data), ${groups.size} op sets, ${chosen.length} run`,
      `ops checked alone against finite differences: ${direct.size}: ${[...direct].sort().join(' ')}`,
      `ops checked in all (expanded functions included): ${ops.size}`,
      ...[...by].map(
        ([k, ns]) =>
          `${k}: ${ns.length}${k.startsWith('ok') || k.startsWith('zero') ? '' : `: ${ns.map((n) => `${n} [${results.get(n)!.detail}]`).join('\n    ')}`}`,
      ),
    ];
    if (process.env.GRADCHECK_REPORT === '1') console.log(lines.join('\n'));
    if (process.env.GRADCHECK_OUT) writeFileSync(process.env.GRADCHECK_OUT, JSON.stringify(Object.fromEntries(results), null, 1));
    expect(results.size).toBe(chosen.length);
    // A harness that stopped checking (every case skipped) fails here.
    if (!process.env.GRADCHECK_ONLY) expect(okCases.length).toBeGreaterThanOrEqual(1050);
  });
});
