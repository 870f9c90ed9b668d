// Depthwise 2-D convolution as an MLX primitive (see depthwise.h). MLX's CPU convolution with
// groups == channels runs a scalar loop per group (about 0.3 GFLOP/s); this one works on the
// channels-first planes ONNX gives, on the CPU kernels' thread pool. No padding copy, no layout
// change. Where the CPU has AVX-512F or AVX2+FMA, rows of stride 1 or 2 run the masked vector loop
// of depthwise_impl.h (depthwise_avx512.cpp, depthwise_avx2.cpp); elsewhere (other strides,
// kernels wider than 16, other CPUs, MLXC_CPU_KERNELS=generic) the portable loop below: for each
// output row and kernel tap, one multiply-add over the row's valid span, which the compiler
// vectorizes for stride 1.
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/common/dense.h"
#include "kernels/common/cpu.h"
#include "kernels/conv/depthwise.h"
#include "kernels/conv/epilogue.h"
#include "kernels/conv/pointwise.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"

namespace mlxc::cpu {
// The vector plane loops (depthwise_impl.h), built per instruction set.
namespace avx512 {
void depthwise_plane(const float* in, const float* k, float b, float* out, int H, int W, int KH, int KW, int OH, int OW, int sh, int sw,
                     int pt, int pl, int dh, int dw, const pointwise::Epilogue& e, float* scratch, size_t scratch_n);
}
namespace avx2 {
void depthwise_plane(const float* in, const float* k, float b, float* out, int H, int W, int KH, int KW, int OH, int OW, int sh, int sw,
                     int pt, int pl, int dh, int dw, const pointwise::Epilogue& e, float* scratch, size_t scratch_n);
}
namespace {

using mx::array;

/** Which plane loop runs: AVX-512 or AVX2 (strides 1 and 2 along the row, kernel rows up to 16 wide), else the portable one. */
enum class Isa { portable, avx2, avx512 };
Isa plane_isa(int KW, int sw) {
#if defined(__x86_64__)
  if (KW > 16 || (sw != 1 && sw != 2)) return Isa::portable;
  if (has_avx512()) return Isa::avx512;
  if (has_avx2()) return Isa::avx2;
#else
  (void)KW, (void)sw;
#endif
  return Isa::portable;
}

struct Geometry {
  int sh, sw, pt, pl, pb, pr, dh, dw;
  // The epilogue after the bias: clamp to [lo, hi], then act (0 none, 1 HardSigmoid, 2 HardSwish
  // with alpha and beta).
  float lo, hi;
  int act;
  float alpha, beta;
  bool operator==(const Geometry&) const = default;
};

/** The portable loop's epilogue on one output row. */
void finish_row(float* row, int n, const Geometry& g) {
  if (g.act == 0 && g.lo == -std::numeric_limits<float>::infinity() && g.hi == std::numeric_limits<float>::infinity()) return;
  for (int i = 0; i < n; i++) {
    float v = row[i];
    v = v < g.lo ? g.lo : v;
    v = v > g.hi ? g.hi : v;
    if (g.act != 0) {
      float h = v * g.alpha + g.beta;
      h = h < 0.0f ? 0.0f : h;
      h = h > 1.0f ? 1.0f : h;
      v = g.act == 1 ? h : v * h;
    }
    row[i] = v;
  }
}

int out_size(int in, int k, int s, int p0, int p1, int d) { return (in + p0 + p1 - d * (k - 1) - 1) / s + 1; }

mx::Shape out_shape(const mx::Shape& x, const mx::Shape& w, const Geometry& g) {
  return {x[0], w[0], out_size(x[2], w[2], g.sh, g.pt, g.pb, g.dh), out_size(x[3], w[3], g.sw, g.pl, g.pr, g.dw)};
}

/** One output plane: out[OH, OW] = bias + sum over taps of k[ky, kx] * in[iy, ix] (in [H, W]). */
void plane(const float* in, const float* k, float b, float* out, int H, int W, int KH, int KW, int OH, int OW, const Geometry& g) {
  for (int oy = 0; oy < OH; oy++) {
    float* row = out + static_cast<size_t>(oy) * OW;
    for (int ox = 0; ox < OW; ox++) row[ox] = b;
    for (int ky = 0; ky < KH; ky++) {
      int iy = oy * g.sh - g.pt + ky * g.dh;
      if (iy < 0 || iy >= H) continue;
      const float* irow = in + static_cast<size_t>(iy) * W;
      if (KW == 3 && g.sw == 1 && g.dw == 1 && g.pl <= 1 && OW >= 3 && W >= 3) {
        // The common 3-wide row at stride 1: the three taps in one pass over the interior (one load
        // and store of the output per element instead of three), the edges tap by tap.
        const float w0 = k[ky * 3], w1 = k[ky * 3 + 1], w2 = k[ky * 3 + 2];
        const float* src = irow - g.pl;  // src[ox + kx] = in[ox + kx - pl]
        const int lo = g.pl;             // ox + 0 - pl >= 0
        int hi = W - 2 + g.pl;           // ox + 2 - pl <= W - 1
        if (hi > OW) hi = OW;
        for (int ox = lo; ox < hi; ox++) row[ox] += w0 * src[ox] + w1 * src[ox + 1] + w2 * src[ox + 2];
        for (int ox = 0; ox < lo; ox++)
          for (int kx = 0; kx < 3; kx++) {
            int ix = ox + kx - g.pl;
            if (ix >= 0 && ix < W) row[ox] += k[ky * 3 + kx] * irow[ix];
          }
        for (int ox = hi < lo ? lo : hi; ox < OW; ox++)
          for (int kx = 0; kx < 3; kx++) {
            int ix = ox + kx - g.pl;
            if (ix >= 0 && ix < W) row[ox] += k[ky * 3 + kx] * irow[ix];
          }
        continue;
      }
      for (int kx = 0; kx < KW; kx++) {
        const float wv = k[ky * KW + kx];
        const int off = kx * g.dw - g.pl;  // ix = ox * sw + off
        int lo = off >= 0 ? 0 : (-off + g.sw - 1) / g.sw;
        int last = W - 1 - off;  // ox * sw <= last
        if (last < 0) continue;
        int hi = last / g.sw + 1;
        if (hi > OW) hi = OW;
        if (g.sw == 1) {
          const float* src = irow + off;
          for (int ox = lo; ox < hi; ox++) row[ox] += wv * src[ox];
        } else {
          for (int ox = lo; ox < hi; ox++) row[ox] += wv * irow[ox * g.sw + off];
        }
      }
    }
    finish_row(row, OW, g);
  }
}

class DepthwiseConv2d : public mx::Primitive {
 public:
  DepthwiseConv2d(mx::Stream s, Geometry g, bool bias) : mx::Primitive(s), g_(g), bias_(bias) {}
  const char* name() const override { return "DepthwiseConv2d"; }
  bool is_equivalent(const mx::Primitive& o) const override {
    auto& p = static_cast<const DepthwiseConv2d&>(o);
    return g_ == p.g_ && bias_ == p.bias_;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<array>& in) override { return {out_shape(in[0].shape(), in[1].shape(), g_)}; }
  void eval_gpu(const std::vector<array>&, std::vector<array>&) override {
    throw std::runtime_error("DepthwiseConv2d is a CPU kernel (the front end composes MLX ops on other devices)");
  }

  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    auto& out = outs[0];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& a : in) enc.set_input_array(a);
    enc.set_output_array(out);
    // Views are copied into row order first (common/dense.h).
    const array x0 = cpu::row_ordered_input(in[0], enc);
    const array w0 = cpu::row_ordered_input(in[1], enc);
    const array b0 = bias_ ? cpu::row_ordered_input(in[2], enc) : w0;
    enc.dispatch([x = array::unsafe_weak_copy(x0), w = array::unsafe_weak_copy(w0), b = array::unsafe_weak_copy(b0),
                  out = array::unsafe_weak_copy(out), g = g_, has_bias = bias_]() mutable {
      const int N = x.shape(0), C = x.shape(1), H = x.shape(2), W = x.shape(3);
      const int O = w.shape(0), KH = w.shape(2), KW = w.shape(3);
      const int OH = out.shape(2), OW = out.shape(3);
      const int M = O / C;
      const float* xp = x.data<float>();
      const float* wp = w.data<float>();
      const float* bp = has_bias ? b.data<float>() : nullptr;
      float* op = out.data<float>();
      const size_t in_plane = static_cast<size_t>(H) * W, out_plane = static_cast<size_t>(OH) * OW;
      // Planes on the pool's threads, at least ~32k multiply-adds per chunk.
      const size_t work = out_plane * static_cast<size_t>(KH) * KW;
      const size_t grain = work >= 32768 ? 1 : 32768 / (work ? work : 1);
      const Isa isa = plane_isa(KW, g.sw);
      const pointwise::Epilogue e{nullptr, nullptr, g.lo, g.hi, g.act, g.alpha, g.beta};
      // The vector builds' 3x3 loop pads each plane into this thread's scratch first (up to 256 KiB).
      const size_t need = KH == 3 && KW == 3 && g.dh == 1 && g.dw == 1 ? depthwise_scratch(H, OW) : 0;
      cpu::parallel_for(static_cast<size_t>(N) * O, grain, [&](size_t p0, size_t p1) {
        thread_local std::vector<float> pad;
        float* scratch = nullptr;
        size_t scratch_n = 0;
        if (need && need <= (size_t{1} << 16) && isa != Isa::portable) {
          if (pad.size() < need) pad.resize(need);
          scratch = pad.data();
          scratch_n = pad.size();
        }
        for (size_t p = p0; p < p1; p++) {
          const size_t n = p / O, o = p % O;
          const float* src = xp + (n * C + o / M) * in_plane;
          float* dst = op + p * out_plane;
          const float* k = wp + o * KH * KW;
          const float bv = bp ? bp[o] : 0.0f;
#if defined(__x86_64__)
          if (isa == Isa::avx512) {
            avx512::depthwise_plane(src, k, bv, dst, H, W, KH, KW, OH, OW, g.sh, g.sw, g.pt, g.pl, g.dh, g.dw, e, scratch, scratch_n);
            continue;
          }
          if (isa == Isa::avx2) {
            avx2::depthwise_plane(src, k, bv, dst, H, W, KH, KW, OH, OW, g.sh, g.sw, g.pt, g.pl, g.dh, g.dw, e, scratch, scratch_n);
            continue;
          }
#endif
          plane(src, k, bv, dst, H, W, KH, KW, OH, OW, g);
        }
      });
    });
  }

