// The fused CPU kernels (mlxc_fused_*: vectorized, multithreaded MLX primitives) against MLX's own
// ops evaluated in float64 on the CPU, over ordinary values, odd sizes (vector tails), edge values
// (NaN, ±Inf, denormals, signed zeros) and empty arrays; the composed path off float32; gradients.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';
import { activationReference, onePlusErf64 } from '../test/activation-reference.js';
import { inputs, flat } from '../test/numeric.js';

const cpu = { stream: 'cpu' } as const;
const f64 = (x: mx.Array) => mx.astype(x, 'float64', cpu);

/** |got − ref| ≤ atol + rtol·|ref| elementwise, NaN where ref is NaN, equal infinities. */
function expectMatches(got: mx.Array, ref: mx.Array, rtol: number, atol: number, what: string): void {
  expect(got.shape).toEqual(ref.shape);
  const g = flat(got);
  const r = flat(ref);
  for (let i = 0; i < r.length; i++) {
    const tag = `${what}[${i}]: got ${g[i]}, reference ${r[i]}`;
    if (Number.isNaN(r[i])) expect(Number.isNaN(g[i]), tag).toBe(true);
    else if (!Number.isFinite(r[i])) expect(g[i], tag).toBe(r[i]);
    else expect(Math.abs(g[i] - r[i]), tag).toBeLessThanOrEqual(atol + rtol * Math.abs(r[i]));
  }
}

const DENORM = 1e-40;
const edges = [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, 0, -0, DENORM, -DENORM, 1e-30, -1e-30];
const wide = (n: number, seed: number) => inputs(n, -9, 9, seed);

const refArray = (kind: string, x: mx.Array) =>
  mx.array(
    Float32Array.from(flat(x), (v) => activationReference[kind](v)),
    { shape: x.shape },
  );

describe('fused activations', () => {
  for (const kind of Object.keys(activationReference)) {
    it(`${kind}: float32 kernel against float64, odd sizes and edge values`, () => {
      for (const n of [1, 7, 8, 9, 1000, 40_001]) {
        const data = [...edges, ...wide(n, n)];
        const x = mx.array(new Float32Array(data));
        const got = mx.ext.fusedActivation(x, null, kind, cpu);
        expect(got.dtype).toBe('float32');
        const ref = refArray(kind, x);
        // Denormal outputs are compared absolutely (1e-37). The GELU forms' far negative tails
        // (|y| < 1e-14, x < -5.6) are too: there 1 + erf is below 1.5e-8 and the kernel gives 0 for
        // it, and float32 rounding of the tanh form's argument dominates (MLX's and onnxruntime's
        // float32 formulas give 0 on the whole tail from x = -5.6 on).
        const atol = kind.startsWith('gelu') ? 1e-14 : 1e-37;
        expectMatches(got, ref, 4e-6, atol, `${kind} n=${n}`);
      }
    });
  }

  it('GELU on vectors whose lanes are all in the central range, or all in a tail', () => {
    // The kernel evaluates its tail branches only where some lane of a vector needs them.
    for (const [lo, hi] of [
      [-1.4, 1.4],
      [-12, -5.7],
      [1.5, 5],
    ]) {
      const x = mx.array(new Float32Array(inputs(1001, lo, hi, 8)));
      // Far in the negative tail, erfc's relative sensitivity to its argument (2t²) turns float32
      // rounding of x / sqrt 2 into ~1e-5 relative: still exact to 1e-30 absolutely.
      const rtol = lo < -5 ? 1.5e-5 : 4e-6;
      expectMatches(mx.ext.fusedActivation(x, null, 'gelu', cpu), refArray('gelu', x), rtol, 1e-37, `gelu [${lo}, ${hi}]`);
    }
  });

  it('with a bias along the last axis, on a strided (transposed) input', () => {
    const x = mx.transpose(mx.array(new Float32Array(wide(13 * 37, 3)), { shape: [37, 13] }), null, cpu);
    const bias = mx.array(new Float32Array(wide(37, 4)));
    const got = mx.ext.fusedActivation(x, bias, 'gelu', cpu);
    // The kernel adds in float32, as onnxruntime's BiasGelu does: the reference gets that sum.
    const ref = refArray('gelu', mx.add(x, bias, cpu));
    expectMatches(got, ref, 4e-6, 1e-14, 'bias gelu');
  });

  it('the portable and vectorized builds agree (tails included)', () => {
    // The vector body and the scalar tail of one call must agree. (The whole file also passes on
    // the portable build alone: MLXC_CPU_KERNELS=generic, read once per process.)
    const data = new Float32Array(wide(11, 9));
    const whole = flat(mx.ext.fusedActivation(mx.array(data), null, 'erf', cpu));
    const one = Array.from(data, (v) => flat(mx.ext.fusedActivation(mx.array(new Float32Array([v])), null, 'erf', cpu))[0]);
    for (let i = 0; i < data.length; i++) expect(Math.abs(whole[i] - one[i])).toBeLessThanOrEqual(2e-7);
  });

  it('empty arrays, other dtypes and unknown kinds', () => {
    expect(mx.ext.fusedActivation(mx.zeros([0, 4], 'float32'), null, 'tanh', cpu).shape).toEqual([0, 4]);
    const h = mx.array(new Float32Array([0.5, -1, 2]));
    const x16 = mx.astype(h, 'float16', cpu);
    const got = mx.ext.fusedActivation(x16, null, 'gelu_tanh', cpu);
    expect(got.dtype).toBe('float16');
    expectMatches(mx.astype(got, 'float32', cpu), refArray('gelu_tanh', h), 2e-3, 1e-3, 'f16');
    expect(() => mx.ext.fusedActivation(h, null, 'swish', cpu)).toThrow(/unknown kind 'swish'/);
  });

  it('gradients go through the composition', () => {
    const x = mx.array(new Float32Array(wide(9, 5)));
    const g = mx.grad((a: mx.Array) => mx.sum(mx.ext.fusedActivation(a, null, 'gelu', cpu)))(x) as mx.Array;
    // d/dx 0.5 x (1 + erf(x / sqrt 2)) = Φ(x) + x φ(x)
    const d = (v: number) => 0.5 * onePlusErf64(v * Math.SQRT1_2) + (v * Math.exp((-v * v) / 2)) / Math.sqrt(2 * Math.PI);
    expectMatches(g, mx.array(Float32Array.from(flat(x), d)), 1e-5, 1e-6, 'd gelu');
  });
});

