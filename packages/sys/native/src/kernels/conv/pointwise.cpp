// The 1x1 convolution channels-first as an MLX primitive (see pointwise.h). Tasks of the thread
// pool take tiles of (image, kCols positions, all output channels): x's columns of the tile stay in
// L1 across the output channels, and w (O x C, a few kilobytes) stays there throughout.
#include "kernels/conv/pointwise.h"

#include <limits>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <vector>

#include "kernels/common/cpu.h"
#include "kernels/common/dense.h"
#include "kernels/common/fused_primitive.h"
#include "kernels/conv/epilogue.h"
#include "mlx/backend/cpu/encoder.h"

namespace mlxc::cpu {
// The vector blocks (pointwise_impl.h), built per instruction set.
namespace avx512 {
void pointwise_block(const float* x, const float* w, float* y, size_t C, size_t S, size_t o0, size_t o1, size_t s0, size_t s1,
                     const pointwise::Epilogue& e, float* pack);
}
namespace avx2 {
void pointwise_block(const float* x, const float* w, float* y, size_t C, size_t S, size_t o0, size_t o1, size_t s0, size_t s1,
                     const pointwise::Epilogue& e, float* pack);
}
namespace {

namespace mx = mlx::core;
using mx::array;

/** The portable block: rows of y accumulated over C (the compiler vectorizes along the positions), then the epilogue. */
void portable_block(const float* x, const float* w, float* y, size_t C, size_t S, size_t o0, size_t o1, size_t s0, size_t s1,
                    const pointwise::Epilogue& e, float*) {
  const size_t n = s1 - s0;
  for (size_t o = o0; o < o1; o++) {
    float* yr = y + o * S + s0;
    for (size_t i = 0; i < n; i++) yr[i] = 0.0f;
    for (size_t k = 0; k < C; k++) {
      const float wv = w[o * C + k];
      const float* xr = x + k * S + s0;
      for (size_t i = 0; i < n; i++) yr[i] += wv * xr[i];
    }
    const float bv = e.bias ? e.bias[o] : 0.0f;
    const float* rr = e.res ? e.res + o * S + s0 : nullptr;
    for (size_t i = 0; i < n; i++) {
      float v = yr[i] + bv + (rr ? rr[i] : 0.0f);
      v = v < e.lo ? e.lo : v;
      v = v > e.hi ? e.hi : v;
      if (e.act != 0) {
        float h = v * e.alpha + e.beta;
        h = h < 0.0f ? 0.0f : h;
        h = h > 1.0f ? 1.0f : h;
        v = e.act == 1 ? h : v * h;
      }
      yr[i] = v;
    }
  }
}

pointwise::Block pick_block() {
#if defined(__x86_64__)
  if (has_avx512()) return avx512::pointwise_block;
  if (has_avx2()) return avx2::pointwise_block;
#endif
  return portable_block;
}

/** [N, C, ...sp] -> [N, O, ...sp]. */
mx::Shape out_shape(const mx::Shape& x, int o) {
  mx::Shape s = x;
  s[1] = o;
  return s;
}

array composed(const array& x, const array& w, const std::optional<array>& bias, const std::optional<array>& residual, float lo, float hi,
               int act, float alpha, float beta, mx::Stream s) {
  const int n = x.shape(0), c = x.shape(1);
  array y = mx::matmul(w, mx::reshape(x, {n, c, -1}, s), s);
  y = mx::reshape(y, out_shape(x.shape(), w.shape(0)), s);
  return conv_epilogue_act(y, bias, residual, lo, hi, act, alpha, beta, false, s);
}

class PointwiseConv : public FusedPrimitive {
 public:
  PointwiseConv(mx::Stream s, float lo, float hi, int act, float alpha, float beta, bool has_bias, bool has_residual)
      : FusedPrimitive(s), lo_(lo), hi_(hi), act_(act), alpha_(alpha), beta_(beta), has_bias_(has_bias), has_residual_(has_residual) {}
  const char* name() const override { return "PointwiseConv"; }
  bool is_equivalent(const mx::Primitive& o) const override {
    if (typeid(o) != typeid(*this)) return false;
    auto& p = static_cast<const PointwiseConv&>(o);
    return lo_ == p.lo_ && hi_ == p.hi_ && act_ == p.act_ && alpha_ == p.alpha_ && beta_ == p.beta_ && has_bias_ == p.has_bias_ &&
           has_residual_ == p.has_residual_;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<array>& in) override { return {out_shape(in[0].shape(), in[1].shape(0))}; }
  array compose(const std::vector<array>& in) const override {
    std::optional<array> b = has_bias_ ? std::optional<array>(in[2]) : std::nullopt;
    std::optional<array> r = has_residual_ ? std::optional<array>(in[has_bias_ ? 3 : 2]) : std::nullopt;
    return composed(in[0], in[1], b, r, lo_, hi_, act_, alpha_, beta_, st());
  }

  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    auto& out = outs[0];
    const array* res = has_residual_ ? &in[has_bias_ ? 3 : 2] : nullptr;
    // Each output element is written once, after its residual element is read (same task).
    if (res && res->is_donatable() && row_ordered(*res))
      out.copy_shared_buffer(*res);
    else
      out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& a : in) enc.set_input_array(a);
    enc.set_output_array(out);
    // Views are copied into row order first (common/dense.h).
    const array x0 = row_ordered_input(in[0], enc);
    const array w0 = row_ordered_input(in[1], enc);
    const array b0 = has_bias_ ? row_ordered_input(in[2], enc) : w0;
    const array r0 = res ? row_ordered_input(*res, enc) : w0;
    enc.dispatch([x = array::unsafe_weak_copy(x0), w = array::unsafe_weak_copy(w0), b = array::unsafe_weak_copy(b0),
                  r = array::unsafe_weak_copy(r0), out = array::unsafe_weak_copy(out), hb = has_bias_, hr = res != nullptr, lo = lo_,
                  hi = hi_, act = act_, alpha = alpha_, beta = beta_]() mutable {
      const size_t N = x.shape(0), C = x.shape(1), O = w.shape(0), S = N ? x.size() / (N * C) : 0;
      const float* xp = x.data<float>();
      const float* wp = w.data<float>();
      const float* bp = hb ? b.data<float>() : nullptr;
      const float* rp = hr ? r.data<float>() : nullptr;
      float* yp = out.data<float>();
      const pointwise::Block blk = pick_block();
      constexpr size_t cols = pointwise::kCols;
      const size_t sblocks = (S + cols - 1) / cols;
      // Tiles of (image, cols positions, all O channels), at least ~32k multiply-adds per task.
      const size_t work = C * O * cols;
      const size_t grain = work >= 32768 ? 1 : 32768 / (work ? work : 1);
      parallel_for(N * sblocks, grain, [&](size_t t0, size_t t1) {
        std::vector<float> pack(C * cols);
        for (size_t t = t0; t < t1; t++) {
          const size_t img = t / sblocks, s0 = (t % sblocks) * cols, s1 = s0 + cols < S ? s0 + cols : S;
          const pointwise::Epilogue e{bp, rp ? rp + img * O * S : nullptr, lo, hi, act, alpha, beta};
          blk(xp + img * C * S, wp, yp + img * O * S, C, S, 0, O, s0, s1, e, pack.data());
        }
      });
    });
  }

