// Fused CPU kernels (spec/cpu.ts): MLX primitives whose eval_cpu runs vectorized (AVX2+FMA where
// the running CPU has it, a portable loop elsewhere) and multithreaded loops. On any other device,
// or for dtypes other than float32, the front ends build the same computation from MLX's own ops,
// so callers need not know where they run. MLXC_CPU_KERNELS=off takes MLX's ops everywhere and
// MLXC_CPU_KERNELS=generic the portable build (both read once per process).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "mlx/mlx.h"

namespace mlxc::cpu {

namespace mx = mlx::core;

/** act(x + bias): kind is one of exp, erf, tanh, sigmoid, relu, silu, gelu, gelu_tanh, identity;
 * bias (optional) broadcasts along the last axis (its size is x's last dimension). */
mx::array activation(const mx::array& x, const std::optional<mx::array>& bias, const std::string& kind, mx::Stream s);

/** softmax (or log-softmax) over the last axis. */
mx::array softmax(const mx::array& x, bool log, mx::Stream s);

/** Layer normalisation over the last axis: (x - mean) / sqrt(var + eps) * weight + bias. */
mx::array layer_norm(const mx::array& x, const std::optional<mx::array>& weight, const std::optional<mx::array>& bias, float eps, mx::Stream s);

/** RMS normalisation over the last axis: x / sqrt(mean(x^2) + eps) * weight. */
mx::array rms_norm(const mx::array& x, const std::optional<mx::array>& weight, float eps, mx::Stream s);

// Vector math over n contiguous floats (kernels.cpp and math.cpp).
enum class Act { exp, erf, tanh, sigmoid, relu, silu, gelu, gelu_tanh, identity };
/** out[i] = act(in[i] + (bias ? bias[i % c] : 0)), n a multiple of c when bias is given. */
void activation_rows(const float* in, const float* bias, float* out, size_t n, size_t c, Act act);
/** One row each: softmax, log-softmax, layer norm, rms norm (weight/bias may be null). */
void softmax_row(const float* in, float* out, size_t n, bool log);
void layer_norm_row(const float* in, const float* w, const float* b, float* out, size_t n, float eps);
void rms_norm_row(const float* in, const float* w, float* out, size_t n, float eps);
/** Whether the AVX2+FMA paths run on this CPU. */
bool has_avx2();
/** Whether the AVX-512F paths run on this CPU (then they take precedence over AVX2). */
bool has_avx512();
/** MLXC_CPU_KERNELS=off: MLX's ops everywhere, no native kernel (for comparisons; read once per process). */
bool kernels_off();

// The thread pool (pool.cpp).
/** Runs f(begin, end) over [0, n) in chunks of at least `grain`, on the pool's threads and the caller's. */
void parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& f);
/** Threads the pool and BLAS use (the caller's included); 0 resets to the machine's cores. */
void set_num_threads(int n);
int num_threads();

}  // namespace mlxc::cpu
