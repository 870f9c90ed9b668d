// Matrix products, convolutions, linear algebra and FFTs, against direct float64 loops in JS.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';
import { inputs, flat, expectAllClose } from '../test/numeric.js';

const expectClose = (actual: mx.Array | number[], expected: readonly number[], rtol = 1e-5, atol = 1e-5): void =>
  expectAllClose(actual, expected, rtol, atol);

/** [m, k] x [k, n], row-major, float64. */
function matmulRef(a: readonly number[], b: readonly number[], m: number, k: number, n: number): number[] {
  const c = new Array<number>(m * n).fill(0);
  for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) for (let p = 0; p < k; p++) c[i * n + j] += a[i * k + p] * b[p * n + j];
  return c;
}
const transposeRef = (a: readonly number[], m: number, n: number) =>
  Array.from({ length: m * n }, (_, i) => a[(i % m) * n + Math.floor(i / m)]);

describe('matrix products', () => {
  const [m, k, n] = [5, 7, 3];
  const A = inputs(m * k, -1, 1, 1);
  const B = inputs(k * n, -1, 1, 2);

  it('matmul of 2-D arrays', () => {
    expectClose(mx.matmul(mx.array(A, { shape: [m, k] }), mx.array(B, { shape: [k, n] })), matmulRef(A, B, m, k, n));
  });

  it('matmul batches and broadcasts leading dimensions', () => {
    const A2 = inputs(2 * m * k, -1, 1, 3);
    const r = mx.matmul(mx.array(A2, { shape: [2, m, k] }), mx.array(B, { shape: [k, n] }));
    expect(r.shape).toEqual([2, m, n]);
    expectClose(r, [...matmulRef(A2.slice(0, m * k), B, m, k, n), ...matmulRef(A2.slice(m * k), B, m, k, n)]);
  });

  it('matmul of a transposed (non-contiguous) operand', () => {
    const Bt = transposeRef(B, k, n); // [n, k]
    const r = mx.matmul(mx.array(A, { shape: [m, k] }), mx.transpose(mx.array(Bt, { shape: [n, k] })));
    expectClose(r, matmulRef(A, B, m, k, n));
  });

  it('addmm: alpha * a @ b + beta * c', () => {
    const C = inputs(m * n, -1, 1, 4);
    const ab = matmulRef(A, B, m, k, n);
    const r = mx.addmm(mx.array(C, { shape: [m, n] }), mx.array(A, { shape: [m, k] }), mx.array(B, { shape: [k, n] }), 0.5, 2);
    expectClose(
      r,
      ab.map((v, i) => 0.5 * v + 2 * C[i]),
    );
  });

  it('tensordot over paired axes and over the last/first axes', () => {
    // [2, 3, 4] . [4, 3, 5] over (1, 2) x (1, 0) -> [2, 5]
    const X = inputs(24, -1, 1, 5);
    const Y = inputs(60, -1, 1, 6);
    const ref: number[] = [];
    for (let i = 0; i < 2; i++)
      for (let l = 0; l < 5; l++) {
        let s = 0;
        for (let j = 0; j < 3; j++) for (let q = 0; q < 4; q++) s += X[i * 12 + j * 4 + q] * Y[q * 15 + j * 5 + l];
        ref.push(s);
      }
    expectClose(mx.tensordot(mx.array(X, { shape: [2, 3, 4] }), mx.array(Y, { shape: [4, 3, 5] }), [1, 2], [1, 0]), ref);
    expectClose(mx.tensordotAxis(mx.array(A, { shape: [m, k] }), mx.array(B, { shape: [k, n] }), 1), matmulRef(A, B, m, k, n));
  });

  it('einsum: matmul, batched trace, outer product', () => {
    const a = mx.array(A, { shape: [m, k] });
    const b = mx.array(B, { shape: [k, n] });
    expectClose(mx.einsum('ik,kj->ij', [a, b]), matmulRef(A, B, m, k, n));
    const sq = inputs(2 * 9, -1, 1, 8);
    expectClose(
      mx.einsum('bii->b', [mx.array(sq, { shape: [2, 3, 3] })]),
      [0, 1].map((bb) => sq[bb * 9] + sq[bb * 9 + 4] + sq[bb * 9 + 8]),
    );
    expectClose(mx.einsum('i,j->ij', [mx.array([1, 2]), mx.array([3, 4, 5])]), [3, 4, 5, 6, 8, 10]);
  });

  it('inner, outer, kron', () => {
    const u = [1, 2, 3];
    const v = [4, -5, 6];
    expect(mx.inner(mx.array(u), mx.array(v)).item()).toBe(4 - 10 + 18);
    expect(flat(mx.outer(mx.array(u), mx.array(v)))).toEqual(u.flatMap((p) => v.map((q) => p * q)));
    expect(mx.kron(mx.array([[1, 2]]), mx.array([[1], [10]])).toList()).toEqual([
      [1, 2],
      [10, 20],
    ]);
  });
});

