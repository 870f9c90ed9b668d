// The channels-last convolution as an MLX primitive (see conv_gemm.h): the im2col packing, the
// portable kernel and the task split; the AVX-512 and AVX2 kernels are conv_gemm_avx512.cpp and
// conv_gemm_avx2.cpp.
#include "kernels/conv/conv_gemm.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <typeinfo>

#include "kernels/common/fused_primitive.h"
#include "kernels/conv/conv_winograd.h"
#include "kernels/common/dense.h"
#include "kernels/common/cpu.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlxc_private.h"

namespace mlxc::cpu {
namespace convgemm {

namespace {
// Runs of a few floats (a stem's taps of 1-3 channels) are copied and zeroed in loops: a call to
// memcpy or memset per run of 3 floats was half of the packing of a 28x28 single-channel image.
// (Unrolled by hand in blocks of 4: a plain loop is turned back into those calls.)
inline void copy_run(float* dst, const float* src, size_t n) {
  if (n >= 16) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float a = src[i], b = src[i + 1], c = src[i + 2], d = src[i + 3];
    dst[i] = a;
    dst[i + 1] = b;
    dst[i + 2] = c;
    dst[i + 3] = d;
  }
  switch (n - i) {
    case 3: dst[i + 2] = src[i + 2]; [[fallthrough]];
    case 2: dst[i + 1] = src[i + 1]; [[fallthrough]];
    case 1: dst[i] = src[i]; [[fallthrough]];
    default: break;
  }
}
inline void zero_run(float* dst, size_t n) {
  if (n >= 16) {
    std::memset(dst, 0, n * sizeof(float));
    return;
  }
  size_t i = 0;
  for (; i + 4 <= n; i += 4) dst[i] = dst[i + 1] = dst[i + 2] = dst[i + 3] = 0.0f;
  switch (n - i) {
    case 3: dst[i + 2] = 0.0f; [[fallthrough]];
    case 2: dst[i + 1] = 0.0f; [[fallthrough]];
    case 1: dst[i] = 0.0f; [[fallthrough]];
    default: break;
  }
}

/** count window rows of N floats, src stepping by `step`, dst by `ldd`: a fixed-size copy each (a
 * stem's 3 taps of one channel are one 8-byte and one 4-byte move, not a loop of 3). */
template <size_t N>
void copy_rows(float* dst, size_t ldd, const float* src, size_t step, size_t count) {
  for (size_t i = 0; i < count; i++, dst += ldd, src += step) std::memcpy(dst, src, N * sizeof(float));
}
template <size_t N>
void zero_rows(float* dst, size_t ldd, size_t count) {
  for (size_t i = 0; i < count; i++, dst += ldd) std::memset(dst, 0, N * sizeof(float));
}
void copy_rows_any(float* dst, size_t ldd, const float* src, size_t step, size_t count, size_t n) {
  for (size_t i = 0; i < count; i++, dst += ldd, src += step) copy_run(dst, src, n);
}
void zero_rows_any(float* dst, size_t ldd, size_t count, size_t n) {
  for (size_t i = 0; i < count; i++, dst += ldd) zero_run(dst, n);
}
/** The fixed-size copies of the common kernel-row widths (kw * c: 3x3 over 1, 2, 3, 4, 8 channels,
 * 5x5 and 7x7 over 1 and 3, 2x2 and 1x1 over a few). */
#define MLXC_ROW_WIDTHS(X) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(12) X(15) X(16) X(21) X(24) X(32)
void copy_rows_n(float* dst, size_t ldd, const float* src, size_t step, size_t count, size_t n) {
  switch (n) {
#define MLXC_CASE(N) \
  case N: return copy_rows<N>(dst, ldd, src, step, count);
    MLXC_ROW_WIDTHS(MLXC_CASE)
#undef MLXC_CASE
    default: return copy_rows_any(dst, ldd, src, step, count, n);
  }
}
void zero_rows_n(float* dst, size_t ldd, size_t count, size_t n) {
  switch (n) {
#define MLXC_CASE(N) \
  case N: return zero_rows<N>(dst, ldd, count);
    MLXC_ROW_WIDTHS(MLXC_CASE)
#undef MLXC_CASE
    default: return zero_rows_any(dst, ldd, count, n);
  }
}
#undef MLXC_ROW_WIDTHS

/** pack_rows of whole rows (one pass over K), dilated or grouped: a tap at a time, row by row. */
void pack_whole_rows_taps(const Shape& s, const float* x, size_t m0, size_t mc, float* buf, size_t gi) {
  const size_t plane = s.oh * s.ow, K = s.depth(), cg = s.cg(), ch0 = gi * cg, kwc = s.kw * cg;
  // The first row's position, then stepped row by row: three 64-bit divisions per row were most
  // of the packing of a small input's many rows (28x28 with one channel).
  size_t b = m0 / plane, oy = (m0 % plane) / s.ow, ox = m0 % s.ow;
  for (size_t r = 0; r < mc; r++) {
    if (r > 0 && ++ox == s.ow) {
      ox = 0;
      if (++oy == s.oh) {
        oy = 0;
        ++b;
      }
    }
    const float* xb = x + b * s.ih * s.iw * s.c;
    float* dst = buf + r * K;
    // Signed: the window may start before the input.
    const long ix0 = static_cast<long>(ox * s.sw) - static_cast<long>(s.pw);
    for (size_t ky = 0; ky < s.kh; ky++, dst += kwc) {
      const size_t iy = oy * s.sh + ky * s.dh - s.ph;  // unsigned: before the input wraps past ih
      if (iy >= s.ih) {
        zero_run(dst, kwc);
        continue;
      }
      const float* row = xb + iy * s.iw * s.c + ch0;
      for (size_t kx = 0; kx < s.kw; kx++) {
        const long ix = ix0 + static_cast<long>(kx * s.dw);
        if (ix < 0 || ix >= static_cast<long>(s.iw))
          zero_run(dst + kx * cg, cg);
        else
          copy_run(dst + kx * cg, row + ix * s.c, cg);
      }
    }
  }
}

/** pack_rows of whole rows (one pass over K), one group, undilated along x: each kernel row of a
 * window is one run of kw * c floats. The rows go by spans of one output row: there every kernel
 * row reads one input row (or none: zeros), and the positions whose window lies inside the input
 * along x (all but the padded edges) are fixed-size copies one stride apart. */
void pack_whole_rows(const Shape& s, const float* x, size_t m0, size_t mc, float* buf, size_t gi) {
  if (s.dw != 1 || s.g != 1) return pack_whole_rows_taps(s, x, m0, mc, buf, gi);
  const size_t plane = s.oh * s.ow, K = s.depth(), kwc = s.kw * s.c;
  // Output columns whose window is inside the input along x: [in_lo, in_hi).
  const size_t in_lo = (s.pw + s.sw - 1) / s.sw;
  const size_t in_hi = s.iw + s.pw >= s.kw ? (s.iw + s.pw - s.kw) / s.sw + 1 : 0;
  size_t b = m0 / plane, oy = (m0 % plane) / s.ow, ox = m0 % s.ow;
  for (size_t r = 0; r < mc;) {
    const size_t span = std::min(mc - r, s.ow - ox), end = ox + span;
    const size_t a = std::clamp(in_lo, ox, end), e = std::clamp(in_hi, a, end);
    const float* xb = x + b * s.ih * s.iw * s.c;
    float* d0 = buf + r * K;
    for (size_t ky = 0; ky < s.kh; ky++) {
      float* dk = d0 + ky * kwc;
      const size_t iy = oy * s.sh + ky * s.dh - s.ph;  // unsigned: before the input wraps past ih
      if (iy >= s.ih) {
        zero_rows_n(dk, K, span, kwc);
        continue;
      }
      const float* row = xb + iy * s.iw * s.c;
      // The edges: the window partly (or wholly) in the padding.
      const auto edge = [&](size_t p) {
        float* dst = dk + (p - ox) * K;
        const long ix0 = static_cast<long>(p * s.sw) - static_cast<long>(s.pw);
        const long lo = std::clamp<long>(-ix0, 0, static_cast<long>(s.kw));
        const long hi = std::clamp<long>(static_cast<long>(s.iw) - ix0, lo, static_cast<long>(s.kw));
        if (lo > 0) zero_run(dst, lo * s.c);
        if (hi > lo) copy_run(dst + lo * s.c, row + (ix0 + lo) * s.c, (hi - lo) * s.c);
        if (hi < static_cast<long>(s.kw)) zero_run(dst + hi * s.c, (s.kw - hi) * s.c);
      };
      for (size_t p = ox; p < a; p++) edge(p);
      if (e > a) copy_rows_n(dk + (a - ox) * K, K, row + (a * s.sw - s.pw) * s.c, s.sw * s.c, e - a, kwc);
      for (size_t p = e; p < end; p++) edge(p);
    }
    r += span;
    ox = end;
    if (ox == s.ow) {
      ox = 0;
      if (++oy == s.oh) {
        oy = 0;
        ++b;
      }
    }
  }
}
}  // namespace

void pack_rows(const Shape& s, const float* x, size_t m0, size_t mc, size_t k0, size_t kc, float* buf, size_t gi) {
  if (mc == 0 || kc == 0) return;
  if (k0 == 0 && kc == s.depth()) return pack_whole_rows(s, x, m0, mc, buf, gi);
  const size_t plane = s.oh * s.ow, k1 = k0 + kc, cg = s.cg(), ch0 = gi * cg;
  // The output position of the first row, then stepped row by row; the tap and channel of column
  // k0 likewise: no integer division inside the loops (a few channels per tap, e.g. a stem's one,
  // make one segment per kernel row, and the divisions dominated).
  size_t b = m0 / plane, oy = (m0 % plane) / s.ow, ox = m0 % s.ow;
  const size_t tap0 = k0 / cg, ci0 = k0 % cg, ky0 = tap0 / s.kw, kx0 = tap0 % s.kw;
  for (size_t r = 0; r < mc; r++) {
    const float* xb = x + b * s.ih * s.iw * s.c + ch0;
    float* dst = buf + r * kc;
    size_t k = k0, ci = ci0, ky = ky0, kx = kx0;
    // Unsigned: a position before the input wraps to a huge index and fails the bound check.
    const size_t iy0 = oy * s.sh - s.ph, ix0 = ox * s.sw - s.pw;
    while (k < k1) {
      const size_t iy = iy0 + ky * s.dh, ix = ix0 + kx * s.dw;
      size_t len = cg - ci;
      if (iy >= s.ih)
        len += (s.kw - 1 - kx) * cg;  // the whole kernel row is above or below the input: zeros
      else if (ix < s.iw && s.dw == 1 && s.g == 1)
        len += std::min(s.kw - 1 - kx, s.iw - 1 - ix) * s.c;  // the next taps are the next positions, contiguous
      len = std::min(len, k1 - k);
      if (iy < s.ih && ix < s.iw) {
        const float* src = xb + (iy * s.iw + ix) * s.c + ci;
        if (len >= 16)
          std::memcpy(dst, src, len * sizeof(float));
        else
          for (size_t i = 0; i < len; i++) dst[i] = src[i];
      } else {
        std::memset(dst, 0, len * sizeof(float));
      }
      dst += len;
      k += len;
      // Advance (ky, kx, ci) by len columns: at most a kernel row of taps.
      ci += len;
      while (ci >= cg) {
        ci -= cg;
        if (++kx == s.kw) {
          kx = 0;
          ++ky;
        }
      }
    }
    if (++ox == s.ow) {
      ox = 0;
      if (++oy == s.oh) {
        oy = 0;
        ++b;
      }
    }
  }
}

namespace {
inline float clampf(float v, float lo, float hi) {
  v = v < lo ? lo : v;
  return v > hi ? hi : v;
}
}  // namespace

void run_generic(const Shape& s, const float* x, const float* wp, const float* bias, const float* res, float* y, float lo, float hi,
                 size_t task, size_t ntasks_n, float* buf) {
  constexpr size_t MR = 4, NR = kPanel;
  const size_t O = s.o;
  walk_task(
      s, x, wp, task, ntasks_n, buf, kDepthBlock, false,
      [&](const float* a, size_t lda, size_t m0, size_t mc, size_t kc, bool first, bool last, const float* b, size_t col, size_t ncols) {
        for (size_t i = 0; i < mc; i += MR) {
          const size_t r = std::min(MR, mc - i);
          float acc[MR][NR] = {};
          for (size_t k = 0; k < kc; k++) {
            const float* bk = b + k * NR;
            for (size_t ri = 0; ri < r; ri++) {
              const float av = a[(i + ri) * lda + k];
              for (size_t j = 0; j < NR; j++) acc[ri][j] += av * bk[j];
            }
          }
          for (size_t ri = 0; ri < r; ri++) {
            const size_t row = m0 + i + ri;
            float* c = y + row * O + col;
            for (size_t j = 0; j < ncols; j++) {
              float v = acc[ri][j] + (first ? 0.0f : c[j]);
              if (last) {
                if (bias) v += bias[col + j];
                if (res) v += res[row * O + col + j];
                v = clampf(v, lo, hi);
              }
              c[j] = v;
            }
          }
        }
      });
}

}  // namespace convgemm

