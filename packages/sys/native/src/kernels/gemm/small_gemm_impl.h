// The small-M matrix-product kernels' arithmetic (small_gemm.h), written once over a vector type V
// (8 floats on AVX2, small_gemm_avx2.cpp; a plain 8-float struct the compiler vectorizes for the
// baseline ISA, small_gemm_generic.cpp) and compiled into one namespace per build (MLXC_GEMM_NS),
// like math_impl.h. Nothing here instantiates standard-library templates, so no AVX2 code can
// leak into shared inline symbols.
//
// Every kernel computes a band of output columns [n0, n1) for all M rows of a, so the caller
// splits the columns over threads. Accumulation is in float32, in k order per lane (no
// reassociation beyond the vector lanes), so NaN and Inf propagate as in any dot product.
#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace MLXC_GEMM_NS {

/** One float: the column / depth tails of the vector loops. */
struct S1 {
  float v;
  static constexpr size_t W = 1;
  static S1 load(const float* p) { return {*p}; }
  static void store(float* p, S1 a) { *p = a.v; }
  static S1 zero() { return {0.0f}; }
  static S1 splat(float f) { return {f}; }
#ifdef __FMA__
  static S1 fma(S1 a, S1 b, S1 c) { return {__builtin_fmaf(a.v, b.v, c.v)}; }
#else
  static S1 fma(S1 a, S1 b, S1 c) { return {a.v * b.v + c.v}; }
#endif
  friend S1 operator+(S1 a, S1 b) { return {a.v + b.v}; }
  static float hsum(S1 a) { return a.v; }
};

// ---------------------------------------------------------------------------------------------
// b stored [K, N] (row stride ldb): out[m, n] = sum_k a[m, k] * b[k, n].
// A tile of R rows by C vectors of columns keeps R*C accumulators in registers over a depth block;
// each b row segment is loaded once per tile and used by all R rows.

template <class V, int R, int C>
inline void tile_kn(const float* a, size_t lda, const float* b, size_t ldb, float* out, size_t ldo, size_t kc, bool first,
                    const float* bias) {
  V acc[R][C];
  for (int r = 0; r < R; r++)
    for (int j = 0; j < C; j++) acc[r][j] = first ? (bias ? V::load(bias + j * V::W) : V::zero()) : V::load(out + r * ldo + j * V::W);
  for (size_t k = 0; k < kc; k++) {
    const float* bk = b + k * ldb;
    V bv[C];
    for (int j = 0; j < C; j++) bv[j] = V::load(bk + j * V::W);
    for (int r = 0; r < R; r++) {
      V ar = V::splat(a[r * lda + k]);
      for (int j = 0; j < C; j++) acc[r][j] = V::fma(ar, bv[j], acc[r][j]);
    }
  }
  for (int r = 0; r < R; r++)
    for (int j = 0; j < C; j++) V::store(out + r * ldo + j * V::W, acc[r][j]);
}

/** Rows [0, R) of a, columns [n0, n1), depth [k0, k0 + kc): full tiles of C vectors, then single vectors, then single floats. */
template <class V, int R, int C>
inline void band_kn(const float* a, size_t lda, const float* b, size_t ldb, float* out, size_t ldo, size_t n0, size_t n1, size_t k0,
                    size_t kc, const float* bias) {
  const bool first = k0 == 0;
  const float* ak = a + k0;
  const float* bk = b + k0 * ldb;
  size_t n = n0;
  for (; n + C * V::W <= n1; n += C * V::W) tile_kn<V, R, C>(ak, lda, bk + n, ldb, out + n, ldo, kc, first, bias ? bias + n : nullptr);
  for (; n + V::W <= n1; n += V::W) tile_kn<V, R, 1>(ak, lda, bk + n, ldb, out + n, ldo, kc, first, bias ? bias + n : nullptr);
  for (; n < n1; n++) tile_kn<S1, R, 1>(ak, lda, bk + n, ldb, out + n, ldo, kc, first, bias ? bias + n : nullptr);
}

/** One row of a: out[n0, n1) is the accumulator, and four rows of b at a time stream through it
 * front to back (the fastest order from memory: each row of b is one long sequential read). */
