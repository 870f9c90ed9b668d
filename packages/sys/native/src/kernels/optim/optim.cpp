// AdamW's step as one MLX primitive (see optim.h). Composed from MLX's ops it is a dozen
// element-wise passes over each parameter (and sqrt is slow on MLX's CPU backend); this is one pass
// over param, grad and the moments, in blocks on the CPU kernels' thread pool, vectorized with
// AVX-512F or AVX2 where the CPU has it (optim_avx512.cpp, optim_avx2.cpp) and a portable loop elsewhere. The outputs take
// the buffers of donated inputs (the moments a training loop releases before evaluating), so the
// update runs in place. The front end decides: float32 on a CPU stream gets the primitive,
// everything else the same computation from MLX's ops, in the same order and with the same float32
// constants, so both paths give the same numbers within float32 rounding.
#include "kernels/optim/optim.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <typeinfo>

#include "kernels/common/cpu.h"
#include "kernels/common/dense.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"

namespace mlxc::cpu {
namespace {

using mx::array;

std::string shape_str(const mx::Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); i++) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

bool operator==(const AdamWConsts& a, const AdamWConsts& b) {
  return a.b1 == b.b1 && a.one_minus_b1 == b.one_minus_b1 && a.b2 == b.b2 && a.one_minus_b2 == b.one_minus_b2 && a.decay == b.decay &&
         a.sqrt_c2 == b.sqrt_c2 && a.eps == b.eps && a.step_size == b.step_size;
}

class AdamWStep : public mx::Primitive {
 public:
  AdamWStep(mx::Stream s, AdamWConsts k) : mx::Primitive(s), k_(k) {}
  const char* name() const override { return "AdamWStep"; }
  bool is_equivalent(const mx::Primitive& o) const override {
    return typeid(o) == typeid(*this) && k_ == static_cast<const AdamWStep&>(o).k_;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<array>& in) override { return {in[0].shape(), in[0].shape(), in[0].shape()}; }
  void eval_gpu(const std::vector<array>&, std::vector<array>&) override {
    throw std::runtime_error("AdamWStep is a CPU kernel (the front end composes MLX ops on other devices)");
  }

  // in: {param, grad} on the first step, {param, grad, m, v} after; outs: {param', m', v'}.
  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    const bool first = in.size() == 2;
    // MLX gives each output of a primitive its own copy of the inputs, so an input of this one is
    // held three times and never looks donatable. `in` is the inputs of the output being evaluated;
    // the other outputs' copies are dropped here (MLX detaches every output once evaluated anyway),
    // so that an input nothing else holds can be donated. Not under a transformation (tracers),
    // whose graph may still be walked through any output.
    bool traced = false;
    for (auto& o : outs) traced = traced || o.is_tracer();
    bool mine = false;
    for (auto& o : outs) mine = mine || &o.inputs() == &in;
    if (!traced && mine)
      for (auto& o : outs)
        if (&o.inputs() != &in) o.inputs().clear();
    // An output takes its input's buffer where MLX lets it (in[i] itself, not a copy of the
    // handle, which would make it look still read elsewhere): param into param', m into m', v into v'.
    const auto take = [&](array& out, const array* from) {
      if (from && from->is_donatable() && row_ordered(*from) && from->itemsize() == out.itemsize())
        out.copy_shared_buffer(*from);
      else
        out.set_data(mx::allocator::malloc(out.nbytes()));
    };
    take(outs[0], &in[0]);
    take(outs[1], first ? nullptr : &in[2]);
    take(outs[2], first ? nullptr : &in[3]);
    auto& enc = mx::cpu::get_command_encoder(stream());
    // A view (transpose, slice, broadcast) is copied into row order first (dense.h).
    std::vector<array> ins;
    for (auto& a : in) {
      ins.push_back(row_ordered_input(a, enc));
      enc.set_input_array(ins.back());
    }
    for (auto& o : outs) enc.set_output_array(o);
    std::vector<array> weak;
    for (auto& a : ins) weak.push_back(array::unsafe_weak_copy(a));
    enc.dispatch([ins = std::move(weak), p = array::unsafe_weak_copy(outs[0]), m = array::unsafe_weak_copy(outs[1]),
                  v = array::unsafe_weak_copy(outs[2]), k = k_]() mutable {
      const float* pi = ins[0].data<float>();
      const float* gi = ins[1].data<float>();
      const float* mi = ins.size() == 4 ? ins[2].data<float>() : nullptr;
      const float* vi = ins.size() == 4 ? ins[3].data<float>() : nullptr;
      float* po = p.data<float>();
      float* mo = m.data<float>();
      float* vo = v.data<float>();
      const size_t n = p.size();
      // Blocks of 16384 on the pool's threads; in place, each element is read before it is
      // written, by the same thread.
      constexpr size_t block = 16384;
      parallel_for((n + block - 1) / block, 1, [=](size_t b0, size_t b1) {
        const size_t i0 = b0 * block, i1 = std::min(n, b1 * block);
        adamw_span(pi + i0, gi + i0, mi ? mi + i0 : nullptr, vi ? vi + i0 : nullptr, po + i0, mo + i0, vo + i0, i1 - i0, k);
      });
    });
  }