/** Direct 1-D convolution (cross-correlation, as MLX): x [N, L, Cin], w [Cout, K, Cin/groups]. */
function conv1dRef(
  x: number[],
  [N, L, Cin]: number[],
  w: number[],
  [Cout, K]: number[],
  stride: number,
  pad: number,
  dil: number,
  groups: number,
) {
  const cinG = Cin / groups;
  const coutG = Cout / groups;
  const Lout = Math.floor((L + 2 * pad - dil * (K - 1) - 1) / stride) + 1;
  const out: number[] = [];
  for (let b = 0; b < N; b++)
    for (let t = 0; t < Lout; t++)
      for (let o = 0; o < Cout; o++) {
        const g = Math.floor(o / coutG);
        let s = 0;
        for (let kk = 0; kk < K; kk++) {
          const pos = t * stride - pad + kk * dil;
          if (pos < 0 || pos >= L) continue;
          for (let c = 0; c < cinG; c++) s += x[(b * L + pos) * Cin + g * cinG + c] * w[(o * K + kk) * cinG + c];
        }
        out.push(s);
      }
  return { out, shape: [N, Lout, Cout] };
}

/** Direct 2-D convolution: x [N, H, W, Cin], w [Cout, KH, KW, Cin]. */
function conv2dRef(x: number[], [N, H, W, Cin]: number[], w: number[], [Cout, KH, KW]: number[], [sh, sw]: number[], [ph, pw]: number[]) {
  const Ho = Math.floor((H + 2 * ph - KH) / sh) + 1;
  const Wo = Math.floor((W + 2 * pw - KW) / sw) + 1;
  const out: number[] = [];
  for (let b = 0; b < N; b++)
    for (let i = 0; i < Ho; i++)
      for (let j = 0; j < Wo; j++)
        for (let o = 0; o < Cout; o++) {
          let s = 0;
          for (let u = 0; u < KH; u++)
            for (let v = 0; v < KW; v++) {
              const y = i * sh - ph + u;
              const z = j * sw - pw + v;
              if (y < 0 || y >= H || z < 0 || z >= W) continue;
              for (let c = 0; c < Cin; c++) s += x[((b * H + y) * W + z) * Cin + c] * w[((o * KH + u) * KW + v) * Cin + c];
            }
          out.push(s);
        }
  return { out, shape: [N, Ho, Wo, Cout] };
}

