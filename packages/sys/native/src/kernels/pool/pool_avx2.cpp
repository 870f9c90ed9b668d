// The channels-last max pool's window loop on AVX2 (pool.h): eight channels a vector, up to four
// vectors of one output position in registers across its window's taps (for_each_window finds
// those inside the input once per position, for the portable loop too). acc = max(v, acc) keeps
// acc on a tie and when v is NaN, as the portable loop's `v > acc` does; a NaN tap is kept apart
// (the last one's bits) and is the result where one was seen, as there. This file alone is compiled with
// -mavx2 -mfma (CMakeLists.txt); pool.cpp calls it only when the running CPU has both.
#include "kernels/pool/pool.h"

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>

#include <cfloat>

namespace mlxc::cpu::avx2 {
namespace {

/** Channels [c0, c0 + 8 V) of the output position of window w. */
template <int V>
inline void window(const float* xb, float* y, const PoolGeom& p, const PoolWindow& w, size_t c0) {
  __m256 acc[V], nanv[V], seen[V];
#pragma GCC unroll 4
  for (int v = 0; v < V; v++) {
    acc[v] = _mm256_set1_ps(-FLT_MAX);
    nanv[v] = seen[v] = _mm256_setzero_ps();
  }
  for (size_t ky = w.ky0; ky < w.ky1; ky++) {
    const size_t iy = w.oy * p.sh + ky * p.dh - p.ph;
    for (size_t kx = w.kx0; kx < w.kx1; kx++) {
      const size_t ix = w.ox * p.sw + kx * p.dw - p.pw;
      const float* t = xb + (iy * p.iw + ix) * p.c + c0;
#pragma GCC unroll 4
      for (int v = 0; v < V; v++) {
        const __m256 x = _mm256_loadu_ps(t + 8 * v);
        const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
        acc[v] = _mm256_max_ps(x, acc[v]);
        nanv[v] = _mm256_blendv_ps(nanv[v], x, nan);
        seen[v] = _mm256_or_ps(seen[v], nan);
      }
    }
  }
#pragma GCC unroll 4
  for (int v = 0; v < V; v++) _mm256_storeu_ps(y + c0 + 8 * v, _mm256_blendv_ps(acc[v], nanv[v], seen[v]));
}

}  // namespace

void max_pool_rows(const float* x, float* y, const PoolGeom& p, size_t c8, size_t r0, size_t r1) {
  for_each_window(x, y, p, r0, r1, [&](const float* xb, float* yo, const PoolWindow& w) {
    size_t c0 = 0;
    for (; c0 + 32 <= c8; c0 += 32) window<4>(xb, yo, p, w, c0);
    if (c0 + 16 <= c8) {
      window<2>(xb, yo, p, w, c0);
      c0 += 16;
    }
    if (c0 + 8 <= c8) window<1>(xb, yo, p, w, c0);
  });
}

}  // namespace mlxc::cpu::avx2
#else
#include <stdexcept>
namespace mlxc::cpu::avx2 {
void max_pool_rows(const float*, float*, const PoolGeom&, size_t, size_t, size_t) {
  throw std::runtime_error("max_pool_rows: built without AVX2");
}
}  // namespace mlxc::cpu::avx2
#endif