template <class V>
void gemv_kn(const float* a, const float* b, size_t ldb, const float* bias, float* out, size_t K, size_t n0, size_t n1) {
  for (size_t n = n0; n < n1; n++) out[n] = bias ? bias[n] : 0.0f;
  size_t k = 0;
  for (; k + 4 <= K; k += 4) {
    const V a0 = V::splat(a[k]), a1 = V::splat(a[k + 1]), a2 = V::splat(a[k + 2]), a3 = V::splat(a[k + 3]);
    const float *b0 = b + k * ldb, *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb;
    size_t n = n0;
    for (; n + V::W <= n1; n += V::W) {
      V o = V::load(out + n);
      o = V::fma(a0, V::load(b0 + n), o);
      o = V::fma(a1, V::load(b1 + n), o);
      o = V::fma(a2, V::load(b2 + n), o);
      o = V::fma(a3, V::load(b3 + n), o);
      V::store(out + n, o);
    }
    for (; n < n1; n++) {
      float o = out[n];
      o = __builtin_fmaf(a[k], b0[n], o);
      o = __builtin_fmaf(a[k + 1], b1[n], o);
      o = __builtin_fmaf(a[k + 2], b2[n], o);
      o = __builtin_fmaf(a[k + 3], b3[n], o);
      out[n] = o;
    }
  }
  for (; k < K; k++) {
    const V ak = V::splat(a[k]);
    const float* bk = b + k * ldb;
    size_t n = n0;
    for (; n + V::W <= n1; n += V::W) V::store(out + n, V::fma(ak, V::load(bk + n), V::load(out + n)));
    for (; n < n1; n++) out[n] = __builtin_fmaf(a[k], bk[n], out[n]);
  }
}

/** Depth blocks of 32 rows of b: a block of the band (32 row segments, each contiguous) stays in
 * cache while every row group reads it, and each row of b is read front to back. */
