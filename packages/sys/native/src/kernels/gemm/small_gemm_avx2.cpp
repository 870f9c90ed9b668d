// The small-M product kernels of small_gemm_impl.h on AVX2+FMA (8 floats). This file alone is
// compiled with -mavx2 -mfma (CMakeLists.txt); small_gemm_generic.cpp calls it only when the
// running CPU has both.
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include <cstdlib>
#include <new>

#define MLXC_GEMM_NS mlxc_gemm_avx2
#include "kernels/gemm/small_gemm_impl.h"

namespace mlxc_gemm_avx2 {

struct V8 {
  __m256 v;
  static constexpr size_t W = 8;
  static V8 load(const float* p) { return {_mm256_loadu_ps(p)}; }
  static void store(float* p, V8 a) { _mm256_storeu_ps(p, a.v); }
  static V8 zero() { return {_mm256_setzero_ps()}; }
  static V8 splat(float f) { return {_mm256_set1_ps(f)}; }
  static V8 fma(V8 a, V8 b, V8 c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
  friend V8 operator+(V8 a, V8 b) { return {_mm256_add_ps(a.v, b.v)}; }
  /** The 8 four-bit fields of w, low bits first, as floats. */
  static V8 nibbles(uint32_t w) {
    __m256i x = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(w)), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
    return {_mm256_cvtepi32_ps(_mm256_and_si256(x, _mm256_set1_epi32(15)))};
  }
  /** The 8 bytes at p (two words, low byte first), as floats. */
  static V8 bytes(const uint32_t* p) {
    return {_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))))};
  }
  static float hsum(V8 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

// ---------------------------------------------------------------------------------------------
// 4 bits (as the AVX-512 build's q4): byte j of an 8-byte run holds element 2j in its low nibble
// and 2j + 1 in its high one (MLX's words, element i at bits [4i, 4i + 4), little-endian), so one
// vpmovzxbd of the run gives the 8 even elements (& 15) and the 8 odd ones (>> 4) of 16: 7
// instructions for 16 weights of a column where one word at a time (broadcast, variable shift,
// mask, convert, multiply-add) took 10. x is split alike once per call (xs: each run of 16 as its 8
// even elements, then its 8 odd ones), for every column. Over a [768, 32000] weight on a 2-vCPU
// Zen 3: 2 rows 1.9 -> 1.6 ms, 4 rows 3.4 -> 2.5, 7 rows 5.2 -> 3.8; one row about the same
// (~1.2 ms). Sums are float32 within a group, each lane over its even or odd elements in k order.

/** The 8 weights at even positions (lo) and at odd positions (hi) of the 16 at p. */
inline void unpack16(const uint8_t* p, __m256& lo, __m256& hi) {
  const __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  lo = _mm256_cvtepi32_ps(_mm256_and_si256(x, _mm256_set1_epi32(15)));
  hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(x, 4));
}

/** Output columns [0, C) of rows [0, R) of xs (split x, row stride K); w, sc and bi at the tile's first column. */
template <int R, int C>
inline void tile_q4s(const float* xs, size_t K, const uint8_t* w, size_t wrow, const float* sc, const float* bi, const float* asum,
                     size_t groups, size_t group, float* out, size_t ldo, const float* bias) {
  __m256 tot[R][C];
  float off[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; r++)
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) tot[r][c] = _mm256_setzero_ps(), off[r][c] = 0.0f;
  const size_t runs = group / 16;
  for (size_t g = 0; g < groups; g++) {
    __m256 acc[R][C];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
      for (int c = 0; c < C; c++) acc[r][c] = _mm256_setzero_ps();
    for (size_t i = 0; i < runs; i++) {
      const size_t k = g * group + i * 16;
// One column's weights at a time (16 sums, the unpacked pair and x's two vectors would not fit
// the 16 registers with every column's weights held); x's rows come again from L1.
#pragma GCC unroll 4
      for (int c = 0; c < C; c++) {
        __m256 lo, hi;
        unpack16(w + c * wrow + k / 2, lo, hi);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
          acc[r][c] =
              _mm256_fmadd_ps(_mm256_loadu_ps(xs + r * K + k + 8), hi, _mm256_fmadd_ps(_mm256_loadu_ps(xs + r * K + k), lo, acc[r][c]));
      }
    }
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
      const __m256 s = _mm256_set1_ps(sc[c * groups + g]);
#pragma GCC unroll 4
      for (int r = 0; r < R; r++) {
        tot[r][c] = _mm256_fmadd_ps(s, acc[r][c], tot[r][c]);
        off[r][c] = __builtin_fmaf(bi[c * groups + g], asum[r * groups + g], off[r][c]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; r++)
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
      const float y = V8::hsum({tot[r][c]}) + off[r][c];
      out[r * ldo + c] = bias ? y + bias[c] : y;
    }
}

