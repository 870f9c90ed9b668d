// Row-ordered copies of strided inputs (see dense.h): transposes, slices and broadcasts, read
// through their strides, the innermost axis as the inner loop, rows on the thread pool.
#include "kernels/common/dense.h"

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "kernels/common/cpu.h"

namespace mlxc::cpu {

namespace mx = mlx::core;
using mx::array;

array row_ordered_input(const array& a, mx::cpu::CommandEncoder& enc) {
  if (row_ordered(a)) return a;
  if (a.itemsize() != 4) throw std::invalid_argument("row_ordered_input: 4-byte elements only");
  array out(a.shape(), a.dtype(), nullptr, {});
  out.set_data(mx::allocator::malloc(out.nbytes()));
  enc.dispatch([src = array::unsafe_weak_copy(a), dst = array::unsafe_weak_copy(out)]() mutable {
    const int nd = static_cast<int>(src.ndim());
    const uint32_t* sp = src.data<uint32_t>();
    uint32_t* dp = dst.data<uint32_t>();
    const size_t n = src.size();
    if (nd == 0 || n == 0) {
      if (n) dp[0] = sp[0];
      return;
    }
    const size_t inner = src.shape(nd - 1);
    const int64_t is = src.strides()[nd - 1];
    const size_t rows = n / inner;
    parallel_for(rows, (16384 + inner - 1) / inner, [&](size_t r0, size_t r1) {
      // The multi-index of row r0 over the outer axes and its offset, then stepped row by row like
      // an odometer (a division per axis and row cost more than a short row's copy: a transposed
      // image [N, H, W, 3] has rows of 3).
      std::vector<int64_t> idx(nd > 1 ? nd - 1 : 1, 0);
      int64_t off = 0;
      size_t rem = r0;
      for (int d = nd - 2; d >= 0; d--) {
        const size_t dim = src.shape(d);
        idx[d] = static_cast<int64_t>(rem % dim);
        off += idx[d] * src.strides()[d];
        rem /= dim;
      }
      for (size_t r = r0; r < r1; r++) {
        const uint32_t* s = sp + off;
        uint32_t* o = dp + r * inner;
        if (is == 1)
          std::memcpy(o, s, inner * 4);
        else
          for (size_t i = 0; i < inner; i++) o[i] = s[static_cast<int64_t>(i) * is];
        for (int d = nd - 2; d >= 0; d--) {
          off += src.strides()[d];
          if (++idx[d] < src.shape(d)) break;
          off -= static_cast<int64_t>(src.shape(d)) * src.strides()[d];
          idx[d] = 0;
        }
      }
    });
  });
  enc.add_temporary(out);
  return out;
}

}  // namespace mlxc::cpu
