// The convolution epilogue as an MLX primitive (see epilogue.h). Composed from MLX's ops it is a
// layout copy plus three elementwise passes over the output (or one fused kernel that reads the
// channels-last data with strides); here it is one pass: row by row when the layout stays, and in
// tiles (a block of positions by a block of channels, both in L1) when it moves. Channels-last
// rows [M, C] stay as they are (row by row, the bias along the row).
#include "kernels/conv/epilogue.h"

#include <limits>
#include <stdexcept>
#include <typeinfo>

#include "kernels/activation/math.h"
#include "kernels/common/dense.h"
#include "kernels/common/cpu.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"
#include "mlx/transforms.h"

namespace mlxc::cpu {
namespace {

namespace mx = mlx::core;
using mx::array;

/** NaN-preserving clamp: a comparison with NaN is false, so NaN passes through both. */
inline float clampf(float v, float lo, float hi) {
  v = v < lo ? lo : v;
  return v > hi ? hi : v;
}

array composed(const array& y, const std::optional<array>& bias, const std::optional<array>& residual, float lo, float hi, int act,
               float alpha, float beta, bool channels_last, mx::Stream s) {
  array x = channels_last ? mx::moveaxis(y, -1, 1, s) : y;
  if (bias) {
    mx::Shape shape(x.ndim(), 1);
    shape[1] = -1;
    x = mx::add(x, mx::reshape(*bias, shape, s), s);
  }
  if (residual) x = mx::add(x, *residual, s);
  // maximum and minimum keep NaN, as the clamp above does.
  if (lo > -std::numeric_limits<float>::infinity()) x = mx::maximum(x, array(lo, x.dtype()), s);
  if (hi < std::numeric_limits<float>::infinity()) x = mx::minimum(x, array(hi, x.dtype()), s);
  if (act == 0) return x;
  auto h = mx::add(mx::multiply(x, array(alpha, x.dtype()), s), array(beta, x.dtype()), s);
  h = mx::minimum(mx::maximum(h, array(0.0f, x.dtype()), s), array(1.0f, x.dtype()), s);
  return act == 1 ? h : mx::multiply(x, h, s);
}

class ConvEpilogue : public mx::Primitive {
 public:
  ConvEpilogue(mx::Stream s, float lo, float hi, int act, float alpha, float beta, bool channels_last, bool has_bias, bool has_residual)
      : mx::Primitive(s),
        lo_(lo),
        hi_(hi),
        act_(act),
        alpha_(alpha),
        beta_(beta),
        channels_last_(channels_last),
        has_bias_(has_bias),
        has_residual_(has_residual) {}
  const char* name() const override { return "ConvEpilogue"; }
  bool is_equivalent(const mx::Primitive& o) const override {
    if (typeid(o) != typeid(*this)) return false;
    auto& p = static_cast<const ConvEpilogue&>(o);
    return lo_ == p.lo_ && hi_ == p.hi_ && act_ == p.act_ && alpha_ == p.alpha_ && beta_ == p.beta_ && channels_last_ == p.channels_last_ &&
           has_bias_ == p.has_bias_ && has_residual_ == p.has_residual_;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<array>& in) override { return {out_shape(in[0].shape(), channels_last_)}; }
  /** Whether the result has y's layout: channels-first, or channels-last rows [m, c] (no spatial axes). */
  bool layout_stays(const array& y) const { return !channels_last_ || y.ndim() == 2; }
  static mx::Shape out_shape(const mx::Shape& y, bool channels_last) {
    if (!channels_last) return y;
    mx::Shape o{y[0], y.back()};
    o.insert(o.end(), y.begin() + 1, y.end() - 1);
    return o;
  }
  array compose(const std::vector<array>& in) const {
    auto s = const_cast<ConvEpilogue*>(this)->stream();
    std::optional<array> b = has_bias_ ? std::optional<array>(in[1]) : std::nullopt;
    std::optional<array> r = has_residual_ ? std::optional<array>(in[has_bias_ ? 2 : 1]) : std::nullopt;
    return composed(in[0], b, r, lo_, hi_, act_, alpha_, beta_, channels_last_, s);
  }
  std::vector<array> vjp(const std::vector<array>& primals, const std::vector<array>& cotangents, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    auto f = [this](const std::vector<array>& in) { return std::vector<array>{compose(in)}; };
    auto grads = mx::vjp(f, primals, cotangents).second;
    std::vector<array> out;
    for (int i : argnums) out.push_back(grads[i]);
    return out;
  }
  void eval_gpu(const std::vector<array>&, std::vector<array>&) override {
    throw std::runtime_error("ConvEpilogue is a CPU kernel (the front end composes MLX ops on other devices)");
  }
  /** The pass itself: out = act(clamp(y' + bias + residual, lo, hi)) (a task: it copies what it reads of the primitive). */
  template <int Act>
  static void run(const array& y, const array& b, const array& r, array out, bool hb, bool hr, float lo, float hi, float alpha, float beta,
                  bool cl) {
    auto fin = [lo, hi](float v) { return clampf(v, lo, hi); };
    // The activation over a span just written (in L1), by the vectorized builds of math.h.
    auto act = [alpha, beta](float* p, size_t m) {
      if constexpr (Act != 0) hard_sigmoid_rows(p, p, m, alpha, beta, Act == 2);
    };
    const float* yp = y.data<float>();
    const float* bp = hb ? b.data<float>() : nullptr;
    const float* rp = hr ? r.data<float>() : nullptr;
    float* op = out.data<float>();
    const size_t n = out.shape(0), c = out.shape(1), sp = n && c ? out.size() / (n * c) : 0;
    if (cl && out.ndim() == 2) {
      // Channels-last rows [m, c] that stay so: c contiguous floats, the bias a vector along them.
      parallel_for(n, (16384 + c - 1) / (c ? c : 1), [&](size_t r0, size_t r1) {
        for (size_t row = r0; row < r1; row++) {
          const float* yr = yp + row * c;
          const float* rr = rp ? rp + row * c : nullptr;
          float* orow = op + row * c;
          if (bp && rr)
            for (size_t i = 0; i < c; i++) orow[i] = fin(yr[i] + bp[i] + rr[i]);
          else if (bp)
            for (size_t i = 0; i < c; i++) orow[i] = fin(yr[i] + bp[i]);
          else if (rr)
            for (size_t i = 0; i < c; i++) orow[i] = fin(yr[i] + rr[i]);
          else
            for (size_t i = 0; i < c; i++) orow[i] = fin(yr[i]);
          act(orow, c);
        }
      });
      return;
    }
    if (!cl) {
      // Row (n, ch): sp contiguous floats with one bias value.
      parallel_for(n * c, (16384 + sp - 1) / (sp ? sp : 1), [&](size_t r0, size_t r1) {
        for (size_t row = r0; row < r1; row++) {
          const float bv = bp ? bp[row % c] : 0.0f;
          const float* yr = yp + row * sp;
          const float* rr = rp ? rp + row * sp : nullptr;
          float* orow = op + row * sp;
          if (rr)
            for (size_t i = 0; i < sp; i++) orow[i] = fin(yr[i] + bv + rr[i]);
          else
            for (size_t i = 0; i < sp; i++) orow[i] = fin(yr[i] + bv);
          act(orow, sp);
        }
      });
      return;
    }
    // y [n, sp, c] -> out [n, c, sp], in tiles of TS positions by TC channels.
    constexpr size_t TS = 32, TC = 64;
    const size_t sblocks = (sp + TS - 1) / TS;
    parallel_for(n * sblocks, 4, [&](size_t u0, size_t u1) {
      float tile[TC][TS];
      for (size_t u = u0; u < u1; u++) {
        const size_t img = u / sblocks, s0 = (u % sblocks) * TS, s1 = s0 + TS < sp ? s0 + TS : sp;
        const float* yi = yp + img * sp * c;
        for (size_t c0 = 0; c0 < c; c0 += TC) {
          const size_t c1 = c0 + TC < c ? c0 + TC : c;
          // Read rows of channels (contiguous in y), write them transposed into the tile.
          for (size_t s = s0; s < s1; s++) {
            const float* yrow = yi + s * c;
            for (size_t ch = c0; ch < c1; ch++) tile[ch - c0][s - s0] = yrow[ch] + (bp ? bp[ch] : 0.0f);
          }
          for (size_t ch = c0; ch < c1; ch++) {
            float* orow = op + (img * c + ch) * sp;
            const float* t = tile[ch - c0];
            if (rp) {
              const float* rr = rp + (img * c + ch) * sp;
              for (size_t s = s0; s < s1; s++) orow[s] = fin(t[s - s0] + rr[s]);
            } else {
              for (size_t s = s0; s < s1; s++) orow[s] = fin(t[s - s0]);
            }
            act(orow + s0, s1 - s0);
          }
        }
      }
    });
  }

  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    auto& out = outs[0];
    const array& y = in[0];
    const array* res = has_residual_ ? &in[has_bias_ ? 2 : 1] : nullptr;
    // The layout stays: the result may take y's or the residual's buffer.
    if (layout_stays(y) && y.is_donatable() && row_ordered(y) && y.itemsize() == out.itemsize())
      out.copy_shared_buffer(y);
    else if (res && res->is_donatable() && row_ordered(*res))
      out.copy_shared_buffer(*res);
    else
      out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& a : in) enc.set_input_array(a);
    enc.set_output_array(out);
    // Views (a reshape of a transpose, a broadcast residual) are copied into row order first.
    const array y0 = row_ordered_input(y, enc);
    const array b0 = has_bias_ ? row_ordered_input(in[1], enc) : y0;
    const array r0 = res ? row_ordered_input(*res, enc) : y0;
    const array yw = array::unsafe_weak_copy(y0), bw = array::unsafe_weak_copy(b0), rw = array::unsafe_weak_copy(r0),
                ow = array::unsafe_weak_copy(out);
    const bool hb = has_bias_, hr = res != nullptr, cl = channels_last_;
    const float lo = lo_, hi = hi_, alpha = alpha_, beta = beta_;
    if (act_ == 1)
      enc.dispatch([=]() { run<1>(yw, bw, rw, ow, hb, hr, lo, hi, alpha, beta, cl); });
    else if (act_ == 2)
      enc.dispatch([=]() { run<2>(yw, bw, rw, ow, hb, hr, lo, hi, alpha, beta, cl); });
    else
      enc.dispatch([=]() { run<0>(yw, bw, rw, ow, hb, hr, lo, hi, alpha, beta, cl); });
  }

