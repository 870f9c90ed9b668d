// The small-M product kernels on AVX-512F (16 floats). This file alone is compiled with
// -mavx512f -mfma (CMakeLists.txt); small_gemm_generic.cpp calls it only where the running CPU has
// both (has_avx512()), ahead of the AVX2 build.
//
// The tiles of small_gemm_impl.h serve 2-4 rows and transposed weights. Decoding's shapes get
// kernels of their own, written to stream the weights at the cache's (or memory's) bandwidth:
// - one row times b [K, N] (gemv_kn): each row of b read in one run of the band's width, eight
//   rows in flight per pass (eight sequential streams, which the hardware prefetchers follow:
//   software prefetches of the next pass measured slower), masked column tails;
// - b [N, K] with a short K (gemm_nk_short, attention's q·Kᵀ): 16 outputs' lane sums at once;
// - 4-bit weights (q4): each 16-byte run of 32 weights is widened with one vpmovzxbd into its low
//   and high nibbles (the even and odd elements) and multiplied with x's 32 elements split the
//   same way; several output columns at a time, so that the chains of multiply-adds overlap.
// Every sum is still float32 in k order per lane, within a group for the 4-bit kernel.
#if defined(__x86_64__) && defined(__AVX512F__) && defined(__FMA__)
#include <immintrin.h>

#define MLXC_GEMM_NS mlxc_gemm_avx512
#include "kernels/gemm/small_gemm_impl.h"

