// The mean over the trailing axes as an MLX primitive (see mean.h): each row of the trailing size
// summed in 16 independent lanes (which the compiler keeps in vector registers: no reassociation
// across them is needed) and the lanes added at the end, then divided by the row's length.
#include "kernels/pool/mean.h"

#include <numeric>
#include <stdexcept>
#include <string>
#include <typeinfo>

#include "kernels/common/cpu.h"
#include "kernels/common/dense.h"
#include "kernels/common/fused_primitive.h"
#include "mlx/backend/cpu/encoder.h"

namespace mlxc::cpu {
namespace {

namespace mx = mlx::core;
using mx::array;

float row_mean(const float* x, size_t n) {
  constexpr size_t K = 16;
  float acc[K] = {};
  size_t i = 0;
  for (; i + K <= n; i += K)
    for (size_t j = 0; j < K; j++) acc[j] += x[i + j];
  float s = 0.0f;
  for (; i < n; i++) s += x[i];
  for (size_t j = 0; j < K; j++) s += acc[j];
  return s / static_cast<float>(n);
}

std::vector<int> trailing(int ndim, int axes) {
  std::vector<int> v(axes);
  std::iota(v.begin(), v.end(), ndim - axes);
  return v;
}

mx::Shape out_shape(const mx::Shape& x, int axes, bool keepdims) {
  mx::Shape o(x.begin(), x.end() - axes);
  if (keepdims) o.insert(o.end(), axes, 1);
  return o;
}

class MeanTrailing : public FusedPrimitive {
 public:
  MeanTrailing(mx::Stream s, int axes, bool keepdims) : FusedPrimitive(s), axes_(axes), keepdims_(keepdims) {}
  const char* name() const override { return "MeanTrailing"; }
  bool is_equivalent(const mx::Primitive& o) const override {
    if (typeid(o) != typeid(*this)) return false;
    auto& p = static_cast<const MeanTrailing&>(o);
    return axes_ == p.axes_ && keepdims_ == p.keepdims_;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<array>& in) override { return {out_shape(in[0].shape(), axes_, keepdims_)}; }
  array compose(const std::vector<array>& in) const override {
    return mx::mean(in[0], trailing(static_cast<int>(in[0].ndim()), axes_), keepdims_, st());
  }
  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    auto& out = outs[0];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    enc.set_input_array(in[0]);
    enc.set_output_array(out);
    // A view is copied into row order first (common/dense.h).
    const array x0 = row_ordered_input(in[0], enc);
    enc.dispatch([x = array::unsafe_weak_copy(x0), out = array::unsafe_weak_copy(out)]() mutable {
      const size_t rows = out.size(), n = rows ? x.size() / rows : 0;
      const float* xp = x.data<float>();
      float* op = out.data<float>();
      parallel_for(rows, (32768 + n - 1) / n, [&](size_t r0, size_t r1) {
        for (size_t r = r0; r < r1; r++) op[r] = row_mean(xp + r * n, n);
      });
    });
  }

 private:
  int axes_;
  bool keepdims_;
};

}  // namespace

array mean_trailing(const array& x, int axes, bool keepdims, mx::Stream s) {
  const int nd = static_cast<int>(x.ndim());
  if (axes < 1 || axes > nd)
    throw std::invalid_argument("mean_trailing: axes must be in [1, " + std::to_string(nd) + "] for an array of rank " +
                                std::to_string(nd) + ", got " + std::to_string(axes));
  const mx::Shape shape = out_shape(x.shape(), axes, keepdims);
  // Native: float32 on the CPU with rows to average (an empty row's mean is MLX's NaN).
  const bool native = !kernels_off() && s.device == mx::Device::cpu && x.dtype() == mx::float32 && x.size() > 0;
  if (!native) return mx::mean(x, trailing(nd, axes), keepdims, s);
  return array(shape, mx::float32, std::make_shared<MeanTrailing>(s, axes, keepdims), {x});
}

}  // namespace mlxc::cpu
