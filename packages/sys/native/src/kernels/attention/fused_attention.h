// Scaled-dot-product attention over whole query sequences (prefill, encoders) as one MLX primitive
// (spec/kernels/attention.ts). MLX's CPU composition runs it as two batched matmuls (OpenBLAS
// called once per batch entry and head, its threads woken for each small product), a strided copy
// of the scaled Kᵀ view, a mask add and a softmax, each a pass over the scores in memory. The
// kernel instead takes blocks of query rows of one key/value head as tasks on the thread pool:
// their scores against the keys they may see in a thread-local buffer, masks and the row softmax
// there, then the product with V written straight into the output. Float32 on the CPU; elsewhere
// (and for other dtypes, or with MLXC_CPU_KERNELS=off) the same composition of MLX's ops.
#pragma once

#include <optional>

#include "mlx/mlx.h"

namespace mlxc::cpu {

namespace mx = mlx::core;

/**
 * q [B, Hq, Lq, D], k [B, Hk, Lk, D], v [B, Hk, Lk, Dv] (Hq a multiple of Hk: query head h reads
 * key/value head h / (Hq / Hk)) -> [B, Hq, Lq, Dv]: softmax((q * scale)·kᵀ + masks)·v. Query i sees
 * key j when j <= i + causal_offset (causal), where a boolean mask is true, and within the mask's
 * width W (mask [B | 1, Hq | 1, Lq | 1, W], W <= Lk: keys from W on are masked out); a float mask is
 * added to the scores. Rows that see no key give zeros (NaN with empty_nan: the softmax of ONNX's
 * graphs over nothing); a NaN score makes its row NaN. Keys that no query of a block sees are not read.
 */
mx::array fused_attention(const mx::array& q, const mx::array& k, const mx::array& v, const std::optional<mx::array>& mask, float scale,
                          bool causal, int causal_offset, bool empty_nan, mx::Stream s);

}  // namespace mlxc::cpu
