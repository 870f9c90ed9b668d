// The AVX2+FMA body of the channels-last convolution (conv_gemm.h), for CPUs without AVX-512: the
// im2col rows of a block of output positions packed on the fly, times the prepacked weight panels,
// with the epilogue in the store of the last pass over K. Sixteen 8-float registers: a micro-tile
// is 6 output positions x 16 channels (half a panel) in 12 of them, each k two loads of the panel
// and six broadcasts; a panel's second half is a second pass over the same rows (left out when
// the panel holds 16 channels or fewer). Columns past the panel's channels are masked in the
// prologue and epilogue only. Compiled with -mavx2 -mfma; called only where the CPU has them.
#include "kernels/conv/conv_gemm.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "kernels/common/prefetch_l2.h"
#include "kernels/conv/vec_avx2.h"

#define MLXC_CONV_DIRECT_NS mlxc_conv_direct_avx2
#define MLXC_CONV_DIRECT_ROW 16
#include "kernels/conv/conv_direct_impl.h"

namespace mlxc::cpu::convgemm {
namespace {

constexpr int MR = 6;  // output positions per micro-tile (12 accumulators of the 16 registers)
constexpr size_t kHalfPanel = kPanel / 2;

struct Tile {
  const float* bias;  // at the half panel's first channel, or null
  const float* res;   // at the tile's first row and the half panel's first channel, or null
  size_t ldr;
  float lo, hi;
};

/** Lanes j < n of 8 (n clamped to [0, 8]) as an AVX mask. */
inline __m256i lanes(int n) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); }

/**
 * C[R x ncols] (=|+=) A[R x kc] B[kc x 16] (a half panel, rows 16 apart); on the last pass the epilogue. ncols in [1, 16].
 * pfn cache lines from pf are prefetched into L2 along the way, one every kc / pfn steps (the next panel's weights, see run_avx2).
 */
template <int R>
void micro(size_t kc, const float* a, size_t lda, const float* b, float* c, size_t ldc, int ncols, bool first, bool last, const Tile& t,
           const char* pf, size_t pfn) {
  SpreadPrefetch pre(pf, pfn, kc);
  __m256 acc0[R], acc1[R];
  const bool two = ncols > 8;
  const __m256i m0 = lanes(ncols), m1 = lanes(ncols - 8);
  if (last) {
    // The residual's and C's rows are O floats apart, which the prefetchers do not follow: ask for
    // their lines now, so that they arrive while the products run.
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) {
      if (t.res) __builtin_prefetch(t.res + i * t.ldr, 0, 3);
      if (first) __builtin_prefetch(c + i * ldc, 1, 3);
    }
  }
  if (first) {
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) acc0[i] = acc1[i] = _mm256_setzero_ps();
  } else {
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) {
      acc0[i] = _mm256_maskload_ps(c + i * ldc, m0);
      acc1[i] = two ? _mm256_maskload_ps(c + i * ldc + 8, m1) : _mm256_setzero_ps();
    }
  }
  if (two) {
#pragma GCC unroll 2
    for (size_t k = 0; k < kc; k++) {
      pre.at(k);
      const __m256 b0 = _mm256_loadu_ps(b + k * kHalfPanel), b1 = _mm256_loadu_ps(b + k * kHalfPanel + 8);
#pragma GCC unroll 6
      for (int i = 0; i < R; i++) {
        const __m256 av = _mm256_broadcast_ss(a + i * lda + k);
        acc0[i] = _mm256_fmadd_ps(av, b0, acc0[i]);
        acc1[i] = _mm256_fmadd_ps(av, b1, acc1[i]);
      }
    }
  } else {
#pragma GCC unroll 2
    for (size_t k = 0; k < kc; k++) {
      pre.at(k);
      const __m256 b0 = _mm256_loadu_ps(b + k * kHalfPanel);
#pragma GCC unroll 6
      for (int i = 0; i < R; i++) acc0[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(a + i * lda + k), b0, acc0[i]);
    }
  }
  if (last) {
    const __m256 lo = _mm256_set1_ps(t.lo), hi = _mm256_set1_ps(t.hi);
    const __m256 bi0 = t.bias ? _mm256_maskload_ps(t.bias, m0) : _mm256_setzero_ps();
    const __m256 bi1 = t.bias && two ? _mm256_maskload_ps(t.bias + 8, m1) : _mm256_setzero_ps();
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) {
      __m256 v0 = _mm256_add_ps(acc0[i], bi0), v1 = _mm256_add_ps(acc1[i], bi1);
      if (t.res) {
        v0 = _mm256_add_ps(v0, _mm256_maskload_ps(t.res + i * t.ldr, m0));
        if (two) v1 = _mm256_add_ps(v1, _mm256_maskload_ps(t.res + i * t.ldr + 8, m1));
      }
      // max/min return their second operand when either is NaN: the bound first keeps NaN.
      acc0[i] = _mm256_min_ps(hi, _mm256_max_ps(lo, v0));
      acc1[i] = _mm256_min_ps(hi, _mm256_max_ps(lo, v1));
    }
  }
  // Whole vectors where the columns fill them: vmaskmovps stores cost ~10x a plain store on Zen 3
  // (they were 40% of an 8-channel stem's kernel time).
  if (ncols == 8 || ncols == 16) {
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) {
      _mm256_storeu_ps(c + i * ldc, acc0[i]);
      if (two) _mm256_storeu_ps(c + i * ldc + 8, acc1[i]);
    }
    return;
  }
