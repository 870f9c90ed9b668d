// The packed-weight product (mlxc_dense_pack_weight, mlxc_dense_gemm) against float64 references
// computed here: few rows (the panel-streaming kernel) and many (12-row tiles, K over one block of
// at most 1024 and over several, row and column tails), 1-D and batched x, x as a view, bias or none, NaN and ±Inf, the
// panel layout itself, refused arguments, other dtypes (MLX's matmul on the unpacked weight) and
// gradients. Shared by the widest build this CPU has and the portable build
// (MLXC_CPU_KERNELS=generic), each in its own process.
import { describe, expect, it } from 'vitest';
import * as mx from '../src/index.js';
import { activationReference } from './activation-reference.js';
import { flat, inputs } from './numeric.js';

const cpu = { stream: 'cpu' } as const;

const rand = (shape: number[], seed: number) => {
  const n = shape.reduce((a, b) => a * b, 1);
  return mx.array(new Float32Array(inputs(n, -2, 2, seed)), { shape });
};

/** x [..., K] @ w [K, N] (+ bias) in float64, with sum |x·w| per element (float32 accumulation's bound). */
function reference(x: mx.Array, w: mx.Array, bias?: mx.Array) {
  const X = flat(x);
  const W = flat(w);
  const B = bias ? flat(bias) : undefined;
  const [K, N] = w.shape;
  const rows = X.length / K;
  const v: number[] = [];
  const mag: number[] = [];
  for (let m = 0; m < rows; m++)
    for (let n = 0; n < N; n++) {
      let s = B ? B[n] : 0;
      let g = B ? Math.abs(B[n]) : 0;
      for (let k = 0; k < K; k++) {
        const p = X[m * K + k] * W[k * N + n];
        s += p;
        g += Math.abs(p);
      }
      v.push(s);
      mag.push(g);
    }
  return { v, mag, shape: [...x.shape.slice(0, -1), N] };
}

function expectProduct(got: mx.Array, ref: ReturnType<typeof reference>, what: string, rel = 2e-6): void {
  expect(got.shape, what).toEqual(ref.shape);
  expect(got.dtype, what).toBe('float32');
  const g = flat(got);
  for (let i = 0; i < ref.v.length; i++) {
    const r = ref.v[i];
    const tag = `${what}[${i}]: got ${g[i]}, reference ${r}`;
    if (Number.isNaN(r)) expect(Number.isNaN(g[i]), tag).toBe(true);
    else if (!Number.isFinite(r)) expect(g[i], tag).toBe(r);
    else expect(Math.abs(g[i] - r), tag).toBeLessThanOrEqual(rel * ref.mag[i] + 1e-30);
  }
}

