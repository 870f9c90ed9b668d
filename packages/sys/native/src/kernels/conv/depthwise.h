// Depthwise 2-D convolution as a CPU kernel (spec/kernels/conv.ts), an MLX primitive. On a CPU
// stream with float32 data it runs the library's own loop (vectorized over the contiguous axis by
// the compiler); on any other device or dtype the front end builds the same computation from MLX's
// ops, so callers need not know where it runs.
#pragma once

#include <cstddef>
#include <optional>

#include "mlx/mlx.h"

namespace mlxc::cpu {

namespace mx = mlx::core;

/**
 * Depthwise 2-D convolution, channels-first: x [N, C, H, W], w [C*M, 1, KH, KW] (output channel o
 * reads input channel o / M), optional bias [C*M]. pads are top, left, bottom, right. Returns
 * [N, C*M, OH, OW].
 */
mx::array depthwise_conv2d(const mx::array& x, const mx::array& w, const std::optional<mx::array>& bias, int stride_h, int stride_w,
                           int pad_top, int pad_left, int pad_bottom, int pad_right, int dilation_h, int dilation_w, mx::Stream s);

/**
 * depthwise_conv2d, then clamp to [lo, hi] and act (0 none, 1 HardSigmoid, 2 HardSwish with alpha and
 * beta) on each output in the same pass: the fused Conv + HardSwish of MobileNetV3's depthwise layers.
 */
mx::array depthwise_conv2d_act(const mx::array& x, const mx::array& w, const std::optional<mx::array>& bias, int stride_h, int stride_w,
                               int pad_top, int pad_left, int pad_bottom, int pad_right, int dilation_h, int dilation_w, float lo, float hi,
                               int act, float alpha, float beta, mx::Stream s);

/** Floats of scratch the vector builds' 3x3 plane loop takes for H input rows and OW output columns
 * (either stride, the widest build's vectors): each row padded, split into even and odd columns at
 * stride 2 (depthwise_impl.h, plane3). */
inline size_t depthwise_scratch(int H, int OW) { return static_cast<size_t>(H) * (2 * static_cast<size_t>((OW + 15) / 16 * 16) + 4); }

}  // namespace mlxc::cpu
