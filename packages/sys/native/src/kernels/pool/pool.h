// Channels-last max and average pooling on the CPU (spec/kernels/pool.ts), the pools between and
// after channels-last convolutions (ResNet's stem and head): MLX composes them from a padded copy
// of the input and one strided slice per window tap folded with maximum (or add), each pass over
// the whole result; here one pass reads each output position's window taps, C contiguous floats
// each, on the thread pool.
#pragma once

#include <cstddef>
#include <vector>

#include "mlx/mlx.h"

namespace mlxc::cpu {

namespace mx = mlx::core;

/** The geometry of one channels-last pool (1-D as height 1). */
struct PoolGeom {
  size_t n, ih, iw, c, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
};

/** One output position of a pool and the taps of its window inside the input: [ky0, ky1) x [kx0, kx1). */
struct PoolWindow {
  size_t oy, ox, ky0, ky1, kx0, kx1;
};

// Internal linkage: pool_avx2.cpp, built with other instruction sets, includes these too.
namespace {

/** The taps k < kernel of one axis whose input index o * s + k * d - pad lies inside [0, n):
 * [k0, k1) (one run: the index grows with k). */
inline void taps_inside(size_t o, size_t s, size_t d, size_t pad, size_t n, size_t kernel, size_t& k0, size_t& k1) {
  k0 = 0;
  while (k0 < kernel && o * s + k0 * d < pad) k0++;
  k1 = k0;
  while (k1 < kernel && o * s + k1 * d - pad < n) k1++;
}

/** f(xb, yo, w) for each output position of rows [r0, r1) (row = image * oh + oy) of a channels-last
 * pool: xb the image's input, yo the position's C outputs, w its window. */
template <class F>
void for_each_window(const float* x, float* y, const PoolGeom& p, size_t r0, size_t r1, F&& f) {
  for (size_t r = r0; r < r1; r++) {
    PoolWindow w{r % p.oh, 0, 0, 0, 0, 0};
    const float* xb = x + r / p.oh * p.ih * p.iw * p.c;
    taps_inside(w.oy, p.sh, p.dh, p.ph, p.ih, p.kh, w.ky0, w.ky1);
    for (w.ox = 0; w.ox < p.ow; w.ox++) {
      taps_inside(w.ox, p.sw, p.dw, p.pw, p.iw, p.kw, w.kx0, w.kx1);
      f(xb, y + (r * p.ow + w.ox) * p.c, w);
    }
  }
}

}  // namespace

/** The max of each window of x [N, ...spatial, C] (1 or 2 spatial axes natively, float32 on the
 * CPU): kernel, strides, pads (begin and end: the padding never wins, NaN propagates) and
 * dilations per spatial axis; [N, ...out, C] with out = (in + begin + end - span) / stride + 1.
 * Elsewhere MLX's pad, strided slices and maximum, with the same result. */
mx::array max_pool_channels_last(const mx::array& x, const std::vector<int>& kernel, const std::vector<int>& strides,
                                 const std::vector<int>& pads_begin, const std::vector<int>& pads_end, const std::vector<int>& dilations,
                                 mx::Stream s);

/** The mean of each window of x [N, ...spatial, C] (ONNX AveragePool, channels-last; 1 or 2 spatial
 * axes natively, float32 on the CPU): kernel, strides, pads (begin and end), dilations per spatial
 * axis; with ceil_mode the output size rounds up (a window starting in the end padding or past it
 * is dropped) and the overhang past the end padding is neither summed nor counted; the padding
 * counts in the divisor with count_include_pad, else only the taps inside the input do.
 * Elsewhere MLX's pad, strided slices and add, divided by the same counts. */
mx::array avg_pool_channels_last(const mx::array& x, const std::vector<int>& kernel, const std::vector<int>& strides,
                                 const std::vector<int>& pads_begin, const std::vector<int>& pads_end, const std::vector<int>& dilations,
                                 bool ceil_mode, bool count_include_pad, mx::Stream s);

}  // namespace mlxc::cpu
