// The channels-last max and average pools as MLX primitives (see pool.h).
#include "kernels/pool/pool.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <typeinfo>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "kernels/common/fused_primitive.h"
#include "kernels/common/dense.h"
#include "kernels/common/cpu.h"
#include "mlx/backend/cpu/encoder.h"

namespace mlxc::cpu {
namespace avx2 {
/** Output rows [r0, r1) of a channels-last max pool, channels [0, c8) (a multiple of 8; pool_avx2.cpp). */
void max_pool_rows(const float* x, float* y, const PoolGeom& p, size_t c8, size_t r0, size_t r1);
}  // namespace avx2
namespace {

using mx::array;

/** Output rows per pool chunk for rows of `per_row` window taps: at least ~32k taps a chunk, as the
 * conv kernels do. A small pool (small-cnn's 2x2 max over 14x14x8: 6k taps) runs on the calling
 * thread; waking the pool's threads and waiting for them cost more than the loop. */
inline size_t row_grain(size_t per_row) { return per_row >= 32768 ? 1 : 32768 / (per_row ? per_row : 1); }

array composed(const array& x, const std::vector<int>& k, const std::vector<int>& st, const std::vector<int>& pb,
               const std::vector<int>& pe, const std::vector<int>& dil, const mx::Shape& out, mx::Stream s) {
  const int sp = static_cast<int>(k.size());
  std::vector<int> axes;
  for (int i = 0; i < sp; i++) axes.push_back(1 + i);
  mx::Shape lo(pb.begin(), pb.end()), hi(pe.begin(), pe.end());
  const array padded = mx::pad(x, axes, lo, hi, array(std::numeric_limits<float>::lowest(), x.dtype()), "constant", s);
  std::optional<array> y;
  std::vector<int> tap(sp, 0);
  while (true) {
    mx::Shape start(padded.ndim(), 0), stop = padded.shape(), step(padded.ndim(), 1);
    for (int i = 0; i < sp; i++) {
      start[1 + i] = tap[i] * dil[i];
      stop[1 + i] = start[1 + i] + (out[1 + i] - 1) * st[i] + 1;
      step[1 + i] = st[i];
    }
    array v = mx::slice(padded, start, stop, step, s);
    y = y ? mx::maximum(*y, v, s) : v;
    int i = sp - 1;
    while (i >= 0 && ++tap[i] == k[i]) tap[i--] = 0;
    if (i < 0) break;
  }
  return *y;
}

/** acc = v where v > acc or v is NaN (maximum's NaN rule: a NaN in the window is the result), in
 * blocks of W; SSE2 for blocks of 4 on x86-64 (the compiler left the select scalar). */
template <size_t W>
inline void max_into(float* acc, const float* v) {
#if defined(__SSE2__)
  if constexpr (W % 4 == 0) {
    for (size_t i = 0; i < W; i += 4) {
      const __m128 a = _mm_loadu_ps(acc + i), b = _mm_loadu_ps(v + i);
      const __m128 m = _mm_or_ps(_mm_cmpgt_ps(b, a), _mm_cmpunord_ps(b, b));
      _mm_storeu_ps(acc + i, _mm_or_ps(_mm_and_ps(m, b), _mm_andnot_ps(m, a)));
    }
    return;
  }
  // One lane at a time, the same select: the compiler's compare and branch on the data mispredicted
  // on every other tap of noisy data (a one-channel 2x2 pool of 1568 outputs took 45 us).
  for (size_t i = 0; i < W; i++) {
    const __m128 a = _mm_load_ss(acc + i), b = _mm_load_ss(v + i);
    const __m128 m = _mm_or_ps(_mm_cmpgt_ss(b, a), _mm_cmpunord_ss(b, b));
    _mm_store_ss(acc + i, _mm_or_ps(_mm_and_ps(m, b), _mm_andnot_ps(m, a)));
  }
  return;
#endif
  for (size_t i = 0; i < W; i++) acc[i] = (v[i] > acc[i] || v[i] != v[i]) ? v[i] : acc[i];
}

/** y[c0, c0 + cn) = the max over window w of channels [c0, c0 + cn), W at a time in a local block
 * (cn a multiple of W): it stays in registers, where through y every channel of every tap was
 * reloaded and stored (y might alias the input). */
template <size_t W>
inline void window_max(const float* xb, float* y, const PoolGeom& p, const PoolWindow& w, size_t c0, size_t cn) {
  for (size_t j = 0; j < cn; j += W) {
    alignas(16) float acc[W];
    for (size_t ci = 0; ci < W; ci++) acc[ci] = std::numeric_limits<float>::lowest();
    for (size_t ky = w.ky0; ky < w.ky1; ky++) {
      const size_t iy = w.oy * p.sh + ky * p.dh - p.ph;
      for (size_t kx = w.kx0; kx < w.kx1; kx++) {
        const size_t ix = w.ox * p.sw + kx * p.dw - p.pw;
        max_into<W>(acc, xb + (iy * p.iw + ix) * p.c + c0 + j);
      }
    }
    for (size_t ci = 0; ci < W; ci++) y[c0 + j + ci] = acc[ci];
  }
}

class MaxPoolChannelsLast : public FusedPrimitive {
 public:
  MaxPoolChannelsLast(mx::Stream s, std::vector<int> k, std::vector<int> st, std::vector<int> pb, std::vector<int> pe, std::vector<int> dil)
      : FusedPrimitive(s), k_(std::move(k)), st_(std::move(st)), pb_(std::move(pb)), pe_(std::move(pe)), dil_(std::move(dil)) {}
  const char* name() const override { return "MaxPoolChannelsLast"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    if (typeid(other) != typeid(*this)) return false;
    auto& p = static_cast<const MaxPoolChannelsLast&>(other);
    return k_ == p.k_ && st_ == p.st_ && pb_ == p.pb_ && pe_ == p.pe_ && dil_ == p.dil_;
  }
  mx::Shape out_shape(const mx::Shape& x) const {
    mx::Shape o{x[0]};
    for (size_t i = 0; i < k_.size(); i++) o.push_back((x[1 + i] + pb_[i] + pe_[i] - ((k_[i] - 1) * dil_[i] + 1)) / st_[i] + 1);
    o.push_back(x.back());
    return o;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<array>& in) override { return {out_shape(in[0].shape())}; }
  array compose(const std::vector<array>& in) const override {
    return composed(in[0], k_, st_, pb_, pe_, dil_, out_shape(in[0].shape()), st());
  }

  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    auto& out = outs[0];
    const array& x = in[0];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    const bool two = x.ndim() == 4;
    const PoolGeom p{static_cast<size_t>(x.shape(0)),
                     two ? static_cast<size_t>(x.shape(1)) : 1,
                     static_cast<size_t>(x.shape(-2)),
                     static_cast<size_t>(x.shape(-1)),
                     two ? static_cast<size_t>(out.shape(1)) : 1,
                     static_cast<size_t>(out.shape(-2)),
                     two ? static_cast<size_t>(k_[0]) : 1,
                     static_cast<size_t>(k_.back()),
                     two ? static_cast<size_t>(st_[0]) : 1,
                     static_cast<size_t>(st_.back()),
                     two ? static_cast<size_t>(pb_[0]) : 0,
                     static_cast<size_t>(pb_.back()),
                     two ? static_cast<size_t>(dil_[0]) : 1,
                     static_cast<size_t>(dil_.back())};
    auto& enc = mx::cpu::get_command_encoder(stream());
    enc.set_input_array(x);
    enc.set_output_array(out);
    const array x0 = row_ordered_input(x, enc);  // a view is copied into row order first (dense.h)
    enc.dispatch([p, x = array::unsafe_weak_copy(x0), out = array::unsafe_weak_copy(out)]() mutable {
      const float* xp = x.data<float>();
      float* yp = out.data<float>();
      const size_t rows = p.n * p.oh;
      if (rows == 0 || p.ow == 0 || p.c == 0) return;
      // Whole vectors of 8 channels by the AVX2 loop where the CPU has it (pool_avx2.cpp), the
      // rest here: 8 at a time, then 4, then the last few one by one.
      const size_t vec = has_avx2() ? p.c / 8 * 8 : 0;
      parallel_for(rows, row_grain(p.ow * p.c * p.kh * p.kw), [&](size_t r0, size_t r1) {
        if (vec) avx2::max_pool_rows(xp, yp, p, vec, r0, r1);
        if (vec == p.c) return;
        const size_t c8 = vec + (p.c - vec) / 8 * 8, c4 = vec + (p.c - vec) / 4 * 4;
        for_each_window(xp, yp, p, r0, r1, [&](const float* xb, float* y, const PoolWindow& w) {
          window_max<8>(xb, y, p, w, vec, c8 - vec);
          window_max<4>(xb, y, p, w, c8, c4 - c8);
          window_max<1>(xb, y, p, w, c4, p.c - c4);
        });
      });
    });
  }

