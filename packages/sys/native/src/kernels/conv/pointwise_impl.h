// The 1x1 convolution's block (pointwise.h) over a vector type V with masked loads and stores,
// compiled per instruction set (pointwise_avx512.cpp, pointwise_avx2.cpp, each inside its own
// namespace MLXC_PW_NS; called only after a runtime check). A register tile is MR output channels
// by two vectors of positions: per input channel, two loads of x's row and MR broadcasts of w,
// 2 MR multiply-adds; the epilogue runs on the accumulators before the one store. A tail of
// positions is masked, a tail of channels a narrower tile.
#include <cstddef>

#include "kernels/conv/pointwise.h"

namespace MLXC_PW_NS {

using mlxc::cpu::pointwise::Epilogue;

/** clamp then activation, NaN kept (ordered compares are false for it). */
template <class V>
inline V finish(V v, const Epilogue& e) {
  v = V::select(V::lt(v, V::splat(e.lo)), V::splat(e.lo), v);
  v = V::select(V::gt(v, V::splat(e.hi)), V::splat(e.hi), v);
  if (e.act == 0) return v;
  const V zero = V::splat(0.0f), one = V::splat(1.0f);
  V h = V::fma(v, V::splat(e.alpha), V::splat(e.beta));
  h = V::select(V::lt(h, zero), zero, h);
  h = V::select(V::gt(h, one), one, h);
  return e.act == 1 ? h : V::mul(v, h);
}

/** y[o0 + i, s0 + ...] for i < MR over two vectors of positions, from xp: x's columns of them packed
 * [C, 2 L] (zeros past the row); lanes of m0, m1 stored unless Full. */
template <class V, int MR, bool Full>
inline void tile(const float* xp, const float* w, float* y, size_t C, size_t S, size_t o0, size_t s0, typename V::M m0, typename V::M m1,
                 const Epilogue& e) {
  constexpr size_t L = V::W;
  V acc[MR][2];
  for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = V::splat(0.0f);
  const float* wp = w + o0 * C;
  for (size_t k = 0; k < C; k++, xp += 2 * L) {
    const V a = V::loadu(xp);
    const V b = V::loadu(xp + L);
    for (int i = 0; i < MR; i++) {
      const V wv = V::splat(wp[i * C + k]);
      acc[i][0] = V::fma(wv, a, acc[i][0]);
      acc[i][1] = V::fma(wv, b, acc[i][1]);
    }
  }
  for (int i = 0; i < MR; i++) {
    const size_t o = o0 + i, at = o * S + s0;
    const V bv = V::splat(e.bias ? e.bias[o] : 0.0f);
    for (int j = 0; j < 2; j++) {
      V v = acc[i][j] + bv;
      if (e.res) v = v + (Full ? V::loadu(e.res + at + j * L) : V::load(e.res + at + j * L, j ? m1 : m0));
      v = finish(v, e);
      if (Full)
        V::storeu(y + at + j * L, v);
      else
        V::store(y + at + j * L, j ? m1 : m0, v);
    }
  }
}

template <class V, int MR, bool Full>
inline void rows(const float* x, const float* w, float* y, size_t C, size_t S, size_t o0, size_t o1, size_t s0, typename V::M m0,
                 typename V::M m1, const Epilogue& e) {
  size_t o = o0;
  for (; o + MR <= o1; o += MR) tile<V, MR, Full>(x, w, y, C, S, o, s0, m0, m1, e);
  // The channels past the last whole tile, in one narrower tile.
  switch (o1 - o) {
#define MLXC_PW_TAIL(r)                                                      \
  case r:                                                                    \
    if constexpr (r < MR) tile<V, r, Full>(x, w, y, C, S, o, s0, m0, m1, e); \
    break;
    MLXC_PW_TAIL(1)
    MLXC_PW_TAIL(2)
    MLXC_PW_TAIL(3)
    MLXC_PW_TAIL(4)
    MLXC_PW_TAIL(5)
    MLXC_PW_TAIL(6)
    MLXC_PW_TAIL(7)
#undef MLXC_PW_TAIL
    default: break;
  }
}

/**
 * The block [o0, o1) x [s0, s1) of one image (pointwise::Block), MR <= 8; pack holds C * 2 V::W
 * floats. Each chunk of 2 V::W positions is packed first: x's rows lie S floats apart, and at
 * mobilenet's sizes (S * 4 bytes a multiple of 1 KiB) C of them map to a few L1 sets, so the
 * unpacked columns were evicted before the next tile of channels read them again.
 */
template <class V, int MR>
void block(const float* x, const float* w, float* y, size_t C, size_t S, size_t o0, size_t o1, size_t s0, size_t s1, const Epilogue& e,
           float* pack) {
  constexpr size_t L = V::W;
  for (size_t s = s0; s < s1; s += 2 * L) {
    const size_t n = s1 - s < 2 * L ? s1 - s : 2 * L;
    const int ni = static_cast<int>(n), li = static_cast<int>(L);
    const typename V::M m0 = V::range(0, ni), m1 = V::range(0, ni - li);
    const float* xs = x + s;
    if (n == 2 * L) {
      for (size_t k = 0; k < C; k++, xs += S) {
        V::storeu(pack + k * 2 * L, V::loadu(xs));
        V::storeu(pack + k * 2 * L + L, V::loadu(xs + L));
      }
      rows<V, MR, true>(pack, w, y, C, S, o0, o1, s, m0, m1, e);
    } else {
      for (size_t k = 0; k < C; k++, xs += S) {
        V::storeu(pack + k * 2 * L, V::load(xs, m0));
        V::storeu(pack + k * 2 * L + L, V::load(xs + L, m1));
      }
      rows<V, MR, false>(pack, w, y, C, S, o0, o1, s, m0, m1, e);
    }
  }
}

}  // namespace MLXC_PW_NS