namespace mlxc_gemm_avx512 {

struct V16 {
  __m512 v;
  static constexpr size_t W = 16;
  static V16 load(const float* p) { return {_mm512_loadu_ps(p)}; }
  static void store(float* p, V16 a) { _mm512_storeu_ps(p, a.v); }
  static V16 zero() { return {_mm512_setzero_ps()}; }
  static V16 splat(float f) { return {_mm512_set1_ps(f)}; }
  static V16 fma(V16 a, V16 b, V16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
  friend V16 operator+(V16 a, V16 b) { return {_mm512_add_ps(a.v, b.v)}; }
  static float hsum(V16 a) { return hsum16(a.v); }
  /** Halves, then as the AVX2 build (V8::hsum) does. */
  static float hsum16(__m512 a) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

inline __mmask16 tail_mask(size_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

/** Rows of b per pass. */
constexpr size_t kGemvRows = 8;

/** One row of a times b [K, N] (row stride ldb), columns [n0, n1). The band is not blocked further:
 * each row of b is read in one run of the band's width (SmallMatmul's bands are at most 8192
 * columns, out 32 KB in L1/L2). Blocks of 1024 columns (out in L1) measured 10-25% slower from
 * memory (the prefetchers retrain on each run) and no faster from L2. */
void gemv_kn(const float* a, const float* b, size_t ldb, const float* bias, float* out, size_t K, size_t n0, size_t n1) {
  const size_t full = n0 + (n1 - n0) / 16 * 16;
  const __mmask16 tm = tail_mask(n1 - full);
  for (size_t n = n0; n < full; n += 16) _mm512_storeu_ps(out + n, bias ? _mm512_loadu_ps(bias + n) : _mm512_setzero_ps());
  if (tm) _mm512_mask_storeu_ps(out + full, tm, bias ? _mm512_maskz_loadu_ps(tm, bias + full) : _mm512_setzero_ps());
  size_t k = 0;
  for (; k + kGemvRows <= K; k += kGemvRows) {
    const float* r = b + k * ldb;
    const __m512 a0 = _mm512_set1_ps(a[k]), a1 = _mm512_set1_ps(a[k + 1]), a2 = _mm512_set1_ps(a[k + 2]), a3 = _mm512_set1_ps(a[k + 3]),
                 a4 = _mm512_set1_ps(a[k + 4]), a5 = _mm512_set1_ps(a[k + 5]), a6 = _mm512_set1_ps(a[k + 6]), a7 = _mm512_set1_ps(a[k + 7]);
    const float *b0 = r, *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb, *b4 = b3 + ldb, *b5 = b4 + ldb, *b6 = b5 + ldb, *b7 = b6 + ldb;
    for (size_t n = n0; n < full; n += 16) {
      __m512 o = _mm512_loadu_ps(out + n);
      o = _mm512_fmadd_ps(a0, _mm512_loadu_ps(b0 + n), o);
      o = _mm512_fmadd_ps(a1, _mm512_loadu_ps(b1 + n), o);
      o = _mm512_fmadd_ps(a2, _mm512_loadu_ps(b2 + n), o);
      o = _mm512_fmadd_ps(a3, _mm512_loadu_ps(b3 + n), o);
      o = _mm512_fmadd_ps(a4, _mm512_loadu_ps(b4 + n), o);
      o = _mm512_fmadd_ps(a5, _mm512_loadu_ps(b5 + n), o);
      o = _mm512_fmadd_ps(a6, _mm512_loadu_ps(b6 + n), o);
      o = _mm512_fmadd_ps(a7, _mm512_loadu_ps(b7 + n), o);
      _mm512_storeu_ps(out + n, o);
    }
    if (tm) {
      __m512 o = _mm512_maskz_loadu_ps(tm, out + full);
      o = _mm512_fmadd_ps(a0, _mm512_maskz_loadu_ps(tm, b0 + full), o);
      o = _mm512_fmadd_ps(a1, _mm512_maskz_loadu_ps(tm, b1 + full), o);
      o = _mm512_fmadd_ps(a2, _mm512_maskz_loadu_ps(tm, b2 + full), o);
      o = _mm512_fmadd_ps(a3, _mm512_maskz_loadu_ps(tm, b3 + full), o);
      o = _mm512_fmadd_ps(a4, _mm512_maskz_loadu_ps(tm, b4 + full), o);
      o = _mm512_fmadd_ps(a5, _mm512_maskz_loadu_ps(tm, b5 + full), o);
      o = _mm512_fmadd_ps(a6, _mm512_maskz_loadu_ps(tm, b6 + full), o);
      o = _mm512_fmadd_ps(a7, _mm512_maskz_loadu_ps(tm, b7 + full), o);
      _mm512_mask_storeu_ps(out + full, tm, o);
    }
  }
  for (; k < K; k++) {
    const __m512 ak = _mm512_set1_ps(a[k]);
    const float* bk = b + k * ldb;
    for (size_t n = n0; n < full; n += 16)
      _mm512_storeu_ps(out + n, _mm512_fmadd_ps(ak, _mm512_loadu_ps(bk + n), _mm512_loadu_ps(out + n)));
    if (tm)
      _mm512_mask_storeu_ps(out + full, tm,
                            _mm512_fmadd_ps(ak, _mm512_maskz_loadu_ps(tm, bk + full), _mm512_maskz_loadu_ps(tm, out + full)));
  }
}

// ---------------------------------------------------------------------------------------------
// b stored [N, K] with a short K (attention's q·Kᵀ at decode: K the head size, N the keys). The
// shared tile sums each output's 16 lanes on its own (a handful of shuffles and adds per output,
// as many as the multiply-adds at K = 32); here 16 outputs at a time are summed together by a
// transpose-and-add tree, 15 adds and 30 shuffles for the 16.

/** The lane sums of v[0..16), in order, as one vector. */
inline __m512 reduce16(const __m512* v) {
  __m512 w[8], x[4], y[2];
  // Within each 128-bit lane: pairs, then quads (each lane's 4 partial sums of 4 outputs).
  for (int i = 0; i < 8; i++) w[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; i++)
    x[i] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * i], w[2 * i + 1], 0x44), _mm512_shuffle_ps(w[2 * i], w[2 * i + 1], 0xEE));
  // Across the 128-bit lanes: x[i] holds outputs 4i..4i+3 once per lane.
  for (int i = 0; i < 2; i++)
    y[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], 0x88), _mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(y[0], y[1], 0x88), _mm512_shuffle_f32x4(y[0], y[1], 0xDD));
}

/** Depth up to which gemm_nk_short runs: 16 rows of b (16 KB) stay in L1 while each row of a reads them. */
constexpr size_t kShortDepth = 256;