namespace {

using mx::array;

/** The packed weight [P, ...k, C / g, kPanel] back to [O, ...k, C / g] (g groups of P / g panels each). */
array unpack_weight(const array& wp, int o, int g, mx::Stream s) {
  array w = wp;
  if (avx2_build()) {
    // Each panel's halves [2, depth, 16] back to [depth, 32] (conv_pack_weight).
    const int P = wp.shape(0), depth = static_cast<int>(wp.size() / std::max<size_t>(1, static_cast<size_t>(P) * kPanel));
    w = mx::reshape(mx::transpose(mx::reshape(wp, {P, 2, depth, kPanel / 2}, s), {0, 2, 1, 3}, s), wp.shape(), s);
  }
  w = mx::moveaxis(w, -1, 1, s);  // [P, kPanel, ...k, C / g]
  mx::Shape shape(w.shape().begin() + 1, w.shape().end());
  shape[0] = wp.shape(0) * kPanel;
  w = mx::reshape(w, shape, s);
  if (g == 1) {
    mx::Shape start(w.ndim(), 0), stop = w.shape();
    stop[0] = o;
    return mx::slice(w, start, stop, s);
  }
  // [g, P / g * kPanel, ...] -> each group's first O / g channels.
  mx::Shape grouped{g, shape[0] / g};
  grouped.insert(grouped.end(), shape.begin() + 1, shape.end());
  w = mx::reshape(w, grouped, s);
  mx::Shape start(w.ndim(), 0), stop = w.shape();
  stop[1] = o / g;
  w = mx::slice(w, start, stop, s);
  shape[0] = o;
  return mx::reshape(w, shape, s);
}

array composed(const array& x, const array& wp, int o, const std::optional<array>& bias, const std::optional<array>& residual,
               const std::vector<int>& strides, const std::vector<int>& pb, const std::vector<int>& pe, const std::vector<int>& dil,
               float lo, float hi, mx::Stream s) {
  const std::vector<int> ones(strides.size(), 1);
  const int g = x.shape(-1) / wp.shape(-2);
  array y = mx::conv_general(x, unpack_weight(wp, o, g, s), strides, pb, pe, dil, ones, g, false, s);
  if (bias) y = mx::add(y, *bias, s);
  if (residual) y = mx::add(y, *residual, s);
  if (lo > -std::numeric_limits<float>::infinity()) y = mx::maximum(y, array(lo, y.dtype()), s);
  if (hi < std::numeric_limits<float>::infinity()) y = mx::minimum(y, array(hi, y.dtype()), s);
  return y;
}

class ConvGemm : public FusedPrimitive {
 public:
  ConvGemm(mx::Stream s, int o, std::vector<int> strides, std::vector<int> pb, std::vector<int> pe, std::vector<int> dil, float lo,
           float hi, bool has_bias, bool has_residual)
      : FusedPrimitive(s),
        o_(o),
        strides_(std::move(strides)),
        pb_(std::move(pb)),
        pe_(std::move(pe)),
        dil_(std::move(dil)),
        lo_(lo),
        hi_(hi),
        has_bias_(has_bias),
        has_residual_(has_residual) {}
  const char* name() const override { return "ConvGemm"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    if (typeid(other) != typeid(*this)) return false;
    auto& p = static_cast<const ConvGemm&>(other);
    return o_ == p.o_ && strides_ == p.strides_ && pb_ == p.pb_ && pe_ == p.pe_ && dil_ == p.dil_ && lo_ == p.lo_ && hi_ == p.hi_ &&
           has_bias_ == p.has_bias_ && has_residual_ == p.has_residual_;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<array>& in) override { return {out_shape(in[0].shape(), in[1].shape())}; }
  mx::Shape out_shape(const mx::Shape& x, const mx::Shape& wp) const {
    mx::Shape o{x[0]};
    for (size_t i = 0; i < strides_.size(); i++) {
      const int k = wp[1 + i], span = (k - 1) * dil_[i] + 1;
      o.push_back((x[1 + i] + pb_[i] + pe_[i] - span) / strides_[i] + 1);
    }
    o.push_back(o_);
    return o;
  }
  array compose(const std::vector<array>& in) const override {
    std::optional<array> b = has_bias_ ? std::optional<array>(in[2]) : std::nullopt;
    std::optional<array> r = has_residual_ ? std::optional<array>(in[has_bias_ ? 3 : 2]) : std::nullopt;
    return composed(in[0], in[1], o_, b, r, strides_, pb_, pe_, dil_, lo_, hi_, st());
  }

  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    auto& out = outs[0];
    const array& x = in[0];
    const array& wp = in[1];
    const array* res = has_residual_ ? &in[has_bias_ ? 3 : 2] : nullptr;
    // The residual is read at the position and channel written, in the store of the last pass over
    // K: its buffer may be the result's when that pass is the only one (earlier passes store sums).
    size_t depth = wp.shape(-2);
    for (int i = 1; i + 2 < wp.ndim(); i++) depth *= wp.shape(i);
    const size_t pass = convgemm::build_pass(depth);
    if (res && depth <= pass && res->is_donatable() && row_ordered(*res))
      out.copy_shared_buffer(*res);
    else
      out.set_data(mx::allocator::malloc(out.nbytes()));
    const bool two = x.ndim() == 4;
    convgemm::Shape sh{};
    sh.n = x.shape(0);
    sh.ih = two ? x.shape(1) : 1;
    sh.iw = x.shape(-2);
    sh.c = x.shape(-1);
    sh.oh = two ? out.shape(1) : 1;
    sh.ow = out.shape(-2);
    sh.kh = two ? wp.shape(1) : 1;
    sh.kw = wp.shape(-3);
    sh.sh = two ? strides_[0] : 1;
    sh.sw = strides_.back();
    sh.ph = two ? pb_[0] : 0;
    sh.pw = pb_.back();
    sh.dh = two ? dil_[0] : 1;
    sh.dw = dil_.back();
    sh.o = o_;
    sh.g = x.shape(-1) / wp.shape(-2);
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& a : in) enc.set_input_array(a);
    enc.set_output_array(out);
    // Views (the stem's move to channels-last) are copied into row order first (dense.h).
    const array x0 = row_ordered_input(x, enc);
    const array w0 = row_ordered_input(wp, enc);
    const array b0 = has_bias_ ? row_ordered_input(in[2], enc) : x0;
    const array r0 = res ? row_ordered_input(*res, enc) : x0;
    enc.dispatch([sh, x = array::unsafe_weak_copy(x0), wp = array::unsafe_weak_copy(w0), b = array::unsafe_weak_copy(b0),
                  r = array::unsafe_weak_copy(r0), out = array::unsafe_weak_copy(out), hb = has_bias_, hr = res != nullptr, lo = lo_,
                  hi = hi_, wino = wino_, w_held = w0]() mutable {
      const size_t M = sh.rows(), P = sh.panels();
      if (M == 0 || sh.o == 0) return;
      const float* xp = x.data<float>();
      const float* wpp = wp.data<float>();
      const float* bp = hb ? b.data<float>() : nullptr;
      const float* rp = hr ? r.data<float>() : nullptr;
      float* yp = out.data<float>();
      if (sh.depth() == 0) {
        // No input channels: the product is zero; the epilogue alone.
        for (size_t m = 0; m < M; m++)
          for (size_t j = 0; j < sh.o; j++) {
            float v = (bp ? bp[j] : 0.0f) + (rp ? rp[m * sh.o + j] : 0.0f);
            v = v < lo ? lo : v;
            yp[m * sh.o + j] = v > hi ? hi : v;
          }
        return;
      }
      // The weight's transform, kept for the next evaluation of this primitive (a compiled
      // replay's): keyed by the weight array, held here, so that no other array can take its id.
      // Few tiles take F(2x2, 3x3) only from the second evaluation of a weight on (winograd::fits:
      // an eager run's one evaluation keeps the direct product). A weight with an infinity or NaN
      // keeps the direct product (all_finite says why).
      if (winograd::fits(sh, true)) {
        std::lock_guard<std::mutex> lk(wino->m);
        const bool seen = wino->weight && wino->weight->id() == w_held.id();
        if (!seen) {
          wino->weight = w_held;
          wino->transformed = false;
          std::vector<float>().swap(wino->u);
        }
        if (winograd::fits(sh, seen) && winograd::all_finite(xp, sh.n * sh.ih * sh.iw * sh.c)) {
          if (!wino->transformed) {
            wino->finite = winograd::all_finite(wpp, wp.size());
            if (wino->finite) {
              wino->u.resize(winograd::weight_floats(sh));
              winograd::transform_weight(sh, wpp, avx2_build(), wino->u.data());
            }
            wino->transformed = true;
          }
          if (wino->finite) {
            winograd::run(sh, xp, wino->u.data(), bp, rp, yp, lo, hi);
            return;
          }
        }
      }
      // The widest vector build the CPU runs (conv_gemm_avx512.cpp, conv_gemm_avx2.cpp), else the portable loop.
      const int isa = has_avx512() ? 2 : has_avx2() ? 1 : 0;
      // Few channels per group: the direct kernel, over output rows. Its multiply-adds are the
      // real ones (no panel padding), so it goes over the threads from a quarter of the im2col
      // path's count: mobilenet-v3-ish's stem (1 M real, 2 M padded) ran on one thread at first,
      // where the im2col path had run it on two.
      if (isa == 1 && convgemm::direct_fits(sh)) {
        const size_t rows = sh.n * sh.oh, macs = M * sh.depth() * sh.o;
        const auto run_rows = [&](size_t r0, size_t r1) { convgemm::direct_avx2(sh, xp, wpp, bp, rp, yp, lo, hi, r0, r1); };
        if (macs < convgemm::kSerialMacs / 4 || num_threads() <= 1)
          run_rows(0, rows);
        else
          parallel_for(rows, 1, run_rows);
        return;
      }
      // Tasks: row blocks, each split over panel shares when there are too few blocks for the threads.
      const size_t blocks = (M + convgemm::kRowBlock - 1) / convgemm::kRowBlock;
      // A small product runs on this thread alone: waking the pool's threads and waiting for each
      // to check in costs more than the work (small-cnn's convs: 0.1-0.2 M multiply-adds).
      const size_t macs = M * sh.depth() * P * kPanel;
      const bool serial = macs < convgemm::kSerialMacs;
      const size_t threads = serial ? 1 : static_cast<size_t>(std::max(1, num_threads()));
      const size_t want = 4 * threads;
      const size_t shares = blocks >= want ? 1 : std::min(P, (want + blocks - 1) / blocks);
      // One pool chunk per thread, each taking single tasks until none is left: the pool's own
      // chunks (at most 4 per thread, of several tasks each) left one thread a chunk more than
      // the other on 2 cores (33 row blocks at 56x56: 5-task chunks, 4 against 3).
      const size_t ntasks = blocks * shares;
      // Blocks split over panel shares would each pack the same rows: pack them all once instead
      // (a row stride off multiples of 4 KiB), and let every task read them in place.
      convgemm::Shape run = sh;
      std::vector<float> rows;
      const float* xr = xp;
      if (shares > 1 && sh.g == 1 && !(sh.direct() && sh.depth() <= static_cast<size_t>(convgemm::kDepthBlock))) {
        const size_t K = sh.depth(), ld = K % 1024 == 0 ? K + 16 : K;
        rows.resize(M * ld);
        parallel_for_unless(serial, M, 8, [&](size_t m0, size_t m1) {
          for (size_t m = m0; m < m1; m++) convgemm::pack_rows(sh, xp, m, 1, 0, K, rows.data() + m * ld);
        });
        run.ld = ld;
        xr = rows.data();
      }
      std::atomic<size_t> next{0};
      parallel_for_unless(serial, std::min(threads, ntasks), 1, [&](size_t, size_t) {
        thread_local std::vector<float> buf;
        constexpr size_t most = std::max({convgemm::kDepthBlock, convgemm::kDepthAvx2, convgemm::kDepthAvx512});
        if (buf.size() < convgemm::kRowBlock * most) buf.resize(convgemm::kRowBlock * most);
        for (size_t t = next.fetch_add(1); t < ntasks; t = next.fetch_add(1)) {
          if (isa == 2)
            convgemm::run_avx512(run, xr, wpp, bp, rp, yp, lo, hi, t, shares, buf.data());
          else if (isa == 1)
            convgemm::run_avx2(run, xr, wpp, bp, rp, yp, lo, hi, t, shares, buf.data());
          else
            convgemm::run_generic(run, xr, wpp, bp, rp, yp, lo, hi, t, shares, buf.data());
        }
      });
    });
  }

 private:
  /** The transformed weight of the Winograd path (conv_winograd.h), and the weight array it came from. */
  struct WinogradWeight {
    std::mutex m;
    std::optional<array> weight;
    /** Whether u holds the weight's transform (or the weight was found not finite: then empty). */
    bool transformed = false;
    bool finite = false;
    std::vector<float> u;
  };

  int o_;
  std::vector<int> strides_, pb_, pe_, dil_;
  float lo_, hi_;
  bool has_bias_, has_residual_;
  std::shared_ptr<WinogradWeight> wino_ = std::make_shared<WinogradWeight>();
};

}  // namespace

