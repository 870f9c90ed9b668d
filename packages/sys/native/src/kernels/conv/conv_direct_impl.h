// The channels-last convolution of few output channels per group (conv_gemm.h, convgemm::direct_fits)
// over a vector type V, compiled per instruction set (conv_gemm_avx2.cpp, conv_gemm_avx512.cpp,
// each inside its own namespace, MLXC_CONV_DIRECT_NS, and only called after a runtime check).
// A stem (1-3 input channels into 8 or 16) or a grouped convolution of a few channels per group
// left the im2col path with little to multiply: every output position's window packed into a row
// first, and a 32-channel panel of which a quarter or half was used. Here the input is read in
// place: for a block of R output positions of one output row whose windows lie inside the input
// along x, each tap and channel is one weight vector (the group's first og lanes of its packed
// panel) and R broadcasts of the input, into R x NV accumulators; the positions whose window
// reaches into the padding along x go one at a time, each tap's column checked (a copy of the
// window's rows padded along x instead cost more in copies than the checks: a grouped stride-2
// convolution of 4 channels per group went from 2.1 to 4.0 us). Taps in the padding multiply zeros, in the
// im2col path's order, so the sums are those of the im2col path (bit for bit, NaN and infinite
// weights included). Bias, residual and clamp in the store; whole-vector stores where the group's
// channels fill them.
#include <algorithm>
#include <cstddef>

#include "kernels/conv/conv_gemm.h"

namespace MLXC_CONV_DIRECT_NS {

using mlxc::cpu::kPanel;
using mlxc::cpu::convgemm::Shape;
/** Floats from one weight row (a tap's channel) to the next: the build's half panel (conv_gemm.h, split_halves). */
constexpr size_t kRow = MLXC_CONV_DIRECT_ROW;

/** Everything a block needs besides its position. */
struct Ctx {
  const Shape* s;
  const float* xb;    // the image's first pixel, at the group's first channel
  const float* wg;    // the group's panel's first half: [...k, cg] rows kRow apart
  const float* bias;  // at the group's first channel, or null
  const float* res;   // at the row's first position and the group's first channel, or null
  float* y;           // likewise, in the result
  size_t oy;
  int og;
  float lo, hi;
};

/** acc[r] += the len weight rows at wt (kRow apart) times the len floats at xp + r * step. */
template <class V, int R, int NV>
inline void fma_run(V (&acc)[R][NV], const float* xp, size_t step, const float* wt, size_t len) {
  for (size_t j = 0; j < len; j++) {
    V w[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; v++) w[v] = V::loadu(wt + j * kRow + v * V::W);
    // One running pointer, not R of them (they were spilled, and reloaded for every tap).
    const float* q = xp + j;
#pragma GCC unroll 8
    for (int r = 0; r < R; r++, q += step) {
      const V a = V::splat(*q);
#pragma GCC unroll 2
      for (int v = 0; v < NV; v++) acc[r][v] = V::fma(a, w[v], acc[r][v]);
    }
  }
}

/** The R output positions ox0, ox0 + 1, ... of the row (Edge: a window may reach into the padding along x). */
template <class V, int R, int NV, bool Edge>
inline void block(const Ctx& t, size_t ox0) {
  const Shape& s = *t.s;
  const size_t cg = s.cg(), step = s.sw * s.c;
  // One group, undilated along x: a kernel row's taps and channels are one run of kw * c floats,
  // in the weight's order (a stem's 3 taps of 1-3 channels were a loop each).
  const bool whole_rows = !Edge && s.g == 1 && s.dw == 1;
  V acc[R][NV];
  const V zero = V::splat(0.0f);
#pragma GCC unroll 8
  for (int r = 0; r < R; r++)
#pragma GCC unroll 2
    for (int v = 0; v < NV; v++) acc[r][v] = zero;
  for (size_t ky = 0; ky < s.kh; ky++) {
    const size_t iy = t.oy * s.sh + ky * s.dh - s.ph;  // unsigned: before the input wraps past ih
    const float* wk = t.wg + ky * s.kw * cg * kRow;
    if (iy >= s.ih) {
      // A kernel row above or below the input: zeros times the weights, as the im2col rows have them.
      for (size_t j = 0; j < s.kw * cg; j++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) {
          const V w = V::loadu(wk + j * kRow + v * V::W);
#pragma GCC unroll 8
          for (int r = 0; r < R; r++) acc[r][v] = V::fma(zero, w, acc[r][v]);
        }
      continue;
    }
    const float* xr = t.xb + iy * s.iw * s.c;
    const long ix0 = static_cast<long>(ox0 * s.sw) - static_cast<long>(s.pw);
    if (whole_rows) {
      fma_run<V, R, NV>(acc, xr + ix0 * static_cast<long>(s.c), step, wk, s.kw * s.c);
      continue;
    }
    for (size_t kx = 0; kx < s.kw; kx++) {
      const float* wt = wk + kx * cg * kRow;
      const long ix = ix0 + static_cast<long>(kx * s.dw);
      if (!Edge) {
        fma_run<V, R, NV>(acc, xr + ix * static_cast<long>(s.c), step, wt, cg);
        continue;
      }
      // Positions whose tap lies in the padding read zeros (the pointer chosen, not the load).
      static constexpr float kZero = 0.0f;
      for (size_t ci = 0; ci < cg; ci++) {
        V w[NV];
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) w[v] = V::loadu(wt + ci * kRow + v * V::W);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
          const long at = ix + r * static_cast<long>(s.sw);
          const bool in = at >= 0 && at < static_cast<long>(s.iw);
          const V a = V::splat(*(in ? xr + at * static_cast<long>(s.c) + ci : &kZero));
#pragma GCC unroll 2
          for (int v = 0; v < NV; v++) acc[r][v] = V::fma(a, w[v], acc[r][v]);
        }
      }
    }
  }
  constexpr size_t W = V::W;
  const size_t O = s.o;
  const V lo = V::splat(t.lo), hi = V::splat(t.hi);
