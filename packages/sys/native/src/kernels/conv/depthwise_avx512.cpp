// The depthwise plane loop (depthwise_impl.h) on AVX-512F: 16 lanes, mask registers. This file
// alone is compiled with -mavx512f -mfma (CMakeLists.txt); depthwise.cpp calls it only when the
// running CPU has AVX-512F.
#if defined(__x86_64__) && defined(__AVX512F__) && defined(__FMA__)
#include <immintrin.h>

#define MLXC_DW_NS mlxc_dw_avx512
#include "kernels/conv/depthwise_impl.h"

namespace mlxc_dw_avx512 {

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
  /** Lanes 0, 2, ..., 30 of the 32 floats at p (lanes of m0 from p, of m1 from p + 16; others 0). */
  static V16 load_even(const float* p, M m0, M m1) {
    const __m512 a = _mm512_maskz_loadu_ps(m0, p), c = _mm512_maskz_loadu_ps(m1, p + 16);
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return {_mm512_permutex2var_ps(a, even, c)};
  }
  static V16 loadu(const float* p) { return {_mm512_loadu_ps(p)}; }
  static V16 loadu_even(const float* p) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return {_mm512_permutex2var_ps(_mm512_loadu_ps(p), even, _mm512_loadu_ps(p + 16))};
  }
  static void storeu(float* p, V16 a) { _mm512_storeu_ps(p, a.v); }
  static void store(float* p, M m, V16 a) { _mm512_mask_storeu_ps(p, m, a.v); }
  static V16 fma(V16 a, V16 b, V16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
};

}  // namespace mlxc_dw_avx512

namespace mlxc::cpu::avx512 {
void depthwise_plane(const float* in, const float* k, float b, float* out, int H, int W, int KH, int KW, int OH, int OW, int sh, int sw,
                     int pt, int pl, int dh, int dw) {
  mlxc_dw_avx512::plane<mlxc_dw_avx512::V16>(in, k, b, out, H, W, KH, KW, OH, OW, sh, sw, pt, pl, dh, dw);
}
}  // namespace mlxc::cpu::avx512
#endif
