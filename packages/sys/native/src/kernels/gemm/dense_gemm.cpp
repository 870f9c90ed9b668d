// The packed-weight product as an MLX primitive (dense_gemm.h), its front end and the portable
// kernels. The front end decides: float32 on a CPU stream gets the primitive, everything else MLX's
// matmul on the weight unpacked from its panels. The VJP differentiates that composition.
#include "kernels/gemm/dense_gemm.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <vector>

#include "kernels/activation/activation.h"
#include "kernels/common/cpu.h"
#include "kernels/common/dense.h"
#include "kernels/common/fused_primitive.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"
#include "mlxc_private.h"

namespace mlxc::cpu {
namespace {

using mx::array;
constexpr size_t NR = dense::kPanel;

/** The [K, n] weight back from its panels, with MLX's ops. */
array unpacked(const array& wp, int n, mx::Stream s) {
  const int P = wp.shape(0), K = wp.shape(1), half = static_cast<int>(NR) / 2;
  array w = avx2_build()
                ? mx::reshape(mx::transpose(mx::reshape(wp, {P, 2, K, half}, s), {2, 0, 1, 3}, s), {K, P * static_cast<int>(NR)}, s)
                : mx::reshape(mx::transpose(wp, {1, 0, 2}, s), {K, P * static_cast<int>(NR)}, s);
  return P * static_cast<int>(NR) == n ? w : mx::slice(w, {0, 0}, {K, n}, s);
}

array composed(const array& x, const array& wp, int n, const std::optional<array>& bias, Act act, const std::optional<array>& residual,
               mx::Stream s) {
  array y = mx::matmul(x, unpacked(wp, n, s), s);
  if (bias) y = mx::add(y, *bias, s);
  if (act != Act::identity) y = composed_activation(y, act, s);
  return residual ? mx::add(y, *residual, s) : y;
}

class DenseGemm : public FusedPrimitive {
 public:
  DenseGemm(mx::Stream s, int n, bool has_bias, Act act, bool has_residual)
      : FusedPrimitive(s), n_(n), has_bias_(has_bias), act_(act), has_residual_(has_residual) {}
  const char* name() const override { return "DenseGemm"; }
  bool is_equivalent(const mx::Primitive& o) const override {
    if (typeid(o) != typeid(*this)) return false;
    auto& p = static_cast<const DenseGemm&>(o);
    return n_ == p.n_ && has_bias_ == p.has_bias_ && act_ == p.act_ && has_residual_ == p.has_residual_;
  }
  array compose(const std::vector<array>& in) const override {
    return composed(in[0], in[1], n_, has_bias_ ? std::optional<array>(in[2]) : std::nullopt, act_,
                    has_residual_ ? std::optional<array>(in.back()) : std::nullopt, st());
  }
  std::vector<mx::Shape> output_shapes(const std::vector<array>& in) override {
    auto shape = in[0].shape();
    shape.back() = n_;
    return {shape};
  }

  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    auto& out = outs[0];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& a : in) enc.set_input_array(a);
    enc.set_output_array(out);
    // Views (a transposed activation) are copied into row order first (dense.h).
    const array x0 = row_ordered_input(in[0], enc);
    const array w0 = row_ordered_input(in[1], enc);
    const array b0 = has_bias_ ? row_ordered_input(in[2], enc) : x0;
    const array r0 = has_residual_ ? row_ordered_input(in.back(), enc) : x0;
    enc.dispatch([x = array::unsafe_weak_copy(x0), wp = array::unsafe_weak_copy(w0), b = array::unsafe_weak_copy(b0),
                  r = array::unsafe_weak_copy(r0), out = array::unsafe_weak_copy(out), hb = has_bias_, hr = has_residual_,
                  n = static_cast<size_t>(n_), act = act_]() mutable {
      const size_t K = wp.shape(1), M = n ? out.size() / n : 0;
      dense::Problem p{x.data<float>(),
                       K,
                       wp.data<float>(),
                       hb ? b.data<float>() : nullptr,
                       out.data<float>(),
                       M,
                       K,
                       n,
                       static_cast<size_t>(wp.shape(0)),
                       act,
                       hr ? r.data<float>() : nullptr};
      run(p);
    });
  }