#pragma GCC unroll 2
  for (int v = 0; v < NV; v++) {
    const int n = std::min<int>(static_cast<int>(W), t.og - v * static_cast<int>(W));
    const typename V::M m = V::range(0, n);
    const V b = t.bias ? V::load(t.bias + v * W, m) : zero;
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
      const size_t at = (ox0 + r) * O + v * W;
      V y = acc[r][v] + b;
      if (t.res) y = y + V::load(t.res + at, m);
      // NaN stays NaN: the comparisons are false for it.
      y = V::select(V::lt(y, lo), lo, y);
      y = V::select(V::gt(y, hi), hi, y);
      if (n == static_cast<int>(W))
        V::storeu(t.y + at, y);
      else
        V::store(t.y + at, m, y);
    }
  }
}

/** One output row of one group: the positions whose window lies inside the input along x,
 * [lo_in, hi_in), in blocks of R (the last few by halves); the others one at a time, their taps
 * checked (blocks of R with a check per position and tap were slower: 6.6 against 5.4 us for a
 * 28x28 stem with one column of padding on each side). */
template <class V, int R, int NV>
inline void row(const Ctx& t, size_t lo_in, size_t hi_in) {
  const size_t ow = t.s->ow;
  size_t ox = 0;
  for (; ox < std::min(lo_in, ow); ox++) block<V, 1, NV, true>(t, ox);
  for (; ox + R <= hi_in; ox += R) block<V, R, NV, false>(t, ox);
  if constexpr (R > 4)
    if (ox + 4 <= hi_in) {
      block<V, 4, NV, false>(t, ox);
      ox += 4;
    }
  if constexpr (R > 2)
    if (ox + 2 <= hi_in) {
      block<V, 2, NV, false>(t, ox);
      ox += 2;
    }
  for (; ox < hi_in; ox++) block<V, 1, NV, false>(t, ox);
  for (; ox < ow; ox++) block<V, 1, NV, true>(t, ox);
}

/** Output rows [r0, r1) (row = image * oh + oy), every group. */
template <class V>
void direct_rows(const Shape& s, const float* x, const float* wp, const float* bias, const float* res, float* y, float lo, float hi,
                 size_t r0, size_t r1) {
  const size_t K = s.depth(), og = s.og(), cg = s.cg();
  // Output columns whose window lies inside the input along x: [lo_in, hi_in) (empty when hi_in <= lo_in).
  const size_t lo_in = (s.pw + s.sw - 1) / s.sw;
  const size_t reach = (s.kw - 1) * s.dw + 1;
  const size_t hi_in = s.iw + s.pw >= reach ? std::min(s.ow, (s.iw + s.pw - reach) / s.sw + 1) : 0;
  const bool two = og > V::W;
  for (size_t rw = r0; rw < r1; rw++) {
    const size_t b = rw / s.oh, oy = rw % s.oh;
    for (size_t gi = 0; gi < s.g; gi++) {
      Ctx t{&s,
            x + b * s.ih * s.iw * s.c + gi * cg,
            wp + gi * s.group_panels() * K * kPanel,
            bias ? bias + gi * og : nullptr,
            res ? res + rw * s.ow * s.o + gi * og : nullptr,
            y + rw * s.ow * s.o + gi * og,
            oy,
            static_cast<int>(og),
            lo,
            hi};
      if (two)
        row<V, 6, 2>(t, lo_in, hi_in);
      else
        row<V, 8, 1>(t, lo_in, hi_in);
    }
  }
}

}  // namespace MLXC_CONV_DIRECT_NS
