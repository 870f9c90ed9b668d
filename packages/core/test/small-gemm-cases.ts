// The CPU products for few rows (mlxc_small_matmul, mlxc_small_quantized_matmul) against float64
// references computed here: odd sizes (vector and band tails), b as [K, N], as a transposed view
// and strided (gathered), strided a, broadcast batch axes, a 1-D a, bias, NaN and ±Inf, empty
// operands, the row limits where MLX's ops take over, other dtypes, gradients. Shared by the tests
// of the widest build this CPU has (AVX-512F on most x86 servers), of the AVX2 build
// (MLXC_CPU_KERNELS=avx2) and of the portable build (MLXC_CPU_KERNELS=generic), each in its own process.
import { describe, expect, it } from 'vitest';
import * as mx from '../src/index.js';
import { flat, inputs } from './numeric.js';

const cpu = { stream: 'cpu' } as const;

/** A float32 array of `shape` with values in [-2, 2). */
const rand = (shape: number[], seed: number) => {
  const n = shape.reduce((a, b) => a * b, 1);
  return mx.array(new Float32Array(inputs(n, -2, 2, seed)), { shape });
};

/** Row-major float64 copy of x's values and its shape. */
const host = (x: mx.Array) => ({ v: flat(x), shape: x.shape });

/**
 * numpy matmul in float64 of a [..., M, K] (or [K]) and b [..., K, N], plus bias [N]; with the
 * sum of |a·b| per element, which bounds float32 accumulation error.
 */
function reference(a: mx.Array, b: mx.Array, bias?: mx.Array): { v: number[]; mag: number[]; shape: number[] } {
  const A = host(a);
  const B = host(b);
  const bv = bias ? flat(bias) : undefined;
  const aShape = A.shape.length === 1 ? [1, A.shape[0]] : A.shape;
  const [M, K] = aShape.slice(-2);
  const N = B.shape[B.shape.length - 1];
  const ab = aShape.slice(0, -2);
  const bb = B.shape.slice(0, -2);
  const nd = Math.max(ab.length, bb.length);
  const pad = (s: number[]) => [...Array(nd - s.length).fill(1), ...s];
  const pa = pad(ab);
  const pb = pad(bb);
  const batch = pa.map((d, i) => Math.max(d, pb[i]));
  const count = batch.reduce((x, y) => x * y, 1);
  const v: number[] = [];
  const mag: number[] = [];
  for (let t = 0; t < count; t++) {
    // Batch index -> offsets into a and b (broadcast axes of size 1 repeat).
    let rem = t;
    let oa = 0;
    let ob = 0;
    let sa = 1;
    let sb = 1;
    for (let d = nd - 1; d >= 0; d--) {
      const i = rem % batch[d];
      rem = Math.floor(rem / batch[d]);
      oa += (pa[d] === 1 ? 0 : i) * sa;
      ob += (pb[d] === 1 ? 0 : i) * sb;
      sa *= pa[d];
      sb *= pb[d];
    }
    for (let m = 0; m < M; m++)
      for (let n = 0; n < N; n++) {
        let s = bv ? bv[n] : 0;
        let g = bv ? Math.abs(bv[n]) : 0;
        for (let k = 0; k < K; k++) {
          const p = A.v[oa * M * K + m * K + k] * B.v[ob * K * N + k * N + n];
          s += p;
          g += Math.abs(p);
        }
        v.push(s);
        mag.push(g);
      }
  }
  const shape = [...batch, ...(A.shape.length === 1 ? [] : [M]), N];
  return { v, mag, shape };
}

/** got within rel of the float64 result relative to sum |a·b| (float32 accumulation), NaN and ±Inf alike. */
const expectProduct = (got: mx.Array, ref: { v: number[]; mag: number[]; shape: number[] }, what: string, rel = 2e-6) =>
  expectProductAt(got, ref, what, rel);

