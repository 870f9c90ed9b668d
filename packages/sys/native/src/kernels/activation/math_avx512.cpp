// The kernels of math_impl.h on AVX-512F (16 floats, mask registers). This file alone is compiled
// with -mavx512f -mfma (CMakeLists.txt); math_generic.cpp calls it only when the running CPU has
// AVX-512F (MLXC_CPU_KERNELS=avx2 or generic picks a narrower build). NaN rules match the AVX2 build:
// min/max return their second operand when either is NaN, as _mm256_min_ps/_max_ps do.
#if defined(__x86_64__) && defined(__AVX512F__) && defined(__FMA__)
#include <immintrin.h>

#define MLXC_MATH_NS mlxc_math_avx512
#include "kernels/activation/math_impl.h"

namespace mlxc_math_avx512 {

struct V16 {
  __m512 v;
  using M = __mmask16;
  static constexpr size_t W = 16;
  static V16 load(const float* p) { return {_mm512_loadu_ps(p)}; }
  static void store(float* p, V16 a) { _mm512_storeu_ps(p, a.v); }
  static V16 splat(float f) { return {_mm512_set1_ps(f)}; }
  friend V16 operator+(V16 a, V16 b) { return {_mm512_add_ps(a.v, b.v)}; }
  friend V16 operator-(V16 a, V16 b) { return {_mm512_sub_ps(a.v, b.v)}; }
  friend V16 operator*(V16 a, V16 b) { return {_mm512_mul_ps(a.v, b.v)}; }
  friend V16 operator/(V16 a, V16 b) { return {_mm512_div_ps(a.v, b.v)}; }
  static V16 fma(V16 a, V16 b, V16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
  static V16 min(V16 a, V16 b) { return {_mm512_min_ps(a.v, b.v)}; }
  static V16 max(V16 a, V16 b) { return {_mm512_max_ps(a.v, b.v)}; }
  static V16 abs(V16 a) { return {_mm512_abs_ps(a.v)}; }
  static V16 copysign(V16 mag, V16 sign) {
    const __m512i s = _mm512_set1_epi32(static_cast<int>(0x80000000u));
    __m512i m = _mm512_andnot_si512(s, _mm512_castps_si512(mag.v));
    return {_mm512_castsi512_ps(_mm512_or_si512(m, _mm512_and_si512(s, _mm512_castps_si512(sign.v))))};
  }
  static M lt(V16 a, V16 b) { return _mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ); }
  static M gt(V16 a, V16 b) { return _mm512_cmp_ps_mask(a.v, b.v, _CMP_GT_OQ); }
  static M isnan(V16 a) { return _mm512_cmp_ps_mask(a.v, a.v, _CMP_UNORD_Q); }
  static M isinf(V16 a) { return _mm512_cmp_ps_mask(_mm512_abs_ps(a.v), _mm512_set1_ps(__builtin_inff()), _CMP_EQ_OQ); }
  static M mor(M a, M b) { return static_cast<M>(a | b); }
  static bool any(M m) { return m != 0; }
  // blend takes its second operand where the mask is set.
  static V16 select(M m, V16 a, V16 b) { return {_mm512_mask_blend_ps(m, b.v, a.v)}; }
  static V16 round(V16 a) { return {_mm512_roundscale_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)}; }
  static V16 pow2(V16 n) {
    __m512i i = _mm512_add_epi32(_mm512_cvtps_epi32(n.v), _mm512_set1_epi32(127));
    return {_mm512_castsi512_ps(_mm512_slli_epi32(i, 23))};
  }
  static float hsum(V16 a) { return _mm512_reduce_add_ps(a.v); }
  static float hmax(V16 a) { return _mm512_reduce_max_ps(a.v); }
};

}  // namespace mlxc_math_avx512

namespace mlxc::cpu::avx512 {
using V = mlxc_math_avx512::V16;
void hard_sigmoid_rows(const float* x, float* out, size_t n, float a, float b, bool swish) {
  mlxc_math_avx512::hard_sigmoid_span<V>(x, out, n, a, b, swish);
}
void activation_rows(const float* in, const float* bias, float* out, size_t n, size_t c, int act) {
  mlxc_math_avx512::act_rows<V>(in, bias, out, n, c, act);
}
void activation_block(float* c, size_t ld, size_t rows, size_t cols, int act) { mlxc_math_avx512::act_block<V>(c, ld, rows, cols, act); }
void softmax_row(const float* in, float* out, size_t n, bool log) { mlxc_math_avx512::softmax_row<V>(in, out, n, log); }
void layer_norm_row(const float* in, const float* w, const float* b, float* out, size_t n, float eps) {
  mlxc_math_avx512::layer_norm_row<V>(in, w, b, out, n, eps);
}
void rms_norm_row(const float* in, const float* w, float* out, size_t n, float eps) {
  mlxc_math_avx512::rms_norm_row<V>(in, w, out, n, eps);
}
}  // namespace mlxc::cpu::avx512
#endif
