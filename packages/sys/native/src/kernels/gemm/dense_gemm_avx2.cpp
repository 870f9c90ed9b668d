// The AVX2+FMA bodies of the packed-weight product (dense_gemm.h), for CPUs without AVX-512 (AMD
// Zen 2/3, Intel client parts). Compiled with -mavx2 -mfma; called only where the CPU has them.
// Sixteen 8-float registers shape both kernels:
// The panels hold their two halves of 16 columns one after another (the AVX2 build's layout, dense_pack_weight), so that
// each half is K rows of 64 bytes, front to back.
//  - few rows: each panel streamed once, front to back (its two halves side by side); at each k
//    the panel's four vectors times every row's value. One and two rows take two k at a time into separate sums (so that a row's
//    chains of multiply-adds overlap), three rows one k (12 sums and the 4 loads fill the file),
//    four to seven rows each half of the panel in turn with all the rows at each k (up to 14 sums),
//    prefetched 4 KiB ahead; eight rows two passes of four.
//  - tiles: the 12 packed rows of a tile as two halves of 6, each times one half (16 columns) of
//    the panel: 6 x 16 sums in 12 registers, each k two loads of the panel and six broadcasts;
//    K in long blocks (kDepthAvx2) that stream a half panel's block from L2 across the tiles,
//    while the tiles' calls prefetch the next half panel's block into L2.
// The last panel's columns past n go through a small buffer. Every sum is float32 in k order
// per lane (the few-row kernel adds its two half-sums at the end).
#include "kernels/gemm/dense_gemm.h"
#include "kernels/common/cpu.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "kernels/common/prefetch_l2.h"