/** out[m, n] = dot(a[m, :], b[n, :]) for columns [n0, n0 + cols), cols <= 16. */
inline void nk_block(const float* a, size_t lda, const float* b, size_t ldb, const float* bias, float* out, size_t ldo, size_t M, size_t K,
                     size_t n0, size_t cols) {
  const size_t full = K / 16 * 16;
  const __mmask16 km = tail_mask(K - full);
  const __mmask16 nm = cols == 16 ? static_cast<__mmask16>(0xFFFF) : tail_mask(cols);
  for (size_t m = 0; m < M; m++) {
    const float* am = a + m * lda;
    __m512 acc[16];
    for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_ps();
    if (cols == 16) {
      for (size_t k = 0; k < full; k += 16) {
        const __m512 av = _mm512_loadu_ps(am + k);
        for (int j = 0; j < 16; j++) acc[j] = _mm512_fmadd_ps(av, _mm512_loadu_ps(b + (n0 + j) * ldb + k), acc[j]);
      }
      if (km) {
        const __m512 av = _mm512_maskz_loadu_ps(km, am + full);
        for (int j = 0; j < 16; j++) acc[j] = _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(km, b + (n0 + j) * ldb + full), acc[j]);
      }
    } else {
      for (size_t k = 0; k < full; k += 16) {
        const __m512 av = _mm512_loadu_ps(am + k);
        for (size_t j = 0; j < cols; j++) acc[j] = _mm512_fmadd_ps(av, _mm512_loadu_ps(b + (n0 + j) * ldb + k), acc[j]);
      }
      if (km) {
        const __m512 av = _mm512_maskz_loadu_ps(km, am + full);
        for (size_t j = 0; j < cols; j++) acc[j] = _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(km, b + (n0 + j) * ldb + full), acc[j]);
      }
    }
    __m512 s = reduce16(acc);
    if (bias) s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(nm, bias + n0));
    _mm512_mask_storeu_ps(out + m * ldo + n0, nm, s);
  }
}

/** Lanes [8h, 8h + 8) of v. */
inline __m256 half8(__m512 v, int h) {
  return h == 0 ? _mm512_castps512_ps256(v) : _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}

/**
 * R = 2..4 rows of a (a group of query heads) against J keys at a time (8 for two rows, 4 for three
 * or four): each key's vectors are loaded once for all the rows, and the R·J lane sums (lane r·J +
 * j: row r, key j) come out of one reduce16. Columns [n0, n1) in whole blocks of J; the caller
 * takes the rest.
 */
template <int R>
size_t nk_rows(const float* a, size_t lda, const float* b, size_t ldb, const float* bias, float* out, size_t ldo, size_t K, size_t n0,
               size_t n1) {
  constexpr int J = R == 2 ? 8 : 4;
  const size_t full = K / 16 * 16;
  const __mmask16 km = tail_mask(K - full);
  size_t n = n0;
  for (; n + J <= n1; n += J) {
    __m512 acc[16];
    for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
    for (size_t k = 0; k < full; k += 16) {
      __m512 bv[J];
      for (int j = 0; j < J; j++) bv[j] = _mm512_loadu_ps(b + (n + j) * ldb + k);
      for (int r = 0; r < R; r++) {
        const __m512 av = _mm512_loadu_ps(a + r * lda + k);
        for (int j = 0; j < J; j++) acc[r * J + j] = _mm512_fmadd_ps(av, bv[j], acc[r * J + j]);
      }
    }
    if (km) {
      __m512 bv[J];
      for (int j = 0; j < J; j++) bv[j] = _mm512_maskz_loadu_ps(km, b + (n + j) * ldb + full);
      for (int r = 0; r < R; r++) {
        const __m512 av = _mm512_maskz_loadu_ps(km, a + r * lda + full);
        for (int j = 0; j < J; j++) acc[r * J + j] = _mm512_fmadd_ps(av, bv[j], acc[r * J + j]);
      }
    }
    __m512 s = reduce16(acc);
    if (J == 8) {
      for (int r = 0; r < R; r++) {
        __m256 y = half8(s, r);
        if (bias) y = _mm256_add_ps(y, _mm256_loadu_ps(bias + n));
        _mm256_storeu_ps(out + r * ldo + n, y);
      }
    } else {
      if (bias) s = _mm512_add_ps(s, _mm512_broadcast_f32x4(_mm_loadu_ps(bias + n)));
      // The four 128-bit lanes, one per row (extractf32x4 takes its lane as an immediate).
      _mm_storeu_ps(out + n, _mm512_castps512_ps128(s));
      _mm_storeu_ps(out + ldo + n, _mm512_extractf32x4_ps(s, 1));
      _mm_storeu_ps(out + 2 * ldo + n, _mm512_extractf32x4_ps(s, 2));
      if (R == 4) _mm_storeu_ps(out + 3 * ldo + n, _mm512_extractf32x4_ps(s, 3));
    }
  }
  return n;
}