array conv_pack_weight(const array& w, mx::Stream s) {
  if (w.ndim() < 3) throw std::invalid_argument("conv_pack_weight: w must be [O, ...kernel, C], got rank " + std::to_string(w.ndim()));
  const int o = w.shape(0), p = (o + kPanel - 1) / kPanel;
  array x = w;
  if (p * kPanel != o) {
    std::vector<std::pair<int, int>> pad(w.ndim(), {0, 0});
    pad[0] = {0, p * kPanel - o};
    x = mx::pad(x, pad, array(0, w.dtype()), "constant", s);
  }
  mx::Shape shape{p, kPanel};
  shape.insert(shape.end(), w.shape().begin() + 1, w.shape().end());
  if (avx2_build()) {
    // [p, 2, 16, depth] -> [p, 2, depth, 16], under the packed shape.
    int depth = 1;
    for (int i = 1; i < w.ndim(); i++) depth *= w.shape(i);
    x = mx::transpose(mx::reshape(x, {p, 2, kPanel / 2, depth}, s), {0, 1, 3, 2}, s);
    mx::Shape packed{p};
    packed.insert(packed.end(), w.shape().begin() + 1, w.shape().end());
    packed.push_back(kPanel);
    return mx::reshape(mx::contiguous(x, false, s), packed, s);
  }
  x = mx::reshape(x, shape, s);
  return mx::contiguous(mx::moveaxis(x, 1, -1, s), false, s);
}

