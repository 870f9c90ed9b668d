// Matrix products with few rows on the CPU (spec/kernels/gemm.ts): the shapes of LLM decoding (one token,
// or a small batch of them, times a weight matrix), where MLX's CPU matmul hands OpenBLAS an
// sgemm that packs the whole weight matrix on every call, and MLX's quantized_matmul runs a
// scalar, single-threaded loop. These MLX primitives read the weights in place instead:
// vectorized (AVX-512F or AVX2+FMA where the running CPU has it, a portable build elsewhere) and
// split by output columns over the fused kernels' thread pool. Anything they do not take (other devices,
// dtypes, more rows than small_gemm_max_rows) gets MLX's own op, so callers need not check.
// MLXC_CPU_KERNELS=off (or MLXC_SMALL_GEMM=off, these kernels alone) takes MLX's ops everywhere;
// MLXC_CPU_KERNELS=avx2 the AVX2 build, MLXC_CPU_KERNELS=generic the portable build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "mlx/mlx.h"

namespace mlxc::cpu {

namespace mx = mlx::core;

/** Rows of a (all leading axes together when b is a matrix) up to which the float32 kernel runs
 * (at 8 rows OpenBLAS's packed sgemm has caught up on 2 threads; packages/ort-ep/bench/small-gemm.ts). */
constexpr int small_gemm_max_rows = 4;
/** Rows of x up to which the 4- and 8-bit kernel runs; past them, on the CPU, the weights are
 * dequantized once and multiplied with MLX's matmul (MLX's CPU quantized_matmul is a scalar loop). */
constexpr int small_qgemm_max_rows = 16;

/** a @ b (+ bias along the last axis) with numpy's matmul rules (a 1-D a, broadcast batch axes). */
mx::array small_matmul(const mx::array& a, const mx::array& b, const std::optional<mx::array>& bias, mx::Stream s);

/** MLX's quantized_matmul(x, w, scales, biases, transpose, group_size, bits, "affine"); the kernel
 * takes transpose with 4 or 8 bits and groups of 32, 64 or 128 on float32 operands, up to
 * small_qgemm_max_rows rows (more rows: dequantize + matmul on the CPU). */
mx::array small_quantized_matmul(const mx::array& x, const mx::array& w, const mx::array& scales, const mx::array& biases, bool transpose,
                                 int group_size, int bits, mx::Stream s);

// The kernels (small_gemm_impl.h): each computes output columns [n0, n1) of all M rows.
namespace gemm {
/** b stored [K, N] with row stride ldb. */
void kn(const float* a, size_t lda, const float* b, size_t ldb, const float* bias, float* out, size_t ldo, size_t M, size_t K, size_t n0,
        size_t n1);
/** b stored [N, K] with row stride ldb (a transposed view of a [K, N] matrix). */
void nk(const float* a, size_t lda, const float* b, size_t ldb, const float* bias, float* out, size_t ldo, size_t M, size_t K, size_t n0,
        size_t n1);
/** nk for up to 4 rows of a at any depth: on AVX-512 every row against each block of b's rows at
 * once, their lane sums in one reduction (the short-depth kernel's: with all rows of a in one pass
 * each row of b is read once, so depth needs no bound); on AVX2 each row against 8 of b's rows at
 * a time, their 8 sums reduced together; nk elsewhere and for more rows. */
void nk_rows(const float* a, size_t lda, const float* b, size_t ldb, const float* bias, float* out, size_t ldo, size_t M, size_t K,
             size_t n0, size_t n1);
/** 8-bit affine weights w [N, K / 4], as q4. */
void q8(const float* a, size_t lda, const uint32_t* w, const float* sc, const float* bi, const float* asum, const float* bias, float* out,
        size_t ldo, size_t M, size_t K, size_t group, size_t n0, size_t n1);
/** 4-bit affine weights w [N, K / 8], scales and biases [N, K / group]; asum [M, K / group] the group sums of a. */
void q4(const float* a, size_t lda, const uint32_t* w, const float* sc, const float* bi, const float* asum, const float* bias, float* out,
        size_t ldo, size_t M, size_t K, size_t group, size_t n0, size_t n1);
}  // namespace gemm

}  // namespace mlxc::cpu
