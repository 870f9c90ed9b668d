// Inputs of the project's CPU primitives in row order, copied only where they are not. A kernel
// that reads its input as one flat run used to get it through mx::contiguous at graph-building
// time: one more node per input in every evaluation (and in every compiled replay's tape), though
// the input was a view needing a copy in few of them. Deciding in eval_cpu, where the input's
// layout is known, costs nothing when it is already in row order.
#pragma once

#include "mlx/array.h"
#include "mlx/backend/cpu/encoder.h"

namespace mlxc::cpu {

/** Whether a's elements lie in row order, one after the other from a.data(). */
inline bool row_ordered(const mlx::core::array& a) { return a.flags().row_contiguous && a.data_size() == a.size(); }

/**
 * `a` itself where row_ordered(a); else a row-ordered copy of it, allocated now and filled by a task
 * queued on `enc` ahead of the caller's own, and held by `enc` until that task ran. Call from
 * eval_cpu before dispatching the kernel (4-byte elements, as the float32 kernels take).
 */
mlx::core::array row_ordered_input(const mlx::core::array& a, mlx::core::cpu::CommandEncoder& enc);

/**
 * `a` itself where its last axis is contiguous (a kernel that reads its rows through the other
 * strides: the heads of a [B, L, H, D] projection, the slices of a joined one); else
 * row_ordered_input(a, enc).
 */
inline mlx::core::array rows_in_place(const mlx::core::array& a, mlx::core::cpu::CommandEncoder& enc) {
  if (a.ndim() == 0 || a.shape(-1) <= 1 || a.strides().back() == 1) return a;
  return row_ordered_input(a, enc);
}

}  // namespace mlxc::cpu
