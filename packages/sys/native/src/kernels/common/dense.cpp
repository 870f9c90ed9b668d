// Row-ordered copies of strided inputs (see dense.h): transposes, slices and broadcasts, read
// through their strides, the innermost axis as the inner loop, rows on the thread pool.
#include "kernels/common/dense.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "kernels/common/cpu.h"

namespace mlxc::cpu {

namespace mx = mlx::core;
using mx::array;

namespace {

/**
 * dst in row order from src whose next-to-last axis (A) has stride 1 and whose last (B, inner) has
 * stride `is`: per plane (an index of the axes before A), dst[a][b] = src[a + b *
 * is]. Blocks of `block` positions by every b: B reads of `block` contiguous elements, written B
 * apart within a block that stays in L1 (at most 24 KiB). Blocks on the thread pool.
 */
void transpose_planes(const array& src, const uint32_t* sp, uint32_t* dp) {
  const int nd = static_cast<int>(src.ndim());
  const size_t A = src.shape(nd - 2), B = src.shape(nd - 1);
  const int64_t is = src.strides()[nd - 1];
  const size_t planes = src.size() / (A * B);
  const size_t block = std::max<size_t>(8, std::min<size_t>(256, 6144 / B));
  const size_t per_plane = (A + block - 1) / block;
  parallel_for(planes * per_plane, std::max<size_t>(1, 16384 / (block * B)), [&](size_t t0, size_t t1) {
    for (size_t t = t0; t < t1; t++) {
      const size_t pl = t / per_plane, a0 = (t % per_plane) * block, a1 = std::min(A, a0 + block);
      // The plane's offset: its index over the axes before A.
      int64_t off = 0;
      size_t rem = pl;
      for (int d = nd - 3; d >= 0; d--) {
        const size_t dim = src.shape(d);
        off += static_cast<int64_t>(rem % dim) * src.strides()[d];
        rem /= dim;
      }
      const uint32_t* s = sp + off;
      uint32_t* o = dp + pl * A * B;
      if (B <= 4) {
        // Few columns (an image's channels): every read stream at once, each write contiguous.
        for (size_t a = a0; a < a1; a++)
          for (size_t b = 0; b < B; b++) o[a * B + b] = s[static_cast<int64_t>(a) + static_cast<int64_t>(b) * is];
      } else {
        for (size_t b = 0; b < B; b++) {
          const uint32_t* sb = s + static_cast<int64_t>(b) * is;
          for (size_t a = a0; a < a1; a++) o[a * B + b] = sb[a];
        }
      }
    }
  });
}

}  // namespace

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
    // A moved axis (NCHW -> NHWC, the image under a channels-last stem): the next-to-last axis is
    // the contiguous one and the last a few planes apart. Row by row, each row of 3 cost a step
    // of the odometer below (~2 ns an element: 50 us for a [1, 96, 96, 3] image); here each plane
    // [A, inner] is one transpose, read along A and written along inner.
    if (nd >= 2 && inner > 1 && src.strides()[nd - 2] == 1 && src.shape(nd - 2) > 1) {
      transpose_planes(src, sp, dp);
      return;
    }
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
