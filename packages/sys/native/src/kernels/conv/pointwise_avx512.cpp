// The 1x1 convolution's block (pointwise_impl.h) on AVX-512F. This file alone is compiled with
// the matching flags (CMakeLists.txt); pointwise.cpp calls it only when the running CPU has them.
#if defined(__x86_64__) && defined(__AVX512F__) && defined(__FMA__)
#include "kernels/conv/vec_avx512.h"

#define MLXC_PW_NS mlxc_pw_avx512
#include "kernels/conv/pointwise_impl.h"

namespace mlxc::cpu::avx512 {
void pointwise_block(const float* x, const float* w, float* y, size_t C, size_t S, size_t o0, size_t o1, size_t s0, size_t s1,
                     const pointwise::Epilogue& e, float* pack) {
  mlxc_pw_avx512::block<mlxc_vec_avx512::V16, 8>(x, w, y, C, S, o0, o1, s0, s1, e, pack);
}
}  // namespace mlxc::cpu::avx512
#endif