array conv_gemm(const array& x, const array& wp, int o, const std::optional<array>& bias, const std::optional<array>& residual,
                const std::vector<int>& strides, const std::vector<int>& pads_begin, const std::vector<int>& pads_end,
                const std::vector<int>& dilations, float lo, float hi, mx::Stream s) {
  const int sp = static_cast<int>(x.ndim()) - 2;
  if (sp < 1) throw std::invalid_argument("conv_gemm: x must be [N, ...spatial, C], got rank " + std::to_string(x.ndim()));
  if (wp.ndim() != x.ndim() + 1)
    throw std::invalid_argument("conv_gemm: the packed weight must be [P, ...kernel, C, " + std::to_string(kPanel) + "] of rank " +
                                std::to_string(x.ndim() + 1) + ", got rank " + std::to_string(wp.ndim()));
  if (wp.shape(-1) != kPanel) throw std::invalid_argument("conv_gemm: the packed weight's last axis must be " + std::to_string(kPanel));
  // Groups: the input's channels over the weight's (one group when they are equal).
  const int cg = wp.shape(-2), c = x.shape(-1);
  if (cg <= 0 || c <= 0 || c % cg != 0)
    throw std::invalid_argument("conv_gemm: the input has " + std::to_string(c) + " channels, the weight " + std::to_string(cg) +
                                " (the input's must be a multiple of the weight's, one group each)");
  const int g = c / cg;
  if (o % g != 0)
    throw std::invalid_argument("conv_gemm: " + std::to_string(o) + " output channels do not split into " + std::to_string(g) +
                                " groups (" + std::to_string(c) + " input channels of " + std::to_string(cg) + " each)");
  if (o <= 0 || static_cast<long>(g) * ((o / g + kPanel - 1) / kPanel) != wp.shape(0))
    throw std::invalid_argument("conv_gemm: " + std::to_string(o) + " output channels" +
                                (g > 1 ? " in " + std::to_string(g) + " groups" : std::string()) + " do not fill " +
                                std::to_string(wp.shape(0)) + " panels of " + std::to_string(kPanel));
  auto per_axis = [&](const std::vector<int>& v, const char* what, int least) {
    if (static_cast<int>(v.size()) != sp)
      throw std::invalid_argument(std::string("conv_gemm: ") + what + " needs " + std::to_string(sp) + " values, got " +
                                  std::to_string(v.size()));
    for (int e : v)
      if (e < least) throw std::invalid_argument(std::string("conv_gemm: ") + what + " must be at least " + std::to_string(least));
  };
  per_axis(strides, "strides", 1);
  per_axis(pads_begin, "pads_begin", 0);
  per_axis(pads_end, "pads_end", 0);
  per_axis(dilations, "dilations", 1);
  for (int i = 0; i < sp; i++) {
    // In 64 bits: a huge dilation or pad must not wrap past the check.
    const int64_t span = (static_cast<int64_t>(wp.shape(1 + i)) - 1) * dilations[i] + 1;
    const int64_t padded = static_cast<int64_t>(x.shape(1 + i)) + pads_begin[i] + pads_end[i];
    if (padded < span)
      throw std::invalid_argument("conv_gemm: the window (" + std::to_string(span) + ") is larger than the padded input (" +
                                  std::to_string(padded) + ") on spatial axis " + std::to_string(i));
    if (padded > std::numeric_limits<int32_t>::max())
      throw std::invalid_argument("conv_gemm: the padded input (" + std::to_string(padded) + ") on spatial axis " + std::to_string(i) +
                                  " is past 2^31 - 1");
  }
  if (bias && (bias->ndim() != 1 || bias->shape(0) != o))
    throw std::invalid_argument("conv_gemm: bias must be a vector of " + std::to_string(o) + " channels");
  auto prim = std::make_shared<ConvGemm>(s, o, strides, pads_begin, pads_end, dilations, lo, hi, bias.has_value(), residual.has_value());
  const mx::Shape out = prim->out_shape(x.shape(), wp.shape());
  if (residual && residual->shape() != out) throw std::invalid_argument("conv_gemm: the residual must have the result's shape");
  const bool native = !kernels_off() && s.device == mx::Device::cpu && sp <= 2 && x.dtype() == mx::float32 && wp.dtype() == mx::float32 &&
                      (!bias || bias->dtype() == mx::float32) && (!residual || residual->dtype() == mx::float32);
  if (!native) return composed(x, wp, o, bias, residual, strides, pads_begin, pads_end, dilations, lo, hi, s);
  // Any layout: eval_cpu copies an input that is not in row order (dense.h).
  std::vector<array> in{x, wp};
  if (bias) in.push_back(*bias);
  if (residual) in.push_back(*residual);
  return array(out, mx::float32, std::move(prim), std::move(in));
}