describe('gated activation', () => {
  // act(a) * b from the float64 reference of act, times b in float64, rounded once.
  const gatedRef = (kind: string, a: number[], b: number[], shape: number[]) =>
    mx.array(
      Float32Array.from(a, (v, i) => activationReference[kind](v) * b[i]),
      { shape },
    );

  it('silu and gelu, two inputs and the halves of one array, rows of odd widths', () => {
    for (const kind of ['silu', 'gelu', 'gelu_tanh', 'relu']) {
      for (const [rows, c] of [
        [1, 7],
        [3, 704],
        [130, 33],
      ]) {
        const av = [...edges.slice(0, Math.min(c, edges.length)), ...wide(rows * c, rows + c)].slice(0, rows * c);
        const bv = wide(rows * c, 7 * c + rows);
        const a = mx.array(new Float32Array(av), { shape: [rows, c] });
        const b = mx.array(new Float32Array(bv), { shape: [rows, c] });
        const want = gatedRef(kind, flat(a), flat(b), [rows, c]);
        // GELU's far negative tail is compared absolutely, as above (times |b| < 9).
        const atol = kind.startsWith('gelu') ? 1e-13 : 1e-30;
        expectMatches(mx.ext.gatedActivation(a, b, kind, cpu), want, 4e-6, atol, `${kind} ${rows}x${c}`);
        // The halves of one [rows, 2c] array: gate first, up second.
        const joined = mx.concatenate([a, b], 1, cpu);
        expectMatches(mx.ext.gatedActivation(joined, null, kind, cpu), want, 4e-6, atol, `${kind} halves ${rows}x${c}`);
        // The slices of a joined product, [1, rows, 2c] split along the last axis: views read in place.
        const [ga, gb] = mx.split(mx.reshape(joined, [1, rows, 2 * c], cpu), 2, 2, cpu);
        const viewed = mx.ext.gatedActivation(ga, gb, kind, cpu);
        expect(viewed.shape).toEqual([1, rows, c]);
        expectMatches(mx.reshape(viewed, [rows, c], cpu), want, 4e-6, atol, `${kind} views ${rows}x${c}`);
      }
    }
  });

  it('transposed inputs, a broadcast b, float16 and gradients go through the composition', () => {
    const av = wide(12, 1);
    const bv = wide(12, 2);
    const a = mx.array(new Float32Array(av), { shape: [3, 4] });
    const b = mx.array(new Float32Array(bv), { shape: [3, 4] });
    const at = mx.transpose(a, [1, 0], cpu);
    const bt = mx.transpose(b, [1, 0], cpu);
    expectMatches(mx.ext.gatedActivation(at, bt, 'silu', cpu), gatedRef('silu', flat(at), flat(bt), [4, 3]), 4e-6, 1e-30, 'transposed');
    const row = mx.array(new Float32Array([0.5, -2, 3, 1]), { shape: [4] });
    const bcast = mx.broadcastTo(row, [3, 4], cpu);
    expectMatches(mx.ext.gatedActivation(a, row, 'silu', cpu), gatedRef('silu', av, flat(bcast), [3, 4]), 4e-6, 1e-30, 'broadcast b');
    const got16 = mx.ext.gatedActivation(mx.astype(a, 'float16', cpu), mx.astype(b, 'float16', cpu), 'silu', cpu);
    expect(got16.dtype).toBe('float16');
    expectMatches(mx.astype(got16, 'float32', cpu), gatedRef('silu', av, bv, [3, 4]), 4e-3, 2e-3, 'f16');
    // d/da silu(a) b = b sigmoid(a) (1 + a (1 - sigmoid(a))); d/db = silu(a)
    const [ga, gb] = mx.grad((x: mx.Array, y: mx.Array) => mx.sum(mx.ext.gatedActivation(x, y, 'silu', cpu)), [0, 1])(a, b) as mx.Array[];
    const sig = (v: number) => 1 / (1 + Math.exp(-v));
    expectMatches(
      ga,
      mx.array(
        Float32Array.from(av, (v, i) => bv[i] * sig(v) * (1 + v * (1 - sig(v)))),
        { shape: [3, 4] },
      ),
      1e-5,
      1e-6,
      'd a',
    );
    expectMatches(
      gb,
      mx.array(
        Float32Array.from(av, (v) => v * sig(v)),
        { shape: [3, 4] },
      ),
      1e-5,
      1e-6,
      'd b',
    );
  });

  it('refuses an odd width without b and unknown kinds', () => {
    const x = mx.array(new Float32Array(wide(6, 3)), { shape: [2, 3] });
    expect(() => mx.ext.gatedActivation(x, null, 'silu', cpu)).toThrow(/two halves and must have an even length/);
    expect(() => mx.ext.gatedActivation(x, x, 'swish', cpu)).toThrow(/unknown kind 'swish'/);
    expect(mx.ext.gatedActivation(mx.zeros([0, 4], 'float32'), null, 'silu', cpu).shape).toEqual([0, 2]);
  });
});