 private:
  float lo_, hi_;
  int act_;
  float alpha_, beta_;
  bool has_bias_, has_residual_;
};

}  // namespace

array pointwise_conv(const array& x, const array& w, const std::optional<array>& bias, const std::optional<array>& residual, float lo,
                     float hi, int act, float alpha, float beta, mx::Stream s) {
  const std::string where = "pointwise_conv: ";
  if (x.ndim() < 3)
    throw std::invalid_argument(where + "x must be [N, C, ...spatial] with a spatial axis, got rank " + std::to_string(x.ndim()));
  if (w.ndim() != 2 || w.shape(1) != x.shape(1))
    throw std::invalid_argument(where + "w must be [O, " + std::to_string(x.shape(1)) + "] for an input of " + std::to_string(x.shape(1)) +
                                " channels");
  const int o = w.shape(0);
  if (bias && (bias->ndim() != 1 || bias->shape(0) != o)) throw std::invalid_argument(where + "bias must be [" + std::to_string(o) + "]");
  if (act < 0 || act > 2)
    throw std::invalid_argument(where + "act must be 0 (none), 1 (HardSigmoid) or 2 (HardSwish), got " + std::to_string(act));
  const mx::Shape shape = out_shape(x.shape(), o);
  const bool native = !kernels_off() && s.device == mx::Device::cpu && x.dtype() == mx::float32 && w.dtype() == mx::float32 &&
                      (!bias || bias->dtype() == mx::float32) && x.size() > 0 && o > 0 &&
                      (!residual || (residual->dtype() == mx::float32 && residual->shape() == shape));
  if (!native) return composed(x, w, bias, residual, lo, hi, act, alpha, beta, s);
  std::vector<array> in{x, w};
  if (bias) in.push_back(*bias);
  if (residual) in.push_back(*residual);
  return array(shape, mx::float32, std::make_shared<PointwiseConv>(s, lo, hi, act, alpha, beta, bias.has_value(), residual.has_value()),
               std::move(in));
}

}  // namespace mlxc::cpu