template <int R>
void rows_q4s(const float* xs, size_t K, const uint8_t* w, const float* sc, const float* bi, const float* asum, const float* bias,
              float* out, size_t ldo, size_t group, size_t n0, size_t n1) {
  const size_t groups = K / group, wrow = K / 2;
  // Four columns for one row (four independent chains), fewer as rows add their own.
  constexpr int C = R == 1 ? 4 : R == 2 ? 2 : 1;
  size_t n = n0;
  for (; n + C <= n1; n += C) {
    tile_q4s<R, C>(xs, K, w + n * wrow, wrow, sc + n * groups, bi + n * groups, asum, groups, group, out + n, ldo,
                   bias ? bias + n : nullptr);
  }
  for (; n < n1; n++)
    tile_q4s<R, 1>(xs, K, w + n * wrow, wrow, sc + n * groups, bi + n * groups, asum, groups, group, out + n, ldo,
                   bias ? bias + n : nullptr);
}

/** Each run of 16 of x's rows [M, K] (K a multiple of 16) as its 8 even elements, then its 8 odd ones, into xs [M, K]. */
inline void split_even_odd(const float* a, size_t lda, size_t M, size_t K, float* xs) {
  for (size_t m = 0; m < M; m++)
    for (size_t k = 0; k < K; k += 16) {
      const __m256 p0 = _mm256_loadu_ps(a + m * lda + k), p1 = _mm256_loadu_ps(a + m * lda + k + 8);
      // In each 128-bit lane: p0's 0, 2 and p1's 0, 2 (x0 x2 x8 x10 | x4 x6 x12 x14), then the
      // 64-bit quarters reordered 0, 2, 1, 3 (x0 x2 x4 x6 x8 x10 x12 x14); odd alike.
      const __m256 e = _mm256_shuffle_ps(p0, p1, 0x88), o = _mm256_shuffle_ps(p0, p1, 0xDD);
      _mm256_storeu_ps(xs + m * K + k, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xD8)));
      _mm256_storeu_ps(xs + m * K + k + 8, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), 0xD8)));
    }
}

void gemm_q4_split(const float* a, size_t lda, const uint32_t* w, const float* sc, const float* bi, const float* asum, const float* bias,
                   float* out, size_t ldo, size_t M, size_t K, size_t group, size_t n0, size_t n1) {
  // On the stack up to 32 KiB, else from malloc (no standard-library template may be instantiated
  // in this AVX2 file: small_gemm_impl.h).
  constexpr size_t kStack = 8192;
  alignas(32) float on_stack[kStack];
  float* xs = M * K <= kStack ? on_stack : static_cast<float*>(std::malloc(M * K * sizeof(float)));
  if (!xs) throw std::bad_alloc();
  split_even_odd(a, lda, M, K, xs);
  struct Free {
    float* p;
    bool heap;
    ~Free() {
      if (heap) std::free(p);
    }
  } release{xs, xs != on_stack};
  const uint8_t* wb = reinterpret_cast<const uint8_t*>(w);
  const size_t groups = K / group;
  size_t m = 0;
  for (; m + 4 <= M; m += 4) rows_q4s<4>(xs + m * K, K, wb, sc, bi, asum + m * groups, bias, out + m * ldo, ldo, group, n0, n1);
  switch (M - m) {
    case 3: rows_q4s<3>(xs + m * K, K, wb, sc, bi, asum + m * groups, bias, out + m * ldo, ldo, group, n0, n1); break;
    case 2: rows_q4s<2>(xs + m * K, K, wb, sc, bi, asum + m * groups, bias, out + m * ldo, ldo, group, n0, n1); break;
    case 1: rows_q4s<1>(xs + m * K, K, wb, sc, bi, asum + m * groups, bias, out + m * ldo, ldo, group, n0, n1); break;
    default: break;
  }
}

