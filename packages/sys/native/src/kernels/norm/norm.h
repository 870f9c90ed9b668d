// Row-wise normalisations as CPU kernels (spec/kernels/norm.ts): softmax, log-softmax, layer norm
// and RMS norm over the last axis, one vectorized pass per row (norm.cpp, on the row kernels of
// activation/math.h). float32 on a CPU stream runs the library's kernel (an MLX primitive on the
// thread pool); anything else gets the same computation from MLX's ops (see common/cpu.h).
#pragma once

#include <optional>

#include "mlx/mlx.h"

namespace mlxc::cpu {

namespace mx = mlx::core;

/** softmax (or log-softmax) over the last axis. */
mx::array softmax(const mx::array& x, bool log, mx::Stream s);

/** Layer normalisation over the last axis: (x - mean) / sqrt(var + eps) * weight + bias. */
mx::array layer_norm(const mx::array& x, const std::optional<mx::array>& weight, const std::optional<mx::array>& bias, float eps,
                     mx::Stream s);

/** RMS normalisation over the last axis: x / sqrt(mean(x^2) + eps) * weight. */
mx::array rms_norm(const mx::array& x, const std::optional<mx::array>& weight, float eps, mx::Stream s);

}  // namespace mlxc::cpu
