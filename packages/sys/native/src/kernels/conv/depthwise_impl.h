// The depthwise convolution's plane loop over a vector type V with masked loads and stores,
// compiled per instruction set (depthwise_avx2.cpp, depthwise_avx512.cpp, each inside its own
// namespace, MLXC_DW_NS, and only called after a runtime check; depthwise.cpp keeps the portable
// loop for other CPUs). An output row is cut into chunks of V::W columns; for each chunk and tap
// column kx the lanes whose input column lies inside the row are a mask (the padding and the row's
// ends), so the edges need no scalar code and a row narrower than a vector is one masked chunk.
// Masked-off lanes are never read (the instructions suppress their faults), so a chunk's address
// may start before its row. Strides 1 and 2 along the row (2 reads two vectors and keeps the even
// lanes); the caller takes the portable loop for other strides or wider kernels.
#include <cstddef>
#include <cstdint>

#include "kernels/conv/pointwise.h"

namespace MLXC_DW_NS {

using mlxc::cpu::pointwise::Epilogue;

/** clamp then activation (the fused Conv's epilogue; bias and residual unused here), NaN kept. */
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

/** Widest kernel row the vector loop takes (its masks live in an array of this many). */
constexpr int kMaxKW = 16;

/** One vector of a tap: the chunk at p (input columns p[0], p[sw], ...), masked unless Whole. */
template <class V, bool Whole>
inline V tap(const float* p, int sw, typename V::M lo, typename V::M hi) {
  if (sw == 1) return Whole ? V::loadu(p) : V::load(p, lo);
  return Whole ? V::loadu_even(p) : V::load_even(p, lo, hi);
}

/** The chunk's input address in row iy (it may start before the row, in lanes that are masked off). */
inline const float* at(const float* in, int iy, int W, int col) {
  return reinterpret_cast<const float*>(reinterpret_cast<uintptr_t>(in + static_cast<size_t>(iy) * W) + static_cast<intptr_t>(col) * 4);
}

/**
 * The output rows of one chunk (out points at its first column); Whole: no masks needed. Rows
 * whose taps all lie inside the input go R at a time, their R sums interleaved (one sum's chain of
 * multiply-adds waits on each result's latency); the rest, at the top and bottom, one at a time.
 */
template <class V, bool Whole>
inline void rows(const float* in, const float* k, float b, float* out, int H, int W, int KH, int KW, int OH, int OW, int sh, int sw, int pt,
                 int dh, const int* base, const typename V::M* lo_mask, const typename V::M* hi_mask, typename V::M out_mask,
                 const Epilogue& e) {
  constexpr int R = 4;
  auto store = [&](int oy, V acc) {
    acc = finish(acc, e);
    if (Whole)
      V::storeu(out + static_cast<size_t>(oy) * OW, acc);
    else
      V::store(out + static_cast<size_t>(oy) * OW, out_mask, acc);
  };
  // Rows [y0, y1) read only rows inside the input: oy * sh - pt >= 0, oy * sh - pt + (KH - 1) * dh < H.
  int y0 = (pt + sh - 1) / sh;
  const int last = H - 1 + pt - (KH - 1) * dh;  // oy * sh <= last
  int y1 = last < 0 ? 0 : last / sh + 1;
  if (y1 > OH) y1 = OH;
  if (y0 > y1) y0 = y1;
  for (int oy = 0; oy < OH; oy++) {
    if (oy == y0) {
      for (; oy + R <= y1; oy += R) {
        V acc[R];
        for (int r = 0; r < R; r++) acc[r] = V::splat(b);
        for (int ky = 0; ky < KH; ky++) {
          const int iy = oy * sh - pt + ky * dh;
          const float* kr = k + ky * KW;
          for (int kx = 0; kx < KW; kx++) {
            const V w = V::splat(kr[kx]);
            for (int r = 0; r < R; r++)
              acc[r] = V::fma(w, tap<V, Whole>(at(in, iy + r * sh, W, base[kx]), sw, lo_mask[kx], hi_mask[kx]), acc[r]);
          }
        }
        for (int r = 0; r < R; r++) store(oy + r, acc[r]);
      }
      if (oy >= OH) break;
    }
    V acc = V::splat(b);
    for (int ky = 0; ky < KH; ky++) {
      const int iy = oy * sh - pt + ky * dh;
      if (iy < 0 || iy >= H) continue;
      const float* kr = k + ky * KW;
      for (int kx = 0; kx < KW; kx++)
        acc = V::fma(V::splat(kr[kx]), tap<V, Whole>(at(in, iy, W, base[kx]), sw, lo_mask[kx], hi_mask[kx]), acc);
    }
    store(oy, acc);
  }
}

/** out[OH, OW] = finish(b + sum over taps of k[ky, kx] * in[iy, ix]), in [H, W]; sw is 1 or 2, KW <= kMaxKW. */
template <class V>
void plane(const float* in, const float* k, float b, float* out, int H, int W, int KH, int KW, int OH, int OW, int sh, int sw, int pt,
           int pl, int dh, int dw, const Epilogue& e) {
  using M = typename V::M;
  constexpr int L = static_cast<int>(V::W);
  for (int c0 = 0; c0 < OW; c0 += L) {
    const int n = OW - c0 < L ? OW - c0 : L;
    // Per tap column: where its chunk starts in the input row and which lanes it may read.
    int base[kMaxKW];
    M lo_mask[kMaxKW], hi_mask[kMaxKW];
    for (int kx = 0; kx < KW; kx++) {
      base[kx] = c0 * sw + kx * dw - pl;  // input column of lane 0
      // Input columns base + t, t in [0, last], that lie in [0, W): last = sw * (n - 1).
      const int t_lo = base[kx] < 0 ? -base[kx] : 0;
      int t_hi = W - base[kx];  // exclusive
      const int t_end = sw * (n - 1) + 1;
      if (t_hi > t_end) t_hi = t_end;
      lo_mask[kx] = V::range(t_lo, t_hi);          // input lanes [0, L)
      hi_mask[kx] = V::range(t_lo - L, t_hi - L);  // input lanes [L, 2L), stride 2 only
    }
    const M out_mask = V::range(0, n);
    // A chunk whose taps all read whole vectors inside the row (the row's interior) runs unmasked:
    // AVX2's masked loads and stores cost several times a plain one on some CPUs.
    bool whole = n == L;
    for (int kx = 0; kx < KW && whole; kx++) whole = base[kx] >= 0 && base[kx] + sw * L <= W;
    if (whole)
      rows<V, true>(in, k, b, out + c0, H, W, KH, KW, OH, OW, sh, sw, pt, dh, base, lo_mask, hi_mask, out_mask, e);
    else
      rows<V, false>(in, k, b, out + c0, H, W, KH, KW, OH, OW, sh, sw, pt, dh, base, lo_mask, hi_mask, out_mask, e);
  }
}

}  // namespace MLXC_DW_NS