namespace mlxc::cpu::dense {
namespace {

constexpr size_t NR = kPanel;
constexpr size_t kHalfPanel = kPanel / 2;
constexpr int kHalf = kTile / 2;
static_assert(NR == 32 && kTile == 12, "the AVX2 kernels are written for 32-column panels and 12-row tiles");

/**
 * Vector v (of 4) of row k of a panel whose halves lie one after another (the AVX2 build's layout, dense_pack_weight):
 * vectors 0-1 in the first half's row, 2-3 in the second's, K * 16 floats on.
 */
inline __m256 panel_vec(const float* b, size_t K, size_t k, int v) {
  return _mm256_loadu_ps(b + (v >= 2 ? K * kHalfPanel : 0) + k * kHalfPanel + 8 * (v & 1));
}

/** Stores `v` (8 lanes) at p, only the first `n` lanes when n < 8. */
inline void store_part(float* p, __m256 v, size_t n) {
  if (n >= 8) {
    _mm256_storeu_ps(p, v);
    return;
  }
  alignas(32) float t[8];
  _mm256_store_ps(t, v);
  for (size_t j = 0; j < n; j++) p[j] = t[j];
}

/** Loads the first `n` of 8 floats at p (zeros past them). */
inline __m256 load_part(const float* p, size_t n) {
  if (n >= 8) return _mm256_loadu_ps(p);
  alignas(32) float t[8] = {};
  for (size_t j = 0; j < n; j++) t[j] = p[j];
  return _mm256_load_ps(t);
}

/** Stores the four vectors of a 32-column output row, ncols of them, plus the bias (ncols floats). */
inline void store_row(float* out, const __m256* s, const float* bias, size_t ncols) {
  for (int v = 0; v < 4; v++) {
    const size_t c0 = static_cast<size_t>(v) * 8;
    if (c0 >= ncols) break;
    const size_t n = ncols - c0;
    __m256 r = s[v];
    if (bias) r = _mm256_add_ps(r, load_part(bias + c0, n));
    store_part(out + c0, r, n);
  }
}

/** One or two rows times one panel b [K][32], two k at a time into separate sums. */
template <int R>
void few_panel_pair(const float* x, size_t lda, const float* b, size_t K, const float* bias, float* out, size_t ldo, size_t ncols) {
  static_assert(R == 1 || R == 2);
  __m256 s[R][4], t[1][4];
  for (int v = 0; v < 4; v++) {
    t[0][v] = _mm256_setzero_ps();
    for (int r = 0; r < R; r++) s[r][v] = _mm256_setzero_ps();
  }
  size_t k = 0;
  if constexpr (R == 1) {
    for (; k + 2 <= K; k += 2) {
      const __m256 xa = _mm256_broadcast_ss(x + k), xb = _mm256_broadcast_ss(x + k + 1);
      for (int v = 0; v < 4; v++) {
        s[0][v] = _mm256_fmadd_ps(xa, panel_vec(b, K, k, v), s[0][v]);
        t[0][v] = _mm256_fmadd_ps(xb, panel_vec(b, K, k + 1, v), t[0][v]);
      }
    }
  }
  // Two rows: 16 sums leave no register for the loads, so one k at a time (each load used twice).
  for (; k < K; k++) {
    __m256 xr[R];
    for (int r = 0; r < R; r++) xr[r] = _mm256_broadcast_ss(x + r * lda + k);
    for (int v = 0; v < 4; v++) {
      const __m256 bv = panel_vec(b, K, k, v);
      for (int r = 0; r < R; r++) s[r][v] = _mm256_fmadd_ps(xr[r], bv, s[r][v]);
    }
  }
  for (int r = 0; r < R; r++) {
    if constexpr (R == 1) {
      __m256 sum[4];
      for (int v = 0; v < 4; v++) sum[v] = _mm256_add_ps(s[r][v], t[r][v]);
      store_row(out + r * ldo, sum, bias, ncols);
    } else {
      store_row(out + r * ldo, s[r], bias, ncols);
    }
  }
}

/** Three rows times one panel, one k at a time: 12 sums, each panel load used three times. */
void few_panel3(const float* x, size_t lda, const float* b, size_t K, const float* bias, float* out, size_t ldo, size_t ncols) {
  __m256 s[3][4];
  for (auto& r : s)
    for (auto& v : r) v = _mm256_setzero_ps();
  for (size_t k = 0; k < K; k++) {
    const __m256 x0 = _mm256_broadcast_ss(x + k), x1 = _mm256_broadcast_ss(x + lda + k), x2 = _mm256_broadcast_ss(x + 2 * lda + k);
    for (int v = 0; v < 4; v++) {
      const __m256 bv = panel_vec(b, K, k, v);
      s[0][v] = _mm256_fmadd_ps(x0, bv, s[0][v]);
      s[1][v] = _mm256_fmadd_ps(x1, bv, s[1][v]);
      s[2][v] = _mm256_fmadd_ps(x2, bv, s[2][v]);
    }
  }
  for (int r = 0; r < 3; r++) store_row(out + r * ldo, s[r], bias, ncols);
}

/** A load the compiler may not merge with an earlier one of the same address (it becomes a multiply-add's memory operand). */
inline __m256 load_again(const float* p) {
  __m256 v;
  asm volatile("vmovups %1, %0" : "=x"(v) : "m"(*reinterpret_cast<const __m256*>(p)));
  return v;
}

/** How far ahead (in rows of a half panel, 64 bytes each) few_panel_rows prefetches the weight. */
constexpr size_t kPrefetchRows = 64;

/**
 * R rows (4 to 7) times one panel in one pass: each half (16 columns, K rows of 64 bytes) streamed
 * once with every row's value at each k, 2R sums, two loads and R broadcasts (passes of fewer rows
 * read the panel again and left the multiply-adds waiting on the memory in between). At 7 rows the
 * 14 sums and the broadcast leave one register: each multiply-add reads its half of the panel's row
 * from L1 (load_again; the compiler otherwise kept one sum on the stack, stored on every k).
 */
template <int R>
void few_panel_rows(const float* x, size_t lda, const float* b, size_t K, const float* bias, float* out, size_t ldo, size_t ncols) {
  static_assert(R >= 4 && R <= 7);
  for (size_t h = 0; h < 2; h++) {
    const size_t c0 = h * kHalfPanel;
    if (c0 >= ncols) break;
    const float* bh = b + h * K * kHalfPanel;
    __m256 s[R][2];
#pragma GCC unroll 7
    for (int r = 0; r < R; r++) s[r][0] = s[r][1] = _mm256_setzero_ps();
    for (size_t k = 0; k < K; k++) {
      // 4 KiB ahead (into the next half panel near the end): the multiply-adds of several rows
      // consume each line slowly enough that the hardware's prefetch alone left the memory idle
      // (7 rows over a [768, 32768] weight: 6.0 -> 4.7 ms on Zen 3; one to three rows gain nothing).
      // An address past the weight's end near the last panel: a prefetch never faults.
      _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(bh) + (k + kPrefetchRows) * kHalfPanel * sizeof(float)),
                   _MM_HINT_T0);
      // Seven rows read the row's halves again for each multiply-add (load_again); fewer hold them.
      const float* bk = bh + k * kHalfPanel;
      const __m256 b0 = _mm256_loadu_ps(bk), b1 = _mm256_loadu_ps(bk + 8);
#pragma GCC unroll 7
      for (int r = 0; r < R; r++) {
        const __m256 xr = _mm256_broadcast_ss(x + r * lda + k);
        s[r][0] = _mm256_fmadd_ps(xr, R == 7 ? load_again(bk) : b0, s[r][0]);
        s[r][1] = _mm256_fmadd_ps(xr, R == 7 ? load_again(bk + 8) : b1, s[r][1]);
      }
    }
    const size_t n = std::min(kHalfPanel, ncols - c0);
    // Unrolled, as the loops above: a loop over r here indexed the sums, which kept them in memory
    // (stored on every k).
#pragma GCC unroll 7
    for (int r = 0; r < R; r++) {
      // store_row's four vectors: this half's two, the other two past n (never stored).
      const __m256 v[4] = {s[r][0], s[r][1], s[r][0], s[r][1]};
      store_row(out + r * ldo + c0, v, bias ? bias + c0 : nullptr, n);
    }
  }
}