 private:
  float lo_, hi_;
  int act_;
  float alpha_, beta_;
  bool channels_last_, has_bias_, has_residual_;
};

}  // namespace

array conv_epilogue(const array& y, const std::optional<array>& bias, const std::optional<array>& residual, float lo, float hi,
                    bool channels_last, mx::Stream s) {
  return conv_epilogue_act(y, bias, residual, lo, hi, 0, 1.0f, 0.0f, channels_last, s);
}

array conv_epilogue_act(const array& y, const std::optional<array>& bias, const std::optional<array>& residual, float lo, float hi, int act,
                        float alpha, float beta, bool channels_last, mx::Stream s) {
  if (act < 0 || act > 2)
    throw std::invalid_argument("conv_epilogue: act must be 0 (none), 1 (HardSigmoid) or 2 (HardSwish), got " + std::to_string(act));
  if (y.ndim() < 2)
    throw std::invalid_argument("conv_epilogue: y must have a batch and a channel axis, got rank " + std::to_string(y.ndim()));
  const int c = channels_last ? y.shape(-1) : y.shape(1);
  if (bias && (bias->ndim() != 1 || bias->shape(0) != c))
    throw std::invalid_argument("conv_epilogue: bias must be a vector of " + std::to_string(c) + " channels");
  mx::Shape out = ConvEpilogue::out_shape(y.shape(), channels_last);
  const bool native = !kernels_off() && s.device == mx::Device::cpu && y.dtype() == mx::float32 && y.size() > 0 &&
                      (!bias || bias->dtype() == mx::float32) &&
                      (!residual || (residual->dtype() == mx::float32 && residual->shape() == out));
  if (!native) return composed(y, bias, residual, lo, hi, act, alpha, beta, channels_last, s);
  // Any layout: eval_cpu copies an input that is not in row order (dense.h).
  std::vector<array> in{y};
  if (bias) in.push_back(*bias);
  if (residual) in.push_back(*residual);
  return array(out, mx::float32,
               std::make_shared<ConvEpilogue>(s, lo, hi, act, alpha, beta, channels_last, bias.has_value(), residual.has_value()),
               std::move(in));
}

}  // namespace mlxc::cpu
