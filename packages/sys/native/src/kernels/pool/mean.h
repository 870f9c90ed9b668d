// The mean over the trailing axes on the CPU (spec/kernels/pool.ts): ReduceMean over H, W of a
// squeeze-excite block and GlobalAveragePool, channels-first. MLX's CPU reduction sums such rows at
// about 1 GFLOP/s; here each row is one vectorized pass, rows on the thread pool.
#pragma once

#include "mlx/mlx.h"

namespace mlxc::cpu {

/** The mean of x over its last `axes` axes (1 <= axes <= ndim), those axes kept as 1 with keepdims:
 * float32 on the CPU natively; anything else MLX's mean, with the same result. */
mlx::core::array mean_trailing(const mlx::core::array& x, int axes, bool keepdims, mlx::core::Stream s);

}  // namespace mlxc::cpu