void conv_pack_host(float* dst, const void* src_bytes, size_t o, size_t c, size_t s, size_t group) {
  if (group == 0 || o % group != 0)
    throw std::invalid_argument("conv_pack_host: " + std::to_string(o) + " output channels do not split into " + std::to_string(group) +
                                " groups");
  constexpr size_t P = 32, H = P / 2;
  const size_t og = o / group, per = (og + P - 1) / P, depth = s * c;
  const bool split = avx2_build();
  const size_t stride = split ? H : P;
  // Zeros past each group's channels come from the caller's zero-filled buffer; its pages are populated first.
  populate_host(dst, group * per * depth * P * sizeof(float));
  const auto* src = static_cast<const unsigned char*>(src_bytes);
  // Output channels in turn (each writes its own lanes of its panel), about 64 KiB of weights a task.
  parallel_for(o, std::max<size_t>(1, (size_t{1} << 14) / std::max<size_t>(depth, 1)), [=](size_t o0, size_t o1) {
    for (size_t oi = o0; oi < o1; oi++) {
      const size_t gi = oi / og, oj = oi - gi * og, j = oj % P;
      const size_t panel = (gi * per + oj / P) * depth * P;
      float* base = dst + (split ? panel + (j >= H ? depth * H : 0) + j % H : panel + j);
      const unsigned char* from = src + oi * depth * sizeof(float);
      for (size_t ci = 0; ci < c; ci++)
        for (size_t si = 0; si < s; si++) std::memcpy(base + (si * c + ci) * stride, from + (ci * s + si) * sizeof(float), sizeof(float));
    }
  });
}

}  // namespace mlxc::cpu

extern "C" int mlxc_conv_pack_host(void* dst, const void* src, size_t o, size_t c, size_t s, size_t group) {
  if (!dst || !src) {
    mlxc::raise("mlxc_conv_pack_host: dst and src must not be null");
    return 1;
  }
  try {
    mlxc::cpu::conv_pack_host(static_cast<float*>(dst), src, o, c, s, group);
  } catch (const std::exception& e) {
    mlxc::raise(e.what());
    return 1;
  }
  return 0;
}

extern "C" int mlxc_conv_split_halves(bool* res) {
  if (!res) {
    mlxc::raise("mlxc_conv_split_halves: res is null");
    return 1;
  }
  *res = mlxc::cpu::avx2_build();
  return 0;
}
