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

#include "kernels/conv/depthwise.h"
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
                 int dh, const int* base, const typename V::M* lo_mask, const typename V::M* hi_mask, typename V::M out_mask, bool full,
                 const Epilogue& e) {
  constexpr int R = 4;
  auto store = [&](int oy, V acc) {
    acc = finish(acc, e);
    if (Whole || full)
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

/**
 * The undilated 3x3 kernel (MobileNet's), strides 1 or 2 along the row: the plane's rows are first
 * copied into `buf` with the row's padding as zeros, for stride 2 split into even and odd columns,
 * so that every tap of every chunk is one plain load at a fixed offset (no masks, no per-tap
 * address arithmetic), and the nine weights stay in registers. The general loop below spent most
 * of its time on its taps' loop control, masked edges and spilled addresses (~11 GFLOP/s a core
 * on a 48-channel 48x48 layer). Same sums in the same order: bias, then ky, kx; rows outside the
 * input skipped, columns outside it multiplied as zeros. Rows of output vectors go R at a time,
 * their sums interleaved; a last partial vector of a row is a masked store.
 */
template <class V, int SW>
void plane3(const float* in, const float* k, float b, float* out, int H, int W, int OH, int OW, int sh, int pt, int pl, const Epilogue& e,
            float* buf) {
  constexpr int L = static_cast<int>(V::W);
  constexpr int R = 4;
  const int OWr = (OW + L - 1) / L * L;
  // Padded column pc = ix + pl; tap kx of output column ox reads pc = ox * SW + kx. Stride 1: one
  // row of OWr + 2 columns. Stride 2: even columns (pc = 2j, OWr + 1 of them) then odd (OWr).
  const int ev = SW == 1 ? OWr + 2 : OWr + 1;
  const int rw = SW == 1 ? ev : ev + OWr;            // floats a buffered row
  const int need = SW == 1 ? OWr + 2 : 2 * OWr + 1;  // padded columns read
  // Columns [lo, hi) of a buffered run hold input columns; the rest are zeros. Run r (SW = 2: r = 0
  // even, 1 odd) holds padded columns pc = SW * j + r, input column SW * j + r - pl.
  auto span = [&](int r, int n, int& lo, int& hi) {
    lo = pl - r <= 0 ? 0 : (pl - r + SW - 1) / SW;            // SW * j + r - pl >= 0
    hi = W - 1 + pl - r < 0 ? 0 : (W - 1 + pl - r) / SW + 1;  // SW * j + r - pl <= W - 1
    if (hi > n) hi = n;
    if (lo > hi) lo = hi;
  };
  for (int y = 0; y < H; y++) {
    const float* src = in + static_cast<size_t>(y) * W;
    float* d = buf + static_cast<size_t>(y) * rw;
    for (int r = 0; r < SW; r++) {
      const int n = SW == 1 ? need : r == 0 ? ev : OWr;
      float* run = d + (r ? ev : 0);
      int lo, hi;
      span(r, n, lo, hi);
      for (int j = 0; j < lo; j++) run[j] = 0.0f;
      for (int j = lo; j < hi; j++) run[j] = src[SW * j + r - pl];
      for (int j = hi; j < n; j++) run[j] = 0.0f;
    }
  }
  V wv[9];
  for (int i = 0; i < 9; i++) wv[i] = V::splat(k[i]);
  // Offsets of taps kx = 0, 1, 2 within a buffered row, for output column 0.
  const int t0 = 0, t1 = SW == 1 ? 1 : ev, t2 = SW == 1 ? 2 : 1;
  auto taps = [&](const float* row, const V* w, V acc) {
    acc = V::fma(w[0], V::loadu(row + t0), acc);
    acc = V::fma(w[1], V::loadu(row + t1), acc);
    return V::fma(w[2], V::loadu(row + t2), acc);
  };
  const typename V::M tail = V::range(0, OW - (OWr - L));
  auto store = [&](int oy, int c0, V acc) {
    acc = finish(acc, e);
    float* o = out + static_cast<size_t>(oy) * OW + c0;
    if (c0 + L <= OW)
      V::storeu(o, acc);
    else
      V::store(o, tail, acc);
  };
  // Rows [y0, y1) read only rows inside the input: oy * sh - pt >= 0 and oy * sh - pt + 2 < H.
  int y0 = (pt + sh - 1) / sh;
  const int last = H - 1 + pt - 2;
  int y1 = last < 0 ? 0 : last / sh + 1;
  if (y1 > OH) y1 = OH;
  if (y0 > y1) y0 = y1;
  const size_t rs = static_cast<size_t>(sh) * rw;  // one output row's input rows to the next's
  auto one = [&](int oy) {
    for (int c0 = 0; c0 < OW; c0 += L) {
      V acc = V::splat(b);
      for (int ky = 0; ky < 3; ky++) {
        const int iy = oy * sh - pt + ky;
        if (iy < 0 || iy >= H) continue;
        acc = taps(buf + static_cast<size_t>(iy) * rw + c0, wv + 3 * ky, acc);
      }
      store(oy, c0, acc);
    }
  };
  int oy = 0;
  for (; oy < y0; oy++) one(oy);
  for (; oy + R <= y1; oy += R) {
    const float* r0 = buf + static_cast<size_t>(oy * sh - pt) * rw;
    for (int c0 = 0; c0 < OW; c0 += L) {
      V acc[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; r++) acc[r] = V::splat(b);
#pragma GCC unroll 3
      for (int ky = 0; ky < 3; ky++)
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) acc[r] = taps(r0 + r * rs + static_cast<size_t>(ky) * rw + c0, wv + 3 * ky, acc[r]);
#pragma GCC unroll 4
      for (int r = 0; r < R; r++) store(oy + r, c0, acc[r]);
    }
  }
  for (; oy < OH; oy++) one(oy);
}

/** out[OH, OW] = finish(b + sum over taps of k[ky, kx] * in[iy, ix]), in [H, W]; sw is 1 or 2, KW <= kMaxKW;
 * scratch (scratch_n floats, or null) for plane3(). */
template <class V>
void plane(const float* in, const float* k, float b, float* out, int H, int W, int KH, int KW, int OH, int OW, int sh, int sw, int pt,
           int pl, int dh, int dw, const Epilogue& e, float* scratch, size_t scratch_n) {
  using M = typename V::M;
  constexpr int L = static_cast<int>(V::W);
  if (KH == 3 && KW == 3 && dh == 1 && dw == 1 && scratch && mlxc::cpu::depthwise_scratch(H, OW) <= scratch_n) {
    if (sw == 1)
      plane3<V, 1>(in, k, b, out, H, W, OH, OW, sh, pt, pl, e, scratch);
    else
      plane3<V, 2>(in, k, b, out, H, W, OH, OW, sh, pt, pl, e, scratch);
    return;
  }
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
    // A whole vector of outputs stores unmasked even where its taps need masks (the row's edges):
    // AVX2's masked store costs several times a plain one on Zen 3 (a quarter of a 48x48 plane's time).
    const bool full = n == L;
    // A chunk whose taps all read whole vectors inside the row (the row's interior) runs unmasked:
    // AVX2's masked loads and stores cost several times a plain one on some CPUs.
    bool whole = n == L;
    for (int kx = 0; kx < KW && whole; kx++) whole = base[kx] >= 0 && base[kx] + sw * L <= W;
    if (whole) {
      rows<V, true>(in, k, b, out + c0, H, W, KH, KW, OH, OW, sh, sw, pt, dh, base, lo_mask, hi_mask, out_mask, full, e);
    } else {
      rows<V, false>(in, k, b, out + c0, H, W, KH, KW, OH, OW, sh, sw, pt, dh, base, lo_mask, hi_mask, out_mask, full, e);
    }
  }
}

}  // namespace MLXC_DW_NS
