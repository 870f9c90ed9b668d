// A whole LSTM layer's recurrence (every direction) as one MLX primitive (see lstm.h). Built from
// MLX ops, each step is a dozen tiny primitives (a [B, H] x [H, 4H] matmul, slices, gate
// activations, multiplies and adds), so a short sequence costs hundreds of scheduled ops; here the
// whole loop of every direction runs in one task: per step and batch row, the recurrent product as
// rows of multiply-adds over the 4H gates (vectorized by the compiler), then the gate math in place.
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "kernels/activation/math.h"
#include "kernels/common/cpu.h"
#include "kernels/gemm/small_gemm.h"
#include "kernels/rnn/lstm.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"

namespace mlxc::cpu {
namespace {

using mx::array;

struct GateAct {
  int code;
  float alpha, beta;
};

// The activation codes of lstm.h.
inline float apply(const GateAct& a, float x) {
  switch (a.code) {
    case 0: return x > 0.0f ? x : 0.0f;                                                 // Relu
    case 1: return std::tanh(x);                                                        // Tanh
    case 2: return 1.0f / (1.0f + std::exp(-x));                                        // Sigmoid
    case 3: return a.alpha * x + a.beta;                                                // Affine
    case 4: return x < 0.0f ? a.alpha * x : x;                                          // LeakyRelu
    case 5: return x > a.alpha ? x : 0.0f;                                              // ThresholdedRelu
    case 6: return a.alpha * std::tanh(a.beta * x);                                     // ScaledTanh
    case 7: return std::fmin(1.0f, std::fmax(0.0f, a.alpha * x + a.beta));              // HardSigmoid
    case 8: return x < 0.0f ? a.alpha * std::expm1(x) : x;                              // Elu
    case 9: return x / (1.0f + std::fabs(x));                                           // Softsign
    default: return x > 0.0f ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));  // Softplus
  }
}

/** The same activation from MLX's ops. */
array apply_ops(const GateAct& a, const array& x, mx::Stream s) {
  auto sc = [&](float v) { return array(v, x.dtype()); };
  switch (a.code) {
    case 0: return mx::maximum(x, sc(0), s);
    case 1: return mx::tanh(x, s);
    case 2: return mx::sigmoid(x, s);
    case 3: return mx::add(mx::multiply(x, sc(a.alpha), s), sc(a.beta), s);
    case 4: return mx::where(mx::less(x, sc(0), s), mx::multiply(x, sc(a.alpha), s), x, s);
    case 5: return mx::where(mx::greater(x, sc(a.alpha), s), x, mx::zeros_like(x, s), s);
    case 6: return mx::multiply(mx::tanh(mx::multiply(x, sc(a.beta), s), s), sc(a.alpha), s);
    case 7: return mx::clip(mx::add(mx::multiply(x, sc(a.alpha), s), sc(a.beta), s), sc(0), sc(1), s);
    case 8: return mx::where(mx::less(x, sc(0), s), mx::multiply(mx::expm1(x, s), sc(a.alpha), s), x, s);
    case 9: return mx::divide(x, mx::add(mx::abs(x, s), sc(1), s), s);
    default: return mx::logaddexp(x, mx::zeros_like(x, s), s);
  }
}

struct Config {
  int dirs;
  bool reverse;  // a single direction runs backwards
  bool has_lens, has_peep, input_forget;
  float clip;                 // infinity: none
  std::vector<GateAct> acts;  // 3 per direction: f, g, h
  bool operator==(const Config& o) const {
    if (dirs != o.dirs || reverse != o.reverse || has_lens != o.has_lens || has_peep != o.has_peep || input_forget != o.input_forget ||
        !(clip == o.clip) || acts.size() != o.acts.size())
      return false;
    for (size_t i = 0; i < acts.size(); i++)
      if (acts[i].code != o.acts[i].code || acts[i].alpha != o.acts[i].alpha || acts[i].beta != o.acts[i].beta) return false;
    return true;
  }
};

