// The fused activation as an MLX primitive (see activation.h). The front end decides: float32 on a
// CPU stream gets the primitive, everything else (GPU streams, other dtypes, empty arrays, shapes
// the kernel does not take) the same computation from MLX's ops. The primitive's VJP
// differentiates that composition, so gradients flow through either path.
#include "kernels/activation/activation.h"
#include "kernels/activation/math.h"
#include "kernels/common/dense.h"
#include "kernels/common/fused_primitive.h"
#include "kernels/common/row_kernel.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <typeinfo>

#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"
#include "mlx/transforms.h"

namespace mlxc::cpu {
using mx::array;
using namespace row_kernel;

Act parse_activation(const std::string& k) {
  static const std::pair<const char*, Act> names[] = {
      {"exp", Act::exp},   {"erf", Act::erf},   {"tanh", Act::tanh},           {"sigmoid", Act::sigmoid},   {"relu", Act::relu},
      {"silu", Act::silu}, {"gelu", Act::gelu}, {"gelu_tanh", Act::gelu_tanh}, {"identity", Act::identity},
  };
  for (auto& [n, a] : names)
    if (k == n) return a;
  throw std::invalid_argument("fused activation: unknown kind '" + k +
                              "' (exp, erf, tanh, sigmoid, relu, silu, gelu, gelu_tanh, identity)");
}

array composed_activation(const array& x, Act act, mx::Stream s) {
  switch (act) {
    case Act::exp: return mx::exp(x, s);
    case Act::erf: return mx::erf(x, s);
    case Act::tanh: return mx::tanh(x, s);
    case Act::sigmoid: return mx::sigmoid(x, s);
    case Act::relu: return mx::maximum(x, sc(0, x), s);
    case Act::silu: return mx::multiply(x, mx::sigmoid(x, s), s);
    case Act::gelu: {
      auto e = mx::erf(mx::multiply(x, sc(0.70710678118654752f, x), s), s);
      return mx::multiply(mx::multiply(x, sc(0.5f, x), s), mx::add(e, sc(1, x), s), s);
    }
    case Act::gelu_tanh: {
      auto cube = mx::multiply(mx::multiply(x, x, s), x, s);
      auto inner = mx::multiply(mx::add(x, mx::multiply(cube, sc(0.044715f, x), s), s), sc(0.7978845608028654f, x), s);
      return mx::multiply(mx::multiply(x, sc(0.5f, x), s), mx::add(mx::tanh(inner, s), sc(1, x), s), s);
    }
    case Act::identity: return x;
  }
  return x;
}

namespace {

class FusedActivation : public FusedPrimitive {
 public:
  FusedActivation(mx::Stream s, Act act) : FusedPrimitive(s), act_(act) {}
  const char* name() const override { return "FusedActivation"; }
  bool is_equivalent(const mx::Primitive& o) const override {
    return typeid(o) == typeid(*this) && act_ == static_cast<const FusedActivation&>(o).act_;
  }
  array compose(const std::vector<array>& in) const override {
    auto s = const_cast<FusedActivation*>(this)->stream();
    return composed_activation(in.size() > 1 ? mx::add(in[0], in[1], s) : in[0], act_, s);
  }
  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    auto& out = outs[0];
    alloc_like(in[0], out);
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& a : in) enc.set_input_array(a);
    enc.set_output_array(out);
    bool bias = in.size() > 1;
    const array x0 = row_ordered_input(in[0], enc);
    const array b0 = bias ? row_ordered_input(in[1], enc) : x0;
    enc.dispatch(
        [x = array::unsafe_weak_copy(x0), b = array::unsafe_weak_copy(b0), out = array::unsafe_weak_copy(out), bias, act = act_]() mutable {
          const float* xp = x.data<float>();
          const float* bp = bias ? b.data<float>() : nullptr;
          float* op = out.data<float>();
          size_t n = x.size();
          if (bias) {
            size_t c = x.shape(-1), rows = n / c;
            parallel_for(rows, (16384 + c - 1) / c,
                         [&](size_t r0, size_t r1) { activation_rows(xp + r0 * c, bp, op + r0 * c, (r1 - r0) * c, c, act); });
          } else {
            constexpr size_t block = 1024;
            parallel_for((n + block - 1) / block, 16, [&](size_t b0, size_t b1) {
              size_t e = b1 * block < n ? b1 * block : n;
              activation_rows(xp + b0 * block, nullptr, op + b0 * block, e - b0 * block, 0, act);
            });
          }
        });
  }

 private:
  Act act_;
};

/**
 * x as rows: its last axis contiguous and its other axes one stride apart (a row-ordered array, or
 * a slice of one along the last axis); ld the stride between rows. False for other layouts.
 */
