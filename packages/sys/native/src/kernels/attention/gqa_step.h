// One decode step of grouped-query attention over a KV cache of fixed capacity, in three primitives
// (spec/kernels/attention.ts): the new queries' and keys' rotary embedding, the new keys and values
// written into the cache at each sequence's length (in place when the cache is donated), and
// attention over exactly the keys each query sees. Built from MLX's ops, the same step is some
// forty operations a layer (views, the rotary's halves, the scatter, a mask of the cache's bucket,
// two products, a softmax), each with its own dispatch, and its products run over the padded
// length rather than the sequence's. Float32 on the CPU; other dtypes and devices are the caller's
// (the front end refuses them).
#pragma once

#include <optional>
#include <vector>

#include "mlx/mlx.h"

namespace mlxc::cpu {

namespace mx = mlx::core;

/**
 * q [B, N, S, H], k and v [B, Nkv, S, H] (the step's new rows), or all three flat as ONNX has them
 * (q [B, S, N * H], k and v [B, S, Nkv * H], any strides but a contiguous last axis), or k and v
 * null and q one packed QKV [B, S, (N + 2 Nkv) * H] (queries, keys, values), past_k and
 * past_v [B, Nkv, C, H] (C >= S), len [B] int32 (each sequence's length after the step: its new
 * rows go at start = len - S .. len - 1; from_zero, a first prompt whose right-padded sequences may
 * be shorter than S: at 0 .. S - 1), positions [B, S] int32 (the rotary positions; default start +
 * i, where the mask places query i whatever they are), cos and sin [P, R / 2] (the rotary tables,
 * R <= H; none: no rotary), interleaved (pairs 2i, 2i + 1, else halves i, i + R / 2). Query i of a
 * sequence (at start + i) sees key j when j < min(len, total), j <= start + i when causal, and j >
 * start + i - window when window > 0. Returns {y (q's shape and layout), present_k, present_v}.
 * Lengths and positions out of range are clamped (the caller checks them).
 */
std::vector<mx::array> gqa_step(const mx::array& q, const std::optional<mx::array>& k, const std::optional<mx::array>& v,
                                const mx::array& past_k, const mx::array& past_v, const mx::array& len,
                                const std::optional<mx::array>& positions, const std::optional<mx::array>& cos,
                                const std::optional<mx::array>& sin, bool interleaved, bool causal, int window, int total, float scale,
                                bool from_zero, mx::Stream s);

}  // namespace mlxc::cpu