 private:
  std::vector<int> k_, st_, pb_, pe_, dil_;
};

/** Output size of one axis of the average pool (ONNX's formula, ceil_mode's last window dropped
 * when it would start in the end padding). */
int avg_out_size(int in, int k, int st, int pb, int pe, int dil, bool ceil_mode) {
  const int room = in + pb + pe - ((k - 1) * dil + 1);
  int o = (ceil_mode ? (room + st - 1) / st : room / st) + 1;
  if (ceil_mode && (o - 1) * st >= in + pb) o--;
  return o;
}

/** Per output index of one axis: how many of its window's taps the divisor counts (taps inside
 * [-pb, in + pe) with count_include_pad, else inside [0, in)). The window is a product of its
 * axes, so a window's count is the product of its axes' counts. */
std::vector<float> axis_counts(int in, int out, int k, int st, int pb, int pe, int dil, bool include_pad) {
  std::vector<float> c(out, 0.0f);
  const int lo = include_pad ? -pb : 0, hi = include_pad ? in + pe : in;
  for (int o = 0; o < out; o++)
    for (int t = 0; t < k; t++) {
      const int i = o * st + t * dil - pb;
      if (i >= lo && i < hi) c[o] += 1.0f;
    }
  return c;
}

struct AvgParams {
  std::vector<int> k, st, pb, pe, dil;
  bool ceil_mode, include_pad;
  bool operator==(const AvgParams& o) const {
    return k == o.k && st == o.st && pb == o.pb && pe == o.pe && dil == o.dil && ceil_mode == o.ceil_mode && include_pad == o.include_pad;
  }
  mx::Shape out_shape(const mx::Shape& x) const {
    mx::Shape o{x[0]};
    for (size_t i = 0; i < k.size(); i++) o.push_back(avg_out_size(x[1 + i], k[i], st[i], pb[i], pe[i], dil[i], ceil_mode));
    o.push_back(x.back());
    return o;
  }
};

/** MLX's composition: the zero-padded input's strided tap slices summed, divided by the counts. */
array avg_composed(const array& x, const AvgParams& p, mx::Stream s) {
  const int sp = static_cast<int>(p.k.size());
  const mx::Shape out = p.out_shape(x.shape());
  std::vector<int> axes;
  mx::Shape lo, hi;
  for (int i = 0; i < sp; i++) {
    axes.push_back(1 + i);
    lo.push_back(p.pb[i]);
    // Room for the last window's taps, the ceil overhang included (zeros: summed as nothing).
    const int need = (out[1 + i] - 1) * p.st[i] + (p.k[i] - 1) * p.dil[i] + 1;
    hi.push_back(std::max(p.pe[i], need - x.shape(1 + i) - p.pb[i]));
  }
  const array padded = mx::pad(x, axes, lo, hi, array(0.0f, x.dtype()), "constant", s);
  std::optional<array> y;
  std::vector<int> tap(sp, 0);
  while (true) {
    mx::Shape start(padded.ndim(), 0), stop = padded.shape(), step(padded.ndim(), 1);
    for (int i = 0; i < sp; i++) {
      start[1 + i] = tap[i] * p.dil[i];
      stop[1 + i] = start[1 + i] + (out[1 + i] - 1) * p.st[i] + 1;
      step[1 + i] = p.st[i];
    }
    array v = mx::slice(padded, start, stop, step, s);
    y = y ? mx::add(*y, v, s) : v;
    int i = sp - 1;
    while (i >= 0 && ++tap[i] == p.k[i]) tap[i--] = 0;
    if (i < 0) break;
  }
  // The counts as one host-built array [1, ...out, 1] (products of the axes' counts).
  std::vector<float> count{1.0f};
  mx::Shape cshape{1};
  for (int i = 0; i < sp; i++) {
    const auto c = axis_counts(x.shape(1 + i), out[1 + i], p.k[i], p.st[i], p.pb[i], p.pe[i], p.dil[i], p.include_pad);
    std::vector<float> next;
    next.reserve(count.size() * c.size());
    for (float a : count)
      for (float b : c) next.push_back(a * b);
    count.swap(next);
    cshape.push_back(out[1 + i]);
  }
  cshape.push_back(1);
  const array counts(count.begin(), cshape, mx::float32);
  return mx::divide(*y, mx::astype(counts, y->dtype(), s), s);
}

class AvgPoolChannelsLast : public FusedPrimitive {
 public:
  AvgPoolChannelsLast(mx::Stream s, AvgParams p) : FusedPrimitive(s), p_(std::move(p)) {}
  const char* name() const override { return "AvgPoolChannelsLast"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    return typeid(other) == typeid(*this) && static_cast<const AvgPoolChannelsLast&>(other).p_ == p_;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<array>& in) override { return {p_.out_shape(in[0].shape())}; }
  array compose(const std::vector<array>& in) const override { return avg_composed(in[0], p_, st()); }

  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    auto& out = outs[0];
    const array& x = in[0];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    const bool two = x.ndim() == 4;
    const int ih = two ? x.shape(1) : 1, iw = x.shape(-2), oh = two ? out.shape(1) : 1, ow = out.shape(-2);
    const int kh = two ? p_.k[0] : 1, sh = two ? p_.st[0] : 1, ph = two ? p_.pb[0] : 0, peh = two ? p_.pe[0] : 0, dh = two ? p_.dil[0] : 1;
    struct P {
      size_t n, ih, iw, c, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
    } p{static_cast<size_t>(x.shape(0)), static_cast<size_t>(ih),           static_cast<size_t>(iw), static_cast<size_t>(x.shape(-1)),
        static_cast<size_t>(oh),         static_cast<size_t>(ow),           static_cast<size_t>(kh), static_cast<size_t>(p_.k.back()),
        static_cast<size_t>(sh),         static_cast<size_t>(p_.st.back()), static_cast<size_t>(ph), static_cast<size_t>(p_.pb.back()),
        static_cast<size_t>(dh),         static_cast<size_t>(p_.dil.back())};
    std::vector<float> cy = axis_counts(ih, oh, kh, sh, ph, peh, dh, p_.include_pad);
    std::vector<float> cx = axis_counts(iw, ow, p_.k.back(), p_.st.back(), p_.pb.back(), p_.pe.back(), p_.dil.back(), p_.include_pad);
    auto& enc = mx::cpu::get_command_encoder(stream());
    enc.set_input_array(x);
    enc.set_output_array(out);
    const array x0 = row_ordered_input(x, enc);  // a view is copied into row order first (dense.h)
    enc.dispatch(
        [p, cy = std::move(cy), cx = std::move(cx), x = array::unsafe_weak_copy(x0), out = array::unsafe_weak_copy(out)]() mutable {
          const float* xp = x.data<float>();
          float* yp = out.data<float>();
          const size_t rows = p.n * p.oh;
          if (rows == 0 || p.ow == 0 || p.c == 0) return;
          parallel_for(rows, row_grain(p.ow * p.c * p.kh * p.kw), [&](size_t r0, size_t r1) {
            for (size_t r = r0; r < r1; r++) {
              const size_t b = r / p.oh, oy = r % p.oh;
              const float* xb = xp + b * p.ih * p.iw * p.c;
              for (size_t ox = 0; ox < p.ow; ox++) {
                float* y = yp + (r * p.ow + ox) * p.c;
                for (size_t ci = 0; ci < p.c; ci++) y[ci] = 0.0f;
                for (size_t ky = 0; ky < p.kh; ky++) {
                  // Unsigned: a tap before the input wraps to a huge index and fails the bound check.
                  const size_t iy = oy * p.sh + ky * p.dh - p.ph;
                  if (iy >= p.ih) continue;
                  for (size_t kx = 0; kx < p.kw; kx++) {
                    const size_t ix = ox * p.sw + kx * p.dw - p.pw;
                    if (ix >= p.iw) continue;
                    const float* v = xb + (iy * p.iw + ix) * p.c;
                    for (size_t ci = 0; ci < p.c; ci++) y[ci] += v[ci];
                  }
                }
                // A window with nothing counted divides by zero, as the composition does.
                const float count = cy[oy] * cx[ox];
                for (size_t ci = 0; ci < p.c; ci++) y[ci] /= count;
              }
            }
          });
        });
  }

