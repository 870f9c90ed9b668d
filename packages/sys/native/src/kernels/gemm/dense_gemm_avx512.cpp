// The AVX-512 bodies of the packed-weight product (dense_gemm.h). Compiled with -mavx512f -mfma;
// called only where the CPU has them.
//  - few rows: each panel streamed once, front to back (one sequential run the prefetchers follow);
//    at each k the panel's two vectors times every row's value, two k at a time into separate sums
//    so that one row's chains of multiply-adds overlap;
//  - tiles: 12 rows x 32 columns of sums in 24 registers, each k one load of the tile's 12 packed
//    values' broadcasts and the panel's two vectors, K in long blocks (kDepthAvx512) that stream
//    the panel's block from L2 across the tiles.
// Masked stores past n in the last panel. Every sum is float32 in k order per lane (the few-row
// kernel adds its two half-sums at the end).
#include "kernels/gemm/dense_gemm.h"

#if defined(__AVX512F__) && defined(__FMA__)
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "kernels/common/cpu.h"

namespace mlxc::cpu::dense {
namespace {

constexpr size_t NR = kPanel;

inline __mmask16 lo_mask(size_t ncols) { return ncols >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << ncols) - 1u); }
inline __mmask16 hi_mask(size_t ncols) {
  return ncols >= 32 ? 0xFFFF : ncols <= 16 ? 0 : static_cast<__mmask16>((1u << (ncols - 16)) - 1u);
}

/** R rows (x rows lda apart) times one panel b [K][32]; out rows ldo apart, ncols columns stored. */
template <int R>
void few_panel(const float* x, size_t lda, const float* b, size_t K, const float* bias, float* out, size_t ldo, size_t ncols) {
  __m512 s0[R], s1[R], t0[R], t1[R];
  for (int r = 0; r < R; r++) s0[r] = s1[r] = t0[r] = t1[r] = _mm512_setzero_ps();
  size_t k = 0;
  for (; k + 2 <= K; k += 2) {
    const __m512 b0 = _mm512_loadu_ps(b + k * NR), b1 = _mm512_loadu_ps(b + k * NR + 16);
    const __m512 c0 = _mm512_loadu_ps(b + k * NR + 32), c1 = _mm512_loadu_ps(b + k * NR + 48);
    for (int r = 0; r < R; r++) {
      const __m512 xa = _mm512_set1_ps(x[r * lda + k]), xb = _mm512_set1_ps(x[r * lda + k + 1]);
      s0[r] = _mm512_fmadd_ps(xa, b0, s0[r]);
      s1[r] = _mm512_fmadd_ps(xa, b1, s1[r]);
      t0[r] = _mm512_fmadd_ps(xb, c0, t0[r]);
      t1[r] = _mm512_fmadd_ps(xb, c1, t1[r]);
    }
  }
  if (k < K) {
    const __m512 b0 = _mm512_loadu_ps(b + k * NR), b1 = _mm512_loadu_ps(b + k * NR + 16);
    for (int r = 0; r < R; r++) {
      const __m512 xa = _mm512_set1_ps(x[r * lda + k]);
      s0[r] = _mm512_fmadd_ps(xa, b0, s0[r]);
      s1[r] = _mm512_fmadd_ps(xa, b1, s1[r]);
    }
  }
  const __mmask16 m0 = lo_mask(ncols), m1 = hi_mask(ncols);
  const __m512 bi0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
  const __m512 bi1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
  for (int r = 0; r < R; r++) {
    _mm512_mask_storeu_ps(out + r * ldo, m0, _mm512_add_ps(_mm512_add_ps(s0[r], t0[r]), bi0));
    if (m1) _mm512_mask_storeu_ps(out + r * ldo + 16, m1, _mm512_add_ps(_mm512_add_ps(s1[r], t1[r]), bi1));
  }
}

using FewFn = void (*)(const float*, size_t, const float*, size_t, const float*, float*, size_t, size_t);
constexpr std::array<FewFn, kFewRows> FEW = {&few_panel<1>, &few_panel<2>, &few_panel<3>, &few_panel<4>};

