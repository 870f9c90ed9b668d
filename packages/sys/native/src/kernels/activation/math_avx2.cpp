// The kernels of math_impl.h on AVX2+FMA (8 floats). This file alone is compiled with -mavx2 -mfma
// (CMakeLists.txt); math_generic.cpp calls it only when the running CPU has both.
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#define MLXC_MATH_NS mlxc_math_avx2
#include "kernels/activation/math_impl.h"

namespace mlxc_math_avx2 {

struct V8 {
  __m256 v;
  using M = __m256;
  static constexpr size_t W = 8;
  static V8 load(const float* p) { return {_mm256_loadu_ps(p)}; }
  static void store(float* p, V8 a) { _mm256_storeu_ps(p, a.v); }
  static V8 splat(float f) { return {_mm256_set1_ps(f)}; }
  friend V8 operator+(V8 a, V8 b) { return {_mm256_add_ps(a.v, b.v)}; }
  friend V8 operator-(V8 a, V8 b) { return {_mm256_sub_ps(a.v, b.v)}; }
  friend V8 operator*(V8 a, V8 b) { return {_mm256_mul_ps(a.v, b.v)}; }
  friend V8 operator/(V8 a, V8 b) { return {_mm256_div_ps(a.v, b.v)}; }
  static V8 fma(V8 a, V8 b, V8 c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
  static V8 min(V8 a, V8 b) { return {_mm256_min_ps(a.v, b.v)}; }
  static V8 max(V8 a, V8 b) { return {_mm256_max_ps(a.v, b.v)}; }
  static V8 abs(V8 a) { return {_mm256_andnot_ps(_mm256_set1_ps(-0.0f), a.v)}; }
  static V8 copysign(V8 mag, V8 sign) {
    const __m256 s = _mm256_set1_ps(-0.0f);
    return {_mm256_or_ps(_mm256_andnot_ps(s, mag.v), _mm256_and_ps(s, sign.v))};
  }
  static M lt(V8 a, V8 b) { return _mm256_cmp_ps(a.v, b.v, _CMP_LT_OQ); }
  static M gt(V8 a, V8 b) { return _mm256_cmp_ps(a.v, b.v, _CMP_GT_OQ); }
  static M isnan(V8 a) { return _mm256_cmp_ps(a.v, a.v, _CMP_UNORD_Q); }
  static M isinf(V8 a) { return _mm256_cmp_ps(abs(a).v, _mm256_set1_ps(__builtin_inff()), _CMP_EQ_OQ); }
  static M mor(M a, M b) { return _mm256_or_ps(a, b); }
  static bool any(M m) { return _mm256_movemask_ps(m) != 0; }
  static V8 select(M m, V8 a, V8 b) { return {_mm256_blendv_ps(b.v, a.v, m)}; }
  static V8 round(V8 a) { return {_mm256_round_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)}; }
  static V8 pow2(V8 n) {
    __m256i i = _mm256_add_epi32(_mm256_cvtps_epi32(n.v), _mm256_set1_epi32(127));
    return {_mm256_castsi256_ps(_mm256_slli_epi32(i, 23))};
  }
  static float hsum(V8 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float hmax(V8 a) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

}  // namespace mlxc_math_avx2

namespace mlxc::cpu::avx2 {
using V = mlxc_math_avx2::V8;
void hard_sigmoid_rows(const float* x, float* out, size_t n, float a, float b, bool swish) {
  mlxc_math_avx2::hard_sigmoid_span<V>(x, out, n, a, b, swish);
}
void activation_rows(const float* in, const float* bias, float* out, size_t n, size_t c, int act) {
  mlxc_math_avx2::act_rows<V>(in, bias, out, n, c, act);
}
void activation_block(float* c, size_t ld, size_t rows, size_t cols, int act) { mlxc_math_avx2::act_block<V>(c, ld, rows, cols, act); }
void softmax_row(const float* in, float* out, size_t n, bool log) { mlxc_math_avx2::softmax_row<V>(in, out, n, log); }
void layer_norm_row(const float* in, const float* w, const float* b, float* out, size_t n, float eps) {
  mlxc_math_avx2::layer_norm_row<V>(in, w, b, out, n, eps);
}
void rms_norm_row(const float* in, const float* w, float* out, size_t n, float eps) { mlxc_math_avx2::rms_norm_row<V>(in, w, out, n, eps); }
}  // namespace mlxc::cpu::avx2
#endif
