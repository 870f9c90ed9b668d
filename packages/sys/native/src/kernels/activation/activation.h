// Activations as CPU kernels (spec/kernels/activation.ts): the fused activation (act(x + bias) in
// one vectorized pass, activation.cpp) and HardSigmoid/HardSwish (hard_sigmoid.cpp). float32 on a
// CPU stream runs the library's kernel (an MLX primitive on the thread pool); anything else gets
// the same computation from MLX's ops (see common/cpu.h).
#pragma once

#include <optional>
#include <string>

#include "kernels/activation/math.h"
#include "mlx/mlx.h"

namespace mlxc::cpu {

namespace mx = mlx::core;

/** act(x + bias): kind is one of exp, erf, tanh, sigmoid, relu, silu, gelu, gelu_tanh, identity;
 * bias (optional) broadcasts along the last axis (its size is x's last dimension). */
mx::array activation(const mx::array& x, const std::optional<mx::array>& bias, const std::string& kind, mx::Stream s);

/** act(a) * b in one pass (SwiGLU with silu, GeGLU with gelu): b of a's shape (or broadcasting
 * against it, through MLX's ops); without b, a's last axis holds the two halves [gate, up] of one
 * product and the result is act(a[..., :n/2]) * a[..., n/2:]. a and b may be views (the slices of a
 * joined product): read through their strides when their last axis is contiguous. */
mx::array gated_activation(const mx::array& a, const std::optional<mx::array>& b, const std::string& kind, mx::Stream s);

/** The Act of a kind name of activation() (an invalid_argument naming the kinds for others). */
Act parse_activation(const std::string& kind);
/** act(x) from MLX's ops (the composition the fused kernels' VJP and non-CPU paths use). */
mx::array composed_activation(const mx::array& x, Act act, mx::Stream s);

/** HardSigmoid clip(alpha * x + beta, 0, 1), or with swish HardSwish x * that. */
mx::array hard_sigmoid(const mx::array& x, float alpha, float beta, bool swish, mx::Stream s);

/** QuantizeLinear then DequantizeLinear with one scale and zero point (fake_quantize.cpp): float32
 * (clamp(round_half_even(x / scale) + zero_point, lo, hi) - zero_point) * scale, a NaN quantized
 * to lo; [lo, hi] is the integer type's range. The division runs in the promoted type of x and
 * float32, as QuantizeLinear's. */
mx::array fake_quantize(const mx::array& x, float scale, float zero_point, float lo, float hi, mx::Stream s);

/** The index of the largest element of x flattened, NaN counted as -Infinity, the first of equal
 * maxima (0 where every element is NaN or -Infinity), as an int32 scalar: one pass for float32 on a
 * CPU stream, else MLX's ops (isnan, where, argmax). Empty x is an error. */
mx::array greedy_argmax(const mx::array& x, mx::Stream s);

}  // namespace mlxc::cpu
