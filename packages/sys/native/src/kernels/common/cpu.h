// What every CPU kernel of the library shares (spec/kernels/cpu.ts): which instruction set runs,
// the switch that turns the kernels off, and the thread pool. The kernels (kernels/<concept>/) are
// MLX primitives whose eval_cpu runs vectorized (AVX-512F or AVX2+FMA where the running CPU has
// it, NEON on AArch64, a portable loop elsewhere) and multithreaded loops. On any other device, or
// for dtypes other than float32, their front ends build the same computation from MLX's own ops,
// so callers need not know where they run. MLXC_CPU_KERNELS=off takes MLX's ops everywhere and
// MLXC_CPU_KERNELS=generic the portable build (both read once per process).
#pragma once

#include <string>

#include <cstddef>
#include <functional>

#include "mlx/mlx.h"

namespace mlxc::cpu {

namespace mx = mlx::core;

// The instruction sets (decided in activation/math_generic.cpp, beside the builds they pick).
/** Whether the AVX2+FMA paths run on this CPU. */
bool has_avx2();
/** Whether the AVX-512F paths run on this CPU (then they take precedence over AVX2). */
bool has_avx512();
/**
 * Whether the AVX2 build runs (AVX2 without AVX-512, or MLXC_CPU_KERNELS=avx2): its packed product
 * and convolution read panels whose two halves of 16 columns lie one after another (dense_gemm.h,
 * conv_gemm.h), and take K in long passes. Fixed for the process (math_generic.cpp).
 */
bool avx2_build();
/** The depth of each pass when K goes in as few passes of at most `most` as fit it, of even sizes. */
inline size_t pass_depth(size_t K, size_t most) {
  const size_t passes = (K + most - 1) / most;
  return passes == 0 ? most : (K + passes - 1) / passes;
}
/** MLXC_CPU_KERNELS=off: MLX's ops everywhere, no native kernel (for comparisons; read once per process; cpu.cpp). */
bool kernels_off();
/** MLXC_CPU_KERNELS as read once: "", "off", "generic" or "avx2" (any other value is reported on stderr and read as ""). */
const std::string& cpu_kernels_env();

// The thread pool (thread_pool.cpp).
/** Runs f(begin, end) over [0, n) in chunks of at least `grain`, on the pool's threads and the caller's. */
void parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& f);
/** parallel_for, or f(0, n) on the calling thread alone where `serial` (work too small to hand to the pool). */
void parallel_for_unless(bool serial, size_t n, size_t grain, const std::function<void(size_t, size_t)>& f);
/** Threads the pool and BLAS use (the caller's included); 0 resets to the machine's cores. */
void set_num_threads(int n);
int num_threads();
/**
 * Whether a worker of the pool is polling for work now (it ran a job within the last
 * MLXC_POOL_SPIN_US): a job posted now starts on it at once. Otherwise the workers sleep, and
 * waking one (a futex call, a context switch: tens of microseconds on a loaded VM) costs more than
 * a small job's share saves; kernels run such jobs on the caller's thread alone.
 */
bool pool_polling();

}  // namespace mlxc::cpu