describe('convolutions', () => {
  for (const [stride, pad, dil, groups] of [
    [1, 0, 1, 1],
    [2, 1, 1, 1],
    [1, 2, 2, 1],
    [1, 1, 1, 2],
  ]) {
    it(`conv1d stride ${stride} padding ${pad} dilation ${dil} groups ${groups}`, () => {
      const xs = [2, 9, 4];
      const ws = [6, 3, 4 / groups];
      const X = inputs(2 * 9 * 4, -1, 1, 10 + stride);
      const Wt = inputs(ws[0] * ws[1] * ws[2], -1, 1, 20 + pad);
      const ref = conv1dRef(X, xs, Wt, ws, stride, pad, dil, groups);
      const r = mx.conv1d(mx.array(X, { shape: xs }), mx.array(Wt, { shape: ws }), stride, pad, dil, groups);
      expect(r.shape).toEqual(ref.shape);
      expectClose(r, ref.out);
    });
  }

  for (const [s, p] of [
    [
      [1, 1],
      [0, 0],
    ],
    [
      [2, 1],
      [1, 2],
    ],
  ]) {
    it(`conv2d stride ${s} padding ${p}`, () => {
      const xs = [2, 6, 5, 3];
      const ws = [4, 3, 2, 3];
      const X = inputs(2 * 6 * 5 * 3, -1, 1, 30);
      const Wt = inputs(4 * 3 * 2 * 3, -1, 1, 31);
      const ref = conv2dRef(X, xs, Wt, ws, s, p);
      const r = mx.conv2d(mx.array(X, { shape: xs }), mx.array(Wt, { shape: ws }), s[0], s[1], p[0], p[1], 1, 1, 1);
      expect(r.shape).toEqual(ref.shape);
      expectClose(r, ref.out);
    });
  }

  it('convTranspose1d scatters each input through the kernel', () => {
    // out[b, t*stride - pad + k, o] += x[b, t, c] * w[o, k, c]; length (L-1)*stride - 2*pad + K.
    const [L, Cin, Cout, K, stride, pad] = [5, 2, 3, 3, 2, 1];
    const X = inputs(L * Cin, -1, 1, 40);
    const Wt = inputs(Cout * K * Cin, -1, 1, 41);
    const Lout = (L - 1) * stride - 2 * pad + K;
    const ref = new Array<number>(Lout * Cout).fill(0);
    for (let t = 0; t < L; t++)
      for (let k = 0; k < K; k++) {
        const pos = t * stride - pad + k;
        if (pos < 0 || pos >= Lout) continue;
        for (let o = 0; o < Cout; o++) for (let c = 0; c < Cin; c++) ref[pos * Cout + o] += X[t * Cin + c] * Wt[(o * K + k) * Cin + c];
      }
    const r = mx.convTranspose1d(mx.array(X, { shape: [1, L, Cin] }), mx.array(Wt, { shape: [Cout, K, Cin] }), stride, pad, 1, 0, 1);
    expect(r.shape).toEqual([1, Lout, Cout]);
    expectClose(r, ref);
  });
});

/** Gauss-Jordan inverse of an n x n matrix in float64. */
function invRef(a: readonly number[], n: number): number[] {
  const m = Array.from({ length: n }, (_, i) => [...a.slice(i * n, i * n + n), ...Array.from({ length: n }, (_, j) => (i === j ? 1 : 0))]);
  for (let c = 0; c < n; c++) {
    let p = c;
    for (let r = c + 1; r < n; r++) if (Math.abs(m[r][c]) > Math.abs(m[p][c])) p = r;
    [m[c], m[p]] = [m[p], m[c]];
    const d = m[c][c];
    for (let j = 0; j < 2 * n; j++) m[c][j] /= d;
    for (let r = 0; r < n; r++)
      if (r !== c) {
        const f = m[r][c];
        for (let j = 0; j < 2 * n; j++) m[r][j] -= f * m[c][j];
      }
  }
  return m.flatMap((row) => row.slice(n));
}