 private:
  static void run(const dense::Problem& p) {
    if (p.M == 0 || p.n == 0) return;
    if (p.K == 0) {
      for (size_t m = 0; m < p.M; m++)
        for (size_t j = 0; j < p.n; j++) p.out[m * p.n + j] = p.bias ? p.bias[j] : 0.0f;
      epilogue(p, 0, 0, p.M, p.n);
      return;
    }
    // The widest vector build the CPU runs (dense_gemm_avx512.cpp, dense_gemm_avx2.cpp), else the portable loops.
    const int isa = has_avx512() ? 2 : has_avx2() ? 1 : 0;
    const size_t threads = static_cast<size_t>(std::max(1, num_threads()));
    const size_t macs = p.M * p.K * p.P * NR;
    if (p.M <= static_cast<size_t>(isa == 1 ? dense::kFewRowsAvx2 : dense::kFewRows)) {
      // Few rows stream the weight once: shares of panels, at least ~32K multiply-adds a row each
      // (below that, handing a share to a polling worker costs more than it saves). Under ~256K
      // multiply-adds (a [1, 128] x [128, 512] LSTM projection: ~10 us on one thread), only when a
      // worker is polling: waking a sleeping one took 20 us more than the whole product (a frame of
      // Silero VAD, whose one threaded kernel this is, ran 30 us instead of 10).
      const size_t min_macs = size_t{1} << 15, wake_macs = size_t{1} << 18;
      const size_t per_panel = p.M * p.K * NR;
      const size_t grain = std::max<size_t>(1, min_macs / per_panel);
      auto f = [&](size_t q0, size_t q1) {
        if (isa == 2)
          dense::few_avx512(p, 0, p.M, q0, q1);
        else if (isa == 1)
          dense::few_avx2(p, 0, p.M, q0, q1);
        else
          dense::few_generic(p, 0, p.M, q0, q1);
      };
      if (macs < min_macs || threads == 1 || (macs < wake_macs && !pool_polling()))
        f(0, p.P);
      else
        parallel_for(p.P, grain, f);
      return;
    }
    // More rows: packed in tiles once (all threads), then tasks of row blocks x panel shares.
    const size_t T = (p.M + dense::kTile - 1) / dense::kTile;
    // Up to 4 MiB the buffer is the thread's own, kept (no page faults on the next call); past it, this call's.
    const size_t need = T * p.K * dense::kTile;
    thread_local std::vector<float> kept;
    std::vector<float> own;
    std::vector<float>& packed = need <= (size_t{1} << 20) ? kept : own;
    if (packed.size() < need) packed.resize(need);
    float* ap = packed.data();
    const bool serial = threads == 1 || macs < (size_t{1} << 20);
    parallel_for_unless(serial, T, std::max<size_t>(1, 4096 / std::max<size_t>(p.K, 1)), [&](size_t t0, size_t t1) {
      if (isa >= 1)
        dense::pack_tiles_avx2(p, t0, t1, ap);
      else
        dense::pack_tiles(p, t0, t1, ap);
    });
    // Row blocks of at most 16 tiles (192 rows: their block of K, 192 KiB, stays in L2 across the
    // panels), of even sizes; each split over panel shares when there are fewer blocks than 4 per thread.
    const size_t blocks = (T + 15) / 16, block = (T + blocks - 1) / blocks;
    const size_t want = 4 * (serial ? 1 : threads);
    const size_t shares = blocks >= want ? 1 : std::min(p.P, (want + blocks - 1) / blocks);
    const size_t per = (p.P + shares - 1) / shares, ntasks = blocks * shares;
    std::atomic<size_t> next{0};
    parallel_for_unless(serial, serial ? 1 : std::min(threads, ntasks), 1, [&](size_t, size_t) {
      for (size_t t = next.fetch_add(1); t < ntasks; t = next.fetch_add(1)) {
        const size_t bi = t / shares, si = t % shares;
        const size_t t0 = bi * block, t1 = std::min(T, t0 + block), q0 = si * per, q1 = std::min(p.P, q0 + per);
        if (q0 >= q1) continue;
        if (isa == 2)
          dense::tiles_avx512(p, ap, t0, t1, q0, q1);
        else if (isa == 1)
          dense::tiles_avx2(p, ap, t0, t1, q0, q1);
        else
          dense::tiles_generic(p, ap, t0, t1, q0, q1);
      }
    });
  }

  int n_;
  bool has_bias_;
  Act act_;
  bool has_residual_;
};

}  // namespace