#pragma GCC unroll 6
  for (int i = 0; i < R; i++) {
    if (ncols > 8)
      _mm256_storeu_ps(c + i * ldc, acc0[i]);
    else
      _mm256_maskstore_ps(c + i * ldc, m0, acc0[i]);
    if (two) _mm256_maskstore_ps(c + i * ldc + 8, m1, acc1[i]);
  }
}

using MicroFn = void (*)(size_t, const float*, size_t, const float*, float*, size_t, int, bool, bool, const Tile&, const char*, size_t);
template <int... Rs>
constexpr std::array<MicroFn, sizeof...(Rs)> table(std::integer_sequence<int, Rs...>) {
  return {&micro<Rs + 1>...};
}
constexpr auto MICRO = table(std::make_integer_sequence<int, MR>{});

}  // namespace

void run_avx2(const Shape& s, const float* x, const float* wp, const float* bias, const float* res, float* y, float lo, float hi,
              size_t task, size_t ntasks_n, float* buf) {
  const size_t O = s.o;
  walk_task(s, x, wp, task, ntasks_n, buf, pass_depth(s.depth(), kDepthAvx2), true,
            [&](const float* a, size_t lda, size_t m0, size_t mc, size_t kc, bool first, bool last, const float* b, size_t col, size_t nc) {
              // The panels' halves one after another (the AVX2 build's layout, conv_pack_weight): half h's pass at b + h * K * 16.
              const size_t K = s.depth();
              // The next panel's same pass (b + K * 32: panels lie one after another; past this
              // task's share it is another task's, past the weight's end a hint that fetches
              // nothing) is prefetched into L2 while this one runs, half h's by half h's tiles: a
              // small layer's row tiles all read their panel from L2 but the first, which waited
              // on memory (a 3x3 512 -> 512 layer at 7x7: 9.4 MB of weights, 49 rows).
              const size_t tiles = (mc + MR - 1) / MR;
              for (size_t h = 0; h * 16 < nc; h++) {
                const size_t hc = col + h * 16;
                const int ncols = static_cast<int>(std::min<size_t>(16, nc - h * 16));
                const char* next = reinterpret_cast<const char*>(b + K * kPanel + h * K * kHalfPanel);
                for (size_t i = 0, ti = 0; i < mc; i += MR, ti++) {
                  const int r = static_cast<int>(std::min<size_t>(MR, mc - i));
                  const size_t row = m0 + i;
                  const PrefetchShare sh = prefetch_share(kc, tiles, ti);
                  Tile t{bias ? bias + hc : nullptr, res ? res + row * O + hc : nullptr, O, lo, hi};
                  MICRO[r - 1](kc, a + i * lda, lda, b + h * K * kHalfPanel, y + row * O + hc, O, ncols, first, last, t,
                               next + sh.first * 64, sh.count);
                }
              }
            });
}

void direct_avx2(const Shape& s, const float* x, const float* wp, const float* bias, const float* res, float* y, float lo, float hi,
                 size_t r0, size_t r1) {
  mlxc_conv_direct_avx2::direct_rows<mlxc_vec_avx2::V8>(s, x, wp, bias, res, y, lo, hi, r0, r1);
}

}  // namespace mlxc::cpu::convgemm
#else
#include <stdexcept>
namespace mlxc::cpu::convgemm {
void run_avx2(const Shape&, const float*, const float*, const float*, const float*, float*, float, float, size_t, size_t) {
  throw std::runtime_error("conv_gemm: built without AVX2");
}
void direct_avx2(const Shape&, const float*, const float*, const float*, const float*, float*, float, float, size_t, size_t) {
  throw std::runtime_error("conv_gemm: built without AVX2");
}
}  // namespace mlxc::cpu::convgemm
#endif