void few_panel(size_t rows, const float* x, size_t lda, const float* b, size_t K, const float* bias, float* out, size_t ldo, size_t ncols) {
  switch (rows) {
    case 1: return few_panel_pair<1>(x, lda, b, K, bias, out, ldo, ncols);
    case 2: return few_panel_pair<2>(x, lda, b, K, bias, out, ldo, ncols);
    case 3: return few_panel3(x, lda, b, K, bias, out, ldo, ncols);
    case 4: return few_panel_rows<4>(x, lda, b, K, bias, out, ldo, ncols);
    case 5: return few_panel_rows<5>(x, lda, b, K, bias, out, ldo, ncols);
    case 6: return few_panel_rows<6>(x, lda, b, K, bias, out, ldo, ncols);
    case 7: return few_panel_rows<7>(x, lda, b, K, bias, out, ldo, ncols);
    case 8:
      few_panel_rows<4>(x, lda, b, K, bias, out, ldo, ncols);
      return few_panel_rows<4>(x + 4 * lda, lda, b, K, bias, out + 4 * ldo, ldo, ncols);
    default:
      few_panel_pair<2>(x, lda, b, K, bias, out, ldo, ncols);
      few_panel(rows - 2, x + 2 * lda, lda, b, K, bias, out + 2 * ldo, ldo, ncols);
  }
}

/**
 * C[R x 16] (= on the first block, += after) of packed rows a (R of a tile's 12, a[k * kTile + i])
 * times half a panel b (b[k * 32 + j], j < 16), all 16 columns; bias (16) on the last block. Every
 * loop over R unrolled, so that the 2R sums stay in registers.
 */
template <int R>
void half_tile(size_t kc, const float* a, const float* b, float* c, size_t ldc, bool first, bool last, const float* bias, const char* pf,
               size_t pfn) {
  // pfn cache lines from pf prefetched into L2 along the way, one every kc / pfn steps (the next
  // half panel's block, see tiles_avx2).
  SpreadPrefetch pre(pf, pfn, kc);
  __m256 acc0[R], acc1[R];
  if (first) {
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) acc0[i] = acc1[i] = _mm256_setzero_ps();
  } else {
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) {
      acc0[i] = _mm256_loadu_ps(c + i * ldc);
      acc1[i] = _mm256_loadu_ps(c + i * ldc + 8);
    }
  }
#pragma GCC unroll 4
  for (size_t k = 0; k < kc; k++) {
    pre.at(k);
    const __m256 b0 = _mm256_loadu_ps(b + k * kHalfPanel), b1 = _mm256_loadu_ps(b + k * kHalfPanel + 8);
    const float* ak = a + k * kTile;
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) {
      const __m256 av = _mm256_broadcast_ss(ak + i);
      acc0[i] = _mm256_fmadd_ps(av, b0, acc0[i]);
      acc1[i] = _mm256_fmadd_ps(av, b1, acc1[i]);
    }
  }
  if (last && bias) {
    const __m256 bi0 = _mm256_loadu_ps(bias), bi1 = _mm256_loadu_ps(bias + 8);
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) {
      acc0[i] = _mm256_add_ps(acc0[i], bi0);
      acc1[i] = _mm256_add_ps(acc1[i], bi1);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < R; i++) {
    _mm256_storeu_ps(c + i * ldc, acc0[i]);
    _mm256_storeu_ps(c + i * ldc + 8, acc1[i]);
  }
}

using HalfFn = void (*)(size_t, const float*, const float*, float*, size_t, bool, bool, const float*, const char*, size_t);
constexpr std::array<HalfFn, kHalf> HALF = {&half_tile<1>, &half_tile<2>, &half_tile<3>, &half_tile<4>, &half_tile<5>, &half_tile<6>};

