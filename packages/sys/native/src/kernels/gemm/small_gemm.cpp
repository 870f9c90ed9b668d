// The small-M products as MLX primitives (see small_gemm.h). The front ends decide: float32 on a
// CPU stream with few rows gets the primitive, everything else MLX's own op. Each primitive's VJP
// differentiates that op, so gradients flow through either path.
#include "kernels/gemm/small_gemm.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <vector>

#include "kernels/common/fused_primitive.h"
#include "kernels/common/cpu.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"
#include "mlx/transforms.h"

namespace mlxc::cpu {
namespace {

using mx::array;

/** MLXC_CPU_KERNELS=off (every fused kernel) or MLXC_SMALL_GEMM=off (these alone): MLX's ops, for comparisons. */
bool small_gemm_off() {
  static const bool off = [] {
    const char* g = std::getenv("MLXC_SMALL_GEMM");
    return kernels_off() || (g && std::string(g) == "off");
  }();
  return off;
}

/** Copies the strided array (shape, element strides) at src into dst, row-major. */
void gather(const float* src, const mx::Shape& shape, const mx::Strides& strides, float* dst) {
  const int nd = static_cast<int>(shape.size());
  size_t total = 1;
  for (int d : shape) total *= static_cast<size_t>(d);
  if (total == 0) return;
  if (nd == 0) {
    *dst = *src;
    return;
  }
  std::vector<int> idx(nd, 0);
  const int64_t inner = strides[nd - 1];
  const int n = shape[nd - 1];
  int64_t off = 0;
  for (size_t done = 0; done < total; done += n) {
    for (int i = 0; i < n; i++) *dst++ = src[off + i * inner];
    for (int d = nd - 2; d >= 0; d--) {
      off += strides[d];
      if (++idx[d] < shape[d]) break;
      off -= strides[d] * shape[d];
      idx[d] = 0;
    }
  }
}

/** Element offset of batch entry i (row-major over the first nb axes of shape). */
int64_t batch_offset(size_t i, const mx::Shape& shape, const mx::Strides& strides, int nb) {
  int64_t off = 0;
  for (int d = nb - 1; d >= 0; d--) {
    off += static_cast<int64_t>(i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return off;
}

/** x itself when it is already computed and row-contiguous (constants), else mx::contiguous(x). */
array contiguous_of(const array& x, mx::Stream s) {
  if (x.is_available() && x.flags().row_contiguous) return x;
  return mx::contiguous(x, false, s);
}

/** a [batch..., M, K] @ b [batch..., K, N] (+ bias [N]), batch axes already broadcast, or a [..., K] @ b [K, N]; any strides. */
class SmallMatmul : public FusedPrimitive {
 public:
  SmallMatmul(mx::Stream s, bool has_bias) : FusedPrimitive(s), has_bias_(has_bias) {}
  const char* name() const override { return "SmallMatmul"; }
  bool is_equivalent(const mx::Primitive& o) const override {
    return typeid(o) == typeid(*this) && has_bias_ == static_cast<const SmallMatmul&>(o).has_bias_;
  }
  array compose(const std::vector<array>& in) const override {
    auto y = mx::matmul(in[0], in[1], st());
    return has_bias_ ? mx::add(y, in[2], st()) : y;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<array>& in) override {
    auto shape = in[0].shape();
    shape.back() = in[1].shape(-1);
    return {shape};
  }

  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    auto& out = outs[0];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& x : in) enc.set_input_array(x);
    enc.set_output_array(out);
    enc.dispatch([a = array::unsafe_weak_copy(in[0]), b = array::unsafe_weak_copy(in[1]),
                  bias = array::unsafe_weak_copy(has_bias_ ? in[2] : in[0]), out = array::unsafe_weak_copy(out),
                  hb = has_bias_]() mutable { run(a, b, hb ? bias.data<float>() : nullptr, out); });
  }

 private:
  static void run(const array& a, const array& b, const float* bias, array& out) {
    // A matrix b takes every leading axis of a as rows ("rows mode"); otherwise the batch axes
    // of a and b are already broadcast to the output's.
    const bool rows_mode = b.ndim() == 2;
    const int nd = a.ndim(), nb = rows_mode ? 0 : nd - 2;
    const size_t K = a.shape(-1), N = b.shape(-1);
    const size_t M = rows_mode ? a.size() / K : a.shape(-2);
    const size_t batches = M * N ? out.size() / (M * N) : 0;
    float* o = out.data<float>();
    if (out.size() == 0) return;
    if (K == 0) {
      for (size_t i = 0; i < out.size(); i++) o[i] = bias ? bias[i % N] : 0.0f;
      return;
    }
    // a: rows contiguous along K, or gathered.
    const float* ap = a.data<float>();
    std::vector<float> a_copy;
    int64_t lda = K;
    mx::Strides a_str = a.strides();
    bool gather_a;
    if (rows_mode)
      gather_a = !(a.flags().row_contiguous || (nd == 2 && a.strides(1) == 1) || (nd == 1 && a.strides(0) == 1));
    else
      gather_a = a.strides(-1) != 1 && K > 1;
    if (gather_a) {
      a_copy.resize(a.size());
      gather(ap, a.shape(), a.strides(), a_copy.data());
      ap = a_copy.data();
      a_str = mx::Strides(nd);
      int64_t st = 1;
      for (int d = nd - 1; d >= 0; d--) a_str[d] = st, st *= a.shape(d);
    } else if (nd >= 2 && M > 1 && (!rows_mode || nd == 2)) {
      lda = a.strides(-2);
    }
    // b: [K, N] rows (unit column stride), [N, K] rows (a transposed view), or gathered.
    const float* bp = b.data<float>();
    std::vector<float> b_copy;
    mx::Strides b_str = b.strides();
    const int64_t sK = b.strides(-2), sN = b.strides(-1);
    bool transposed = false;
    int64_t ldb = sK;
    if (N == 1 || sN == 1) {
      ldb = sK;
    } else if (K == 1 || sK == 1) {
      transposed = true;
      ldb = sN;
    } else {
      b_copy.resize(b.size());
      gather(bp, b.shape(), b.strides(), b_copy.data());
      bp = b_copy.data();
      ldb = N;
      b_str = mx::Strides(b.ndim());
      int64_t st = 1;
      for (int d = b.ndim() - 1; d >= 0; d--) b_str[d] = st, st *= b.shape(d);
    }
    // Bands of output columns, one task each: wide enough that each row of a [K, N] b is read in
    // long runs (the prefetchers' streams), narrow enough that every thread gets some.
    const size_t threads = static_cast<size_t>(num_threads());
    size_t NC = (N + 2 * threads - 1) / (2 * threads);
    NC = std::clamp<size_t>((NC + 63) / 64 * 64, 64, transposed ? 256 : M == 1 ? 8192 : 1024);
    const size_t bands = (N + NC - 1) / NC;
    const size_t per_task = M * K * std::min(N, NC);
    // About 128K multiply-adds per chunk at least: below that, waking the pool costs more than it
    // saves. One row (decoding) streams its weights once, at the bandwidth of one core: a split
    // pays from 32K (128 KB of weights, a few microseconds), the pool's workers spinning between
    // the step's products (MLXC_POOL_SPIN_US).
    const size_t min_work = M == 1 && !transposed ? size_t{1} << 15 : size_t{1} << 17;
    const size_t grain = std::max<size_t>(1, min_work / std::max<size_t>(per_task, 1));
    const auto& shape = out.shape();
    parallel_for(batches * bands, grain, [&](size_t t0, size_t t1) {
      for (size_t t = t0; t < t1; t++) {
        const size_t bi = t / bands, n0 = (t % bands) * NC, n1 = std::min(N, n0 + NC);
        const float* at = ap + (nb ? batch_offset(bi, shape, a_str, nb) : 0);
        const float* bt = bp + (nb ? batch_offset(bi, shape, b_str, nb) : 0);
        float* ot = o + bi * M * N;
        if (transposed)
          gemm::nk(at, lda, bt, ldb, bias, ot, N, M, K, n0, n1);
        else
          gemm::kn(at, lda, bt, ldb, bias, ot, N, M, K, n0, n1);
      }
    });
  }

  bool has_bias_;
};

/** x [..., K] @ dequantize(w [N, K * bits / 32], scales, biases [N, K / group])^T, 4 or 8 bits; w, scales and biases row-contiguous. */
class SmallQuantMatmul : public FusedPrimitive {
 public:
  SmallQuantMatmul(mx::Stream s, int group, int bits) : FusedPrimitive(s), group_(group), bits_(bits) {}
  const char* name() const override { return "SmallQuantizedMatmul"; }
  bool is_equivalent(const mx::Primitive& o) const override {
    if (typeid(o) != typeid(*this)) return false;
    auto& p = static_cast<const SmallQuantMatmul&>(o);
    return group_ == p.group_ && bits_ == p.bits_;
  }
  array compose(const std::vector<array>& in) const override {
    return mx::quantized_matmul(in[0], in[1], in[2], in[3], true, group_, bits_, "affine", st());
  }
  std::vector<mx::Shape> output_shapes(const std::vector<array>& in) override {
    auto shape = in[0].shape();
    shape.back() = in[1].shape(0);
    return {shape};
  }

  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    auto& out = outs[0];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& x : in) enc.set_input_array(x);
    enc.set_output_array(out);
    enc.dispatch([x = array::unsafe_weak_copy(in[0]), w = array::unsafe_weak_copy(in[1]), sc = array::unsafe_weak_copy(in[2]),
                  bi = array::unsafe_weak_copy(in[3]), out = array::unsafe_weak_copy(out), group = static_cast<size_t>(group_),
                  bits = bits_]() mutable {
      const size_t K = x.shape(-1), M = x.size() / K, N = w.shape(0), G = K / group;
      const float* xp = x.data<float>();
      std::vector<float> x_copy;
      if (!x.flags().row_contiguous) {
        x_copy.resize(x.size());
        gather(xp, x.shape(), x.strides(), x_copy.data());
        xp = x_copy.data();
      }
      std::vector<float> asum(M * G);
      for (size_t m = 0; m < M; m++)
        for (size_t g = 0; g < G; g++) {
          float s = 0;
          for (size_t k = 0; k < group; k++) s += xp[m * K + g * group + k];
          asum[m * G + g] = s;
        }
      const uint32_t* wp = w.data<uint32_t>();
      const float* sp = sc.data<float>();
      const float* bp = bi.data<float>();
      float* o = out.data<float>();
      constexpr size_t NC = 32;
      const size_t grain = std::max<size_t>(1, (size_t{1} << 17) / std::max<size_t>(M * K * NC, 1));
      parallel_for((N + NC - 1) / NC, grain, [&](size_t t0, size_t t1) {
        if (bits == 8)
          gemm::q8(xp, K, wp, sp, bp, asum.data(), nullptr, o, N, M, K, group, t0 * NC, std::min(N, t1 * NC));
        else
          gemm::q4(xp, K, wp, sp, bp, asum.data(), nullptr, o, N, M, K, group, t0 * NC, std::min(N, t1 * NC));
      });
    });
  }

