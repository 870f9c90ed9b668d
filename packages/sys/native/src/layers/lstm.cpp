// The LSTM recurrence of one direction as one MLX primitive (see layers.h). Built from MLX ops,
// each step is a dozen tiny primitives (a [B, H] x [H, 4H] matmul, slices, three sigmoids, two
// tanhs, multiplies and adds), so a short sequence costs hundreds of scheduled ops; here the whole
// loop runs in one task: per step and batch row, the recurrent product as rows of multiply-adds
// over the 4H gates (vectorized by the compiler), then the gate math in place.
#include <cmath>
#include <stdexcept>
#include <string>

#include "layers/layers.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"

namespace mlxc::layers {
namespace {

using mx::array;

inline float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

class Lstm : public mx::Primitive {
 public:
  Lstm(mx::Stream s, bool reverse, bool lens) : mx::Primitive(s), reverse_(reverse), lens_(lens) {}
  const char* name() const override { return "Lstm"; }
  bool is_equivalent(const mx::Primitive& o) const override {
    auto& p = static_cast<const Lstm&>(o);
    return reverse_ == p.reverse_ && lens_ == p.lens_;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<array>& in) override {
    const int T = in[0].shape(0), B = in[0].shape(1), H = in[1].shape(1);
    return {{T, B, H}, {B, H}, {B, H}};
  }
  void eval_gpu(const std::vector<array>&, std::vector<array>&) override {
    throw std::runtime_error("Lstm is a CPU kernel (the front end composes MLX ops on other devices)");
  }

  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    for (auto& o : outs) o.set_data(mx::allocator::malloc(o.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& a : in) enc.set_input_array(a);
    for (auto& o : outs) enc.set_output_array(o);
    enc.dispatch([proj = array::unsafe_weak_copy(in[0]), r = array::unsafe_weak_copy(in[1]), h0 = array::unsafe_weak_copy(in[2]),
                  c0 = array::unsafe_weak_copy(in[3]), lens = array::unsafe_weak_copy(lens_ ? in[4] : in[3]),
                  y = array::unsafe_weak_copy(outs[0]), hT = array::unsafe_weak_copy(outs[1]), cT = array::unsafe_weak_copy(outs[2]),
                  reverse = reverse_, has_lens = lens_]() mutable {
      const int T = proj.shape(0), B = proj.shape(1), H = r.shape(1), G = 4 * H;
      // The inputs may be views (slices of a direction, broadcast zeros): read them through their
      // strides. R [4H, H] is laid out once as R^T [H, 4H], so that each step's product is rows of
      // multiply-adds over the gates.
      const float* pp = proj.data<float>();
      const auto ps = proj.strides();
      std::vector<float> rt(static_cast<size_t>(H) * G);
      {
        const float* rp = r.data<float>();
        const auto rs = r.strides();
        for (int j = 0; j < G; j++)
          for (int i = 0; i < H; i++) rt[static_cast<size_t>(i) * G + j] = rp[j * rs[0] + i * rs[1]];
      }
      float* yp = y.data<float>();
      float* hp = hT.data<float>();
      float* cp = cT.data<float>();
      const auto copy_state = [B, H](const array& from, float* to) {
        const float* f = from.data<float>();
        const auto st = from.strides();
        for (int b = 0; b < B; b++)
          for (int j = 0; j < H; j++) to[static_cast<size_t>(b) * H + j] = f[b * st[0] + j * st[1]];
      };
      copy_state(h0, hp);
      copy_state(c0, cp);
      std::vector<int64_t> len(B, T);
      if (has_lens) {
        const int32_t* lp = lens.data<int32_t>();
        for (int b = 0; b < B; b++) len[b] = lp[b * lens.strides()[0]];
      }
      std::vector<float> gates(G);
      float* g = gates.data();
      for (int k = 0; k < T; k++) {
        const int t = reverse ? T - 1 - k : k;
        for (int b = 0; b < B; b++) {
          float* yrow = yp + (static_cast<size_t>(t) * B + b) * H;
          float* h = hp + static_cast<size_t>(b) * H;
          float* c = cp + static_cast<size_t>(b) * H;
          if (t >= len[b]) {
            for (int j = 0; j < H; j++) yrow[j] = 0.0f;
            continue;
          }
          const float* prow = pp + t * ps[0] + b * ps[1];
          if (ps[2] == 1)
            for (int j = 0; j < G; j++) g[j] = prow[j];
          else
            for (int j = 0; j < G; j++) g[j] = prow[j * ps[2]];
          for (int i = 0; i < H; i++) {
            const float hv = h[i];
            const float* rr = rt.data() + static_cast<size_t>(i) * G;
            for (int j = 0; j < G; j++) g[j] += hv * rr[j];
          }
          // ONNX's gate order: i, o, f, c.
          for (int j = 0; j < H; j++) {
            const float ig = sigmoid(g[j]), og = sigmoid(g[H + j]), fg = sigmoid(g[2 * H + j]), cc = std::tanh(g[3 * H + j]);
            const float cn = fg * c[j] + ig * cc;
            c[j] = cn;
            h[j] = og * std::tanh(cn);
            yrow[j] = h[j];
          }
        }
      }
    });
  }

