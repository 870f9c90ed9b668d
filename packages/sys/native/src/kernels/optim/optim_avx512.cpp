// AdamW's flat kernel (optim.h) on AVX-512F, 16 floats at a time with a masked tail. This file
// alone is compiled with -mavx512f -mfma (CMakeLists.txt); optim.cpp calls it only when the running
// CPU has AVX-512F. The operations are those of the portable loop, in its order, each rounded on
// its own (no fused multiply-add), so both builds give the same numbers.
#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>

#include "kernels/optim/optim.h"

namespace mlxc::cpu::avx512 {

namespace {

template <bool Later>
inline void adamw16(const float* p_in, const float* g, const float* m_in, const float* v_in, float* p_out, float* m_out, float* v_out,
                    __mmask16 mask, const AdamWConsts& k) {
  const __m512 gi = _mm512_maskz_loadu_ps(mask, g);
  const __m512 pi = _mm512_maskz_loadu_ps(mask, p_in);
  __m512 m = _mm512_mul_ps(gi, _mm512_set1_ps(k.one_minus_b1));
  __m512 v = _mm512_mul_ps(_mm512_mul_ps(gi, gi), _mm512_set1_ps(k.one_minus_b2));
  if constexpr (Later) {
    m = _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(mask, m_in), _mm512_set1_ps(k.b1)), m);
    v = _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(mask, v_in), _mm512_set1_ps(k.b2)), v);
  }
  const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), _mm512_set1_ps(k.sqrt_c2)), _mm512_set1_ps(k.eps));
  const __m512 p =
      _mm512_sub_ps(_mm512_mul_ps(pi, _mm512_set1_ps(k.decay)), _mm512_mul_ps(_mm512_div_ps(m, denom), _mm512_set1_ps(k.step_size)));
  _mm512_mask_storeu_ps(m_out, mask, m);
  _mm512_mask_storeu_ps(v_out, mask, v);
  _mm512_mask_storeu_ps(p_out, mask, p);
}

template <bool Later>
void run(const float* p_in, const float* g, const float* m_in, const float* v_in, float* p_out, float* m_out, float* v_out, size_t n,
         const AdamWConsts& k) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    adamw16<Later>(p_in + i, g + i, Later ? m_in + i : nullptr, Later ? v_in + i : nullptr, p_out + i, m_out + i, v_out + i,
                   static_cast<__mmask16>(0xFFFF), k);
  if (i < n)
    adamw16<Later>(p_in + i, g + i, Later ? m_in + i : nullptr, Later ? v_in + i : nullptr, p_out + i, m_out + i, v_out + i,
                   static_cast<__mmask16>((1u << (n - i)) - 1), k);
}

}  // namespace

void adamw_span(const float* p_in, const float* g, const float* m_in, const float* v_in, float* p_out, float* m_out, float* v_out, size_t n,
                const AdamWConsts& k) {
  if (m_in)
    run<true>(p_in, g, m_in, v_in, p_out, m_out, v_out, n, k);
  else
    run<false>(p_in, g, m_in, v_in, p_out, m_out, v_out, n, k);
}

}  // namespace mlxc::cpu::avx512
#endif