inline float clipped(float v, float c) { return v < -c ? -c : (v > c ? c : v); }

class Lstm : public mx::Primitive {
 public:
  Lstm(mx::Stream s, Config cfg) : mx::Primitive(s), cfg_(std::move(cfg)) {}
  const char* name() const override { return "Lstm"; }
  bool is_equivalent(const mx::Primitive& o) const override { return cfg_ == static_cast<const Lstm&>(o).cfg_; }
  std::vector<mx::Shape> output_shapes(const std::vector<array>& in) override {
    const int T = in[0].shape(0), B = in[0].shape(1), H = in[1].shape(1);
    return {{T, B, cfg_.dirs, H}, {cfg_.dirs, B, H}, {cfg_.dirs, B, H}};
  }
  void eval_gpu(const std::vector<array>&, std::vector<array>&) override {
    throw std::runtime_error("Lstm is a CPU kernel (the front end composes MLX ops on other devices)");
  }

  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    for (auto& o : outs) o.set_data(mx::allocator::malloc(o.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& a : in) enc.set_input_array(a);
    for (auto& o : outs) enc.set_output_array(o);
    std::vector<array> ins;
    for (auto& a : in) ins.push_back(array::unsafe_weak_copy(a));
    enc.dispatch([ins = std::move(ins), y = array::unsafe_weak_copy(outs[0]), hT = array::unsafe_weak_copy(outs[1]),
                  cT = array::unsafe_weak_copy(outs[2]), cfg = cfg_]() mutable { run(ins, y, hT, cT, cfg); });
  }