export function denseGemmSuite(build: 'widest' | 'avx2' | 'portable'): void {
  describe(`dense_gemm (${build} build)`, () => {
    it('packs [K, N] into panels of 32 columns, zeros past N, halves apart where the build splits them', () => {
      const w = rand([3, 40], 1);
      const p = mx.ext.densePackWeight(w, cpu);
      expect(p.shape).toEqual([2, 3, 32]);
      const W = flat(w);
      const P = flat(p);
      // The AVX2 build's panels: each half of 16 columns [K, 16], the second after the first.
      const split = mx.cpuKernelsUseAvx2() && !mx.cpuKernelsUseAvx512();
      if (build === 'portable') expect(split).toBe(false);
      if (build === 'avx2') expect(split).toBe(mx.cpuKernelsUseAvx2());
      for (let q = 0; q < 2; q++)
        for (let k = 0; k < 3; k++)
          for (let j = 0; j < 32; j++) {
            const col = q * 32 + j;
            const at = split ? q * 3 * 32 + Math.floor(j / 16) * 3 * 16 + k * 16 + (j % 16) : (q * 3 + k) * 32 + j;
            expect(P[at], `panel ${q} k ${k} lane ${j}`).toBe(col < 40 ? W[k * 40 + col] : 0);
          }
    });

    // [rows, K, N]: few rows (1-4), the tile path's 5+ rows with tails, K past one pass (1024 deep
    // on AVX2 and AVX-512).
    const shapes: [number, number, number][] = [
      [1, 1, 1],
      [1, 17, 33],
      [2, 64, 32],
      [3, 5, 70],
      [4, 300, 100],
      [4, 9, 59],
      [5, 7, 31],
      // Four to seven rows in one pass (the AVX2 build), K past its prefetch distance, column tails.
      [5, 130, 47],
      [6, 150, 81],
      [7, 20, 27],
      [7, 200, 50],
      [8, 24, 40],
      [11, 9, 33],
      [12, 33, 64],
      [13, 300, 65],
      [14, 300, 56],
      [20, 16, 50],
      [25, 257, 97],
      [130, 520, 45],
      // The AVX2 and AVX-512 builds' passes are up to 1024 deep, split evenly: two of 550, three of 700.
      [13, 1100, 40],
      [30, 2100, 45],
    ];
    for (const [M, K, N] of shapes)
      for (const withBias of [false, true])
        it(`${M} x ${K} x ${N}${withBias ? ' + bias' : ''} equals the float64 product`, () => {
          const x = rand([M, K], M * 7 + K);
          const w = rand([K, N], K * 3 + N);
          const bias = withBias ? rand([N], N) : undefined;
          const got = mx.ext.denseGemm(x, mx.ext.densePackWeight(w, cpu), N, bias ?? null, cpu);
          expectProduct(got, reference(x, w, bias), `${M}x${K}x${N}`);
        });

    it('applies an activation epilogue to every result: few rows, tiles, K past one pass, column tails', () => {
      // The float64 product, then the float64 activation; its slope bounds how far the float32
      // product's rounding moves the result.
      const kinds = ['gelu', 'gelu_tanh', 'relu', 'silu', 'tanh', 'sigmoid'];
      const cases: [number, number, number][] = [
        [1, 24, 40],
        [3, 64, 70],
        [7, 90, 45],
        [13, 300, 97],
        [30, 1100, 33],
      ];
      cases.forEach(([M, K, N], c) => {
        const x = rand([M, K], 30 + c);
        const w = rand([K, N], 40 + c);
        const bias = c % 2 ? rand([N], 50 + c) : undefined;
        const wp = mx.ext.densePackWeight(w, cpu);
        const ref = reference(x, w, bias);
        for (const kind of kinds) {
          const got = flat(mx.ext.denseGemmAct(x, wp, N, bias ?? null, kind, null, cpu));
          const f = activationReference[kind];
          for (let i = 0; i < ref.v.length; i++) {
            const want = f(ref.v[i]);
            const slope = Math.max(1, Math.abs(f(ref.v[i] + 1e-3) - f(ref.v[i] - 1e-3)) / 2e-3);
            const tol = 2e-6 * ref.mag[i] * slope + 4e-7 * Math.abs(want) + 1e-7;
            expect(Math.abs(got[i] - want), `${M}x${K}x${N} ${kind}[${i}]: got ${got[i]}, want ${want}`).toBeLessThanOrEqual(tol);
          }
        }
        // A residual of the result's shape is added after the activation in the epilogue; one that
        // broadcasts (a row) is added after the product.
        const res = rand([M, N], 60 + c);
        const row = rand([N], 70 + c);
        const R = flat(res);
        const Q = flat(row);
        for (const [what, r, at] of [
          ['residual', res, (i: number) => R[i]],
          ['broadcast residual', row, (i: number) => Q[i % N]],
        ] as const) {
          const got = flat(mx.ext.denseGemmAct(x, wp, N, bias ?? null, 'gelu', r, cpu));
          for (let i = 0; i < ref.v.length; i++) {
            const want = activationReference.gelu(ref.v[i]) + at(i);
            const tol = 2e-6 * ref.mag[i] * 1.2 + 4e-7 * (Math.abs(want) + Math.abs(at(i))) + 1e-7;
            expect(Math.abs(got[i] - want), `${M}x${K}x${N} ${what}[${i}]`).toBeLessThanOrEqual(tol);
          }
        }
        // identity is the plain product; another kind name is refused.
        expectProduct(mx.ext.denseGemmAct(x, wp, N, bias ?? null, 'identity', null, cpu), ref, `${M}x${K}x${N} identity`);
        expect(() => mx.ext.denseGemmAct(x, wp, N, null, 'swish', null, cpu)).toThrow(/unknown kind 'swish'/);
      });
    });

    it('takes a 1-D x and batch axes, and x as a transposed view', () => {
      const w = rand([40, 50], 3);
      const wp = mx.ext.densePackWeight(w, cpu);
      const v = rand([40], 4);
      expectProduct(mx.ext.denseGemm(v, wp, 50, null, cpu), reference(v, w), '1-D');
      const b = rand([2, 7, 40], 5);
      expectProduct(mx.ext.denseGemm(b, wp, 50, null, cpu), reference(b, w), 'batched');
      const t = mx.transpose(rand([40, 9], 6));
      expect(t.shape).toEqual([9, 40]);
      expectProduct(mx.ext.denseGemm(t, wp, 50, null, cpu), reference(mx.contiguous(t, false), w), 'view');
      const one = mx.transpose(rand([40, 2], 7));
      expectProduct(mx.ext.denseGemm(one, wp, 50, null, cpu), reference(mx.contiguous(one, false), w), 'few-row view');
    });

    it('propagates NaN and ±Inf as the product does', () => {
      for (const M of [2, 20]) {
        const xv = new Float32Array(inputs(M * 6, -1, 1, 9));
        xv[0] = Number.NaN;
        xv[7] = Number.POSITIVE_INFINITY;
        const x = mx.array(xv, { shape: [M, 6] });
        const w = rand([6, 35], 10);
        expectProduct(mx.ext.denseGemm(x, mx.ext.densePackWeight(w, cpu), 35, null, cpu), reference(x, w), `rows ${M}`);
      }
    });

    it('gives zeros (+ bias) for an empty K and nothing for no rows', () => {
      const wp = mx.ext.densePackWeight(mx.zeros([0, 5], 'float32'), cpu);
      expect(wp.shape).toEqual([1, 0, 32]);
      const bias = rand([5], 11);
      const y = mx.ext.denseGemm(mx.zeros([3, 0], 'float32'), wp, 5, bias, cpu);
      expect(y.shape).toEqual([3, 5]);
      const bv = flat(bias);
      expect(flat(y)).toEqual([...bv, ...bv, ...bv]);
      const none = mx.ext.denseGemm(mx.zeros([0, 4], 'float32'), mx.ext.densePackWeight(rand([4, 5], 12), cpu), 5, null, cpu);
      expect(none.shape).toEqual([0, 5]);
    });

    it('refuses a weight that is not packed for the product', () => {
      const x = rand([2, 8], 13);
      const wp = mx.ext.densePackWeight(rand([8, 40], 14), cpu);
      expect(() => mx.ext.denseGemm(x, rand([8, 40], 14), 40, null, cpu)).toThrow(/packed weight must be \[P, K, 32\]/);
      expect(() => mx.ext.denseGemm(x, wp, 70, null, cpu)).toThrow(/70 output columns do not fill 2 panels of 32/);
      expect(() => mx.ext.denseGemm(rand([2, 9], 15), wp, 40, null, cpu)).toThrow(/x's last axis \(9\) is not the weight's K \(8\)/);
      expect(() => mx.ext.denseGemm(x, wp, 40, rand([39], 16), cpu)).toThrow(/bias must be a vector of 40 columns/);
      expect(() => mx.ext.densePackWeight(rand([2, 3, 4], 17), cpu)).toThrow(/must be a \[K, N\] matrix/);
    });

    it('runs MLX matmul on the unpacked weight for other dtypes', () => {
      const x = mx.astype(rand([3, 20], 18), 'float16');
      const w = mx.astype(rand([20, 33], 19), 'float16');
      const got = mx.ext.denseGemm(x, mx.ext.densePackWeight(w, cpu), 33, null, cpu);
      expect(got.dtype).toBe('float16');
      expect(flat(got)).toEqual(flat(mx.matmul(x, w, cpu)));
    });

    it('differentiates x through the product (the VJP of its composition)', () => {
      const w = rand([24, 40], 20);
      const wp = mx.ext.densePackWeight(w, cpu);
      const bias = rand([40], 21);
      for (const M of [2, 30]) {
        const x = rand([M, 24], 22 + M);
        const g = mx.grad((a: mx.Array) =>
          mx.sum(mx.multiply(mx.ext.denseGemm(a, wp, 40, bias, cpu), mx.ext.denseGemm(a, wp, 40, bias, cpu))),
        )(x);
        // d/dx sum(y²) = 2 y wᵀ, from the float64 y.
        const y = reference(x, w, bias);
        const W = flat(w);
        const G = flat(g);
        for (let m = 0; m < M; m++)
          for (let k = 0; k < 24; k++) {
            let s = 0;
            let mag = 0;
            for (let n = 0; n < 40; n++) {
              s += 2 * y.v[m * 40 + n] * W[k * 40 + n];
              mag += Math.abs(2 * y.v[m * 40 + n] * W[k * 40 + n]);
            }
            expect(Math.abs(G[m * 24 + k] - s), `rows ${M} grad[${m}, ${k}]`).toBeLessThanOrEqual(1e-5 * mag);
          }
      }
    });
  });
}
