// The depthwise plane loop (depthwise_impl.h) on AVX-512F: 16 lanes, mask registers. This file
// alone is compiled with -mavx512f -mfma (CMakeLists.txt); depthwise.cpp calls it only when the
// running CPU has AVX-512F.
#if defined(__x86_64__) && defined(__AVX512F__) && defined(__FMA__)
#include "kernels/conv/vec_avx512.h"

#define MLXC_DW_NS mlxc_dw_avx512
#include "kernels/conv/depthwise_impl.h"

namespace mlxc::cpu::avx512 {
void depthwise_plane(const float* in, const float* k, float b, float* out, int H, int W, int KH, int KW, int OH, int OW, int sh, int sw,
                     int pt, int pl, int dh, int dw, const pointwise::Epilogue& e, float* scratch, size_t scratch_n) {
  mlxc_dw_avx512::plane<mlxc_vec_avx512::V16>(in, k, b, out, H, W, KH, KW, OH, OW, sh, sw, pt, pl, dh, dw, e, scratch, scratch_n);
}
}  // namespace mlxc::cpu::avx512
#endif
