// The 1x1 convolution channels-first (spec/kernels/conv.ts): y[n] = w [O, C] x x[n] [C, S] over the
// flattened spatial axes, with the conv epilogue (bias, residual, clamp, HardSigmoid/HardSwish) in
// the product's store. MLX's matmul hands these small products (C and O in the tens, S in the
// thousands) to OpenBLAS, whose threads then spin in sched_yield against the library's pool, and
// its addmm first copies the broadcast bias with a general strided copy; here register tiles of
// output channels by two vectors of positions run on the CPU kernels' thread pool (AVX-512F or
// AVX2+FMA where the CPU has it, a portable loop elsewhere).
#pragma once

#include <optional>

#include "mlx/mlx.h"

namespace mlxc::cpu {

/**
 * act(clamp(w x + bias + residual, lo, hi)) per image: x [N, C, ...spatial] (at least one spatial
 * axis), w [O, C], bias [O], residual the result's shape [N, O, ...spatial] (one that broadcasts
 * runs MLX's ops after the product); act as conv_epilogue_act's (0 none, 1 HardSigmoid, 2 HardSwish
 * with alpha and beta). float32 on a CPU stream natively; otherwise MLX's matmul and the epilogue.
 */
mlx::core::array pointwise_conv(const mlx::core::array& x, const mlx::core::array& w, const std::optional<mlx::core::array>& bias,
                                const std::optional<mlx::core::array>& residual, float lo, float hi, int act, float alpha, float beta,
                                mlx::core::Stream s);

namespace pointwise {
/** The epilogue of one product: bias [O] and residual [O, S] (or null) of the image, clamp and activation. */
struct Epilogue {
  const float* bias;
  const float* res;
  float lo, hi;
  int act;
  float alpha, beta;
};
/** y [O, S] of one image for output channels [o0, o1) and positions [s0, s1) (x [C, S], w [O, C]);
 * pack: room for C * kCols floats (the vector builds' packed columns). */
using Block = void (*)(const float* x, const float* w, float* y, size_t C, size_t S, size_t o0, size_t o1, size_t s0, size_t s1,
                       const Epilogue& e, float* pack);
/** Positions per task tile (two vectors of the AVX-512 build, four of the AVX2 one). */
constexpr size_t kCols = 32;
}  // namespace pointwise

}  // namespace mlxc::cpu
