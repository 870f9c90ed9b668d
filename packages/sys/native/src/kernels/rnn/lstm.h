// The LSTM recurrence as a CPU kernel (spec/kernels/rnn.ts), an MLX primitive. On a CPU stream
// with float32 data it runs the library's own loop (vectorized over the contiguous axis by the
// compiler); on any other device or dtype the front end builds the same computation from MLX's
// ops, so callers need not know where it runs.
#pragma once

#include <optional>
#include <vector>

#include "mlx/mlx.h"

namespace mlxc::cpu {

namespace mx = mlx::core;

/**
 * The recurrence of a whole ONNX LSTM layer, every direction: proj [T, B, D*4H] holds each step's
 * input projection plus both biases (direction d's gates at d*4H, in ONNX's order i, o, f, c); rt
 * [D, H, 4H] is the recurrence weight transposed (R^T per direction); h0, c0 [D, B, H]; lens
 * (optional, [B]) the sequence lengths (steps at or past a sequence's length leave its state alone
 * and give zeros in Y; reverse directions start at each sequence's last valid step); peepholes
 * (optional, [D, 3H]: i, o, f). acts: 3 activations per direction (f, g, h), each as (code, alpha's
 * float32 bits, beta's float32 bits), codes 0 Relu, 1 Tanh, 2 Sigmoid, 3 Affine, 4 LeakyRelu,
 * 5 ThresholdedRelu, 6 ScaledTanh, 7 HardSigmoid, 8 Elu, 9 Softsign, 10 Softplus. clip > 0 bounds
 * the gate pre-activations (infinity: none); input_forget couples f = 1 - i. direction: 0 forward,
 * 1 reverse, 2 bidirectional. Inputs may be strided views. Returns {Y [T, D, B, H], h_T [D, B, H],
 * c_T [D, B, H]}.
 */
std::vector<mx::array> lstm(const mx::array& proj, const mx::array& rt, const mx::array& h0, const mx::array& c0,
                            const std::optional<mx::array>& lens, const std::optional<mx::array>& peepholes, const std::vector<int>& acts,
                            float clip, bool input_forget, int direction, mx::Stream s);

}  // namespace mlxc::cpu