/**
 * half_tile for the last panel's ncols (< 16) columns: through a [rows x 16] buffer holding the sums
 * between blocks of K (zeros past ncols in the bias).
 */
void half_tile_part(size_t r, size_t kc, const float* a, const float* b, float* c, size_t ldc, size_t ncols, bool first, bool last,
                    const float* bias, const char* pf, size_t pfn) {
  alignas(32) float buf[kHalf * 16];
  alignas(32) float bi[16] = {};
  if (!first)
    for (size_t i = 0; i < r; i++)
      for (size_t j = 0; j < ncols; j++) buf[i * 16 + j] = c[i * ldc + j];
  if (bias)
    for (size_t j = 0; j < ncols; j++) bi[j] = bias[j];
  HALF[r - 1](kc, a, b, buf, 16, first, last, bias ? bi : nullptr, pf, pfn);
  for (size_t i = 0; i < r; i++)
    for (size_t j = 0; j < ncols; j++) c[i * ldc + j] = buf[i * 16 + j];
}

/** Rows i of x (lda apart) at columns [k, k + 8): row i's vector, zeros for a row past `rows`. */
inline __m256 row8(const float* x, size_t lda, size_t i, size_t rows, size_t k) {
  return i < rows ? _mm256_loadu_ps(x + i * lda + k) : _mm256_setzero_ps();
}

}  // namespace

void pack_tiles_avx2(const Problem& p, size_t t0, size_t t1, float* ap) {
  static_assert(kTile == 12, "the transpose below packs 8 + 4 rows");
  for (size_t t = t0; t < t1; t++) {
    float* d = ap + t * p.K * kTile;
    const size_t row = t * kTile, rows = std::min<size_t>(kTile, p.M - row);
    const float* x = p.x + row * p.lda;
    size_t k = 0;
    // Eight columns of the tile's 12 rows at a time: an 8 x 8 transpose of rows 0-7 and two 4 x 4
    // ones of rows 8-11, each column's 12 values stored as one row of the packed tile.
    for (; k + 8 <= p.K; k += 8) {
      __m256 r[8];
      for (size_t i = 0; i < 8; i++) r[i] = row8(x, p.lda, i, rows, k);
      const __m256 a0 = _mm256_unpacklo_ps(r[0], r[1]), a1 = _mm256_unpackhi_ps(r[0], r[1]);
      const __m256 a2 = _mm256_unpacklo_ps(r[2], r[3]), a3 = _mm256_unpackhi_ps(r[2], r[3]);
      const __m256 a4 = _mm256_unpacklo_ps(r[4], r[5]), a5 = _mm256_unpackhi_ps(r[4], r[5]);
      const __m256 a6 = _mm256_unpacklo_ps(r[6], r[7]), a7 = _mm256_unpackhi_ps(r[6], r[7]);
      const __m256 b0 = _mm256_shuffle_ps(a0, a2, 0x44), b1 = _mm256_shuffle_ps(a0, a2, 0xEE);
      const __m256 b2 = _mm256_shuffle_ps(a1, a3, 0x44), b3 = _mm256_shuffle_ps(a1, a3, 0xEE);
      const __m256 b4 = _mm256_shuffle_ps(a4, a6, 0x44), b5 = _mm256_shuffle_ps(a4, a6, 0xEE);
      const __m256 b6 = _mm256_shuffle_ps(a5, a7, 0x44), b7 = _mm256_shuffle_ps(a5, a7, 0xEE);
      const __m256 c[8] = {_mm256_permute2f128_ps(b0, b4, 0x20), _mm256_permute2f128_ps(b1, b5, 0x20), _mm256_permute2f128_ps(b2, b6, 0x20),
                           _mm256_permute2f128_ps(b3, b7, 0x20), _mm256_permute2f128_ps(b0, b4, 0x31), _mm256_permute2f128_ps(b1, b5, 0x31),
                           _mm256_permute2f128_ps(b2, b6, 0x31), _mm256_permute2f128_ps(b3, b7, 0x31)};
      __m256 q[4];
      for (size_t i = 0; i < 4; i++) q[i] = row8(x, p.lda, 8 + i, rows, k);
      __m128 lo[4], hi[4];
      for (int i = 0; i < 4; i++) {
        lo[i] = _mm256_castps256_ps128(q[i]);
        hi[i] = _mm256_extractf128_ps(q[i], 1);
      }
      _MM_TRANSPOSE4_PS(lo[0], lo[1], lo[2], lo[3]);
      _MM_TRANSPOSE4_PS(hi[0], hi[1], hi[2], hi[3]);
      for (int j = 0; j < 8; j++) {
        float* out = d + (k + j) * kTile;
        _mm256_storeu_ps(out, c[j]);
        _mm_storeu_ps(out + 8, j < 4 ? lo[j] : hi[j - 4]);
      }
    }
    for (; k < p.K; k++)
      for (size_t i = 0; i < static_cast<size_t>(kTile); i++) d[k * kTile + i] = i < rows ? x[i * p.lda + k] : 0.0f;
  }
}

