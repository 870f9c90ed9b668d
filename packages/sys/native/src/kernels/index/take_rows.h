// Rows of a table picked by index (spec/kernels/indices.ts): an embedding lookup, ONNX's Gather on
// axis 0. MLX's CPU gather computes every element's position on its own; this copies each picked
// row whole.
#pragma once

#include "mlx/mlx.h"

namespace mlxc::cpu {

namespace mx = mlx::core;

/**
 * table [V, ...rest] at positions `indices` (integers, any shape) along axis 0: [...indices.shape,
 * ...rest]. A negative position counts from the end (as take's), one still outside [0, V) is
 * clamped into it (front ends check their indices first: mlxc_bounded_indices). On a CPU stream a
 * copy of each row; elsewhere, and for an empty table, MLX's take.
 */
mx::array take_rows(const mx::array& table, const mx::array& indices, mx::Stream s);

}  // namespace mlxc::cpu