void gemm_nk_short(const float* a, size_t lda, const float* b, size_t ldb, const float* bias, float* out, size_t ldo, size_t M, size_t K,
                   size_t n0, size_t n1) {
  size_t n = n0;
  switch (M) {
    case 2: n = nk_rows<2>(a, lda, b, ldb, bias, out, ldo, K, n0, n1); break;
    case 3: n = nk_rows<3>(a, lda, b, ldb, bias, out, ldo, K, n0, n1); break;
    case 4: n = nk_rows<4>(a, lda, b, ldb, bias, out, ldo, K, n0, n1); break;
    default:
      for (; n + 16 <= n1; n += 16) nk_block(a, lda, b, ldb, bias, out, ldo, M, K, n, 16);
      break;
  }
  if (n < n1) nk_block(a, lda, b, ldb, bias, out, ldo, M, K, n, n1 - n);
}

// ---------------------------------------------------------------------------------------------
// 4 bits. Byte j of a 16-byte run holds element 2j in its low nibble and 2j + 1 in its high one
// (MLX's words, element i at bits [4i, 4i + 4), little-endian), so one vpmovzxbd of the run gives
// the even elements (& 15) and the odd ones (>> 4); the 32 elements of x are split alike with two
// permutes, once per row for all the tile's columns.

/** The 16 weights at even positions (lo) and at odd positions (hi) of the 32 at p. */
inline void unpack32(const uint8_t* p, __m512& lo, __m512& hi) {
  const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  lo = _mm512_cvtepi32_ps(_mm512_and_si512(x, _mm512_set1_epi32(15)));
  hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(x, 4));
}

/** Output columns [0, C) of rows [0, R) of a; w, sc and bi at the tile's first column (row strides wrow, groups). */
template <int R, int C>
inline void tile_q4(const float* a, size_t lda, const uint8_t* w, size_t wrow, const float* sc, const float* bi, const float* asum,
                    size_t groups, size_t group, float* out, size_t ldo, const float* bias) {
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  __m512 tot[R][C];
  float off[R][C];
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++) tot[r][c] = _mm512_setzero_ps(), off[r][c] = 0.0f;
  const size_t chunks = group / 32;
  for (size_t g = 0; g < groups; g++) {
    __m512 acc[R][C];
    for (int r = 0; r < R; r++)
      for (int c = 0; c < C; c++) acc[r][c] = _mm512_setzero_ps();
    for (size_t i = 0; i < chunks; i++) {
      const size_t k = g * group + i * 32;
      __m512 lo[C], hi[C];
      for (int c = 0; c < C; c++) unpack32(w + c * wrow + k / 2, lo[c], hi[c]);
      for (int r = 0; r < R; r++) {
        const __m512 p0 = _mm512_loadu_ps(a + r * lda + k), p1 = _mm512_loadu_ps(a + r * lda + k + 16);
        const __m512 xe = _mm512_permutex2var_ps(p0, ev, p1), xo = _mm512_permutex2var_ps(p0, od, p1);
        for (int c = 0; c < C; c++) acc[r][c] = _mm512_fmadd_ps(xo, hi[c], _mm512_fmadd_ps(xe, lo[c], acc[r][c]));
      }
    }
    for (int c = 0; c < C; c++) {
      const __m512 s = _mm512_set1_ps(sc[c * groups + g]);
      for (int r = 0; r < R; r++) {
        tot[r][c] = _mm512_fmadd_ps(s, acc[r][c], tot[r][c]);
        off[r][c] = __builtin_fmaf(bi[c * groups + g], asum[r * groups + g], off[r][c]);
      }
    }
  }
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++) {
      const float y = V16::hsum16(tot[r][c]) + off[r][c];
      out[r * ldo + c] = bias ? y + bias[c] : y;
    }
}