describe('linalg (CPU stream)', () => {
  const n = 4;
  // Diagonally dominant, so well conditioned.
  const A = inputs(n * n, -1, 1, 50).map((v, i) => (i % (n + 1) === 0 ? v + 5 : v));
  const cpu = { stream: 'cpu' } as const;
  const eye = Array.from({ length: n * n }, (_, i) => (i % (n + 1) === 0 ? 1 : 0));

  it('inv matches Gauss-Jordan and A @ inv(A) = I', () => {
    const inv = mx.linalg.inv(mx.array(A, { shape: [n, n] }), cpu);
    expectClose(inv, invRef(A, n), 1e-4, 1e-5);
    expectClose(mx.matmul(mx.array(A, { shape: [n, n] }), inv), eye, 0, 1e-5);
  });

  it('solve gives x with A x = b', () => {
    const b = inputs(n * 2, -3, 3, 51);
    const x = mx.linalg.solve(mx.array(A, { shape: [n, n] }), mx.array(b, { shape: [n, 2] }), cpu);
    expectClose(x, matmulRef(invRef(A, n), b, n, n, 2), 1e-4, 1e-5);
  });

  it('cholesky of a symmetric positive definite matrix reproduces it', () => {
    const S = matmulRef(A, transposeRef(A, n, n), n, n, n);
    const L = mx.linalg.cholesky(mx.array(S, { shape: [n, n] }), false, cpu);
    const l = flat(L);
    for (let i = 0; i < n; i++) for (let j = i + 1; j < n; j++) expect(l[i * n + j]).toBe(0);
    expectClose(matmulRef(l, transposeRef(l, n, n), n, n, n), S, 1e-4, 1e-4);
  });

  it('qr: Q is orthonormal, R upper triangular, QR = A', () => {
    const [Q, R] = mx.linalg.qr(mx.array(A, { shape: [n, n] }), cpu);
    const q = flat(Q);
    const r = flat(R);
    expectClose(matmulRef(transposeRef(q, n, n), q, n, n, n), eye, 0, 1e-5);
    for (let i = 1; i < n; i++) for (let j = 0; j < i; j++) expect(Math.abs(r[i * n + j])).toBeLessThan(1e-6);
    expectClose(matmulRef(q, r, n, n, n), A, 1e-5, 1e-5);
  });

  it('norm (Frobenius / L2)', () => {
    expect(mx.linalg.normL2(mx.array([3, 4]), null, false, cpu).item()).toBeCloseTo(5, 6);
    expect(mx.linalg.normL2(mx.array(A, { shape: [n, n] }), null, false, cpu).item()).toBeCloseTo(
      Math.sqrt(A.reduce((s, v) => s + v * v, 0)),
      5,
    );
  });
});

/** Direct DFT of a real signal: X[k] = sum_t x[t] e^{-2 pi i k t / n}, as [re, im] pairs. */
function dftRef(x: readonly number[], bins: number): number[] {
  const n = x.length;
  const out: number[] = [];
  for (let k = 0; k < bins; k++) {
    let re = 0;
    let im = 0;
    for (let t = 0; t < n; t++) {
      re += x[t] * Math.cos((2 * Math.PI * k * t) / n);
      im -= x[t] * Math.sin((2 * Math.PI * k * t) / n);
    }
    out.push(re, im);
  }
  return out;
}

describe('fft', () => {
  const sig = inputs(16, -1, 1, 60);
  it('rfft matches a direct DFT (n/2+1 bins)', () => {
    const r = mx.fft.rfft(mx.array(sig), 16, -1);
    expect(r.dtype).toBe('complex64');
    expect(r.shape).toEqual([9]);
    expectClose(Array.from(r.toTypedArray() as Float32Array), dftRef(sig, 9), 1e-5, 1e-5);
    expect((r.toList() as number[][])[0]).toEqual([
      expect.closeTo(
        sig.reduce((a, b) => a + b, 0),
        5,
      ),
      0,
    ]);
  });
  it('fft of a real signal matches a direct DFT (all bins), ortho norm scales by 1/sqrt(n)', () => {
    expectClose(Array.from(mx.fft.fft(mx.array(sig), 16, -1).toTypedArray() as Float32Array), dftRef(sig, 16), 1e-5, 1e-5);
    const o = mx.fft.fft(mx.array(sig), 16, -1, 'ortho');
    expectClose(
      Array.from(o.toTypedArray() as Float32Array),
      dftRef(sig, 16).map((v) => v / 4),
      1e-5,
      1e-5,
    );
  });
  it('irfft inverts rfft', () => {
    const back = mx.fft.irfft(mx.fft.rfft(mx.array(sig), 16, -1), 16, -1);
    expectClose(back, sig, 1e-5, 1e-5);
  });
});
