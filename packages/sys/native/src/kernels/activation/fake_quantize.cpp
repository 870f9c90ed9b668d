// QuantizeLinear followed by DequantizeLinear of the same per-tensor scale and zero point (a QDQ
// model's activations) as one MLX primitive (see activation.h). Composed from MLX's ops the pair is
// about a dozen small passes (divide, round, add, isnan, where, clip, cast; cast, subtract,
// multiply), each with its own per-op cost; this is one pass, in blocks on the thread pool, with
// the same float32 steps in the same order, so the result is bitwise the composition's.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "kernels/activation/activation.h"
#include "kernels/common/cpu.h"
#include "kernels/common/dense.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"

namespace mlxc::cpu {
namespace {

using mx::array;

/** round half to even of a float32, as nearbyint in the default rounding mode (NaN kept, -0 for
 * small negatives), in plain arithmetic the compiler vectorizes: below 2^23 in magnitude, adding
 * and taking away 2^23 leaves the rounded magnitude (the sum's last place is 1); above, v is an
 * integer already. (nearbyintf is a library call per element on baseline x86-64.) */
inline float round_even(float v) {
  const float t = std::fabs(v);
  const float r = t < 8388608.0f ? (t + 8388608.0f) - 8388608.0f : t;
  return std::copysign(r, v);
}

/** out[i] = (clamp(r, lo, hi) - zp) * scale, r = round_half_even(x[i] / scale) + zp (lo where NaN).
 * On x86-64 four at a time in SSE2 (the compiler left the loop scalar, with branches): the same
 * steps, the clamp as max then min (r is never NaN there, nor -0: adding the zero point, +0 at
 * least, turns -0 into +0, so their rule for equal zeros does not matter). */
void fake_quantize_run(const float* x, float* out, size_t n, float scale, float zp, float lo, float hi) {
  size_t i = 0;
#if defined(__SSE2__)
  const __m128 vs = _mm_set1_ps(scale), vz = _mm_set1_ps(zp), vlo = _mm_set1_ps(lo), vhi = _mm_set1_ps(hi);
  const __m128 big = _mm_set1_ps(8388608.0f), sign = _mm_set1_ps(-0.0f);
  for (; i + 4 <= n; i += 4) {
    const __m128 q = _mm_div_ps(_mm_loadu_ps(x + i), vs);
    const __m128 t = _mm_andnot_ps(sign, q);
    const __m128 small = _mm_cmplt_ps(t, big);  // false for NaN: kept as it is
    const __m128 rt = _mm_sub_ps(_mm_add_ps(t, big), big);
    __m128 r = _mm_or_ps(_mm_or_ps(_mm_and_ps(small, rt), _mm_andnot_ps(small, t)), _mm_and_ps(sign, q));
    r = _mm_add_ps(r, vz);
    const __m128 nan = _mm_cmpunord_ps(r, r);
    r = _mm_or_ps(_mm_and_ps(nan, vlo), _mm_andnot_ps(nan, r));
    r = _mm_min_ps(_mm_max_ps(r, vlo), vhi);
    _mm_storeu_ps(out + i, _mm_mul_ps(_mm_sub_ps(r, vz), vs));
  }
#endif
  for (; i < n; i++) {
    float r = round_even(x[i] / scale) + zp;
    r = r != r ? lo : r;
    r = r < lo ? lo : r;
    r = r > hi ? hi : r;
    out[i] = (r - zp) * scale;
  }
}

class FakeQuantize : public mx::UnaryPrimitive {
 public:
  FakeQuantize(mx::Stream s, float scale, float zp, float lo, float hi) : mx::UnaryPrimitive(s), scale_(scale), zp_(zp), lo_(lo), hi_(hi) {}
  const char* name() const override { return "FakeQuantize"; }
  bool is_equivalent(const mx::Primitive& o) const override {
    auto& p = static_cast<const FakeQuantize&>(o);
    return scale_ == p.scale_ && zp_ == p.zp_ && lo_ == p.lo_ && hi_ == p.hi_;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<array>& in) override { return {in[0].shape()}; }
  void eval_gpu(const std::vector<array>&, array&) override {
    throw std::runtime_error("FakeQuantize is a CPU kernel (the front end composes MLX ops on other devices)");
  }
  void eval_cpu(const std::vector<array>& in, array& out) override {
    auto& enc = mx::cpu::get_command_encoder(stream());
    // Elementwise: a dense input in any order (a transposed view of a convolution's channels-last
    // result) is read as its buffer and the result takes its strides, as MLX's unary ops do, so a
    // layout move before or after costs no copy here. Anything else (broadcast, sliced) is copied
    // into row order first (dense.h).
    array x = in[0];
    if (!x.flags().contiguous) x = cpu::row_ordered_input(in[0], enc);
    // in[0] itself, not a copy of the handle: a copy would make it look still read elsewhere.
    if (x.flags().contiguous && in[0].flags().contiguous && in[0].is_donatable())
      out.copy_shared_buffer(in[0]);
    else
      out.set_data(mx::allocator::malloc(x.data_size() * out.itemsize()), x.data_size(), x.strides(), x.flags());
    enc.set_input_array(x);
    enc.set_output_array(out);
    enc.dispatch([x = array::unsafe_weak_copy(x), out = array::unsafe_weak_copy(out), s = scale_, z = zp_, lo = lo_, hi = hi_]() mutable {
      const float* xp = x.data<float>();
      float* op = out.data<float>();
      const size_t n = x.data_size();
      // Blocks of 4096 on the pool's threads (in place, each element is read before it is written,
      // by the same thread); one block runs on this thread alone.
      constexpr size_t block = 4096;
      if (n <= block) return fake_quantize_run(xp, op, n, s, z, lo, hi);
      cpu::parallel_for((n + block - 1) / block, 4, [=](size_t b0, size_t b1) {
        const size_t i0 = b0 * block, i1 = std::min(n, b1 * block);
        fake_quantize_run(xp + i0, op + i0, i1 - i0, s, z, lo, hi);
      });
    });
  }

 private:
  float scale_, zp_, lo_, hi_;
};

}  // namespace

array fake_quantize(const array& x, float scale, float zero_point, float lo, float hi, mx::Stream s) {
  if (!(lo <= hi)) throw std::invalid_argument("fake_quantize: lo must not be above hi");
  if (kernels_off() || s.device != mx::Device::cpu || x.dtype() != mx::float32 || x.size() == 0) {
    // The ops' own steps: the division in the promoted type of x and the float32 scale, then float32.
    const array q = mx::astype(mx::divide(x, array(scale, mx::float32), s), mx::float32, s);
    array r = mx::add(mx::round(q, 0, s), array(zero_point, mx::float32), s);
    r = mx::where(mx::isnan(r, s), array(lo, mx::float32), r, s);
    r = mx::clip(r, array(lo, mx::float32), array(hi, mx::float32), s);
    return mx::multiply(mx::subtract(r, array(zero_point, mx::float32), s), array(scale, mx::float32), s);
  }
  // The kernel reads its input as one flat run; eval_cpu copies a view into row order first.
  return array(x.shape(), mx::float32, std::make_shared<FakeQuantize>(s, scale, zero_point, lo, hi), {x});
}

}  // namespace mlxc::cpu
