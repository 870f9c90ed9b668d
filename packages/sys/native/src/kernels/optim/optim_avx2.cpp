// AdamW's flat kernel (optim.h) on AVX2, 8 floats at a time with a masked tail. This file alone is
// compiled with -mavx2 (CMakeLists.txt); optim.cpp calls it only when the running CPU has AVX2 and
// not AVX-512F. The operations are those of the portable loop, in its order, each rounded on its
// own (no fused multiply-add), so every build gives the same numbers.
#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>

#include "kernels/optim/optim.h"

namespace mlxc::cpu::avx2 {

namespace {

template <bool Later>
inline void adamw8(const float* p_in, const float* g, const float* m_in, const float* v_in, float* p_out, float* m_out, float* v_out,
                   __m256i mask, const AdamWConsts& k) {
  const __m256 gi = _mm256_maskload_ps(g, mask);
  const __m256 pi = _mm256_maskload_ps(p_in, mask);
  __m256 m = _mm256_mul_ps(gi, _mm256_set1_ps(k.one_minus_b1));
  __m256 v = _mm256_mul_ps(_mm256_mul_ps(gi, gi), _mm256_set1_ps(k.one_minus_b2));
  if constexpr (Later) {
    m = _mm256_add_ps(_mm256_mul_ps(_mm256_maskload_ps(m_in, mask), _mm256_set1_ps(k.b1)), m);
    v = _mm256_add_ps(_mm256_mul_ps(_mm256_maskload_ps(v_in, mask), _mm256_set1_ps(k.b2)), v);
  }
  const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), _mm256_set1_ps(k.sqrt_c2)), _mm256_set1_ps(k.eps));
  const __m256 p =
      _mm256_sub_ps(_mm256_mul_ps(pi, _mm256_set1_ps(k.decay)), _mm256_mul_ps(_mm256_div_ps(m, denom), _mm256_set1_ps(k.step_size)));
  _mm256_maskstore_ps(m_out, mask, m);
  _mm256_maskstore_ps(v_out, mask, v);
  _mm256_maskstore_ps(p_out, mask, p);
}

template <bool Later>
void run(const float* p_in, const float* g, const float* m_in, const float* v_in, float* p_out, float* m_out, float* v_out, size_t n,
         const AdamWConsts& k) {
  const __m256i all = _mm256_set1_epi32(-1);
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    adamw8<Later>(p_in + i, g + i, Later ? m_in + i : nullptr, Later ? v_in + i : nullptr, p_out + i, m_out + i, v_out + i, all, k);
  if (i < n) {
    // Lanes below the remainder on (the sign bit of each 32-bit lane).
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - i)), lane);
    adamw8<Later>(p_in + i, g + i, Later ? m_in + i : nullptr, Later ? v_in + i : nullptr, p_out + i, m_out + i, v_out + i, mask, k);
  }
}

}  // namespace

void adamw_span(const float* p_in, const float* g, const float* m_in, const float* v_in, float* p_out, float* m_out, float* v_out, size_t n,
                const AdamWConsts& k) {
  if (m_in)
    run<true>(p_in, g, m_in, v_in, p_out, m_out, v_out, n, k);
  else
    run<false>(p_in, g, m_in, v_in, p_out, m_out, v_out, n, k);
}

}  // namespace mlxc::cpu::avx2
#endif