function expectProductAt(got: mx.Array, ref: { v: number[]; mag: number[]; shape: number[] }, what: string, rel: number): void {
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

/** x @ dequantize(w)^T in float64 from the packed words (4 or 8 bits a value): w = scale · q + bias per group. */
function quantReference(x: mx.Array, w: mx.Array, scales: mx.Array, biases: mx.Array, group: number, bits: 4 | 8 = 4) {
  const X = flat(x);
  const words = Array.from(w.toTypedArray() as Uint32Array);
  const S = flat(scales);
  const Bi = flat(biases);
  const K = x.shape[x.ndim - 1];
  const N = w.shape[0];
  const rows = X.length / K;
  const G = K / group;
  const v: number[] = [];
  const mag: number[] = [];
  for (let m = 0; m < rows; m++)
    for (let n = 0; n < N; n++) {
      let s = 0;
      let g = 0;
      for (let k = 0; k < K; k++) {
        const per = 32 / bits;
        const q = (words[n * (K / per) + Math.floor(k / per)] >>> (bits * (k % per))) & (2 ** bits - 1);
        const p = X[m * K + k] * (S[n * G + Math.floor(k / group)] * q + Bi[n * G + Math.floor(k / group)]);
        s += p;
        g += Math.abs(p);
      }
      v.push(s);
      mag.push(g);
    }
  return { v, mag, shape: [...x.shape.slice(0, -1), N] };
}

export function smallGemmSuite(build: 'widest' | 'avx2' | 'portable'): void {
  describe(`small-row products (${build} build)`, () => {
    it('runs the expected build', () => {
      if (build !== 'widest') expect(mx.cpuKernelsUseAvx512()).toBe(false);
      if (build === 'portable') expect(mx.cpuKernelsUseAvx2()).toBe(false);
    });

    const sizes: [number, number, number][] = [
      [1, 1, 1],
      [1, 7, 9],
      [2, 33, 17],
      [3, 17, 65],
      [4, 70, 130],
      [5, 100, 77],
      [7, 9, 300],
      [8, 129, 70],
      [1, 300, 1000],
      [2, 64, 1031],
    ];
    it('b [K, N] and b as a transposed view, odd sizes, with and without bias', () => {
      let seed = 1;
      for (const [M, K, N] of sizes) {
        const a = rand([M, K], seed++);
        const b = rand([K, N], seed++);
        const bt = mx.contiguous(mx.transpose(b, null, cpu), false, cpu);
        const bias = rand([N], seed++);
        const ref = reference(a, b);
        // Past 4 rows MLX's matmul (OpenBLAS) computes these, with its own summation order.
        const expectProduct = (got: mx.Array, r: typeof ref, what: string) => expectProductAt(got, r, what, M > 4 ? 1e-5 : 2e-6);
        expectProduct(mx.ext.smallMatmul(a, b, null, cpu), ref, `${M}x${K}x${N} kn`);
        expectProduct(mx.ext.smallMatmul(a, mx.transpose(bt, null, cpu), null, cpu), ref, `${M}x${K}x${N} nk`);
        const refB = reference(a, b, bias);
        expectProduct(mx.ext.smallMatmul(a, b, bias, cpu), refB, `${M}x${K}x${N} kn + bias`);
        expectProduct(mx.ext.smallMatmul(a, mx.transpose(bt, null, cpu), bias, cpu), refB, `${M}x${K}x${N} nk + bias`);
      }
    });

    it('decoding shapes: one row (column and depth tails, wide bands, row-strided b), q·Kᵀ', () => {
      // N one short of, at and past a 16-lane vector; K with a pass of 8 rows short by 1..7; bands
      // of a thousand columns and more.
      let seed = 200;
      for (const [K, N] of [
        [1, 15],
        [7, 16],
        [8, 17],
        [9, 31],
        [15, 33],
        [37, 1],
        [64, 255],
        [3, 4133],
        [19, 2100],
      ] as const) {
        const a = rand([1, K], seed++);
        const b = rand([K, N], seed++);
        const bias = rand([N], seed++);
        expectProduct(mx.ext.smallMatmul(a, b, null, cpu), reference(a, b), `1x${K}x${N} kn`);
        expectProduct(mx.ext.smallMatmul(a, b, bias, cpu), reference(a, b, bias), `1x${K}x${N} kn + bias`);
        const v = mx.reshape(a, [K], cpu);
        expectProduct(mx.ext.smallMatmul(v, b, bias, cpu), reference(v, b, bias), `${K}x${N} 1-D a + bias`);
      }
      // b a column slice of a wider matrix: unit column stride, rows 90 apart (read in place).
      const wide = rand([21, 90], 230);
      const b = mx.slice(wide, [0, 3], [21, 48], [1, 1], cpu);
      const a = rand([1, 21], 231);
      expectProduct(mx.ext.smallMatmul(a, b, null, cpu), reference(a, mx.contiguous(b, false, cpu)), 'row-strided b');
      // Attention's q·Kᵀ at decode: 1-4 query rows, head sizes 32 and 64 (and odd ones) over keys
      // one short of, at and past 16-key blocks, K read in place through a transposed view of a
      // cache with room past the keys in use.
      for (const [M, H, T] of [
        [1, 32, 15],
        [2, 32, 16],
        [3, 64, 17],
        [4, 32, 1029],
        [4, 20, 47],
        [1, 256, 33],
        [2, 257, 18],
      ] as const) {
        const q = rand([2, M, H], seed++);
        const cache = rand([2, T + 5, H], seed++);
        const keys = mx.slice(cache, [0, 0, 0], [2, T, H], [1, 1, 1], cpu);
        const kt = mx.transpose(keys, [0, 2, 1], cpu);
        expectProduct(mx.ext.smallMatmul(q, kt, null, cpu), reference(q, mx.contiguous(kt, false, cpu)), `q·Kᵀ ${M}x${H}x${T}`);
      }
      // a row of a wider matrix (a view at an offset).
      const aw = mx.slice(rand([3, 40], 232), [1, 5], [2, 26], [1, 1], cpu);
      expectProduct(mx.ext.smallMatmul(aw, b, null, cpu), reference(mx.contiguous(aw, false, cpu), mx.contiguous(b, false, cpu)), 'a view');
    });

    it('4-bit weights, the decoding shapes: 1-4 rows, column tails of the 4-column tile, odd group counts', () => {
      let seed = 240;
      for (const [rows, K, N, group] of [
        [1, 32, 1, 32],
        [1, 96, 13, 32],
        [1, 160, 6, 32],
        [1, 384, 7, 128],
        [1, 192, 5, 64],
        [2, 96, 9, 32],
        [3, 320, 3, 64],
        [4, 224, 11, 32],
      ] as const) {
        const x = rand([rows, K], seed++);
        const w = rand([N, K], seed++);
        const [wq, sc, bi] = mx.quantize(w, group, 4, 'affine', null, cpu);
        const got = mx.ext.smallQuantizedMatmul(x, wq, sc, bi, true, group, 4, cpu);
        expectProduct(got, quantReference(x, wq, sc, bi, group), `q4 ${rows}x${K}x${N} g${group}`, 4e-6);
      }
    });

    it('strided operands: a transposed, b with a column step (gathered)', () => {
      const at = rand([37, 3], 11); // a = at^T: unit stride along M, not K
      const a = mx.transpose(at, null, cpu);
      const wide = rand([37, 90], 12);
      const b = mx.slice(wide, [0, 0], [37, 90], [1, 2], cpu); // [37, 45], column stride 2
      expectProduct(mx.ext.smallMatmul(a, b, null, cpu), reference(mx.contiguous(a, false, cpu), mx.contiguous(b, false, cpu)), 'strided');
      // Leading axes that do not collapse into rows of stride K (a matrix b reads them as rows).
      const a3 = mx.transpose(rand([3, 2, 37], 13), [1, 0, 2], cpu);
      expectProduct(
        mx.ext.smallMatmul(a3, b, null, cpu),
        reference(mx.contiguous(a3, false, cpu), mx.contiguous(b, false, cpu)),
        'strided rows',
      );
      const [wq, sc, bi] = mx.quantize(rand([5, 64], 14), 32, 4, 'affine', null, cpu);
      const xt = mx.transpose(rand([64, 2], 15), null, cpu);
      expectProduct(
        mx.ext.smallQuantizedMatmul(xt, wq, sc, bi, true, 32, 4, cpu),
        quantReference(mx.contiguous(xt, false, cpu), wq, sc, bi, 32),
        'q4 strided x',
        4e-6,
      );
    });

    it('broadcast batch axes, a 1-D a, batched transposed b (attention shapes), rows folded over a matrix', () => {
      const a4 = rand([2, 1, 3, 19], 21);
      const b3 = rand([4, 19, 23], 22);
      expectProduct(mx.ext.smallMatmul(a4, b3, null, cpu), reference(a4, b3), 'batch broadcast');
      const v = rand([19], 23);
      expectProduct(mx.ext.smallMatmul(v, b3, null, cpu), reference(v, b3), '1-D a, batched b');
      const w = rand([19, 41], 24);
      expectProduct(mx.ext.smallMatmul(v, w, null, cpu), reference(v, w), '1-D a, matrix b');
      // q [1, H, 1, D] @ K^T, K [1, H, T, D] read through a transposed view; probs @ V.
      const q = rand([1, 4, 1, 16], 25);
      const keys = rand([1, 4, 37, 16], 26);
      const kt = mx.transpose(keys, [0, 1, 3, 2], cpu);
      expectProduct(mx.ext.smallMatmul(q, kt, null, cpu), reference(q, mx.contiguous(kt, false, cpu)), 'q @ K^T');
      const p = rand([1, 4, 1, 37], 27);
      expectProduct(mx.ext.smallMatmul(p, keys, null, cpu), reference(p, keys), 'p @ V');
      const x3 = rand([2, 3, 19], 28);
      const bias = rand([41], 29);
      expectProduct(mx.ext.smallMatmul(x3, w, bias, cpu), reference(x3, w, bias), 'rows folded + bias');
    });

    it('NaN and ±Inf propagate as in float64', () => {
      const a = rand([3, 21], 31);
      const b = rand([21, 19], 32);
      const av = flat(a);
      av[0] = Number.NaN; // row 0: NaN everywhere
      av[21 + 4] = Number.POSITIVE_INFINITY; // row 1: ±Inf by the sign of b[4, n]
      const bv = flat(b);
      bv[7 * 19 + 3] = Number.NEGATIVE_INFINITY; // column 3: -Inf·a[m, 7] (and Inf - Inf = NaN in row 1)
      const a2 = mx.array(Float32Array.from(av), { shape: [3, 21] });
      const b2 = mx.array(Float32Array.from(bv), { shape: [21, 19] });
      const ref = reference(a2, b2);
      expect(ref.v.some((x) => Number.isNaN(x)) && ref.v.some((x) => x === Number.POSITIVE_INFINITY)).toBe(true);
      expectProduct(mx.ext.smallMatmul(a2, b2, null, cpu), ref, 'nan/inf kn');
      const bt = mx.contiguous(mx.transpose(b2, null, cpu), false, cpu);
      expectProduct(mx.ext.smallMatmul(a2, mx.transpose(bt, null, cpu), null, cpu), ref, 'nan/inf nk');
    });

    it('empty operands, the row limit, other dtypes and shape errors behave as mx.matmul', () => {
      expect(mx.ext.smallMatmul(mx.zeros([0, 5], 'float32'), rand([5, 3], 41), null, cpu).shape).toEqual([0, 3]);
      expect(mx.ext.smallMatmul(rand([2, 5], 42), mx.zeros([5, 0], 'float32'), null, cpu).shape).toEqual([2, 0]);
      const k0 = mx.ext.smallMatmul(mx.zeros([2, 0], 'float32'), mx.zeros([0, 3], 'float32'), mx.array(new Float32Array([1, 2, 3])), cpu);
      expect(flat(k0)).toEqual([1, 2, 3, 1, 2, 3]);
      // 9 and 40 rows: MLX's matmul (the kernel stops at 4); same results.
      for (const M of [9, 40]) {
        const a = rand([M, 30], 43);
        const b = rand([30, 20], 44);
        expectProduct(mx.ext.smallMatmul(a, b, null, cpu), reference(a, b), `${M} rows`, 1e-5);
      }
      const h = mx.astype(rand([2, 8], 45), 'float16', cpu);
      const hw = mx.astype(rand([8, 4], 46), 'float16', cpu);
      const y16 = mx.ext.smallMatmul(h, hw, null, cpu);
      expect(y16.dtype).toBe('float16');
      expect(flat(y16)).toEqual(flat(mx.matmul(h, hw, cpu)));
      expect(() => mx.ext.smallMatmul(rand([2, 3], 47), rand([4, 5], 48), null, cpu)).toThrow();
    });

    it('gradients go through matmul', () => {
      const a = rand([2, 6], 51);
      const b = rand([6, 5], 52);
      const g = mx.grad((x: mx.Array) => mx.sum(mx.ext.smallMatmul(x, b, null, cpu)))(a) as mx.Array;
      // d/da sum(a @ b) = ones @ b^T: each row is b's row sums.
      const rows = Array.from({ length: 6 }, (_, k) =>
        flat(b)
          .slice(k * 5, k * 5 + 5)
          .reduce((s, x) => s + x, 0),
      );
      const gv = flat(g);
      for (let i = 0; i < 12; i++) expect(Math.abs(gv[i] - rows[i % 6])).toBeLessThanOrEqual(1e-5);
    });

    it('4-bit weights: groups 32/64/128, rows 1-16 (kernel) and 17+ (dequantized), batch axes, NaN', () => {
      let seed = 60;
      for (const [rows, K, N, group] of [
        [1, 64, 9, 32],
        [2, 256, 33, 64],
        [3, 128, 70, 128],
        [4, 96, 17, 32],
        [5, 256, 40, 32],
        [16, 64, 12, 64],
        [17, 64, 12, 32],
      ] as const) {
        const x = rand([rows, K], seed++);
        const w = rand([N, K], seed++);
        const [wq, sc, bi] = mx.quantize(w, group, 4, 'affine', null, cpu);
        const got = mx.ext.smallQuantizedMatmul(x, wq, sc, bi, true, group, 4, cpu);
        expectProduct(got, quantReference(x, wq, sc, bi, group), `q4 ${rows}x${K}x${N} g${group}`, 4e-6);
      }
      const [wq, sc, bi] = mx.quantize(rand([11, 64], 70), 32, 4, 'affine', null, cpu);
      const x3 = rand([2, 3, 64], 71);
      expectProduct(mx.ext.smallQuantizedMatmul(x3, wq, sc, bi, true, 32, 4, cpu), quantReference(x3, wq, sc, bi, 32), 'q4 batch', 4e-6);
      const xv = flat(rand([2, 64], 72));
      xv[5] = Number.NaN;
      const xn = mx.array(Float32Array.from(xv), { shape: [2, 64] });
      const yn = flat(mx.ext.smallQuantizedMatmul(xn, wq, sc, bi, true, 32, 4, cpu));
      for (let n = 0; n < 11; n++) expect(Number.isNaN(yn[n]) && Number.isFinite(yn[11 + n])).toBe(true);
    });

    it('8-bit weights: the same kernel, groups 32/64/128, rows 1-16 and 17+ (dequantized), column tails, NaN', () => {
      let seed = 80;
      for (const [rows, K, N, group] of [
        [1, 32, 1, 32],
        [1, 96, 13, 32],
        [1, 384, 7, 128],
        [1, 192, 5, 64],
        [2, 256, 33, 64],
        [3, 128, 70, 128],
        [4, 224, 11, 32],
        [16, 64, 12, 64],
        [17, 64, 12, 32],
      ] as const) {
        const x = rand([rows, K], seed++);
        const w = rand([N, K], seed++);
        const [wq, sc, bi] = mx.quantize(w, group, 8, 'affine', null, cpu);
        const got = mx.ext.smallQuantizedMatmul(x, wq, sc, bi, true, group, 8, cpu);
        expectProduct(got, quantReference(x, wq, sc, bi, group, 8), `q8 ${rows}x${K}x${N} g${group}`, 4e-6);
      }
      const [w8, s8, b8] = mx.quantize(rand([11, 64], 73), 32, 8, 'affine', null, cpu);
      const xv = flat(rand([2, 64], 74));
      xv[7] = Number.NaN;
      const yn = flat(mx.ext.smallQuantizedMatmul(mx.array(Float32Array.from(xv), { shape: [2, 64] }), w8, s8, b8, true, 32, 8, cpu));
      for (let n = 0; n < 11; n++) expect(Number.isNaN(yn[n]) && Number.isFinite(yn[11 + n])).toBe(true);
    });
  });
}
