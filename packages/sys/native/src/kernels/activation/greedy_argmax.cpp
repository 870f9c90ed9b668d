// The greedy token: the index of the largest element of a flattened float32 array, NaN counted as
// -Infinity and the first of equal maxima taken, as an int32 scalar (see activation.h). Composed
// from MLX's ops it is five passes and as many primitives (isnan, where, argmax, two casts): on a
// small decoder's CPU step that was ~30 us for an 8192-token vocabulary; here one pass on the
// calling thread (two passes of comparisons: no thread-pool wake-up for a few microseconds of work).
#include <cstdint>
#if defined(__SSE2__)
#include <immintrin.h>
#endif
#include <limits>
#include <string>
#include <stdexcept>

#include "kernels/activation/activation.h"
#include "kernels/common/dense.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"
#include "eval.h"
#include "mlxc_private.h"

namespace mlxc::cpu {
namespace {

using mx::array;

/** The first index of the largest non-NaN value of x[0, n); 0 where none exceeds -Infinity. Two
 * passes: the maximum over independent lanes (NaN compares false and is never taken), then the
 * first element equal to it. On x86 both passes take four floats at a time (SSE2, every x86-64):
 * MAXPS(x, m) is exactly x > m ? x : m, and the compiler left the scalar loop unvectorized
 * (an 8192-token row took ~5 us; ~1 us this way). */
int32_t first_max(const float* x, size_t n) {
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  float best = ninf;
  size_t i = 0;
#if defined(__SSE2__)
  __m128 m0 = _mm_set1_ps(ninf), m1 = m0, m2 = m0, m3 = m0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm_max_ps(_mm_loadu_ps(x + i), m0);
    m1 = _mm_max_ps(_mm_loadu_ps(x + i + 4), m1);
    m2 = _mm_max_ps(_mm_loadu_ps(x + i + 8), m2);
    m3 = _mm_max_ps(_mm_loadu_ps(x + i + 12), m3);
  }
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, _mm_max_ps(_mm_max_ps(m0, m1), _mm_max_ps(m2, m3)));
  for (float v : lanes) best = v > best ? v : best;
#endif
  for (; i < n; i++) best = x[i] > best ? x[i] : best;
  if (best == ninf) return 0;  // every element NaN or -Infinity: all count as -Infinity, the first wins
  size_t k = 0;
#if defined(__SSE2__)
  const __m128 b = _mm_set1_ps(best);
  for (; k + 4 <= n; k += 4) {
    const int hit = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(x + k), b));
    if (hit) return static_cast<int32_t>(k + static_cast<size_t>(__builtin_ctz(static_cast<unsigned>(hit))));
  }
#endif
  for (; k < n; k++)
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

/**
 * mlxc_greedy_rows: the greedy token of each of x's last `rows` rows (its last axis the vocabulary)
 * read where the array's data lies in host memory, with no graph, primitive or evaluation of its
 * own: a decode step's token is one scan of its logits, where a program run (greedy_argmax through
 * a captured graph) cost a small decoder ~20 us of its ~0.6 ms step. x is evaluated first if lazy
 * (waited for if in flight). *done is false, and nothing is written, where x is not float32, not
 * row-contiguous, or held in a GPU's memory: the caller then takes greedy_argmax.
 */
extern "C" int mlxc_greedy_rows(void* dst, size_t rows, bool* done, const mlx_array x) {
  if (!done || (rows && !dst)) {
    mlxc::raise("mlxc_greedy_rows: dst and done must not be null");
    return 1;
  }
  *done = false;
  try {
    mlx::core::array a = mlxc::arr(x);
    if (a.dtype() != mlx::core::float32 || a.ndim() == 0) return 0;
    const size_t V = static_cast<size_t>(a.shape(-1));
    if (V == 0) throw std::invalid_argument("mlxc_greedy_rows: the rows are empty: no token to choose");
    if (V > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
      throw std::invalid_argument("mlxc_greedy_rows: more elements a row than an int32 index holds");
    if (rows == 0 || rows > a.size() / V)
      throw std::invalid_argument("mlxc_greedy_rows: " + std::to_string(rows) + " rows asked of an array of " +
                                  std::to_string(a.size() / V));
    if (a.status() == mlx::core::array::Status::unscheduled) mlxc::eval_within({a}, 0, 0);
    a.wait();
    if (!a.flags().row_contiguous || mlxc::buffer_device(a) >= 0) return 0;
    const float* last = a.data<float>() + (a.size() / V - rows) * V;
    for (size_t r = 0; r < rows; r++) static_cast<int32_t*>(dst)[r] = mlxc::cpu::first_max(last + r * V, V);
    *done = true;
  } catch (const std::exception& e) {
    mlxc::raise(e.what());
    return 1;
  }
  return 0;
}
