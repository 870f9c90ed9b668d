// The vector type of the convolution kernels' AVX-512F builds (depthwise_avx512.cpp,
// pointwise_avx512.cpp): 16 floats, mask registers, loads and stores masked or whole. Include only
// from files compiled with -mavx512f -mfma (CMakeLists.txt).
#pragma once

#include <immintrin.h>

#include <cstddef>

namespace mlxc_vec_avx512 {

struct V16 {
  __m512 v;
  using M = __mmask16;
  static constexpr size_t W = 16;
  /** Lanes [lo, hi) of [0, 16), clipped (empty when hi <= lo). */
  static M range(int lo, int hi) {
    lo = lo < 0 ? 0 : lo;
    hi = hi > 16 ? 16 : hi;
    if (hi <= lo) return 0;
    return static_cast<M>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
  }
  static V16 splat(float f) { return {_mm512_set1_ps(f)}; }
  static V16 load(const float* p, M m) { return {_mm512_maskz_loadu_ps(m, p)}; }
  static V16 loadu(const float* p) { return {_mm512_loadu_ps(p)}; }
  /** Lanes 0, 2, ..., 30 of the 32 floats at p (lanes of m0 from p, of m1 from p + 16; others 0). */
  static V16 load_even(const float* p, M m0, M m1) { return even(_mm512_maskz_loadu_ps(m0, p), _mm512_maskz_loadu_ps(m1, p + 16)); }
  static V16 loadu_even(const float* p) { return even(_mm512_loadu_ps(p), _mm512_loadu_ps(p + 16)); }
  static V16 even(__m512 a, __m512 c) {
    const __m512i idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return {_mm512_permutex2var_ps(a, idx, c)};
  }
  static void storeu(float* p, V16 a) { _mm512_storeu_ps(p, a.v); }
  static void store(float* p, M m, V16 a) { _mm512_mask_storeu_ps(p, m, a.v); }
  static V16 fma(V16 a, V16 b, V16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
  static V16 mul(V16 a, V16 b) { return {_mm512_mul_ps(a.v, b.v)}; }
  friend V16 operator+(V16 a, V16 b) { return {_mm512_add_ps(a.v, b.v)}; }
  static M lt(V16 a, V16 b) { return _mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ); }
  static M gt(V16 a, V16 b) { return _mm512_cmp_ps_mask(a.v, b.v, _CMP_GT_OQ); }
  /** a where m is set, else b. */
  static V16 select(M m, V16 a, V16 b) { return {_mm512_mask_blend_ps(m, b.v, a.v)}; }
};

}  // namespace mlxc_vec_avx512