 private:
  AvgParams p_;
};

/**
 * The checks both channels-last pools make of their arguments (x [N, ...spatial, C] floating point,
 * one kernel/stride/pad/dilation per spatial axis, each window within the padded input); returns
 * the number of spatial axes. `name` starts each message.
 */
int check_pool_args(const char* name, const array& x, const std::vector<int>& kernel, const std::vector<int>& strides,
                    const std::vector<int>& pads_begin, const std::vector<int>& pads_end, const std::vector<int>& dilations) {
  const std::string fn = name;
  const int sp = static_cast<int>(x.ndim()) - 2;
  if (sp < 1) throw std::invalid_argument(fn + ": x must be [N, ...spatial, C], got rank " + std::to_string(x.ndim()));
  auto per_axis = [&](const std::vector<int>& v, const char* what, int least) {
    if (static_cast<int>(v.size()) != sp)
      throw std::invalid_argument(fn + ": " + what + " needs " + std::to_string(sp) + " values, got " + std::to_string(v.size()));
    for (int e : v)
      if (e < least) throw std::invalid_argument(fn + ": " + what + " must be at least " + std::to_string(least));
  };
  per_axis(kernel, "kernel", 1);
  per_axis(strides, "strides", 1);
  per_axis(pads_begin, "pads_begin", 0);
  per_axis(pads_end, "pads_end", 0);
  per_axis(dilations, "dilations", 1);
  for (int i = 0; i < sp; i++) {
    const int span = (kernel[i] - 1) * dilations[i] + 1;
    if (x.shape(1 + i) + pads_begin[i] + pads_end[i] < span)
      throw std::invalid_argument(fn + ": the window (" + std::to_string(span) + ") is larger than the padded input (" +
                                  std::to_string(x.shape(1 + i) + pads_begin[i] + pads_end[i]) + ") on spatial axis " + std::to_string(i));
  }
  if (!mx::issubdtype(x.dtype(), mx::floating)) throw std::invalid_argument(fn + ": x must be floating point");
  return sp;
}

}  // namespace

