// The depthwise plane loop (depthwise_impl.h) on AVX2+FMA: 8 lanes, masks as vectors of
// all-ones or zero words (vmaskmovps). This file alone is compiled with -mavx2 -mfma
// (CMakeLists.txt); depthwise.cpp calls it only when the running CPU has both.
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include "kernels/conv/vec_avx2.h"

#define MLXC_DW_NS mlxc_dw_avx2
#include "kernels/conv/depthwise_impl.h"

namespace mlxc::cpu::avx2 {
void depthwise_plane(const float* in, const float* k, float b, float* out, int H, int W, int KH, int KW, int OH, int OW, int sh, int sw,
                     int pt, int pl, int dh, int dw, const pointwise::Epilogue& e, float* scratch, size_t scratch_n) {
  mlxc_dw_avx2::plane<mlxc_vec_avx2::V8>(in, k, b, out, H, W, KH, KW, OH, OW, sh, sw, pt, pl, dh, dw, e, scratch, scratch_n);
}
}  // namespace mlxc::cpu::avx2
#endif
