// MatMulBlockQuantizedFp8Weight / Fp4Weight against a float64 reference written here from
// ContribOperators.md (onnxruntime runs them on CUDA only): codes decoded from the E4M3 and E2M1
// definitions, block scales, the optional E4M3 activation rounding, bias.
import { describe, expect, it } from 'vitest';
import { float16BitsToNumber } from '@mlx/core';
import { model, node, toHalfBits, v, type TensorSpec } from '../../../test/helpers/build.js';
import { ort, runOn, seeded } from '../../../test/helpers/ort.js';

const MS = 'com.microsoft';
const FLOAT8E4M3FN = 17;

/** E4M3FN: bias 7, 3 mantissa bits, subnormals at exponent 0, S.1111.111 NaN. */
function e4m3(code: number): number {
  const s = code & 0x80 ? -1 : 1;
  const e = (code >> 3) & 0xf;
  const m = code & 7;
  if (e === 15 && m === 7) return Number.NaN;
  return e === 0 ? s * (m / 8) * 2 ** -6 : s * (1 + m / 8) * 2 ** (e - 7);
}
/** E2M1: bias 1, 1 mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives. */
function e2m1(code: number): number {
  const s = code & 8 ? -1 : 1;
  const e = (code >> 1) & 3;
  const m = code & 1;
  return e === 0 ? s * m * 0.5 : s * (1 + m / 2) * 2 ** (e - 1);
}
/** Nearest E4M3 value (ties to even mantissa), saturating at ±448. */
function roundE4M3(x: number): number {
  let best = 0;
  let bestCode = 0;
  for (let c = 0; c < 0x7f; c++) {
    const val = e4m3(c);
    const d = Math.abs(Math.abs(x) - val);
    const bd = Math.abs(Math.abs(x) - best);
    if (d < bd || (d === bd && (c & 1) === 0 && (bestCode & 1) === 1)) [best, bestCode] = [val, c];
  }
  return Math.sign(x) * best;
}

const ints = (n: number, mod: number, seed: number) => seeded(n, seed).map((x) => Math.floor(((x + 1) / 2) * mod) % mod);
const halves = (n: number, seed: number, scale = 1) => seeded(n, seed).map((x) => float16BitsToNumber(toHalfBits(x * scale)));
const f16 = (vals: number[], dims: number[]) => new ort.Tensor('float16', Uint16Array.from(vals, toHalfBits), dims);

function build(op: string, inits: TensorSpec[], inputs: string[], K: number, attrs: Record<string, number>): Uint8Array {
  return model({
    opsets: { '': 21, [MS]: 1 },
    inputs: [v('a', 'float16', [2, 3, K])],
    outputs: [v('y', 'float16')],
    initializers: inits,
    nodes: [node(op, inputs, ['y'], { domain: MS, attrs })],
  });
}

/** Y[r, n] = Σ_k A[r, k] · W[n, k] (+ bias[n]) in float64. */
function reference(a: number[], w: (n: number, k: number) => number, rows: number, N: number, K: number, bias?: number[]): number[] {
  const out: number[] = [];
  for (let r = 0; r < rows; r++)
    for (let n = 0; n < N; n++) {
      let s = bias ? bias[n] : 0;
      for (let k = 0; k < K; k++) s += a[r * K + k] * w(n, k);
      out.push(s);
    }
  return out;
}

async function expectClose(bytes: Uint8Array, a: number[], K: number, want: number[]) {
  const have = Array.from((await runOn('mlx', bytes, { a: f16(a, [2, 3, K]) })).y.data as Uint16Array, float16BitsToNumber);
  expect(have.length).toBe(want.length);
  const bad = have.findIndex((x, i) => !(Math.abs(x - want[i]) <= 2e-2 + 1e-2 * Math.abs(want[i])));
  expect(bad === -1 ? 'ok' : `y[${bad}]: mlx ${have[bad]} vs reference ${want[bad]}`).toBe('ok');
}

describe('MatMulBlockQuantizedFp8Weight', () => {
  const N = 5;
  const K = 40; // blocks of 16: two full and a partial one
  // Finite E4M3 codes of moderate size (exponent field 3..9), either sign.
  const codes = ints(N * K, 56, 1).map((c, i) => ((c % 7) + 3) * 8 + (c % 8) + (i % 3 === 0 ? 0x80 : 0));
  const scales = seeded(N * 3, 2).map((x) => 0.05 + Math.abs(x) * 0.1);
  const bias = halves(N, 3);
  const a = halves(6 * K, 4);
  const inits = (extra: TensorSpec[] = []): TensorSpec[] => [
    { name: 'b', type: FLOAT8E4M3FN, dims: [N, K], raw: Uint8Array.from(codes) },
    { name: 's', type: 'float32', dims: [N, 3], values: scales },
    ...extra,
  ];
  const w = (n: number, k: number) => e4m3(codes[n * K + k]) * Math.fround(scales[n * 3 + Math.floor(k / 16)]);
  it('weight-only (W8A16), partial final block, bias', () =>
    expectClose(
      build(
        'MatMulBlockQuantizedFp8Weight',
        inits([{ name: 'bias', type: 'float16', dims: [N], values: bias }]),
        ['a', 'b', 's', '', 'bias'],
        K,
        {
          block_size: 16,
        },
      ),
      a,
      K,
      reference(a, w, 6, N, K, bias),
    ));
  it('with a_scale: the activation rounded to E4M3 first (W8A8)', () => {
    const aScale = 0.01;
    const aq = a.map((x) => roundE4M3(x / Math.fround(aScale)) * Math.fround(aScale));
    return expectClose(
      build(
        'MatMulBlockQuantizedFp8Weight',
        inits([{ name: 'as', type: 'float32', dims: [], values: [aScale] }]),
        ['a', 'b', 's', 'as'],
        K,
        {
          block_size: 16,
        },
      ),
      a,
      K,
      reference(aq, w, 6, N, K),
    );
  });
});

describe('MatMulBlockQuantizedFp4Weight', () => {
  const N = 4;
  const K = 48; // blocks of 16 (the default): three per row
  const nibbles = ints(N * K, 16, 5);
  const packed = Uint8Array.from({ length: (N * K) / 2 }, (_, i) => nibbles[2 * i] | (nibbles[2 * i + 1] << 4));
  const scaleCodes = ints(N * 3, 16, 6).map((c) => 0x30 + c); // E4M3 scales around 1
  const global = 0.125;
  const a = halves(6 * K, 7);
  const w = (n: number, k: number) => e2m1(nibbles[n * K + k]) * global * e4m3(scaleCodes[n * 3 + Math.floor(k / 16)]);
  it('NVFP4 weights with E4M3 block scales and a global scale (input_scale ignored)', () =>
    expectClose(
      build(
        'MatMulBlockQuantizedFp4Weight',
        [
          { name: 'b', type: 'uint8', dims: [N, K / 2], values: Array.from(packed) },
          { name: 'ws', type: 'uint8', dims: [N, 3], values: scaleCodes },
          { name: 'g', type: 'float32', dims: [], values: [global] },
          { name: 'is', type: 'float32', dims: [], values: [3] },
        ],
        ['a', 'b', 'ws', 'g', 'is'],
        K,
        {},
      ),
      a,
      K,
      reference(a, w, 6, N, K),
    ));
});