 private:
  Geometry g_;
  bool bias_;
};

/** The same convolution from MLX's ops: channels-last conv_general with groups = C. */
array composed(const array& x, const array& w, const std::optional<array>& bias, const Geometry& g, mx::Stream s) {
  const int C = x.shape(1);
  auto xl = mx::transpose(x, {0, 2, 3, 1}, s);
  auto wl = mx::transpose(w, {0, 2, 3, 1}, s);
  auto y = mx::conv_general(xl, wl, {g.sh, g.sw}, {g.pt, g.pl}, {g.pb, g.pr}, {g.dh, g.dw}, {1, 1}, C, false, s);
  if (bias) y = mx::add(y, *bias, s);
  y = mx::transpose(y, {0, 3, 1, 2}, s);
  if (g.act == 0 && g.lo == -std::numeric_limits<float>::infinity() && g.hi == std::numeric_limits<float>::infinity()) return y;
  return conv_epilogue_act(y, std::nullopt, std::nullopt, g.lo, g.hi, g.act, g.alpha, g.beta, false, s);
}

}  // namespace

array depthwise_conv2d(const array& x, const array& w, const std::optional<array>& bias, int stride_h, int stride_w, int pad_top,
                       int pad_left, int pad_bottom, int pad_right, int dilation_h, int dilation_w, mx::Stream s) {
  return depthwise_conv2d_act(x, w, bias, stride_h, stride_w, pad_top, pad_left, pad_bottom, pad_right, dilation_h, dilation_w,
                              -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity(), 0, 1.0f, 0.0f, s);
}

