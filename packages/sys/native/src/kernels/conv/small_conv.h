// The channels-first convolution of few output positions on the CPU (spec/kernels/conv.ts): the
// shapes of streaming audio models (Silero VAD's STFT convolution, [1, 1, 576] by [258, 1, 256]
// stride 128 into 4 positions, then kernel-3 convolutions of ~128 channels over 4 positions), where
// MLX's conv_general (a padded copy of the input, the im2col matrix by a generic strided copy, and
// an OpenBLAS sgemm that packs the weight on every call) and the moves to channels-last and back
// around it cost tens of microseconds for a few hundred thousand multiply-adds. Here the weight is
// read in place in ONNX's layout ([O, C, ...k]: each output channel's taps one contiguous row), the
// im2col rows of up to kRows output positions are packed from the channels-first input into a
// per-thread buffer, and the small-row product kernels (gemm/small_gemm.h, AVX-512F or AVX2+FMA
// where the CPU has them) multiply them by the weight rows with the bias in their store; the clamp
// comes with the store into the channels-first result. No allocation beyond the result.
// Which convolutions to send here is the caller's choice (any shape gives the right result; each
// block of kRows positions reads the whole weight once, so few positions are what it is fast for).
#pragma once

#include <optional>
#include <vector>

#include "mlx/mlx.h"

namespace mlxc::cpu {

namespace small_conv_detail {
/** Output positions per product (the small-row kernels' row count, gemm::small_gemm_max_rows). */
constexpr int kRows = 4;
}  // namespace small_conv_detail

/**
 * clamp(conv(x, w) + bias, lo, hi), channels-first, one group: x [N, C, ...spatial] (1 or 2 spatial
 * axes natively), w [O, C, ...kernel] (ONNX's layout), bias [O]; strides, pads (begin and end) and
 * dilations per spatial axis. Returns [N, O, ...out]. float32 on a CPU stream natively; otherwise
 * (and with MLXC_CPU_KERNELS=off) MLX's conv_general between channels-last moves, with the same result.
 */
mlx::core::array small_conv(const mlx::core::array& x, const mlx::core::array& w, const std::optional<mlx::core::array>& bias,
                            const std::vector<int>& strides, const std::vector<int>& pads_begin, const std::vector<int>& pads_end,
                            const std::vector<int>& dilations, float lo, float hi, mlx::core::Stream s);

}  // namespace mlxc::cpu
