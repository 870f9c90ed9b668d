// The fused activation as an MLX primitive (see activation.h). The front end decides: float32 on a
// CPU stream gets the primitive, everything else (GPU streams, other dtypes, empty arrays, shapes
// the kernel does not take) the same computation from MLX's ops. The primitive's VJP
// differentiates that composition, so gradients flow through either path.
#include "kernels/activation/activation.h"
#include "kernels/activation/math.h"
#include "kernels/common/dense.h"
#include "kernels/common/fused_primitive.h"
#include "kernels/common/row_kernel.h"

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

}  // namespace

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