template <int R>
void rows_q4(const float* a, size_t lda, const uint8_t* w, const float* sc, const float* bi, const float* asum, const float* bias,
             float* out, size_t ldo, size_t K, size_t group, size_t n0, size_t n1) {
  const size_t groups = K / group, wrow = K / 2;
  // Columns at a time: four for one row (four independent chains), fewer as rows add their own.
  constexpr int C = R == 1 ? 4 : R == 2 ? 2 : 1;
  size_t n = n0;
  for (; n + C <= n1; n += C)
    tile_q4<R, C>(a, lda, w + n * wrow, wrow, sc + n * groups, bi + n * groups, asum, groups, group, out + n, ldo,
                  bias ? bias + n : nullptr);
  for (; n < n1; n++)
    tile_q4<R, 1>(a, lda, w + n * wrow, wrow, sc + n * groups, bi + n * groups, asum, groups, group, out + n, ldo,
                  bias ? bias + n : nullptr);
}

void gemm_q4(const float* a, size_t lda, const uint32_t* w, const float* sc, const float* bi, const float* asum, const float* bias,
             float* out, size_t ldo, size_t M, size_t K, size_t group, size_t n0, size_t n1) {
  const uint8_t* wb = reinterpret_cast<const uint8_t*>(w);
  const size_t groups = K / group;
  size_t m = 0;
  for (; m + 4 <= M; m += 4) rows_q4<4>(a + m * lda, lda, wb, sc, bi, asum + m * groups, bias, out + m * ldo, ldo, K, group, n0, n1);
  switch (M - m) {
    case 3: rows_q4<3>(a + m * lda, lda, wb, sc, bi, asum + m * groups, bias, out + m * ldo, ldo, K, group, n0, n1); break;
    case 2: rows_q4<2>(a + m * lda, lda, wb, sc, bi, asum + m * groups, bias, out + m * ldo, ldo, K, group, n0, n1); break;
    case 1: rows_q4<1>(a + m * lda, lda, wb, sc, bi, asum + m * groups, bias, out + m * ldo, ldo, K, group, n0, n1); break;
    default: break;
  }
}

}  // namespace mlxc_gemm_avx512

namespace mlxc::cpu::gemm_avx512 {
using V = mlxc_gemm_avx512::V16;
void kn(const float* a, size_t lda, const float* b, size_t ldb, const float* bias, float* out, size_t ldo, size_t M, size_t K, size_t n0,
        size_t n1) {
  if (M == 1) return mlxc_gemm_avx512::gemv_kn(a, b, ldb, bias, out, K, n0, n1);
  mlxc_gemm_avx512::gemm_kn<V>(a, lda, b, ldb, bias, out, ldo, M, K, n0, n1);
}
void nk(const float* a, size_t lda, const float* b, size_t ldb, const float* bias, float* out, size_t ldo, size_t M, size_t K, size_t n0,
        size_t n1) {
  if (K <= mlxc_gemm_avx512::kShortDepth) return mlxc_gemm_avx512::gemm_nk_short(a, lda, b, ldb, bias, out, ldo, M, K, n0, n1);
  mlxc_gemm_avx512::gemm_nk<V>(a, lda, b, ldb, bias, out, ldo, M, K, n0, n1);
}
void nk_rows(const float* a, size_t lda, const float* b, size_t ldb, const float* bias, float* out, size_t ldo, size_t M, size_t K,
             size_t n0, size_t n1) {
  mlxc_gemm_avx512::gemm_nk_short(a, lda, b, ldb, bias, out, ldo, M, K, n0, n1);
}
void q4(const float* a, size_t lda, const uint32_t* w, const float* sc, const float* bi, const float* asum, const float* bias, float* out,
        size_t ldo, size_t M, size_t K, size_t group, size_t n0, size_t n1) {
  mlxc_gemm_avx512::gemm_q4(a, lda, w, sc, bi, asum, bias, out, ldo, M, K, group, n0, n1);
}
}  // namespace mlxc::cpu::gemm_avx512
#endif
