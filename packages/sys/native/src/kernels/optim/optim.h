// Optimizer updates as CPU kernels (spec/kernels/optim.ts): AdamW's step over one parameter in one
// pass over param, grad and the two moments (optim.cpp; its AVX-512F and AVX2 builds optim_avx512.cpp,
// optim_avx2.cpp).
// float32 on a CPU stream runs the library's kernel (an MLX primitive on the thread pool, writing
// into the donated buffers of the moments where MLX lets it); anything else gets the same
// computation from MLX's ops (see common/cpu.h).
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "mlx/mlx.h"

namespace mlxc::cpu {

namespace mx = mlx::core;

/**
 * One AdamW step (torch.optim.AdamW) of step number `step` (1 for the first): {param', m', v'} with
 * m' = b1 * m + (1 - b1) * g, v' = b2 * v + (1 - b2) * g^2 (m, v absent on the first step: zeros),
 * param' = param * (1 - lr * weight_decay) - (lr / c1) * m' / (sqrt(v') / sqrt(c2) + eps),
 * c1 = 1 - b1^step, c2 = 1 - b2^step.
 */
std::vector<mx::array> adamw_step(const mx::array& param, const mx::array& grad, const std::optional<mx::array>& m,
                                  const std::optional<mx::array>& v, double lr, double beta1, double beta2, double eps, double weight_decay,
                                  int step, mx::Stream s);

/**
 * The constants of one AdamW step as the kernels take them: computed in double, rounded to float32
 * as the MLX-op path (and @mlx/core's optim) rounds its scalars.
 */
struct AdamWConsts {
  float b1, one_minus_b1, b2, one_minus_b2, decay, sqrt_c2, eps, step_size;
};

/**
 * The flat kernel over n elements (m_in, v_in null: zeros). An output may share its input's buffer:
 * each element is read before it is written. Dispatches to the AVX-512F or AVX2 build where the CPU has it.
 */
void adamw_span(const float* p_in, const float* g, const float* m_in, const float* v_in, float* p_out, float* m_out, float* v_out, size_t n,
                const AdamWConsts& k);

/** optim_avx512.cpp's build (x86-64 only; optim.cpp calls it where the CPU has AVX-512F). */
namespace avx512 {
void adamw_span(const float* p_in, const float* g, const float* m_in, const float* v_in, float* p_out, float* m_out, float* v_out, size_t n,
                const AdamWConsts& k);
}

/** optim_avx2.cpp's build (x86-64 only; optim.cpp calls it where the CPU has AVX2 and not AVX-512F). */
namespace avx2 {
void adamw_span(const float* p_in, const float* g, const float* m_in, const float* v_in, float* p_out, float* m_out, float* v_out, size_t n,
                const AdamWConsts& k);
}

}  // namespace mlxc::cpu
