// The channels-first convolution of few output positions as an MLX primitive (see small_conv.h).
#include "kernels/conv/small_conv.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <typeinfo>

#include "kernels/common/cpu.h"
#include "kernels/common/dense.h"
#include "kernels/common/fused_primitive.h"
#include "kernels/gemm/small_gemm.h"
#include "mlx/backend/cpu/encoder.h"

namespace mlxc::cpu {

namespace {

using mx::array;
using small_conv_detail::kRows;

/** Products of fewer multiply-adds run on the calling thread (conv_gemm's threshold: waking the pool costs more). */
constexpr size_t kSerialMacs = size_t{1} << 20;

/** One 2-D problem (1-D as height 1), channels-first. */
struct Geometry {
  size_t n, c, ih, iw, o, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
  size_t positions() const { return oh * ow; }
  size_t depth() const { return c * kh * kw; }
};

/** n floats from src to dst: a memcpy for long runs, moves by hand for the short ones of kernel-3
 * tap rows (a call to memcpy per 3 floats; unrolled in blocks of 4, as a plain loop is turned back
 * into that call). */
inline void copy_run(float* dst, const float* src, size_t n) {
  if (n >= 16) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float a = src[i], b = src[i + 1], c = src[i + 2], d = src[i + 3];
    dst[i] = a;
    dst[i + 1] = b;
    dst[i + 2] = c;
    dst[i + 3] = d;
  }
  switch (n - i) {
    case 3: dst[i + 2] = src[i + 2]; [[fallthrough]];
    case 2: dst[i + 1] = src[i + 1]; [[fallthrough]];
    case 1: dst[i] = src[i]; [[fallthrough]];
    default: break;
  }
}

/** row[0, depth) = the im2col row of output position p of image xb [C, IH, IW], in the weight's
 * order (channel, ky, kx); zeros where the window leaves the input. */
void pack_row(const Geometry& g, const float* xb, size_t p, float* row) {
  const size_t oy = p / g.ow, ox = p % g.ow;
  // Signed: the window may start before the input.
  const long iy0 = static_cast<long>(oy * g.sh) - static_cast<long>(g.ph);
  const long ix0 = static_cast<long>(ox * g.sw) - static_cast<long>(g.pw);
  const long iw = static_cast<long>(g.iw), ih = static_cast<long>(g.ih);
  // Taps [lo, hi) of a kernel row inside the input along x (the same for every channel and row).
  size_t lo = 0, hi = g.kw;
  while (lo < g.kw && ix0 + static_cast<long>(lo * g.dw) < 0) lo++;
  while (hi > lo && ix0 + static_cast<long>((hi - 1) * g.dw) >= iw) hi--;
  for (size_t ci = 0; ci < g.c; ci++) {
    const float* xc = xb + ci * g.ih * g.iw;
    for (size_t ky = 0; ky < g.kh; ky++, row += g.kw) {
      const long iy = iy0 + static_cast<long>(ky * g.dh);
      if (iy < 0 || iy >= ih || lo >= hi) {
        for (size_t k = 0; k < g.kw; k++) row[k] = 0.0f;
        continue;
      }
      const float* src = xc + iy * iw + (ix0 + static_cast<long>(lo * g.dw));  // tap lo
      for (size_t k = 0; k < lo; k++) row[k] = 0.0f;
      if (g.dw == 1) {
        copy_run(row + lo, src, hi - lo);
      } else {
        for (size_t k = lo; k < hi; k++) row[k] = src[(k - lo) * g.dw];
      }
      for (size_t k = hi; k < g.kw; k++) row[k] = 0.0f;
    }
  }
}

mx::Shape out_shape(const mx::Shape& x, const mx::Shape& w, const std::vector<int>& strides, const std::vector<int>& pb,
                    const std::vector<int>& pe, const std::vector<int>& dil) {
  mx::Shape o{x[0], w[0]};
  for (size_t i = 0; i < strides.size(); i++) {
    const int span = (w[2 + i] - 1) * dil[i] + 1;
    o.push_back((x[2 + i] + pb[i] + pe[i] - span) / strides[i] + 1);
  }
  return o;
}

array composed(const array& x, const array& w, const std::optional<array>& bias, const std::vector<int>& strides,
               const std::vector<int>& pb, const std::vector<int>& pe, const std::vector<int>& dil, float lo, float hi, mx::Stream s) {
  const std::vector<int> ones(strides.size(), 1);
  // No input channels: a sum over none is 0 (MLX's CPU conv divides by the channel count: SIGFPE).
  array y =
      x.shape(1) == 0
          ? mx::zeros(out_shape(x.shape(), w.shape(), strides, pb, pe, dil), x.dtype(), s)
          : mx::moveaxis(mx::conv_general(mx::moveaxis(x, 1, -1, s), mx::moveaxis(w, 1, -1, s), strides, pb, pe, dil, ones, 1, false, s),
                         -1, 1, s);
  if (bias) {
    mx::Shape shape(y.ndim() - 1, 1);
    shape[0] = bias->shape(0);
    y = mx::add(y, mx::reshape(*bias, shape, s), s);
  }
  if (lo > -std::numeric_limits<float>::infinity()) y = mx::maximum(y, array(lo, y.dtype()), s);
  if (hi < std::numeric_limits<float>::infinity()) y = mx::minimum(y, array(hi, y.dtype()), s);
  return y;
}

class SmallConv : public FusedPrimitive {
 public:
  SmallConv(mx::Stream s, std::vector<int> strides, std::vector<int> pb, std::vector<int> pe, std::vector<int> dil, float lo, float hi,
            bool has_bias)
      : FusedPrimitive(s),
        strides_(std::move(strides)),
        pb_(std::move(pb)),
        pe_(std::move(pe)),
        dil_(std::move(dil)),
        lo_(lo),
        hi_(hi),
        has_bias_(has_bias) {}
  const char* name() const override { return "SmallConv"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    if (typeid(other) != typeid(*this)) return false;
    auto& p = static_cast<const SmallConv&>(other);
    return strides_ == p.strides_ && pb_ == p.pb_ && pe_ == p.pe_ && dil_ == p.dil_ && lo_ == p.lo_ && hi_ == p.hi_ &&
           has_bias_ == p.has_bias_;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<array>& in) override {
    return {out_shape(in[0].shape(), in[1].shape(), strides_, pb_, pe_, dil_)};
  }
  array compose(const std::vector<array>& in) const override {
    std::optional<array> b = has_bias_ ? std::optional<array>(in[2]) : std::nullopt;
    return composed(in[0], in[1], b, strides_, pb_, pe_, dil_, lo_, hi_, st());
  }

  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    auto& out = outs[0];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    const array& x = in[0];
    const array& w = in[1];
    const bool two = x.ndim() == 4;
    Geometry g{};
    g.n = x.shape(0);
    g.c = x.shape(1);
    g.ih = two ? x.shape(2) : 1;
    g.iw = x.shape(-1);
    g.o = w.shape(0);
    g.oh = two ? out.shape(2) : 1;
    g.ow = out.shape(-1);
    g.kh = two ? w.shape(2) : 1;
    g.kw = w.shape(-1);
    g.sh = two ? strides_[0] : 1;
    g.sw = strides_.back();
    g.ph = two ? pb_[0] : 0;
    g.pw = pb_.back();
    g.dh = two ? dil_[0] : 1;
    g.dw = dil_.back();
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& a : in) enc.set_input_array(a);
    enc.set_output_array(out);
    // Views are copied into row order first (common/dense.h).
    const array x0 = row_ordered_input(x, enc);
    const array w0 = row_ordered_input(w, enc);
    const array b0 = has_bias_ ? row_ordered_input(in[2], enc) : w0;
    enc.dispatch([g, x = array::unsafe_weak_copy(x0), w = array::unsafe_weak_copy(w0), b = array::unsafe_weak_copy(b0),
                  out = array::unsafe_weak_copy(out), hb = has_bias_, lo = lo_, hi = hi_]() mutable {
      const size_t P = g.positions(), K = g.depth(), O = g.o;
      if (g.n == 0 || P == 0 || O == 0) return;
      const float* xp = x.data<float>();
      const float* wp = w.data<float>();
      const float* bp = hb ? b.data<float>() : nullptr;
      float* yp = out.data<float>();
      const size_t blocks = (P + kRows - 1) / kRows;
      // Tasks: (image, block of kRows positions, band of output channels); bands only where the
      // product is worth the pool and there are too few blocks for its threads.
      const size_t macs = g.n * P * K * O;
      const bool serial = macs < kSerialMacs;
      const size_t threads = serial ? 1 : static_cast<size_t>(std::max(1, num_threads()));
      const size_t want = 4 * threads, rows = g.n * blocks;
      const size_t max_bands = (O + 15) / 16;
      const size_t bands = rows >= want ? 1 : std::min(max_bands, (want + rows - 1) / rows);
      const size_t width = ((O + bands - 1) / bands + 15) / 16 * 16;
      const size_t ntasks = rows * bands;
      const auto task = [&](size_t t0, size_t t1) {
        // The packed rows and their products, per thread: no allocation once grown.
        thread_local std::vector<float> buf;
        const size_t need = kRows * (K + O);
        if (buf.size() < need) buf.resize(need);
        float* col = buf.data();
        float* prod = col + kRows * K;
        size_t packed = std::numeric_limits<size_t>::max();
        for (size_t t = t0; t < t1; t++) {
          const size_t r = t / bands, band = t % bands;
          const size_t img = r / blocks, p0 = (r % blocks) * kRows, pr = std::min<size_t>(kRows, P - p0);
          const size_t n0 = std::min(O, band * width), n1 = std::min(O, n0 + width);
          if (n0 >= n1) continue;
          const float* xb = xp + img * g.c * g.ih * g.iw;
          if (packed != r) {
            for (size_t i = 0; i < pr; i++) pack_row(g, xb, p0 + i, col + i * K);
            packed = r;
          }
          // prod [pr, O] (columns [n0, n1)) = col [pr, K] x w [O, K]^T + bias.
          gemm::nk_rows(col, K, wp, K, bp, prod, O, pr, K, n0, n1);
          float* yb = yp + img * O * P + p0;
          for (size_t n = n0; n < n1; n++)
            for (size_t i = 0; i < pr; i++) {
              float v = prod[i * O + n];
              // NaN stays NaN: both comparisons are false for it.
              v = v < lo ? lo : v;
              yb[n * P + i] = v > hi ? hi : v;
            }
        }
      };
      if (serial)
        task(0, ntasks);
      else
        parallel_for(ntasks, 1, task);
    });
  }

 private:
  std::vector<int> strides_, pb_, pe_, dil_;
  float lo_, hi_;
  bool has_bias_;
};

}  // namespace