 private:
  static void run(const std::vector<array>& in, array& y, array& hT, array& cT, const Config& cfg) {
    const array &proj = in[0], &rt = in[1], &h0 = in[2], &c0 = in[3];
    size_t k_in = 4;
    const array* lens = cfg.has_lens ? &in[k_in++] : nullptr;
    const array* peep = cfg.has_peep ? &in[k_in++] : nullptr;
    const int T = proj.shape(0), B = proj.shape(1), D = cfg.dirs, H = rt.shape(1), G = 4 * H;
    // The inputs may be views (broadcast zeros, transposes): read them through their strides.
    // rt [D, H, 4H] is used in place when row-contiguous, else laid out once.
    const float* pp = proj.data<float>();
    const auto ps = proj.strides();
    std::vector<float> rt_copy;
    const float* rtp = rt.data<float>();
    if (!rt.flags().row_contiguous) {
      rt_copy.resize(static_cast<size_t>(D) * H * G);
      const auto rs = rt.strides();
      for (int d = 0; d < D; d++)
        for (int i = 0; i < H; i++)
          for (int j = 0; j < G; j++) rt_copy[(static_cast<size_t>(d) * H + i) * G + j] = rtp[d * rs[0] + i * rs[1] + j * rs[2]];
      rtp = rt_copy.data();
    }
    float* yp = y.data<float>();
    float* hp = hT.data<float>();
    float* cp = cT.data<float>();
    const auto copy_state = [B, D, H](const array& from, float* to) {
      const float* f = from.data<float>();
      const auto st = from.strides();
      for (int d = 0; d < D; d++)
        for (int b = 0; b < B; b++)
          for (int j = 0; j < H; j++) to[(static_cast<size_t>(d) * B + b) * H + j] = f[d * st[0] + b * st[1] + j * st[2]];
    };
    copy_state(h0, hp);
    copy_state(c0, cp);
    std::vector<int64_t> len(B, T);
    if (lens) {
      const int32_t* lp = lens->data<int32_t>();
      for (int b = 0; b < B; b++) len[b] = lp[b * lens->strides()[0]];
    }
    std::vector<float> pv;  // peepholes [D, 3H] (i, o, f)
    if (peep) {
      pv.resize(static_cast<size_t>(D) * 3 * H);
      const float* q = peep->data<float>();
      const auto qs = peep->strides();
      for (int d = 0; d < D; d++)
        for (int j = 0; j < 3 * H; j++) pv[static_cast<size_t>(d) * 3 * H + j] = q[d * qs[0] + j * qs[1]];
    }
    const bool plain = !peep && !cfg.input_forget && std::isinf(cfg.clip) && [&] {
      for (int d = 0; d < D; d++)
        if (cfg.acts[3 * d].code != 2 || cfg.acts[3 * d + 1].code != 1 || cfg.acts[3 * d + 2].code != 1) return false;
      return true;
    }();
    const float cl = cfg.clip;
    std::vector<float> gates(G + H);
    float* g = gates.data();
    float* tc = g + G;  // h(c) of the standard cell
    std::vector<float> pbuf_store(G);
    float* pbuf = pbuf_store.data();  // a strided projection row, laid out
    for (int d = 0; d < D; d++) {
      const bool backwards = d == 1 || cfg.reverse;
      const float* r = rtp + static_cast<size_t>(d) * H * G;
      const GateAct &fa = cfg.acts[3 * d], &ga = cfg.acts[3 * d + 1], &ha = cfg.acts[3 * d + 2];
      const float* pi = peep ? pv.data() + static_cast<size_t>(d) * 3 * H : nullptr;
      for (int k = 0; k < T; k++) {
        const int t = backwards ? T - 1 - k : k;
        for (int b = 0; b < B; b++) {
          float* yrow = yp + ((static_cast<size_t>(t) * B + b) * D + d) * H;  // y is [T, B, D, H]
          float* h = hp + (static_cast<size_t>(d) * B + b) * H;
          float* c = cp + (static_cast<size_t>(d) * B + b) * H;
          if (t >= len[b]) {
            for (int j = 0; j < H; j++) yrow[j] = 0.0f;
            continue;
          }
          // gates = proj row + h R^T: the vectorized gemv of the small-gemm kernels, the
          // projection row as its bias.
          const float* prow = pp + t * ps[0] + b * ps[1] + static_cast<int64_t>(d) * G * ps[2];
          if (ps[2] != 1) {
            for (int j = 0; j < G; j++) pbuf[j] = prow[j * ps[2]];
            prow = pbuf;
          }
          cpu::gemm::kn(h, H, r, G, prow, g, G, 1, H, 0, G);
          // ONNX's gate order: i, o, f, c.
          if (plain) {
            // The standard cell: sigmoid over i, o, f and tanh over c and the new state, each as
            // one vectorized pass.
            cpu::activation_rows(g, nullptr, g, 3 * static_cast<size_t>(H), 0, cpu::Act::sigmoid);
            cpu::activation_rows(g + 3 * H, nullptr, g + 3 * H, H, 0, cpu::Act::tanh);
            for (int j = 0; j < H; j++) c[j] = g[2 * H + j] * c[j] + g[j] * g[3 * H + j];
            cpu::activation_rows(c, nullptr, tc, H, 0, cpu::Act::tanh);
            for (int j = 0; j < H; j++) yrow[j] = h[j] = g[H + j] * tc[j];
            continue;
          }
          for (int j = 0; j < H; j++) {
            const float cv = c[j];
            const float ig = apply(fa, clipped(g[j] + (pi ? pi[j] * cv : 0.0f), cl));
            const float fg = cfg.input_forget ? 1.0f - ig : apply(fa, clipped(g[2 * H + j] + (pi ? pi[2 * H + j] * cv : 0.0f), cl));
            const float cc = apply(ga, clipped(g[3 * H + j], cl));
            const float cn = fg * cv + ig * cc;
            const float og = apply(fa, clipped(g[H + j] + (pi ? pi[H + j] * cn : 0.0f), cl));
            c[j] = cn;
            h[j] = og * apply(ha, cn);
            yrow[j] = h[j];
          }
        }
      }
    }
  }

  Config cfg_;
};