/** C[R x 32] (= on the first block, += after) packed rows a[kc][kTile] times b[kc][32]; bias on the last block; ncols stored. */
template <int R>
void tile(size_t kc, const float* a, const float* b, float* c, size_t ldc, size_t ncols, bool first, bool last, const float* bias) {
  __m512 acc0[R], acc1[R];
  const __mmask16 m0 = lo_mask(ncols), m1 = hi_mask(ncols);
  if (first) {
    for (int i = 0; i < R; i++) acc0[i] = acc1[i] = _mm512_setzero_ps();
  } else {
    for (int i = 0; i < R; i++) {
      acc0[i] = _mm512_maskz_loadu_ps(m0, c + i * ldc);
      acc1[i] = _mm512_maskz_loadu_ps(m1, c + i * ldc + 16);
    }
  }
#pragma GCC unroll 4
  for (size_t k = 0; k < kc; k++) {
    const __m512 b0 = _mm512_loadu_ps(b + k * NR), b1 = _mm512_loadu_ps(b + k * NR + 16);
    const float* ak = a + k * kTile;
#pragma GCC unroll 12
    for (int i = 0; i < R; i++) {
      const __m512 av = _mm512_set1_ps(ak[i]);
      acc0[i] = _mm512_fmadd_ps(av, b0, acc0[i]);
      acc1[i] = _mm512_fmadd_ps(av, b1, acc1[i]);
    }
  }
  if (last && bias) {
    const __m512 bi0 = _mm512_maskz_loadu_ps(m0, bias), bi1 = _mm512_maskz_loadu_ps(m1, bias + 16);
    for (int i = 0; i < R; i++) {
      acc0[i] = _mm512_add_ps(acc0[i], bi0);
      acc1[i] = _mm512_add_ps(acc1[i], bi1);
    }
  }
  for (int i = 0; i < R; i++) {
    _mm512_mask_storeu_ps(c + i * ldc, m0, acc0[i]);
    if (m1) _mm512_mask_storeu_ps(c + i * ldc + 16, m1, acc1[i]);
  }
}

using TileFn = void (*)(size_t, const float*, const float*, float*, size_t, size_t, bool, bool, const float*);
template <int... Rs>
constexpr std::array<TileFn, sizeof...(Rs)> tiles_of(std::integer_sequence<int, Rs...>) {
  return {&tile<Rs + 1>...};
}
constexpr auto TILE = tiles_of(std::make_integer_sequence<int, kTile>{});

}  // namespace

void few_avx512(const Problem& p, size_t m0, size_t m1, size_t p0, size_t p1) {
  const size_t rows = m1 - m0;
  if (rows == 0) return;
  const FewFn f = FEW[rows - 1];
  for (size_t q = p0; q < p1; q++) {
    const size_t col = q * NR, ncols = std::min(NR, p.n - col);
    f(p.x + m0 * p.lda, p.lda, p.wp + q * p.K * NR, p.K, p.bias ? p.bias + col : nullptr, p.out + m0 * p.n + col, p.n, ncols);
    epilogue(p, m0, col, rows, ncols);
  }
}

void tiles_avx512(const Problem& p, const float* ap, size_t t0, size_t t1, size_t p0, size_t p1) {
  const size_t K = p.K;
  // K in as few blocks as fit kDepthAvx512, of even sizes.
  const size_t depth = pass_depth(K, kDepthAvx512);
  for (size_t k0 = 0; k0 < K; k0 += depth) {
    const size_t kc = std::min<size_t>(depth, K - k0);
    const bool first = k0 == 0, last = k0 + kc >= K;
    for (size_t q = p0; q < p1; q++) {
      const size_t col = q * NR, ncols = std::min(NR, p.n - col);
      const float* b = p.wp + q * K * NR + k0 * NR;
      const float* bias = p.bias ? p.bias + col : nullptr;
      for (size_t t = t0; t < t1; t++) {
        const size_t row = t * kTile, rows = std::min<size_t>(kTile, p.M - row);
        TILE[rows - 1](kc, ap + t * K * kTile + k0 * kTile, b, p.out + row * p.n + col, p.n, ncols, first, last, bias);
        // The epilogue on the tile's rows of this panel, while they are in L1.
        if (last) epilogue(p, row, col, rows, ncols);
      }
    }
  }
}

}  // namespace mlxc::cpu::dense
#else
#include <stdexcept>
namespace mlxc::cpu::dense {
void few_avx512(const Problem&, size_t, size_t, size_t, size_t) { throw std::runtime_error("dense_gemm: built without AVX-512"); }
void tiles_avx512(const Problem&, const float*, size_t, size_t, size_t, size_t) {
  throw std::runtime_error("dense_gemm: built without AVX-512");
}
}  // namespace mlxc::cpu::dense
#endif