 private:
  int group_;
  int bits_;
};

}  // namespace

array small_matmul(const array& a, const array& b, const std::optional<array>& bias, mx::Stream s) {
  // MLX's ops: the bias of a matrix product as addmm's C term.
  auto fallback = [&] {
    if (!bias) return mx::matmul(a, b, s);
    if (a.ndim() < 2 || b.ndim() != 2) return mx::add(mx::matmul(a, b, s), *bias, s);
    if (a.ndim() == 2) return mx::addmm(*bias, a, b, 1.0f, 1.0f, s);
    auto y = mx::addmm(*bias, mx::reshape(a, {-1, a.shape(-1)}, s), b, 1.0f, 1.0f, s);
    mx::Shape shape = a.shape();
    shape.back() = b.shape(-1);
    return mx::reshape(y, shape, s);
  };
  if (small_gemm_off() || s.device != mx::Device::cpu || a.dtype() != mx::float32 || b.dtype() != mx::float32 || a.ndim() < 1 ||
      b.ndim() < 2)
    return fallback();
  const int K = a.shape(-1), N = b.shape(-1);
  if (b.shape(-2) != K || a.size() == 0 || K == 0 || N == 0) return fallback();  // MLX's own error or empty result
  if (bias && !(bias->dtype() == mx::float32 && bias->ndim() == 1 && bias->shape(0) == N)) return fallback();
  std::vector<array> in;
  mx::Shape out_shape;
  if (b.ndim() == 2) {
    const size_t rows = a.size() / K;
    if (rows > static_cast<size_t>(small_gemm_max_rows)) return fallback();
    out_shape = a.shape();
    out_shape.back() = N;
    in = {a, b};
  } else {
    const array a2 = a.ndim() == 1 ? mx::reshape(a, {1, K}, s) : a;
    const int M = a2.shape(-2);
    if (M > small_gemm_max_rows) return fallback();
    mx::Shape ab(a2.shape().begin(), a2.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
    mx::Shape batch;
    try {
      batch = mx::broadcast_shapes(ab, bb);
    } catch (const std::exception&) {
      return fallback();  // MLX's own error
    }
    mx::Shape as = batch, bs = batch;
    as.insert(as.end(), {M, K});
    bs.insert(bs.end(), {K, N});
    in = {mx::broadcast_to(a2, as, s), mx::broadcast_to(b, bs, s)};
    out_shape = batch;
    if (a.ndim() != 1) out_shape.push_back(M);
    out_shape.push_back(N);
  }
  if (bias) in.push_back(contiguous_of(*bias, s));
  auto shape = in[0].shape();
  shape.back() = N;
  array y(shape, mx::float32, std::make_shared<SmallMatmul>(s, bias.has_value()), std::move(in));
  return y.shape() == out_shape ? y : mx::reshape(y, out_shape, s);
}

array small_quantized_matmul(const array& x, const array& w, const array& scales, const array& biases, bool transpose, int group_size,
                             int bits, mx::Stream s) {
  auto fallback = [&] { return mx::quantized_matmul(x, w, scales, biases, transpose, group_size, bits, "affine", s); };
  if (small_gemm_off() || s.device != mx::Device::cpu || !transpose || (bits != 4 && bits != 8) ||
      (group_size != 32 && group_size != 64 && group_size != 128) || x.dtype() != mx::float32 || w.dtype() != mx::uint32 ||
      scales.dtype() != mx::float32 || biases.dtype() != mx::float32 || x.ndim() < 1 || w.ndim() != 2 || scales.ndim() != 2 ||
      biases.shape() != scales.shape())
    return fallback();
  const int K = x.shape(-1), N = w.shape(0);
  if (static_cast<int64_t>(w.shape(1)) * 32 / bits != K || scales.shape(0) != N || scales.shape(1) * group_size != K || x.size() == 0 ||
      N == 0)
    return fallback();
  const size_t rows = x.size() / K;
  if (rows > static_cast<size_t>(small_qgemm_max_rows))
    return mx::matmul(x, mx::transpose(mx::dequantize(w, scales, biases, group_size, bits, "affine", std::nullopt, std::nullopt, s), s), s);
  std::vector<array> in{x, contiguous_of(w, s), contiguous_of(scales, s), contiguous_of(biases, s)};
  mx::Shape out_shape = x.shape();
  out_shape.back() = N;
  return array(out_shape, mx::float32, std::make_shared<SmallQuantMatmul>(s, group_size, bits), std::move(in));
}

}  // namespace mlxc::cpu
