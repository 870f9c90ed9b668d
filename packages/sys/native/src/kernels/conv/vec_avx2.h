// The vector type of the convolution kernels' AVX2 builds (depthwise_avx2.cpp, pointwise_avx2.cpp):
// 8 floats, masks as vectors of all-ones or zero words (vmaskmovps; slow on some CPUs, so the
// kernels load and store whole vectors where they can). Include only from files compiled with
// -mavx2 -mfma (CMakeLists.txt).
#pragma once

#include <immintrin.h>

#include <cstddef>

namespace mlxc_vec_avx2 {

struct V8 {
  __m256 v;
  using M = __m256i;
  static constexpr size_t W = 8;
  /** Lanes [lo, hi) of [0, 8) set (lo and hi may lie outside it). */
  static M range(int lo, int hi) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    // lo <= lane < hi: lane > lo - 1 and hi > lane.
    return _mm256_and_si256(_mm256_cmpgt_epi32(lane, _mm256_set1_epi32(lo - 1)), _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), lane));
  }
  static V8 splat(float f) { return {_mm256_set1_ps(f)}; }
  static V8 load(const float* p, M m) { return {_mm256_maskload_ps(p, m)}; }
  static V8 loadu(const float* p) { return {_mm256_loadu_ps(p)}; }
  /** Lanes 0, 2, ..., 14 of the 16 floats at p (lanes of m0 from p, of m1 from p + 8; others 0). */
  static V8 load_even(const float* p, M m0, M m1) { return even(_mm256_maskload_ps(p, m0), _mm256_maskload_ps(p + 8, m1)); }
  static V8 loadu_even(const float* p) { return even(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)); }
  static V8 even(__m256 a, __m256 c) {
    // a0 a2 c0 c2 | a4 a6 c4 c6, then the middle 64-bit pairs swapped: a0 a2 a4 a6 c0 c2 c4 c6.
    const __m256 e = _mm256_shuffle_ps(a, c, _MM_SHUFFLE(2, 0, 2, 0));
    return {_mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)))};
  }
  static void storeu(float* p, V8 a) { _mm256_storeu_ps(p, a.v); }
  static void store(float* p, M m, V8 a) { _mm256_maskstore_ps(p, m, a.v); }
  static V8 fma(V8 a, V8 b, V8 c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
  static V8 mul(V8 a, V8 b) { return {_mm256_mul_ps(a.v, b.v)}; }
  friend V8 operator+(V8 a, V8 b) { return {_mm256_add_ps(a.v, b.v)}; }
  static __m256 lt(V8 a, V8 b) { return _mm256_cmp_ps(a.v, b.v, _CMP_LT_OQ); }
  static __m256 gt(V8 a, V8 b) { return _mm256_cmp_ps(a.v, b.v, _CMP_GT_OQ); }
  /** a where m is set, else b. */
  static V8 select(__m256 m, V8 a, V8 b) { return {_mm256_blendv_ps(b.v, a.v, m)}; }
};

}  // namespace mlxc_vec_avx2
