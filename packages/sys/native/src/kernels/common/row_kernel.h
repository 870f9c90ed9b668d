// What the row kernels (activation/activation.cpp, norm/norm.cpp) share: when their front ends take
// the primitive path, and how their primitives allocate the result.
#pragma once

#include <optional>

#include "kernels/common/cpu.h"
#include "mlx/mlx.h"

namespace mlxc::cpu::row_kernel {

namespace mx = mlx::core;
using mx::array;

inline array sc(float v, const array& like) { return array(v, like.dtype()); }

/** Whether the primitive path takes x on s. */
inline bool native(const array& x, mx::Stream s) {
  return !kernels_off() && s.device == mx::Device::cpu && x.dtype() == mx::float32 && x.ndim() >= 1 && x.size() > 0;
}
inline bool vector_of(const std::optional<array>& v, int n) {
  return !v || (v->ndim() == 1 && v->shape(0) == n && v->dtype() == mx::float32);
}

/** Allocates out, reusing x's buffer where MLX allows it (x row-contiguous and no longer needed). */
inline void alloc_like(const array& x, array& out) {
  if (x.is_donatable() && x.flags().row_contiguous && x.data_size() == x.size() && x.itemsize() == out.itemsize())
    out.copy_shared_buffer(x);
  else
    out.set_data(mx::allocator::malloc(out.nbytes()));
}

}  // namespace mlxc::cpu::row_kernel
