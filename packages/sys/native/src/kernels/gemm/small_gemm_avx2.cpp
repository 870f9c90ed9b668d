// The small-M product kernels of small_gemm_impl.h on AVX2+FMA (8 floats). This file alone is
// compiled with -mavx2 -mfma (CMakeLists.txt); small_gemm_generic.cpp calls it only when the
// running CPU has both.
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

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
void q4(const float* a, size_t lda, const uint32_t* w, const float* sc, const float* bi, const float* asum, const float* bias, float* out,
        size_t ldo, size_t M, size_t K, size_t group, size_t n0, size_t n1) {
  mlxc_gemm_avx2::gemm_q4<V>(a, lda, w, sc, bi, asum, bias, out, ldo, M, K, group, n0, n1);
}
void q8(const float* a, size_t lda, const uint32_t* w, const float* sc, const float* bi, const float* asum, const float* bias, float* out,
        size_t ldo, size_t M, size_t K, size_t group, size_t n0, size_t n1) {
  mlxc_gemm_avx2::gemm_q4<V, 8>(a, lda, w, sc, bi, asum, bias, out, ldo, M, K, group, n0, n1);
}
}  // namespace mlxc::cpu::gemm_avx2
#endif