namespace dense {

void pack_tiles(const Problem& p, size_t t0, size_t t1, float* ap) {
  for (size_t t = t0; t < t1; t++) {
    float* d = ap + t * p.K * kTile;
    for (size_t i = 0; i < static_cast<size_t>(kTile); i++) {
      const size_t r = t * kTile + i;
      if (r < p.M) {
        const float* s = p.x + r * p.lda;
        for (size_t k = 0; k < p.K; k++) d[k * kTile + i] = s[k];
      } else {
        for (size_t k = 0; k < p.K; k++) d[k * kTile + i] = 0.0f;
      }
    }
  }
}

void few_generic(const Problem& p, size_t m0, size_t m1, size_t p0, size_t p1) {
  float acc[NR];
  for (size_t m = m0; m < m1; m++) {
    const float* x = p.x + m * p.lda;
    for (size_t q = p0; q < p1; q++) {
      const float* b = p.wp + q * p.K * NR;
      for (size_t j = 0; j < NR; j++) acc[j] = 0.0f;
      for (size_t k = 0; k < p.K; k++)
        for (size_t j = 0; j < NR; j++) acc[j] += x[k] * b[k * NR + j];
      const size_t col = q * NR, ncols = std::min(NR, p.n - col);
      for (size_t j = 0; j < ncols; j++) p.out[m * p.n + col + j] = acc[j] + (p.bias ? p.bias[col + j] : 0.0f);
      epilogue(p, m, col, 1, ncols);
    }
  }
}

void tiles_generic(const Problem& p, const float* ap, size_t t0, size_t t1, size_t p0, size_t p1) {
  float acc[kTile][NR];
  for (size_t t = t0; t < t1; t++) {
    const float* a = ap + t * p.K * kTile;
    const size_t row = t * kTile, rows = std::min<size_t>(kTile, p.M - row);
    for (size_t q = p0; q < p1; q++) {
      const float* b = p.wp + q * p.K * NR;
      for (auto& r : acc)
        for (float& v : r) v = 0.0f;
      for (size_t k = 0; k < p.K; k++)
        for (size_t i = 0; i < rows; i++)
          for (size_t j = 0; j < NR; j++) acc[i][j] += a[k * kTile + i] * b[k * NR + j];
      const size_t col = q * NR, ncols = std::min(NR, p.n - col);
      for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < ncols; j++) p.out[(row + i) * p.n + col + j] = acc[i][j] + (p.bias ? p.bias[col + j] : 0.0f);
      epilogue(p, row, col, rows, ncols);
    }
  }
}

}  // namespace dense

void dense_pack_host(float* dst, const void* src_bytes, size_t k, size_t n) {
  const size_t P = (n + NR - 1) / NR, full = n / NR, tail = n - full * NR;
  const bool split = avx2_build();
  constexpr size_t H = NR / 2;
  // The source is read with memcpy only: it may be a weight's bytes at any offset in a model file.
  const auto* src = static_cast<const unsigned char*>(src_bytes);
  // A fresh destination's pages, populated at once rather than faulted in by scattered writes.
  populate_host(dst, P * k * NR * sizeof(float));
  // Rows of the source in order (each read once, front to back), about 64 KiB of them a task.
  parallel_for(k, std::max<size_t>(1, (size_t{1} << 14) / std::max<size_t>(n, 1)), [=](size_t i0, size_t i1) {
    float padded[NR];
    for (size_t i = i0; i < i1; i++) {
      const unsigned char* row = src + i * n * sizeof(float);
      for (size_t p = 0; p < P; p++) {
        const void* from = row + p * NR * sizeof(float);
        if (p == full) {
          // The last panel's columns past n are zeros.
          std::memcpy(padded, from, tail * sizeof(float));
          std::memset(padded + tail, 0, (NR - tail) * sizeof(float));
          from = padded;
        }
        if (split) {
          std::memcpy(dst + p * k * NR + i * H, from, H * sizeof(float));
          std::memcpy(dst + p * k * NR + k * H + i * H, static_cast<const unsigned char*>(from) + H * sizeof(float), H * sizeof(float));
        } else {
          std::memcpy(dst + (p * k + i) * NR, from, NR * sizeof(float));
        }
      }
    }
  });
}

namespace {

template <typename T>
void transpose_tiles(T* dst, const T* src, size_t k, size_t n) {
  constexpr size_t B = 32;  // a 32 x 32 tile of either side stays in L1
  // Tasks are bands of 32 rows of dst (columns of src): each writes its own rows front to back.
  parallel_for((n + B - 1) / B, 1, [=](size_t b0, size_t b1) {
    for (size_t c0 = b0 * B; c0 < std::min(n, b1 * B); c0 += B) {
      const size_t c1 = std::min(n, c0 + B);
      for (size_t r0 = 0; r0 < k; r0 += B) {
        const size_t r1 = std::min(k, r0 + B);
        for (size_t c = c0; c < c1; c++) {
          T* out = dst + c * k;
          for (size_t r = r0; r < r1; r++) out[r] = src[r * n + c];
        }
      }
    }
  });
}

}  // namespace

void transpose_host(void* dst, const void* src, size_t k, size_t n, size_t elem_size) {
  if (elem_size == 4)
    transpose_tiles(static_cast<uint32_t*>(dst), static_cast<const uint32_t*>(src), k, n);
  else if (elem_size == 2)
    transpose_tiles(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), k, n);
  else
    throw std::invalid_argument("transpose_host: elem_size must be 2 or 4, got " + std::to_string(elem_size));
}

