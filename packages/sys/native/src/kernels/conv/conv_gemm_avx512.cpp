// The AVX-512 body of the channels-last convolution (conv_gemm.h): the im2col rows of a block of
// output positions packed on the fly, times the prepacked weight panels, with the epilogue in the
// store of the last pass over K. Compiled with -mavx512f -mfma; called only where the CPU has them.
#include "kernels/conv/conv_gemm.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

namespace mlxc::cpu::convgemm {
namespace {

constexpr int MR = 12;  // output positions per micro-tile (24 accumulators of the 32 registers)
constexpr int NR = kPanel;

struct Tile {
  const float* bias;  // at the panel's first channel, or null
  const float* res;   // at the tile's first row and the panel's first channel, or null
  size_t ldr;
  float lo, hi;
};

/** C[mr x NR] (=|+=) A[mr x kc] B[kc x NR]; on the last pass the epilogue. ncols <= NR columns stored.
 * H: ncols <= 16, the panel's second half unused (zero weights): left out (a small conv's 8 or 16
 * channels, or a group's: half the multiply-adds). */
template <int R, bool H>
inline void micro(size_t kc, const float* a, size_t lda, const float* b, float* c, size_t ldc, int ncols, bool first, bool last,
                  const Tile& t) {
  __m512 acc0[R], acc1[R];
  const __mmask16 m0 = ncols >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << ncols) - 1);
  const __mmask16 m1 = ncols >= 32 ? 0xFFFF : ncols <= 16 ? 0 : static_cast<__mmask16>((1u << (ncols - 16)) - 1);
  if (last) {
    // The epilogue reads the residual and writes C, rows O floats apart that the hardware
    // prefetchers do not follow (ResNet-50's 56x56 expansions: 3 MiB each, out of L2): ask for
    // their lines now, so that they arrive while the products run.
    for (int i = 0; i < R; i++) {
      if (t.res) {
        __builtin_prefetch(t.res + i * t.ldr, 0, 3);
        if (!H) __builtin_prefetch(t.res + i * t.ldr + 16, 0, 3);
        if (!H) __builtin_prefetch(t.res + i * t.ldr + NR - 1, 0, 3);
      }
      if (first) {
        __builtin_prefetch(c + i * ldc, 1, 3);
        if (!H) __builtin_prefetch(c + i * ldc + 16, 1, 3);
        if (!H) __builtin_prefetch(c + i * ldc + NR - 1, 1, 3);
      }
    }
  }
  if (first) {
    for (int i = 0; i < R; i++) acc0[i] = acc1[i] = _mm512_setzero_ps();
  } else {
    for (int i = 0; i < R; i++) {
      acc0[i] = _mm512_maskz_loadu_ps(m0, c + i * ldc);
      acc1[i] = H ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, c + i * ldc + 16);
    }
  }
  for (size_t k = 0; k < kc; k++) {
    const __m512 b0 = _mm512_loadu_ps(b + k * NR);
    const __m512 b1 = H ? b0 : _mm512_loadu_ps(b + k * NR + 16);
    for (int i = 0; i < R; i++) {
      const __m512 av = _mm512_set1_ps(a[i * lda + k]);
      acc0[i] = _mm512_fmadd_ps(av, b0, acc0[i]);
      if (!H) acc1[i] = _mm512_fmadd_ps(av, b1, acc1[i]);
    }
  }
  if (last) {
    const __m512 lo = _mm512_set1_ps(t.lo), hi = _mm512_set1_ps(t.hi);
    const __m512 bi0 = t.bias ? _mm512_maskz_loadu_ps(m0, t.bias) : _mm512_setzero_ps();
    const __m512 bi1 = t.bias && !H ? _mm512_maskz_loadu_ps(m1, t.bias + 16) : _mm512_setzero_ps();
    for (int i = 0; i < R; i++) {
      __m512 v0 = _mm512_add_ps(acc0[i], bi0), v1 = _mm512_add_ps(acc1[i], bi1);
      if (t.res) {
        v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, t.res + i * t.ldr));
        if (!H) v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, t.res + i * t.ldr + 16));
      }
      // max/min return their second operand when either is NaN: the bound first keeps NaN.
      v0 = _mm512_min_ps(hi, _mm512_max_ps(lo, v0));
      v1 = _mm512_min_ps(hi, _mm512_max_ps(lo, v1));
      acc0[i] = v0;
      acc1[i] = v1;
    }
  }
  for (int i = 0; i < R; i++) {
    _mm512_mask_storeu_ps(c + i * ldc, m0, acc0[i]);
    if (!H) _mm512_mask_storeu_ps(c + i * ldc + 16, m1, acc1[i]);
  }
}

using MicroFn = void (*)(size_t, const float*, size_t, const float*, float*, size_t, int, bool, bool, const Tile&);
template <bool H, int... Rs>
constexpr std::array<MicroFn, sizeof...(Rs)> table(std::integer_sequence<int, Rs...>) {
  return {&micro<Rs + 1, H>...};
}
constexpr auto MICRO = table<false>(std::make_integer_sequence<int, MR>{});
constexpr auto MICRO_HALF = table<true>(std::make_integer_sequence<int, MR>{});

}  // namespace

void run_avx512(const Shape& s, const float* x, const float* wp, const float* bias, const float* res, float* y, float lo, float hi,
                size_t task, size_t ntasks_n, float* buf) {
  const size_t O = s.o;
  walk_task(s, x, wp, task, ntasks_n, buf, pass_depth(s.depth(), kDepthAvx512), false,
            [&](const float* a, size_t lda, size_t m0, size_t mc, size_t kc, bool first, bool last, const float* b, size_t col, size_t nc) {
              const int ncols = static_cast<int>(nc);
              for (size_t i = 0; i < mc; i += MR) {
                const int r = static_cast<int>(std::min<size_t>(MR, mc - i));
                const size_t row = m0 + i;
                Tile t{bias ? bias + col : nullptr, res ? res + row * O + col : nullptr, O, lo, hi};
                (ncols <= 16 ? MICRO_HALF : MICRO)[r - 1](kc, a + i * lda, lda, b, y + row * O + col, O, ncols, first, last, t);
              }
            });
}

}  // namespace mlxc::cpu::convgemm
#else
#include <stdexcept>
namespace mlxc::cpu::convgemm {
void run_avx512(const Shape&, const float*, const float*, const float*, const float*, float*, float, float, size_t, size_t, float*) {
  throw std::runtime_error("conv_gemm: built without AVX-512");
}
}  // namespace mlxc::cpu::convgemm
#endif
