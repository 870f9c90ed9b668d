// A block of weights prefetched into L2 while the kernel runs on the one before it, its lines
// spread over the calls that read the current block and over each call's loop (conv_gemm_avx2.cpp,
// dense_gemm_avx2.cpp: a layer reads every weight once, so the first calls on each block otherwise
// wait on memory for all of it). x86-64 only (SSE's prefetch); no standard-library templates, as
// the AVX2 files that include it must not define any (math_impl.h says why).
#pragma once

#include <xmmintrin.h>

#include <cstddef>

namespace mlxc::cpu {

/** Call `i`'s share of `lines` cache lines split over `calls` calls (calls > 0): [first, first + count). */
struct PrefetchShare {
  size_t first, count;
};
inline PrefetchShare prefetch_share(size_t lines, size_t calls, size_t i) {
  const size_t per = (lines + calls - 1) / calls;
  const size_t l0 = i * per < lines ? i * per : lines, l1 = l0 + per < lines ? l0 + per : lines;
  return {l0, l1 - l0};
}

/** `lines` cache lines from `from` prefetched into L2 over a loop of `steps` steps, one every
 * steps / lines steps (at least one a step): at(k) at each step k. */
class SpreadPrefetch {
 public:
  SpreadPrefetch(const char* from, size_t lines, size_t steps)
      : p_(from), left_(lines), step_(lines && steps > lines ? steps / lines : 1), next_(lines ? 0 : steps) {}
  /** At step k (< steps): the next line, where one is due. */
  void at(size_t k) {
    if (k != next_) return;
    _mm_prefetch(p_, _MM_HINT_T1);
    p_ += 64;
    next_ = --left_ ? next_ + step_ : ~size_t{0};
  }

 private:
  const char* p_;
  size_t left_, step_, next_;
};

}  // namespace mlxc::cpu
