// Softmax, log-softmax, layer norm and RMS norm over the last axis as one MLX primitive (see
// norm.h). The front ends decide: float32 on a CPU stream gets the primitive, everything else (GPU
// streams, other dtypes, empty arrays, shapes the kernel does not take) the same computation from
// MLX's ops. The primitive's VJP differentiates that composition, so gradients flow through either
// path.
#include "kernels/norm/norm.h"
#include "kernels/activation/math.h"
#include "kernels/common/dense.h"
#include "kernels/common/fused_primitive.h"
#include "kernels/common/row_kernel.h"

#include <functional>
#include <typeinfo>

#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"
#include "mlx/transforms.h"

namespace mlxc::cpu {
namespace {

using mx::array;
using namespace row_kernel;

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

}  // namespace mlxc::cpu