 private:
  bool reverse_;
  bool lens_;
};

/** The same recurrence from MLX's ops, one step at a time. */
std::vector<array> composed(const array& proj, const array& r, const array& h0, const array& c0, const std::optional<array>& lens,
                            bool reverse, mx::Stream s) {
  const int T = proj.shape(0), B = proj.shape(1), H = r.shape(1);
  auto rT = mx::transpose(r, s);
  auto part = [&](const array& a, int i) { return mx::slice(a, {0, i * H}, {B, (i + 1) * H}, s); };
  std::vector<array> ys(T, mx::zeros({B, H}, proj.dtype(), s));
  array h = h0, c = c0;
  std::optional<array> lb;
  if (lens) lb = mx::reshape(mx::astype(*lens, mx::int32, s), {B, 1}, s);
  for (int k = 0; k < T; k++) {
    const int t = reverse ? T - 1 - k : k;
    auto xt = mx::squeeze(mx::slice(proj, {t, 0, 0}, {t + 1, B, 4 * H}, s), 0, s);
    auto gates = mx::add(xt, mx::matmul(h, rT, s), s);
    auto i = mx::sigmoid(part(gates, 0), s), o = mx::sigmoid(part(gates, 1), s), f = mx::sigmoid(part(gates, 2), s);
    auto cn = mx::add(mx::multiply(f, c, s), mx::multiply(i, mx::tanh(part(gates, 3), s), s), s);
    auto hn = mx::multiply(o, mx::tanh(cn, s), s);
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
  auto y = T > 0 ? mx::stack(ys, 0, s) : mx::zeros({0, B, H}, proj.dtype(), s);
  return {y, h, c};
}

}  // namespace

std::vector<array> lstm(const array& proj, const array& r, const array& h0, const array& c0, const std::optional<array>& lens,
                        bool reverse, mx::Stream s) {
  const std::string where = "lstm: ";
  if (proj.ndim() != 3 || r.ndim() != 2) throw std::invalid_argument(where + "proj must be [T, B, 4H] and r [4H, H]");
  const int T = proj.shape(0), B = proj.shape(1), H = r.shape(1);
  if (r.shape(0) != 4 * H || proj.shape(2) != 4 * H)
    throw std::invalid_argument(where + "proj's last axis and r's first must be 4H = " + std::to_string(4 * H));
  if (h0.shape() != mx::Shape{B, H} || c0.shape() != mx::Shape{B, H}) throw std::invalid_argument(where + "h0 and c0 must be [B, H]");
  if (lens && (lens->ndim() != 1 || lens->shape(0) != B)) throw std::invalid_argument(where + "lens must be [B]");
  auto dt = proj.dtype();
  bool all_f32 = dt == mx::float32 && r.dtype() == dt && h0.dtype() == dt && c0.dtype() == dt;
  if (s.device != mx::Device::cpu || !all_f32 || T == 0 || B == 0 || H == 0) return composed(proj, r, h0, c0, lens, reverse, s);
  // No contiguous copies: the kernel reads every input through its strides.
  std::vector<array> in{proj, r, h0, c0};
  if (lens) in.push_back(mx::astype(*lens, mx::int32, s));
  const mx::Shape yshape{T, B, H}, sshape{B, H};
  return array::make_arrays({yshape, sshape, sshape}, {dt, dt, dt}, std::make_shared<Lstm>(s, reverse, lens.has_value()), in);
}

}  // namespace mlxc::layers