array max_pool_channels_last(const array& x, const std::vector<int>& kernel, const std::vector<int>& strides,
                             const std::vector<int>& pads_begin, const std::vector<int>& pads_end, const std::vector<int>& dilations,
                             mx::Stream s) {
  const int sp = check_pool_args("max_pool_channels_last", x, kernel, strides, pads_begin, pads_end, dilations);
  auto prim = std::make_shared<MaxPoolChannelsLast>(s, kernel, strides, pads_begin, pads_end, dilations);
  const mx::Shape out = prim->out_shape(x.shape());
  const bool native = !kernels_off() && s.device == mx::Device::cpu && sp <= 2 && x.dtype() == mx::float32;
  if (!native) return composed(x, kernel, strides, pads_begin, pads_end, dilations, out, s);
  return array(out, mx::float32, std::move(prim), {x});
}

}  // namespace mlxc::cpu

namespace mlxc::cpu {

array avg_pool_channels_last(const array& x, const std::vector<int>& kernel, const std::vector<int>& strides,
                             const std::vector<int>& pads_begin, const std::vector<int>& pads_end, const std::vector<int>& dilations,
                             bool ceil_mode, bool count_include_pad, mx::Stream s) {
  const int sp = check_pool_args("avg_pool_channels_last", x, kernel, strides, pads_begin, pads_end, dilations);
  AvgParams p{kernel, strides, pads_begin, pads_end, dilations, ceil_mode, count_include_pad};
  const bool native = !kernels_off() && s.device == mx::Device::cpu && sp <= 2 && x.dtype() == mx::float32;
  if (!native) return avg_composed(x, p, s);
  const mx::Shape out = p.out_shape(x.shape());
  return array(out, mx::float32, std::make_shared<AvgPoolChannelsLast>(s, std::move(p)), {x});
}

}  // namespace mlxc::cpu