array small_conv(const array& x, const array& w, const std::optional<array>& bias, const std::vector<int>& strides,
                 const std::vector<int>& pads_begin, const std::vector<int>& pads_end, const std::vector<int>& dilations, float lo,
                 float hi, mx::Stream s) {
  const std::string where = "small_conv: ";
  const int sp = static_cast<int>(x.ndim()) - 2;
  if (sp < 1) throw std::invalid_argument(where + "x must be [N, C, ...spatial], got rank " + std::to_string(x.ndim()));
  if (w.ndim() != x.ndim())
    throw std::invalid_argument(where + "w must be [O, C, ...kernel] of rank " + std::to_string(x.ndim()) + ", got rank " +
                                std::to_string(w.ndim()));
  if (w.shape(1) != x.shape(1))
    throw std::invalid_argument(where + "the weight has " + std::to_string(w.shape(1)) + " input channels, the input " +
                                std::to_string(x.shape(1)) + " (one group)");
  auto per_axis = [&](const std::vector<int>& v, const char* what, int least) {
    if (static_cast<int>(v.size()) != sp)
      throw std::invalid_argument(where + what + " needs " + std::to_string(sp) + " values, got " + std::to_string(v.size()));
    for (int e : v)
      if (e < least) throw std::invalid_argument(where + what + " must be at least " + std::to_string(least));
  };
  per_axis(strides, "strides", 1);
  per_axis(pads_begin, "pads_begin", 0);
  per_axis(pads_end, "pads_end", 0);
  per_axis(dilations, "dilations", 1);
  for (int i = 0; i < sp; i++) {
    if (w.shape(2 + i) < 1) throw std::invalid_argument(where + "the kernel is empty on spatial axis " + std::to_string(i));
    // In 64 bits: a huge dilation or pad must not wrap past the check.
    const int64_t span = (static_cast<int64_t>(w.shape(2 + i)) - 1) * dilations[i] + 1;
    const int64_t padded = static_cast<int64_t>(x.shape(2 + i)) + pads_begin[i] + pads_end[i];
    if (padded < span)
      throw std::invalid_argument(where + "the window (" + std::to_string(span) + ") is larger than the padded input (" +
                                  std::to_string(padded) + ") on spatial axis " + std::to_string(i));
    if (padded > std::numeric_limits<int32_t>::max())
      throw std::invalid_argument(where + "the padded input (" + std::to_string(padded) + ") on spatial axis " + std::to_string(i) +
                                  " is past 2^31 - 1");
  }
  const int o = w.shape(0);
  if (bias && (bias->ndim() != 1 || bias->shape(0) != o)) throw std::invalid_argument(where + "bias must be [" + std::to_string(o) + "]");
  const bool native = !kernels_off() && s.device == mx::Device::cpu && sp <= 2 && x.dtype() == mx::float32 && w.dtype() == mx::float32 &&
                      (!bias || bias->dtype() == mx::float32) && x.shape(1) > 0;
  if (!native) return composed(x, w, bias, strides, pads_begin, pads_end, dilations, lo, hi, s);
  std::vector<array> in{x, w};
  if (bias) in.push_back(*bias);
  const mx::Shape shape = out_shape(x.shape(), w.shape(), strides, pads_begin, pads_end, dilations);
  return array(shape, mx::float32, std::make_shared<SmallConv>(s, strides, pads_begin, pads_end, dilations, lo, hi, bias.has_value()),
               std::move(in));
}

}  // namespace mlxc::cpu