template <class V>
void gemm_kn(const float* a, size_t lda, const float* b, size_t ldb, const float* bias, float* out, size_t ldo, size_t M, size_t K,
             size_t n0, size_t n1) {
  if (M == 1) return gemv_kn<V>(a, b, ldb, bias, out, K, n0, n1);
  constexpr size_t KC = 32;
  for (size_t k0 = 0; k0 < K; k0 += KC) {
    size_t kc = K - k0 < KC ? K - k0 : KC;
    size_t m = 0;
    for (; m + 4 <= M; m += 4) band_kn<V, 4, 2>(a + m * lda, lda, b, ldb, out + m * ldo, ldo, n0, n1, k0, kc, bias);
    switch (M - m) {
      case 3: band_kn<V, 3, 2>(a + m * lda, lda, b, ldb, out + m * ldo, ldo, n0, n1, k0, kc, bias); break;
      case 2: band_kn<V, 2, 4>(a + m * lda, lda, b, ldb, out + m * ldo, ldo, n0, n1, k0, kc, bias); break;
      case 1: band_kn<V, 1, 8>(a + m * lda, lda, b, ldb, out + m * ldo, ldo, n0, n1, k0, kc, bias); break;
      default: break;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// b stored [N, K] (a transposed view; row stride ldb): out[m, n] = dot(a[m, :], b[n, :]).
// A tile of R rows by C columns keeps R*C vector accumulators over the whole depth, then sums
// each one's lanes.

template <class V, int R, int C>
inline void tile_nk(const float* a, size_t lda, const float* b, size_t ldb, float* out, size_t ldo, size_t K, const float* bias) {
  V acc[R][C];
  for (int r = 0; r < R; r++)
    for (int j = 0; j < C; j++) acc[r][j] = V::zero();
  size_t k = 0;
  for (; k + V::W <= K; k += V::W) {
    V bv[C];
    for (int j = 0; j < C; j++) bv[j] = V::load(b + j * ldb + k);
    for (int r = 0; r < R; r++) {
      V ar = V::load(a + r * lda + k);
      for (int j = 0; j < C; j++) acc[r][j] = V::fma(ar, bv[j], acc[r][j]);
    }
  }
  for (int r = 0; r < R; r++)
    for (int j = 0; j < C; j++) {
      float s = V::hsum(acc[r][j]);
      for (size_t t = k; t < K; t++) s = __builtin_fmaf(a[r * lda + t], b[j * ldb + t], s);
      out[r * ldo + j] = bias ? s + bias[j] : s;
    }
}

template <class V, int R, int C>
inline void band_nk(const float* a, size_t lda, const float* b, size_t ldb, float* out, size_t ldo, size_t K, size_t n0, size_t n1,
                    const float* bias) {
  size_t n = n0;
  for (; n + C <= n1; n += C) tile_nk<V, R, C>(a, lda, b + n * ldb, ldb, out + n, ldo, K, bias ? bias + n : nullptr);
  for (; n < n1; n++) tile_nk<V, R, 1>(a, lda, b + n * ldb, ldb, out + n, ldo, K, bias ? bias + n : nullptr);
}

template <class V>
void gemm_nk(const float* a, size_t lda, const float* b, size_t ldb, const float* bias, float* out, size_t ldo, size_t M, size_t K,
             size_t n0, size_t n1) {
  // Column bands of 16 rows of b (16 * K floats) stay in cache while every row group reads them.
  for (size_t c0 = n0; c0 < n1; c0 += 16) {
    size_t c1 = n1 - c0 < 16 ? n1 : c0 + 16;
    size_t m = 0;
    for (; m + 2 <= M; m += 2) band_nk<V, 2, 4>(a + m * lda, lda, b, ldb, out + m * ldo, ldo, K, c0, c1, bias);
    if (m < M) band_nk<V, 1, 4>(a + m * lda, lda, b, ldb, out + m * ldo, ldo, K, c0, c1, bias);
  }
}

// ---------------------------------------------------------------------------------------------
// 4-bit (and 8-bit: BITS) affine weights, MLX's layout (transposed: w [N, K * BITS / 32] uint32,
// element i of a word at bits [BITS i, BITS (i + 1))); scales and biases [N, K / group] float32:
//   out[m, n] = sum_g scale[n, g] * (sum_{k in g} a[m, k] * q[n, k]) + bias[n, g] * asum[m, g]
// where asum[m, g] is the sum of a[m, k] over group g (computed once by the caller). Each 8-weight
// word is unpacked once per tile and used by all R rows; a tile takes C columns at once (four for
// one row, two for two), so that C chains of multiply-adds overlap: one column at a time, each
// word's multiply-add waited for the last one's (the loop ran at the FMA's latency, not its rate).

template <class V, int R, int C, int BITS = 4>
inline void tile_q4(const float* a, size_t lda, const uint32_t* w, size_t wrow, const float* sc, const float* bi, const float* asum,
                    size_t groups, size_t group, float* out, size_t ldo, const float* bias) {
  V tot[R][C];
  float off[R][C];
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++) {
      tot[r][c] = V::zero();
      off[r][c] = 0.0f;
    }
  // 8 weights are one word at 4 bits, two at 8.
  constexpr size_t kWords8 = BITS / 4;
  const size_t words = group / 8;
  for (size_t g = 0; g < groups; g++) {
    V acc[R][C];
    for (int r = 0; r < R; r++)
      for (int c = 0; c < C; c++) acc[r][c] = V::zero();
    const uint32_t* wg = w + g * words * kWords8;
    const size_t k0 = g * group;
    for (size_t i = 0; i < words; i++) {
      V q[C];
      for (int c = 0; c < C; c++) {
        if constexpr (BITS == 4)
          q[c] = V::nibbles(wg[c * wrow + i]);
        else
          q[c] = V::bytes(wg + c * wrow + 2 * i);
      }
      for (int r = 0; r < R; r++) {
        const V x = V::load(a + r * lda + k0 + i * 8);
        for (int c = 0; c < C; c++) acc[r][c] = V::fma(x, q[c], acc[r][c]);
      }
    }
    for (int c = 0; c < C; c++) {
      const V s = V::splat(sc[c * groups + g]);
      for (int r = 0; r < R; r++) {
        tot[r][c] = V::fma(s, acc[r][c], tot[r][c]);
        off[r][c] = __builtin_fmaf(bi[c * groups + g], asum[r * groups + g], off[r][c]);
      }
    }
  }
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++) {
      const float y = V::hsum(tot[r][c]) + off[r][c];
      out[r * ldo + c] = bias ? y + bias[c] : y;
    }
}

/** Rows [0, R) of a times the `cols` (at most 4) columns at w: tiles of C columns, C by R. */
template <class V, int R, int BITS = 4>
inline void tiles_q4(const float* a, size_t lda, const uint32_t* w, size_t wrow, const float* sc, const float* bi, const float* asum,
                     size_t groups, size_t group, float* out, size_t ldo, const float* bias, size_t cols) {
  constexpr int C = R == 1 ? 4 : R == 2 ? 2 : 1;
  size_t c = 0;
  for (; c + C <= cols; c += C)
    tile_q4<V, R, C, BITS>(a, lda, w + c * wrow, wrow, sc + c * groups, bi + c * groups, asum, groups, group, out + c, ldo,
                           bias ? bias + c : nullptr);
  for (; c < cols; c++)
    tile_q4<V, R, 1, BITS>(a, lda, w + c * wrow, wrow, sc + c * groups, bi + c * groups, asum, groups, group, out + c, ldo,
                           bias ? bias + c : nullptr);
}

template <class V, int BITS = 4>
void gemm_q4(const float* a, size_t lda, const uint32_t* w, const float* sc, const float* bi, const float* asum, const float* bias,
             float* out, size_t ldo, size_t M, size_t K, size_t group, size_t n0, size_t n1) {
  const size_t groups = K / group, wrow = K * BITS / 32;
  // Four columns at a time, every row tile over them while their words are in L1.
  // Eight bits, one or two rows: the next tile's words, scales and biases are prefetched as each
  // tile starts. Its four columns are four short runs (K bytes each) that the hardware's prefetch
  // did not follow; the kernel waited on memory (a [1, 768] x [768, 32000] product, 2 threads on
  // Zen 3: 2.1 -> 1.3 ms). With more rows (or four bits) it waits on its arithmetic instead, and
  // gains nothing.
  const bool prefetch = BITS == 8 && M <= 2;
  for (size_t n = n0; n < n1; n += 4) {
    const size_t cols = std::min<size_t>(4, n1 - n);
    if (prefetch && n + 4 < n1) {
      const size_t next = std::min<size_t>(4, n1 - n - 4);
      const char* pw = reinterpret_cast<const char*>(w + (n + 4) * wrow);
      for (size_t o = 0; o < next * wrow * sizeof(uint32_t); o += 64) __builtin_prefetch(pw + o, 0, 3);
      const char* ps = reinterpret_cast<const char*>(sc + (n + 4) * groups);
      const char* pb = reinterpret_cast<const char*>(bi + (n + 4) * groups);
      for (size_t o = 0; o < next * groups * sizeof(float); o += 64) {
        __builtin_prefetch(ps + o, 0, 2);
        __builtin_prefetch(pb + o, 0, 2);
      }
    }
    const uint32_t* wn = w + n * wrow;
    const float* sn = sc + n * groups;
    const float* bn = bi + n * groups;
    const float* bs = bias ? bias + n : nullptr;
    size_t m = 0;
    for (; m + 4 <= M; m += 4)
      tiles_q4<V, 4, BITS>(a + m * lda, lda, wn, wrow, sn, bn, asum + m * groups, groups, group, out + m * ldo + n, ldo, bs, cols);
    switch (M - m) {
      case 3:
        tiles_q4<V, 3, BITS>(a + m * lda, lda, wn, wrow, sn, bn, asum + m * groups, groups, group, out + m * ldo + n, ldo, bs, cols);
        break;
      case 2:
        tiles_q4<V, 2, BITS>(a + m * lda, lda, wn, wrow, sn, bn, asum + m * groups, groups, group, out + m * ldo + n, ldo, bs, cols);
        break;
      case 1:
        tiles_q4<V, 1, BITS>(a + m * lda, lda, wn, wrow, sn, bn, asum + m * groups, groups, group, out + m * ldo + n, ldo, bs, cols);
        break;
      default: break;
    }
  }
}

}  // namespace MLXC_GEMM_NS