// ---------------------------------------------------------------------------------------------
// A few rows of a against b [N, K] with a short K (attention's q·Kᵀ at decoding: the query heads of
// one key/value head against its keys): each row against 8 keys at a time, 8 sums of K / 8 vectors
// reduced together by a tree of horizontal adds into one vector of 8 scores, stored at once. The
// general tile (2 rows by 4 keys, each of its 8 sums reduced alone) spent more on the reductions
// than on the products at a head size of 32.

/** The 8 lane sums of s[0..7], in order, as one vector. */
inline __m256 reduce8(const __m256* s) {
  const __m256 t0 = _mm256_hadd_ps(s[0], s[1]), t1 = _mm256_hadd_ps(s[2], s[3]);
  const __m256 t2 = _mm256_hadd_ps(s[4], s[5]), t3 = _mm256_hadd_ps(s[6], s[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  // u0's low lane holds sums 0-3 of the low halves, its high lane those of the high halves (u1: 4-7).
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

void nk_rows8(const float* a, size_t lda, const float* b, size_t ldb, const float* bias, float* out, size_t ldo, size_t M, size_t K,
              size_t n0, size_t n1) {
  const size_t K8 = K / 8 * 8;
  for (size_t m = 0; m < M; m++) {
    const float* am = a + m * lda;
    float* om = out + m * ldo;
    size_t n = n0;
    for (; n + 8 <= n1; n += 8) {
      const float* bn = b + n * ldb;
      __m256 s[8];
#pragma GCC unroll 8
      for (int j = 0; j < 8; j++) s[j] = _mm256_setzero_ps();
      for (size_t k = 0; k < K8; k += 8) {
        const __m256 av = _mm256_loadu_ps(am + k);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) s[j] = _mm256_fmadd_ps(av, _mm256_loadu_ps(bn + j * ldb + k), s[j]);
      }
      __m256 y = reduce8(s);
      if (K8 < K) {
        alignas(32) float t[8];
        for (int j = 0; j < 8; j++) {
          float r = 0.0f;
          for (size_t k = K8; k < K; k++) r = __builtin_fmaf(am[k], bn[j * ldb + k], r);
          t[j] = r;
        }
        y = _mm256_add_ps(y, _mm256_load_ps(t));
      }
      if (bias) y = _mm256_add_ps(y, _mm256_loadu_ps(bias + n));
      _mm256_storeu_ps(om + n, y);
    }
    for (; n < n1; n++) {
      float r = 0.0f;
      for (size_t k = 0; k < K; k++) r = __builtin_fmaf(am[k], b[n * ldb + k], r);
      om[n] = bias ? r + bias[n] : r;
    }
  }
}

}  // namespace mlxc_gemm_avx2

namespace mlxc::cpu::gemm_avx2 {
using V = mlxc_gemm_avx2::V8;
void kn(const float* a, size_t lda, const float* b, size_t ldb, const float* bias, float* out, size_t ldo, size_t M, size_t K, size_t n0,
        size_t n1) {
  mlxc_gemm_avx2::gemm_kn<V>(a, lda, b, ldb, bias, out, ldo, M, K, n0, n1);
}
void nk(const float* a, size_t lda, const float* b, size_t ldb, const float* bias, float* out, size_t ldo, size_t M, size_t K, size_t n0,
        size_t n1) {
  mlxc_gemm_avx2::gemm_nk<V>(a, lda, b, ldb, bias, out, ldo, M, K, n0, n1);
}
void nk_rows(const float* a, size_t lda, const float* b, size_t ldb, const float* bias, float* out, size_t ldo, size_t M, size_t K,
             size_t n0, size_t n1) {
  mlxc_gemm_avx2::nk_rows8(a, lda, b, ldb, bias, out, ldo, M, K, n0, n1);
}
void q4(const float* a, size_t lda, const uint32_t* w, const float* sc, const float* bi, const float* asum, const float* bias, float* out,
        size_t ldo, size_t M, size_t K, size_t group, size_t n0, size_t n1) {
  mlxc_gemm_avx2::gemm_q4_split(a, lda, w, sc, bi, asum, bias, out, ldo, M, K, group, n0, n1);
}
void q8(const float* a, size_t lda, const uint32_t* w, const float* sc, const float* bi, const float* asum, const float* bias, float* out,
        size_t ldo, size_t M, size_t K, size_t group, size_t n0, size_t n1) {
  mlxc_gemm_avx2::gemm_q4<V, 8>(a, lda, w, sc, bi, asum, bias, out, ldo, M, K, group, n0, n1);
}
}  // namespace mlxc::cpu::gemm_avx2
#endif
