// HardSigmoid and HardSwish as one MLX primitive (see activation.h). Composed from MLX's ops they are
// four or five passes over memory (multiply, add, maximum, minimum, multiply), and MLX's CPU
// compile does not make their fused kernel much faster; this is one vectorized pass (math.h's
// hard_sigmoid_rows: AVX-512F, AVX2+FMA or NEON where the CPU has it), in blocks on the CPU
// kernels' thread pool.
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "kernels/common/cpu.h"
#include "kernels/common/dense.h"
#include "kernels/activation/activation.h"
#include "kernels/activation/math.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"

namespace mlxc::cpu {
namespace {

using mx::array;

class HardSigmoid : public mx::UnaryPrimitive {
 public:
  HardSigmoid(mx::Stream s, float alpha, float beta, bool swish) : mx::UnaryPrimitive(s), alpha_(alpha), beta_(beta), swish_(swish) {}
  const char* name() const override { return swish_ ? "HardSwish" : "HardSigmoid"; }
  bool is_equivalent(const mx::Primitive& o) const override {
    auto& p = static_cast<const HardSigmoid&>(o);
    return alpha_ == p.alpha_ && beta_ == p.beta_ && swish_ == p.swish_;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<array>& in) override { return {in[0].shape()}; }
  void eval_gpu(const std::vector<array>&, array&) override {
    throw std::runtime_error("HardSigmoid is a CPU kernel (the front end composes MLX ops on other devices)");
  }
  void eval_cpu(const std::vector<array>& in, array& out) override {
    // in[0] itself, not a copy of the handle: a copy would make it look still read elsewhere.
    if (in[0].is_donatable() && cpu::row_ordered(in[0]) && in[0].itemsize() == out.itemsize())
      out.copy_shared_buffer(in[0]);
    else
      out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    // A view (transpose, slice, broadcast) is copied into row order first (dense.h).
    const array x = cpu::row_ordered_input(in[0], enc);
    enc.set_input_array(x);
    enc.set_output_array(out);
    enc.dispatch([x = array::unsafe_weak_copy(x), out = array::unsafe_weak_copy(out), a = alpha_, b = beta_, swish = swish_]() mutable {
      const float* xp = x.data<float>();
      float* op = out.data<float>();
      const size_t n = x.size();
      // Blocks of 4096 on the pool's threads. In place (out shares x's buffer) each element is read
      // before it is written, by the same thread.
      constexpr size_t block = 4096;
      cpu::parallel_for((n + block - 1) / block, 4, [xp, op, n, a, b, swish](size_t b0, size_t b1) {
        const size_t i1 = std::min(n, b1 * block);
        const size_t i0 = b0 * block;
        hard_sigmoid_rows(xp + i0, op + i0, i1 - i0, a, b, swish);
      });
    });
  }

 private:
  float alpha_, beta_;
  bool swish_;
};

}  // namespace

array hard_sigmoid(const array& x, float alpha, float beta, bool swish, mx::Stream s) {
  if (s.device != mx::Device::cpu || x.dtype() != mx::float32 || x.size() == 0) {
    auto h = mx::clip(mx::add(mx::multiply(x, array(alpha, x.dtype()), s), array(beta, x.dtype()), s), array(0.0f, x.dtype()),
                      array(1.0f, x.dtype()), s);
    return swish ? mx::multiply(x, h, s) : h;
  }
  // The kernel reads its input as one flat run; eval_cpu copies a view into row order first.
  return array(x.shape(), x.dtype(), std::make_shared<HardSigmoid>(s, alpha, beta, swish), {x});
}

}  // namespace mlxc::cpu