 private:
  AdamWConsts k_;
};

// A number as a message shows it: 0.9, 1e-08, inf.
std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

void check_rate(double x, const char* name, double lo, double hi, bool hi_open) {
  if (!std::isfinite(x) || x < lo || (hi_open ? x >= hi : x > hi))
    throw std::invalid_argument(std::string("adamw_step: ") + name + " must be a finite number in [" + num(lo) + ", " + num(hi) +
                                (hi_open ? ")" : "]") + ", got " + num(x));
}

}  // namespace

void adamw_span(const float* p_in, const float* g, const float* m_in, const float* v_in, float* p_out, float* m_out, float* v_out, size_t n,
                const AdamWConsts& k) {
#if defined(__x86_64__)
  // optim_avx512.cpp and optim_avx2.cpp are built with -mavx512f / -mavx2 on x86-64 (CMakeLists.txt).
  if (has_avx512()) return avx512::adamw_span(p_in, g, m_in, v_in, p_out, m_out, v_out, n, k);
  if (has_avx2()) return avx2::adamw_span(p_in, g, m_in, v_in, p_out, m_out, v_out, n, k);
#endif
  // The MLX-op path's order: each product and sum rounded to float32 on its own.
  for (size_t i = 0; i < n; i++) {
    const float gi = g[i];
    const float gm = gi * k.one_minus_b1;
    const float gv = (gi * gi) * k.one_minus_b2;
    const float m = m_in ? m_in[i] * k.b1 + gm : gm;
    const float v = v_in ? v_in[i] * k.b2 + gv : gv;
    const float denom = std::sqrt(v) / k.sqrt_c2 + k.eps;
    const float p = p_in[i] * k.decay;
    m_out[i] = m;
    v_out[i] = v;
    p_out[i] = p - (m / denom) * k.step_size;
  }
}

std::vector<array> adamw_step(const array& param, const array& grad, const std::optional<array>& m, const std::optional<array>& v,
                              double lr, double beta1, double beta2, double eps, double weight_decay, int step, mx::Stream s) {
  const double inf = HUGE_VAL;
  check_rate(lr, "lr", 0, inf, false);
  check_rate(beta1, "beta1", 0, 1, true);
  check_rate(beta2, "beta2", 0, 1, true);
  check_rate(eps, "eps", 0, inf, false);
  check_rate(weight_decay, "weight_decay", 0, inf, false);
  if (step < 1) throw std::invalid_argument("adamw_step: step must be 1 or more (1 for the first step), got " + std::to_string(step));
  if (m.has_value() != v.has_value())
    throw std::invalid_argument("adamw_step: give both moments m and v (a later step) or neither (the first step)");
  const auto same = [&](const array& a, const char* name) {
    if (a.shape() != param.shape())
      throw std::invalid_argument(std::string("adamw_step: ") + name + " has shape " + shape_str(a.shape()) + ", the parameter " +
                                  shape_str(param.shape()));
  };
  same(grad, "grad");
  if (m) same(*m, "m");
  if (v) same(*v, "v");
  const double c1 = 1 - std::pow(beta1, step), c2 = 1 - std::pow(beta2, step);
  const AdamWConsts k{static_cast<float>(beta1),
                      static_cast<float>(1 - beta1),
                      static_cast<float>(beta2),
                      static_cast<float>(1 - beta2),
                      static_cast<float>(1 - lr * weight_decay),
                      static_cast<float>(std::sqrt(c2)),
                      static_cast<float>(eps),
                      static_cast<float>(lr / c1)};
  const auto f32 = mx::float32;
  const bool native = !kernels_off() && s.device == mx::Device::cpu && param.dtype() == f32 && grad.dtype() == f32 &&
                      (!m || m->dtype() == f32) && (!v || v->dtype() == f32) && param.size() > 0;
  if (native) {
    std::vector<array> in{param, grad};
    if (m) in.insert(in.end(), {*m, *v});
    return array::make_arrays({param.shape(), param.shape(), param.shape()}, {f32, f32, f32}, std::make_shared<AdamWStep>(s, k), in);
  }
  // MLX's ops, as @mlx/core's optim composes them (the scalars of the floating dtype of the result).
  auto dt = mx::promote_types(param.dtype(), grad.dtype());
  if (!mx::issubdtype(dt, mx::floating)) dt = f32;
  const auto c = [dt](double x) { return array(x, dt); };
  const array gm = mx::multiply(grad, c(1 - beta1), s);
  const array gv = mx::multiply(mx::square(grad, s), c(1 - beta2), s);
  const array m1 = m ? mx::add(mx::multiply(*m, c(beta1), s), gm, s) : gm;
  const array v1 = v ? mx::add(mx::multiply(*v, c(beta2), s), gv, s) : gv;
  const array denom = mx::add(mx::divide(mx::sqrt(v1, s), c(std::sqrt(c2)), s), c(eps), s);
  const array decayed = weight_decay != 0 ? mx::multiply(param, c(1 - lr * weight_decay), s) : param;
  return {mx::subtract(decayed, mx::multiply(mx::divide(m1, denom, s), c(lr / c1), s), s), m1, v1};
}

}  // namespace mlxc::cpu