describe('fused softmax and norms', () => {
  const shapes = [
    [3, 1],
    [5, 7],
    [4, 64],
    [2, 3, 1001],
  ];
  it('softmax and log-softmax over the last axis', () => {
    for (const shape of shapes) {
      const n = shape.reduce((a, b) => a * b, 1);
      const x = mx.array(new Float32Array(inputs(n, -30, 30, n)), { shape });
      for (const log of [false, true]) {
        const got = mx.ext.fusedSoftmax(x, log, cpu);
        const ref = log
          ? mx.subtract(f64(x), mx.logsumexp(f64(x), -1, { keepdims: true, stream: 'cpu' }), cpu)
          : mx.softmax(f64(x), -1, cpu);
        expectMatches(got, mx.astype(ref, 'float32', cpu), 1e-5, 1e-7, `softmax log=${log} ${shape}`);
      }
    }
  });

  it('softmax rows with -inf (masked), NaN and denormals', () => {
    const rows = [
      [0, Number.NEGATIVE_INFINITY, 1, 2, Number.NEGATIVE_INFINITY, 3, 4, 5, 6],
      [Number.NaN, 1, 2, 3, 4, 5, 6, 7, 8],
      [DENORM, -DENORM, 0, 0, 0, 0, 0, 0, 0],
    ];
    const x = mx.array(new Float32Array(rows.flat()), { shape: [3, 9] });
    const got = mx.ext.fusedSoftmax(x, false, cpu);
    expectMatches(got, mx.astype(mx.softmax(f64(x), -1, cpu), 'float32', cpu), 1e-5, 1e-7, 'softmax edges');
  });

  it('layer norm and RMS norm, with and without weight and bias', () => {
    for (const shape of shapes) {
      const d = shape[shape.length - 1];
      const n = shape.reduce((a, b) => a * b, 1);
      const x = mx.array(new Float32Array(inputs(n, -3, 5, n + 1)), { shape });
      const w = mx.array(new Float32Array(inputs(d, 0.5, 1.5, 2)));
      const b = mx.array(new Float32Array(inputs(d, -1, 1, 3)));
      for (const [wt, bs] of [
        [null, null],
        [w, b],
        [w, null],
      ] as const) {
        const eps = 1e-5;
        const ln = mx.ext.fusedLayerNorm(x, wt, bs, eps, cpu);
        const ref = mx.fast.layerNorm(f64(x), wt && f64(wt), bs && f64(bs), eps, cpu);
        expectMatches(ln, mx.astype(ref, 'float32', cpu), 2e-5, 2e-5, `layer norm ${shape}`);
        const rms = mx.ext.fusedRmsNorm(x, wt, eps, cpu);
        const rref = mx.fast.rmsNorm(f64(x), wt && f64(wt), eps, cpu);
        expectMatches(rms, mx.astype(rref, 'float32', cpu), 2e-5, 2e-5, `rms norm ${shape}`);
      }
    }
  });

  it('threads: one knob, at least one thread', () => {
    const before = mx.cpuThreads();
    mx.setCpuThreads(1);
    expect(mx.cpuThreads()).toBe(1);
    const x = mx.array(new Float32Array(inputs(300_000, -4, 4, 7)));
    const one = flat(mx.ext.fusedActivation(x, null, 'tanh', cpu));
    mx.setCpuThreads(3);
    expect(mx.cpuThreads()).toBe(3);
    expect(flat(mx.ext.fusedActivation(x, null, 'tanh', cpu))).toEqual(one);
    mx.setCpuThreads(0);
    expect(mx.cpuThreads()).toBeGreaterThanOrEqual(1);
    mx.setCpuThreads(before);
  });
});