array depthwise_conv2d_act(const array& x, const array& w, const std::optional<array>& bias, int stride_h, int stride_w, int pad_top,
                           int pad_left, int pad_bottom, int pad_right, int dilation_h, int dilation_w, float lo, float hi, int act,
                           float alpha, float beta, mx::Stream s) {
  const std::string where = "depthwise_conv2d: ";
  if (act < 0 || act > 2)
    throw std::invalid_argument(where + "act must be 0 (none), 1 (HardSigmoid) or 2 (HardSwish), got " + std::to_string(act));
  if (x.ndim() != 4 || w.ndim() != 4) throw std::invalid_argument(where + "x and w must be 4-D ([N, C, H, W] and [C*M, 1, KH, KW])");
  const int C = x.shape(1), O = w.shape(0);
  if (w.shape(1) != 1 || C <= 0 || O % C != 0)
    throw std::invalid_argument(where + "w must be [C*M, 1, KH, KW] for an input of C = " + std::to_string(C) + " channels");
  if (bias && (bias->ndim() != 1 || bias->shape(0) != O)) throw std::invalid_argument(where + "bias must be [" + std::to_string(O) + "]");
  if (stride_h <= 0 || stride_w <= 0 || dilation_h <= 0 || dilation_w <= 0)
    throw std::invalid_argument(where + "strides and dilations must be positive");
  if (pad_top < 0 || pad_left < 0 || pad_bottom < 0 || pad_right < 0) throw std::invalid_argument(where + "pads must not be negative");
  Geometry g{stride_h, stride_w, pad_top, pad_left, pad_bottom, pad_right, dilation_h, dilation_w, lo, hi, act, alpha, beta};
  auto shape = out_shape(x.shape(), w.shape(), g);
  if (shape[2] <= 0 || shape[3] <= 0) throw std::invalid_argument(where + "the kernel is larger than the padded input");
  auto dt = mx::promote_types(x.dtype(), w.dtype());
  if (bias) dt = mx::promote_types(dt, bias->dtype());
  if (s.device != mx::Device::cpu || dt != mx::float32 || x.size() == 0) return composed(x, w, bias, g, s);
  // Any layout: eval_cpu copies an input that is not in row order (common/dense.h).
  std::vector<array> in{mx::astype(x, dt, s), mx::astype(w, dt, s)};
  if (bias) in.push_back(mx::astype(*bias, dt, s));
  return array(shape, dt, std::make_shared<DepthwiseConv2d>(s, g, bias.has_value()), std::move(in));
}

}  // namespace mlxc::cpu
