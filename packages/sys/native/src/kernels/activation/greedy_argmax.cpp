// The greedy token: the index of the largest element of a flattened float32 array, NaN counted as
// -Infinity and the first of equal maxima taken, as an int32 scalar (see activation.h). Composed
// from MLX's ops it is five passes and as many primitives (isnan, where, argmax, two casts): on a
// small decoder's CPU step that was ~30 us for an 8192-token vocabulary; here one pass on the
// calling thread (two passes of comparisons: no thread-pool wake-up for a few microseconds of work).
#include <cstdint>
#include <limits>
#include <stdexcept>

#include "kernels/activation/activation.h"
#include "kernels/common/dense.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"

namespace mlxc::cpu {
namespace {

using mx::array;

/** The first index of the largest non-NaN value of x[0, n); 0 where none exceeds -Infinity. Two
 * passes: the maximum over eight independent lanes (one comparison chain per lane, so they overlap;
 * NaN compares false and is never taken), then the first element equal to it. */
int32_t first_max(const float* x, size_t n) {
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  float m[8] = {ninf, ninf, ninf, ninf, ninf, ninf, ninf, ninf};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
  float best = ninf;
  for (; i < n; i++) best = x[i] > best ? x[i] : best;
  for (float v : m) best = v > best ? v : best;
  if (best == ninf) return 0;  // every element NaN or -Infinity: all count as -Infinity, the first wins
  for (size_t k = 0; k < n; k++)
    if (x[k] == best) return static_cast<int32_t>(k);
  return 0;  // not reached: best is one of the elements
}

class GreedyArgmax : public mx::UnaryPrimitive {
 public:
  explicit GreedyArgmax(mx::Stream s) : mx::UnaryPrimitive(s) {}
  const char* name() const override { return "GreedyArgmax"; }
  bool is_equivalent(const mx::Primitive&) const override { return true; }
  std::vector<mx::Shape> output_shapes(const std::vector<array>&) override { return {mx::Shape{}}; }
  void eval_gpu(const std::vector<array>&, array&) override {
    throw std::runtime_error("GreedyArgmax is a CPU kernel (the front end composes MLX ops on other devices)");
  }
  void eval_cpu(const std::vector<array>& in, array& out) override {
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    // A view (a slice of a batch's logits) is copied into row order first (dense.h).
    const array x = cpu::row_ordered_input(in[0], enc);
    enc.set_input_array(x);
    enc.set_output_array(out);
    enc.dispatch([x = array::unsafe_weak_copy(x), out = array::unsafe_weak_copy(out)]() mutable {
      *out.data<int32_t>() = first_max(x.data<float>(), x.size());
    });
  }
};

}  // namespace

array greedy_argmax(const array& x, mx::Stream s) {
  if (x.size() == 0) throw std::invalid_argument("greedy_argmax: the array is empty");
  if (x.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    throw std::invalid_argument("greedy_argmax: more elements than an int32 index holds");
  if (s.device != mx::Device::cpu || x.dtype() != mx::float32) {
    const array row = mx::astype(mx::flatten(x, s), mx::float32, s);
    const array ninf(-std::numeric_limits<float>::infinity(), mx::float32);
    return mx::astype(mx::argmax(mx::where(mx::isnan(row, s), ninf, row, s), false, s), mx::int32, s);
  }
  return array(mx::Shape{}, mx::int32, std::make_shared<GreedyArgmax>(s), {x});
}

}  // namespace mlxc::cpu
