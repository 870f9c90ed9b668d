// The fused CPU kernels as MLX primitives (see kernels.h). The front ends decide: float32 on a CPU
// stream gets the primitive, everything else (GPU streams, other dtypes, empty arrays, shapes the
// kernels do not take) the same computation from MLX's ops. Each primitive's VJP differentiates
// that composition, so gradients flow through either path.
#include "cpu/kernels.h"
#include "cpu/dense.h"
#include "cpu/fused_primitive.h"

#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <typeinfo>

#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"
#include "mlx/transforms.h"

namespace mlxc::cpu {
namespace {

using mx::array;

array sc(float v, const array& like) { return array(v, like.dtype()); }

Act parse_act(const std::string& k) {
  static const std::pair<const char*, Act> names[] = {
      {"exp", Act::exp},         {"erf", Act::erf},   {"tanh", Act::tanh}, {"sigmoid", Act::sigmoid},
      {"relu", Act::relu},       {"silu", Act::silu}, {"gelu", Act::gelu}, {"gelu_tanh", Act::gelu_tanh},
      {"identity", Act::identity},
  };
  for (auto& [n, a] : names)
    if (k == n) return a;
  throw std::invalid_argument("fused activation: unknown kind '" + k +
                              "' (exp, erf, tanh, sigmoid, relu, silu, gelu, gelu_tanh, identity)");
}

array composed_act(const array& x, Act act, mx::Stream s) {
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


/** Whether the primitive path takes x on s. */
bool native(const array& x, mx::Stream s) {
  return !kernels_off() && s.device == mx::Device::cpu && x.dtype() == mx::float32 && x.ndim() >= 1 && x.size() > 0;
}
bool vector_of(const std::optional<array>& v, int n) {
  return !v || (v->ndim() == 1 && v->shape(0) == n && v->dtype() == mx::float32);
}

/** Allocates out, reusing x's buffer where MLX allows it (x row-contiguous and no longer needed). */
void alloc_like(const array& x, array& out) {
  if (x.is_donatable() && x.flags().row_contiguous && x.data_size() == x.size() && x.itemsize() == out.itemsize())
    out.copy_shared_buffer(x);
  else
    out.set_data(mx::allocator::malloc(out.nbytes()));
}

class FusedActivation : public FusedPrimitive {
 public:
  FusedActivation(mx::Stream s, Act act) : FusedPrimitive(s), act_(act) {}
  const char* name() const override { return "FusedActivation"; }
  bool is_equivalent(const mx::Primitive& o) const override {
    return typeid(o) == typeid(*this) && act_ == static_cast<const FusedActivation&>(o).act_;
  }
  array compose(const std::vector<array>& in) const override {
    auto s = const_cast<FusedActivation*>(this)->stream();
    return composed_act(in.size() > 1 ? mx::add(in[0], in[1], s) : in[0], act_, s);
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
    enc.dispatch([x = array::unsafe_weak_copy(x0), b = array::unsafe_weak_copy(b0),
                  out = array::unsafe_weak_copy(out), bias, act = act_]() mutable {
      const float* xp = x.data<float>();
      const float* bp = bias ? b.data<float>() : nullptr;
      float* op = out.data<float>();
      size_t n = x.size();
      if (bias) {
        size_t c = x.shape(-1), rows = n / c;
        parallel_for(rows, (16384 + c - 1) / c, [&](size_t r0, size_t r1) {
          activation_rows(xp + r0 * c, bp, op + r0 * c, (r1 - r0) * c, c, act);
        });
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

enum class RowOp { softmax, log_softmax, layer_norm, rms_norm };

class FusedRows : public FusedPrimitive {
 public:
  FusedRows(mx::Stream s, RowOp op, float eps, bool has_w, bool has_b)
      : FusedPrimitive(s), op_(op), eps_(eps), has_w_(has_w), has_b_(has_b) {}
  const char* name() const override {
    switch (op_) {
      case RowOp::softmax: return "FusedSoftmax";
      case RowOp::log_softmax: return "FusedLogSoftmax";
      case RowOp::layer_norm: return "FusedLayerNorm";
      default: return "FusedRMSNorm";
    }
  }
  bool is_equivalent(const mx::Primitive& o) const override {
    if (typeid(o) != typeid(*this)) return false;
    auto& p = static_cast<const FusedRows&>(o);
    return op_ == p.op_ && eps_ == p.eps_ && has_w_ == p.has_w_ && has_b_ == p.has_b_;
  }
  array compose(const std::vector<array>& in) const override {
    auto s = const_cast<FusedRows*>(this)->stream();
    const array& x = in[0];
    std::optional<array> w = has_w_ ? std::optional<array>(in[1]) : std::nullopt;
    std::optional<array> b = has_b_ ? std::optional<array>(in[has_w_ ? 2 : 1]) : std::nullopt;
    switch (op_) {
      case RowOp::softmax: return mx::softmax(x, -1, false, s);
      case RowOp::log_softmax: return mx::subtract(x, mx::logsumexp(x, -1, true, s), s);
      case RowOp::layer_norm: {
        auto mean = mx::mean(x, -1, true, s);
        auto d = mx::subtract(x, mean, s);
        auto var = mx::mean(mx::square(d, s), -1, true, s);
        auto y = mx::multiply(d, mx::rsqrt(mx::add(var, sc(eps_, x), s), s), s);
        if (w) y = mx::multiply(y, *w, s);
        if (b) y = mx::add(y, *b, s);
        return y;
      }
      default: {
        auto ms = mx::mean(mx::square(x, s), -1, true, s);
        auto y = mx::multiply(x, mx::rsqrt(mx::add(ms, sc(eps_, x), s), s), s);
        return w ? mx::multiply(y, *w, s) : y;
      }
    }
  }
  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    auto& out = outs[0];
    alloc_like(in[0], out);
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& a : in) enc.set_input_array(a);
    enc.set_output_array(out);
    const array x0 = row_ordered_input(in[0], enc);
    const array w0 = has_w_ ? row_ordered_input(in[1], enc) : x0;
    const array b0 = has_b_ ? row_ordered_input(in[has_w_ ? 2 : 1], enc) : x0;
    enc.dispatch([x = array::unsafe_weak_copy(x0), w = array::unsafe_weak_copy(w0), b = array::unsafe_weak_copy(b0),
                  out = array::unsafe_weak_copy(out), op = op_, eps = eps_, hw = has_w_, hb = has_b_]() mutable {
      const float* xp = x.data<float>();
      const float* wp = hw ? w.data<float>() : nullptr;
      const float* bp = hb ? b.data<float>() : nullptr;
      float* o = out.data<float>();
      size_t c = x.shape(-1), rows = x.size() / c;
      parallel_for(rows, (8192 + c - 1) / c, [&](size_t r0, size_t r1) {
        for (size_t r = r0; r < r1; r++) {
          const float* xr = xp + r * c;
          float* orow = o + r * c;
          switch (op) {
            case RowOp::softmax: softmax_row(xr, orow, c, false); break;
            case RowOp::log_softmax: softmax_row(xr, orow, c, true); break;
            case RowOp::layer_norm: layer_norm_row(xr, wp, bp, orow, c, eps); break;
            case RowOp::rms_norm: rms_norm_row(xr, wp, orow, c, eps); break;
          }
        }
      });
    });
  }

 private:
  RowOp op_;
  float eps_;
  bool has_w_, has_b_;
};

array rows_op(RowOp op, const array& x, const std::optional<array>& w, const std::optional<array>& b, float eps, mx::Stream s) {
  // Any layout: eval_cpu copies an input that is not in row order (dense.h).
  std::vector<array> in{x};
  if (w) in.push_back(*w);
  if (b) in.push_back(*b);
  auto p = std::make_shared<FusedRows>(s, op, eps, w.has_value(), b.has_value());
  return array(x.shape(), mx::float32, p, std::move(in));
}

}  // namespace

array activation(const array& x, const std::optional<array>& bias, const std::string& kind, mx::Stream s) {
  Act act = parse_act(kind);
  if (!native(x, s) || (bias && !vector_of(bias, x.shape(-1)))) {
    return composed_act(bias ? mx::add(x, *bias, s) : x, act, s);
  }
  if (act == Act::identity) return bias ? mx::add(x, *bias, s) : x;
  std::vector<array> in{x};
  if (bias) in.push_back(*bias);
  return array(x.shape(), mx::float32, std::make_shared<FusedActivation>(s, act), std::move(in));
}

array softmax(const array& x, bool log, mx::Stream s) {
  if (!native(x, s)) return log ? mx::subtract(x, mx::logsumexp(x, -1, true, s), s) : mx::softmax(x, -1, false, s);
  return rows_op(log ? RowOp::log_softmax : RowOp::softmax, x, std::nullopt, std::nullopt, 0, s);
}

array layer_norm(const array& x, const std::optional<array>& weight, const std::optional<array>& bias, float eps, mx::Stream s) {
  if (!native(x, s) || !vector_of(weight, x.shape(-1)) || !vector_of(bias, x.shape(-1)))
    return mx::fast::layer_norm(x, weight, bias, eps, s);
  return rows_op(RowOp::layer_norm, x, weight, bias, eps, s);
}

array rms_norm(const array& x, const std::optional<array>& weight, float eps, mx::Stream s) {
  if (!native(x, s) || !vector_of(weight, x.shape(-1))) return mx::fast::rms_norm(x, weight, eps, s);
  return rows_op(RowOp::rms_norm, x, weight, std::nullopt, eps, s);
}

bool kernels_off() {
  static const bool off = [] {
    const char* e = std::getenv("MLXC_CPU_KERNELS");
    return e && std::string(e) == "off";
  }();
  return off;
}

}  // namespace mlxc::cpu