/** The same recurrence from MLX's ops, one step at a time. */
std::vector<array> composed(const array& proj, const array& rt, const array& h0, const array& c0, const std::optional<array>& lens,
                            const std::optional<array>& peep, const Config& cfg, mx::Stream s) {
  const int T = proj.shape(0), B = proj.shape(1), D = cfg.dirs, H = rt.shape(1), G = 4 * H;
  auto part = [&](const array& a, int i) { return mx::slice(a, {0, i * H}, {B, (i + 1) * H}, s); };
  const bool has_clip = !std::isinf(cfg.clip);
  auto clip = [&](const array& x) { return has_clip ? mx::clip(x, array(-cfg.clip, x.dtype()), array(cfg.clip, x.dtype()), s) : x; };
  std::optional<array> lb;
  if (lens) lb = mx::reshape(mx::astype(*lens, mx::int32, s), {B, 1}, s);
  std::vector<array> ydirs, hs, cs;
  for (int d = 0; d < D; d++) {
    const bool backwards = d == 1 || cfg.reverse;
    const GateAct &fa = cfg.acts[3 * d], &ga = cfg.acts[3 * d + 1], &ha = cfg.acts[3 * d + 2];
    auto r = mx::squeeze(mx::slice(rt, {d, 0, 0}, {d + 1, H, G}, s), 0, s);
    std::optional<array> pi, po, pf;
    if (peep) {
      auto pd = mx::squeeze(mx::slice(*peep, {d, 0}, {d + 1, 3 * H}, s), 0, s);
      pi = mx::slice(pd, {0}, {H}, s);
      po = mx::slice(pd, {H}, {2 * H}, s);
      pf = mx::slice(pd, {2 * H}, {3 * H}, s);
    }
    auto peeped = [&](const array& x, const std::optional<array>& p, const array& c) {
      return p ? mx::add(x, mx::multiply(*p, c, s), s) : x;
    };
    array h = mx::squeeze(mx::slice(h0, {d, 0, 0}, {d + 1, B, H}, s), 0, s);
    array c = mx::squeeze(mx::slice(c0, {d, 0, 0}, {d + 1, B, H}, s), 0, s);
    std::vector<array> ys(T, mx::zeros({B, H}, proj.dtype(), s));
    for (int k = 0; k < T; k++) {
      const int t = backwards ? T - 1 - k : k;
      auto xt = mx::squeeze(mx::slice(proj, {t, 0, d * G}, {t + 1, B, (d + 1) * G}, s), 0, s);
      auto gates = mx::add(xt, mx::matmul(h, r, s), s);
      auto i = apply_ops(fa, clip(peeped(part(gates, 0), pi, c)), s);
      auto f = cfg.input_forget ? mx::subtract(array(1.0f, i.dtype()), i, s) : apply_ops(fa, clip(peeped(part(gates, 2), pf, c)), s);
      auto cn = mx::add(mx::multiply(f, c, s), mx::multiply(i, apply_ops(ga, clip(part(gates, 3)), s), s), s);
      auto o = apply_ops(fa, clip(peeped(part(gates, 1), po, cn)), s);
      auto hn = mx::multiply(o, apply_ops(ha, cn, s), s);
      if (lb) {
        auto m = mx::less(array(t, mx::int32), *lb, s);
        ys[t] = mx::where(m, hn, mx::zeros_like(hn, s), s);
        h = mx::where(m, hn, h, s);
        c = mx::where(m, cn, c, s);
      } else {
        ys[t] = hn;
        h = hn;
        c = cn;
      }
    }
    ydirs.push_back(T > 0 ? mx::stack(ys, 0, s) : mx::zeros({0, B, H}, proj.dtype(), s));
    hs.push_back(h);
    cs.push_back(c);
  }
  return {mx::stack(ydirs, 1, s), mx::stack(hs, 0, s), mx::stack(cs, 0, s)};
}

}  // namespace