bool as_rows(const array& x, int64_t& ld) {
  const int n = x.ndim();
  if (n == 0 || (x.shape(-1) > 1 && x.strides()[n - 1] != 1)) return false;
  ld = -1;
  int64_t expect = 0;
  for (int i = n - 2; i >= 0; --i) {
    if (x.shape(i) == 1) continue;
    if (ld < 0) {
      ld = x.strides()[i];
      expect = ld * x.shape(i);
    } else if (x.strides()[i] != expect) {
      return false;
    } else {
      expect *= x.shape(i);
    }
  }
  if (ld < 0) ld = x.shape(-1);  // one row
  return true;
}

/** act(a) * b, or act of a's first half times its second (halves): rows on the thread pool. */
class GatedActivation : public FusedPrimitive {
 public:
  GatedActivation(mx::Stream s, Act act, bool halves) : FusedPrimitive(s), act_(act), halves_(halves) {}
  const char* name() const override { return "GatedActivation"; }
  bool is_equivalent(const mx::Primitive& o) const override {
    if (typeid(o) != typeid(*this)) return false;
    auto& p = static_cast<const GatedActivation&>(o);
    return act_ == p.act_ && halves_ == p.halves_;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<array>& in) override {
    auto shape = in[0].shape();
    if (halves_) shape.back() /= 2;
    return {shape};
  }
  array compose(const std::vector<array>& in) const override {
    return composed_gated(in[0], halves_ ? std::nullopt : std::optional<array>(in[1]), act_, st());
  }

  static array composed_gated(const array& a, const std::optional<array>& b, Act act, mx::Stream s) {
    if (b) return mx::multiply(composed_activation(a, act, s), *b, s);
    const int c = a.shape(-1) / 2;
    auto parts = mx::split(a, mx::Shape{c}, -1, s);
    return mx::multiply(composed_activation(parts[0], act, s), parts[1], s);
  }

  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    auto& out = outs[0];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& a : in) enc.set_input_array(a);
    enc.set_output_array(out);
    // Views whose rows are one stride apart (the slices of a joined product) are read in place.
    const auto rows_of = [&](const array& x, int64_t& ld) {
      if (as_rows(x, ld)) return x;
      array r = row_ordered_input(x, enc);
      ld = x.shape(-1);
      return r;
    };
    int64_t lda = 0, ldb = 0;
    const array a0 = rows_of(in[0], lda);
    const array b0 = halves_ ? a0 : rows_of(in[1], ldb);
    enc.dispatch([a = array::unsafe_weak_copy(a0), b = array::unsafe_weak_copy(b0), out = array::unsafe_weak_copy(out), lda, ldb,
                  halves = halves_, act = act_]() mutable {
      const size_t c = out.shape(-1), rows = c ? out.size() / c : 0;
      const float* ap = a.data<float>();
      // Halves: the up half sits c floats on in each of a's rows.
      const float* bp = halves ? ap + c : b.data<float>();
      const int64_t bstride = halves ? lda : ldb;
      float* op = out.data<float>();
      parallel_for(rows, (16384 + c - 1) / std::max<size_t>(c, 1), [&](size_t r0, size_t r1) {
        for (size_t r = r0; r < r1; r++) {
          float* o = op + r * c;
          activation_rows(ap + r * lda, nullptr, o, c, 0, act);
          const float* u = bp + r * bstride;
          for (size_t j = 0; j < c; j++) o[j] *= u[j];
        }
      });
    });
  }

 private:
  Act act_;
  bool halves_;
};

}  // namespace

array gated_activation(const array& a, const std::optional<array>& b, const std::string& kind, mx::Stream s) {
  const Act act = parse_activation(kind);
  if (!b && (a.ndim() == 0 || a.shape(-1) % 2 != 0))
    throw std::invalid_argument("gated activation: without b, a's last axis holds two halves and must have an even length");
  const bool fits = !b || (b->shape() == a.shape() && b->dtype() == a.dtype());
  if (!native(a, s) || !fits) return GatedActivation::composed_gated(a, b, act, s);
  auto shape = a.shape();
  if (!b) shape.back() /= 2;
  std::vector<array> in{a};
  if (b) in.push_back(*b);
  return array(std::move(shape), mx::float32, std::make_shared<GatedActivation>(s, act, !b), std::move(in));
}

array activation(const array& x, const std::optional<array>& bias, const std::string& kind, mx::Stream s) {
  Act act = parse_activation(kind);
  if (!native(x, s) || (bias && !vector_of(bias, x.shape(-1)))) {
    return composed_activation(bias ? mx::add(x, *bias, s) : x, act, s);
  }
  if (act == Act::identity) return bias ? mx::add(x, *bias, s) : x;
  std::vector<array> in{x};
  if (bias) in.push_back(*bias);
  return array(x.shape(), mx::float32, std::make_shared<FusedActivation>(s, act), std::move(in));
}

}  // namespace mlxc::cpu