array dense_pack_weight(const array& w, mx::Stream s) {
  if (w.ndim() != 2) throw std::invalid_argument("dense_pack_weight: w must be a [K, N] matrix, got rank " + std::to_string(w.ndim()));
  const int K = w.shape(0), N = w.shape(1), P = (N + static_cast<int>(NR) - 1) / static_cast<int>(NR);
  array x = w;
  if (P * static_cast<int>(NR) != N)
    x = mx::pad(x, std::vector<std::pair<int, int>>{{0, 0}, {0, P * static_cast<int>(NR) - N}}, array(0, w.dtype()), "constant", s);
  if (avx2_build()) {
    // [K, P, 2, 16] -> [P, 2, K, 16], under the packed shape.
    const int half = static_cast<int>(NR) / 2;
    x = mx::contiguous(mx::transpose(mx::reshape(x, {K, P, 2, half}, s), {1, 2, 0, 3}, s), false, s);
    return mx::reshape(x, {P, K, static_cast<int>(NR)}, s);
  }
  x = mx::reshape(x, {K, P, static_cast<int>(NR)}, s);
  return mx::contiguous(mx::transpose(x, {1, 0, 2}, s), false, s);
}

array dense_gemm(const array& x, const array& wp, int n, const std::optional<array>& bias, mx::Stream s) {
  return dense_gemm_act(x, wp, n, bias, "identity", std::nullopt, s);
}

array dense_gemm_act(const array& x, const array& wp, int n, const std::optional<array>& bias, const std::string& kind,
                     const std::optional<array>& residual, mx::Stream s) {
  const Act act = parse_activation(kind);
  if (x.ndim() < 1) throw std::invalid_argument("dense_gemm: x must have at least one axis ([..., K])");
  if (wp.ndim() != 3 || wp.shape(2) != static_cast<int>(NR))
    throw std::invalid_argument("dense_gemm: the packed weight must be [P, K, " + std::to_string(NR) + "] (dense_pack_weight), got rank " +
                                std::to_string(wp.ndim()));
  if (n <= 0 || (n + static_cast<int>(NR) - 1) / static_cast<int>(NR) != wp.shape(0))
    throw std::invalid_argument("dense_gemm: " + std::to_string(n) + " output columns do not fill " + std::to_string(wp.shape(0)) +
                                " panels of " + std::to_string(NR));
  if (x.shape(-1) != wp.shape(1))
    throw std::invalid_argument("dense_gemm: x's last axis (" + std::to_string(x.shape(-1)) + ") is not the weight's K (" +
                                std::to_string(wp.shape(1)) + ")");
  if (bias && (bias->ndim() != 1 || bias->shape(0) != n))
    throw std::invalid_argument("dense_gemm: bias must be a vector of " + std::to_string(n) + " columns");
  const bool native = !kernels_off() && s.device == mx::Device::cpu && x.dtype() == mx::float32 && wp.dtype() == mx::float32 &&
                      (!bias || bias->dtype() == mx::float32);
  if (!native) return composed(x, wp, n, bias, act, residual, s);
  auto shape = x.shape();
  shape.back() = n;
  std::vector<array> in{x, wp};
  if (bias) in.push_back(*bias);
  // A residual of the result's own shape and type goes into the epilogue; any other (a broadcast) is added after.
  const bool fused_residual = residual && residual->shape() == shape && residual->dtype() == mx::float32;
  if (fused_residual) in.push_back(*residual);
  array y(shape, mx::float32, std::make_shared<DenseGemm>(s, n, bias.has_value(), act, fused_residual), std::move(in));
  return residual && !fused_residual ? mx::add(y, *residual, s) : y;
}

}  // namespace mlxc::cpu

extern "C" int mlxc_transpose_host(void* dst, const void* src, size_t k, size_t n, size_t elem_size) {
  if (!dst || !src) {
    mlxc::raise("mlxc_transpose_host: dst and src must not be null");
    return 1;
  }
  try {
    mlxc::cpu::transpose_host(dst, src, k, n, elem_size);
  } catch (const std::exception& e) {
    mlxc::raise(e.what());
    return 1;
  }
  return 0;
}

extern "C" int mlxc_dense_pack_host(void* dst, const void* src, size_t k, size_t n) {
  if (!dst || !src) {
    mlxc::raise("mlxc_dense_pack_host: dst and src must not be null");
    return 1;
  }
  try {
    mlxc::cpu::dense_pack_host(static_cast<float*>(dst), src, k, n);
  } catch (const std::exception& e) {
    mlxc::raise(e.what());
    return 1;
  }
  return 0;
}