void few_avx2(const Problem& p, size_t m0, size_t m1, size_t p0, size_t p1) {
  const size_t rows = m1 - m0;
  if (rows == 0) return;
  for (size_t q = p0; q < p1; q++) {
    const size_t col = q * NR, ncols = std::min(NR, p.n - col);
    few_panel(rows, p.x + m0 * p.lda, p.lda, p.wp + q * p.K * NR, p.K, p.bias ? p.bias + col : nullptr, p.out + m0 * p.n + col, p.n, ncols);
    epilogue(p, m0, col, rows, ncols);
  }
}

void tiles_avx2(const Problem& p, const float* ap, size_t t0, size_t t1, size_t p0, size_t p1) {
  const size_t K = p.K;
  // K in as few blocks as fit kDepthAvx2, of even sizes.
  const size_t depth = pass_depth(K, kDepthAvx2);
  for (size_t k0 = 0; k0 < K; k0 += depth) {
    const size_t kc = std::min<size_t>(depth, K - k0);
    const bool first = k0 == 0, last = k0 + kc >= K;
    for (size_t q = p0; q < p1; q++) {
      const size_t col = q * NR, ncols = std::min(NR, p.n - col);
      for (size_t h = 0; h < 2; h++) {
        const size_t hc = h * 16;
        if (hc >= ncols) break;
        const size_t hn = std::min<size_t>(16, ncols - hc);
        // Half h of the panel: K rows of 16 (the AVX2 build's layout, dense_pack_weight), this block's from row k0.
        const float* b = p.wp + q * K * NR + h * K * kHalfPanel + k0 * kHalfPanel;
        const float* bias = p.bias ? p.bias + col + hc : nullptr;
        // The next half panel's block (the second half's, or the next panel's first half: K * 16
        // floats on either way; past this task's share another task's, past the weight's end a hint
        // that fetches nothing) is prefetched into L2 while this one runs, a share of its kc lines
        // by each call of the row tiles: the first tile of each half panel otherwise waited on
        // memory for its whole block.
        const char* next = reinterpret_cast<const char*>(b + K * kHalfPanel);
        const size_t calls = (t1 - t0) * 2;
        size_t ci = 0;
        for (size_t t = t0; t < t1; t++) {
          const size_t row = t * kTile, rows = std::min<size_t>(kTile, p.M - row);
          const float* a = ap + t * K * kTile + k0 * kTile;
          // Halves of 6 rows; a last tile of 7 to 11 rows splits evenly (8 rows: 4 + 4, not 6 + 2,
          // whose 4 sums leave the multiply-add units waiting on their latency).
          for (size_t g = 0, r; g < rows; g += r) {
            const size_t left = rows - g;
            r = left > static_cast<size_t>(kHalf) && left < static_cast<size_t>(kTile) ? (left + 1) / 2 : std::min<size_t>(kHalf, left);
            float* c = p.out + (row + g) * p.n + col + hc;
            const PrefetchShare sh = prefetch_share(kc, calls, ci++);
            if (hn == 16)
              HALF[r - 1](kc, a + g, b, c, p.n, first, last, bias, next + sh.first * 64, sh.count);
            else
              half_tile_part(r, kc, a + g, b, c, p.n, hn, first, last, bias, next + sh.first * 64, sh.count);
          }
          // The epilogue on the tile's rows of this half panel, while they are in L1.
          if (last) epilogue(p, row, col + hc, rows, hn);
        }
      }
    }
  }
}

}  // namespace mlxc::cpu::dense
#else
#include <stdexcept>
namespace mlxc::cpu::dense {
void pack_tiles_avx2(const Problem&, size_t, size_t, float*) { throw std::runtime_error("dense_gemm: built without AVX2"); }
void few_avx2(const Problem&, size_t, size_t, size_t, size_t) { throw std::runtime_error("dense_gemm: built without AVX2"); }
void tiles_avx2(const Problem&, const float*, size_t, size_t, size_t, size_t) {
  throw std::runtime_error("dense_gemm: built without AVX2");
}
}  // namespace mlxc::cpu::dense
#endif
