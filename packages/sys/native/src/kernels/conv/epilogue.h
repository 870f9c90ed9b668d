// The convolution epilogue (spec/kernels/conv.ts): bias, residual, a clamp (Relu, Clip) and
// optionally HardSigmoid/HardSwish in one pass over a convolution's output, which also moves MLX's channels-last result to ONNX's
// channels-first layout. float32 on a CPU stream runs the library's loop (an MLX primitive on the
// thread pool); anything else gets the same computation from MLX's ops.
#pragma once

#include <optional>

#include "mlx/mlx.h"

namespace mlxc::cpu {

/**
 * clamp(y' + bias + residual, lo, hi) as [N, C, ...spatial], where y' is y moved to channels-first
 * when `channels_last` (y [N, ...spatial, C]) and y itself otherwise (y [N, C, ...spatial]);
 * bias [C] is per channel, residual broadcasts to the result. NaN stays NaN (Relu and Clip's rule).
 * A rank-2 y [M, C] with `channels_last` is rows of channels that stay as they are (the result is
 * [M, C]): the layout of a channels-last convolution whose result stays channels-last.
 */
mlx::core::array conv_epilogue(const mlx::core::array& y, const std::optional<mlx::core::array>& bias,
                               const std::optional<mlx::core::array>& residual, float lo, float hi, bool channels_last,
                               mlx::core::Stream s);

/** An activation after the clamp: none, HardSigmoid h = clamp(v * alpha + beta, 0, 1), HardSwish v * h. */
enum class EpilogueAct { none = 0, hard_sigmoid = 1, hard_swish = 2 };

/**
 * conv_epilogue, then `act` (0 none, 1 HardSigmoid, 2 HardSwish, with alpha and beta) on each
 * clamped value, in the same pass: the Conv + HardSwish of MobileNetV3. NaN stays NaN.
 */
mlx::core::array conv_epilogue_act(const mlx::core::array& y, const std::optional<mlx::core::array>& bias,
                                   const std::optional<mlx::core::array>& residual, float lo, float hi, int act, float alpha, float beta,
                                   bool channels_last, mlx::core::Stream s);

}  // namespace mlxc::cpu