std::vector<array> lstm(const array& proj, const array& rt, const array& h0, const array& c0, const std::optional<array>& lens,
                        const std::optional<array>& peepholes, const std::vector<int>& acts, float clip, bool input_forget, int direction,
                        mx::Stream s) {
  const std::string where = "lstm: ";
  if (direction < 0 || direction > 2)
    throw std::invalid_argument(where + "direction must be 0 (forward), 1 (reverse) or 2 (bidirectional)");
  const int D = direction == 2 ? 2 : 1;
  if (proj.ndim() != 3 || rt.ndim() != 3) throw std::invalid_argument(where + "proj must be [T, B, D*4H] and rt [D, H, 4H]");
  const int T = proj.shape(0), B = proj.shape(1), H = rt.shape(1);
  if (rt.shape(0) != D || rt.shape(2) != 4 * H) throw std::invalid_argument(where + "rt must be [D, H, 4H] with D = " + std::to_string(D));
  if (proj.shape(2) != D * 4 * H) throw std::invalid_argument(where + "proj's last axis must be D*4H = " + std::to_string(D * 4 * H));
  const mx::Shape st{D, B, H};
  if (h0.shape() != st || c0.shape() != st) throw std::invalid_argument(where + "h0 and c0 must be [D, B, H]");
  if (lens && (lens->ndim() != 1 || lens->shape(0) != B)) throw std::invalid_argument(where + "lens must be [B]");
  if (peepholes && peepholes->shape() != mx::Shape{D, 3 * H}) throw std::invalid_argument(where + "peepholes must be [D, 3H]");
  if (!(clip > 0)) throw std::invalid_argument(where + "clip must be positive (infinity: none)");
  if (acts.size() != static_cast<size_t>(9 * D))
    throw std::invalid_argument(where + "acts must hold 3 activations per direction as (code, alpha bits, beta bits)");
  Config cfg{D, direction == 1, lens.has_value(), peepholes.has_value(), input_forget, clip, {}};
  for (int k = 0; k < 3 * D; k++) {
    GateAct a{acts[3 * k], 0, 0};
    if (a.code < 0 || a.code > 10) throw std::invalid_argument(where + "activation code " + std::to_string(a.code) + " is not 0..10");
    std::memcpy(&a.alpha, &acts[3 * k + 1], sizeof(float));
    std::memcpy(&a.beta, &acts[3 * k + 2], sizeof(float));
    cfg.acts.push_back(a);
  }
  auto dt = proj.dtype();
  // An empty batch or hidden size: every result is empty, whatever T is (the composition would
  // still build T steps, and T of an empty proj can be any size a feed gives).
  if (B == 0 || H == 0) {
    auto rdt = mx::promote_types(mx::promote_types(dt, rt.dtype()), mx::promote_types(h0.dtype(), c0.dtype()));
    return {mx::zeros({T, D, B, H}, rdt, s), mx::zeros(st, rdt, s), mx::zeros(st, rdt, s)};
  }
  bool all_f32 = dt == mx::float32 && rt.dtype() == dt && h0.dtype() == dt && c0.dtype() == dt && (!peepholes || peepholes->dtype() == dt);
  if (s.device != mx::Device::cpu || !all_f32 || T == 0 || B == 0 || H == 0) return composed(proj, rt, h0, c0, lens, peepholes, cfg, s);
  // No contiguous copies: the kernel reads every input through its strides.
  std::vector<array> in{proj, rt, h0, c0};
  if (lens) in.push_back(mx::astype(*lens, mx::int32, s));
  if (peepholes) in.push_back(*peepholes);
  // The primitive writes Y as [T, B, D, H], the layout models read it in (a Transpose to
  // [T, B, D, H] and a Reshape to [T, B, D*H] follow a bidirectional layer in PyTorch's exports),
  // and returns the [T, D, B, H] view of it: the model's Transpose then cancels this one in a
  // captured graph, and its Reshape needs no copy.
  auto outs = array::make_arrays({{T, B, D, H}, st, st}, {dt, dt, dt}, std::make_shared<Lstm>(s, std::move(cfg)), in);
  outs[0] = mx::transpose(outs[0], {0, 2, 1, 3}, s);
  return outs;
}

}  // namespace mlxc::cpu
