// CPU layer kernels (spec/layers.ts): depthwise convolution, the LSTM recurrence and HardSigmoid/
// HardSwish as MLX primitives. On a CPU stream with float32 data they run the library's own loops
// (vectorized over the contiguous axis by the compiler); on any other device or dtype the front
// ends build the same computation from MLX's ops, so callers need not know where they run.
#pragma once

#include <optional>
#include <vector>

#include "mlx/mlx.h"

namespace mlxc::layers {

namespace mx = mlx::core;

/**
 * Depthwise 2-D convolution, channels-first: x [N, C, H, W], w [C*M, 1, KH, KW] (output channel o
 * reads input channel o / M), optional bias [C*M]. pads are top, left, bottom, right. Returns
 * [N, C*M, OH, OW].
 */
mx::array depthwise_conv2d(const mx::array& x, const mx::array& w, const std::optional<mx::array>& bias, int stride_h, int stride_w,
                           int pad_top, int pad_left, int pad_bottom, int pad_right, int dilation_h, int dilation_w, mx::Stream s);

/**
 * One direction of a standard LSTM (sigmoid, tanh, tanh; no peepholes, clip or input_forget):
 * proj [T, B, 4H] holds each step's input projection plus both biases, gates in ONNX's order
 * i, o, f, c; r [4H, H] is the recurrence weight as ONNX holds it; h0, c0 [B, H]; lens (optional,
 * [B]) are the sequence lengths (steps at or past a sequence's length leave its state alone and
 * give zeros in Y). reverse runs from the last valid step back. Inputs may be strided views.
 * Returns {Y [T, B, H], h_T [B, H], c_T [B, H]}.
 */
std::vector<mx::array> lstm(const mx::array& proj, const mx::array& r, const mx::array& h0, const mx::array& c0,
                            const std::optional<mx::array>& lens, bool reverse, mx::Stream s);

/** HardSigmoid clip(alpha * x + beta, 0, 1), or with swish HardSwish x * that. */
mx::array hard_sigmoid(const mx::array& x, float alpha, float beta, bool swish, mx::Stream s);

}  // namespace mlxc::layers
