// Attention over whole query sequences as an MLX primitive (fused_attention.h). FusedAttention's
// tasks are a block of query rows of every query head of one key/value head (the group's heads
// share each read of K and V): the block's queries times the scale, their scores against the keys
// any row of the block may see (K gathered through its strides into a [D, n] block, then the
// small-row product kernels), causal and mask applied while the scores are in cache, the vectorized
// row softmax over each row's visible keys, then the product with V's rows straight into the
// output. q and v are read through their strides when their last axis is contiguous (the heads of a
// [B, L, H, D] projection need no copy; a block of many rows copies V's rows next to each other
// first), k through any strides (a Kᵀ view swapped back too), the
// mask through its strides (a broadcast mask is never expanded).
#include "kernels/attention/fused_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <vector>

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

#include "kernels/activation/math.h"
#include "kernels/common/cpu.h"
#include "kernels/common/dense.h"
#include "kernels/common/fused_primitive.h"
#include "kernels/gemm/small_gemm.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"

namespace mlxc::cpu {
namespace {

using mx::array;

struct Config {
  float scale;
  bool causal;
  int offset;
  bool has_mask;
  /** Rows that see no key give NaN (a softmax over nothing, as ONNX's graphs compute it) rather than zeros. */
  bool empty_nan;
  bool operator==(const Config& o) const {
    return scale == o.scale && causal == o.causal && offset == o.offset && has_mask == o.has_mask && empty_nan == o.empty_nan;
  }
};

/** The composition of MLX's ops: the grouped layout [B, Hk, G, Lq, Lk], masks, a softmax whose empty rows are zeros, P·V. */
array composed(const array& q, const array& k, const array& v, const std::optional<array>& mask, const Config& c, mx::Stream s) {
  const int B = q.shape(0), Hq = q.shape(1), Lq = q.shape(2), D = q.shape(3), Hk = k.shape(1), Lk = k.shape(2), Dv = v.shape(3);
  const int G = Hq / Hk;
  const array ninf = array(-std::numeric_limits<float>::infinity(), q.dtype());
  array q5 = mx::reshape(mx::multiply(q, array(c.scale, q.dtype()), s), {B, Hk, G, Lq, D}, s);
  array scores = mx::matmul(q5, mx::swapaxes(mx::expand_dims(k, 2, s), -1, -2, s), s);
  if (c.causal) {
    // The offset clamped to [-Lq, Lk] sees the same keys, and row + offset stays within int32.
    const int off = std::clamp(c.offset, -Lq, Lk);
    array rows = mx::expand_dims(mx::arange(off, static_cast<double>(Lq) + off, 1.0, mx::int32, s), 1, s);
    array cols = mx::expand_dims(mx::arange(0.0, static_cast<double>(Lk), 1.0, mx::int32, s), 0, s);
    scores = mx::where(mx::greater_equal(rows, cols, s), scores, ninf, s);
  }
  if (mask) {
    const bool keep = mask->dtype() == mx::bool_;
    array m = keep ? *mask : mx::astype(*mask, q.dtype(), s);
    const int W = m.shape(3);
    if (W < Lk)
      m = mx::pad(m, std::vector<std::pair<int, int>>{{0, 0}, {0, 0}, {0, 0}, {0, Lk - W}}, keep ? array(false) : ninf, "constant", s);
    m = m.shape(1) == 1 ? mx::reshape(m, {m.shape(0), 1, 1, m.shape(2), Lk}, s) : mx::reshape(m, {m.shape(0), Hk, G, m.shape(2), Lk}, s);
    scores = keep ? mx::where(m, scores, ninf, s) : mx::add(scores, m, s);
  }
  const array zero = array(0.0f, q.dtype());
  array valid = mx::not_equal(mx::max(scores, -1, true, s), ninf, s);
  const array empty = c.empty_nan ? array(std::numeric_limits<float>::quiet_NaN(), q.dtype()) : zero;
  array p = mx::where(valid, mx::softmax(mx::where(valid, scores, zero, s), -1, false, s), empty, s);
  return mx::reshape(mx::matmul(p, mx::expand_dims(v, 2, s), s), {B, Hq, Lq, Dv}, s);
}

class FusedAttention : public FusedPrimitive {
 public:
  FusedAttention(mx::Stream s, Config cfg) : FusedPrimitive(s), cfg_(cfg) {}
  const char* name() const override { return "FusedAttention"; }
  bool is_equivalent(const mx::Primitive& o) const override {
    return typeid(o) == typeid(*this) && cfg_ == static_cast<const FusedAttention&>(o).cfg_;
  }
  array compose(const std::vector<array>& in) const override {
    return composed(in[0], in[1], in[2], cfg_.has_mask ? std::optional<array>(in[3]) : std::nullopt, cfg_, st());
  }
  std::vector<mx::Shape> output_shapes(const std::vector<array>& in) override {
    return {{in[0].shape(0), in[0].shape(1), in[0].shape(2), in[2].shape(3)}};
  }

  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    auto& y = outs[0];
    y.set_data(mx::allocator::malloc(y.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& a : in) enc.set_input_array(a);
    enc.set_output_array(y);
    std::vector<array> ins;
    // K is gathered into a transposed block by each task, through any strides.
    ins.push_back(array::unsafe_weak_copy(rows_in_place(in[0], enc)));
    ins.push_back(array::unsafe_weak_copy(in[1]));
    ins.push_back(array::unsafe_weak_copy(rows_in_place(in[2], enc)));
    if (cfg_.has_mask) ins.push_back(array::unsafe_weak_copy(in[3]));
    enc.dispatch([ins = std::move(ins), y = array::unsafe_weak_copy(y), cfg = cfg_]() mutable { run(ins, y, cfg); });
  }

 private:
  static void run(const std::vector<array>& in, array& y, const Config& cfg) {
    const array &q = in[0], &k = in[1], &v = in[2];
    const array* mask = cfg.has_mask ? &in[3] : nullptr;
    const int64_t B = q.shape(0), Hq = q.shape(1), Lq = q.shape(2), D = q.shape(3), Hk = k.shape(1), Lk = k.shape(2), Dv = v.shape(3);
    const int64_t G = Hq / Hk;
    if (y.size() == 0) return;
    float* yp = y.data<float>();
    const float *qp = q.data<float>(), *kp = k.data<float>(), *vp = v.data<float>();
    const auto& qs = q.strides();
    const auto& ks = k.strides();
    const auto& vs = v.strides();
    // The mask's strides, 0 along the axes it broadcasts over.
    int64_t ms[4] = {0, 0, 0, 0};
    int64_t W = Lk;
    const bool keep = mask && mask->dtype() == mx::bool_;
    const float* madd = nullptr;
    const bool* mkeep = nullptr;
    if (mask) {
      for (int a = 0; a < 4; a++) ms[a] = mask->shape(a) == 1 ? 0 : mask->strides()[a];
      W = mask->shape(3);
      if (keep)
        mkeep = mask->data<bool>();
      else
        madd = mask->data<float>();
    }
    // Rows per task: up to 64 across the group's heads, fewer while that leaves under 4 tasks a
    // thread; up to 128 where every row sees the same keys (no causal flag, a mask that broadcasts
    // over the rows: an encoder's 128 queries a head gather its keys once), while smaller blocks
    // let a causal or row-wise mask skip more of the keys (below).
    const int64_t threads = std::max(1, num_threads());
    const bool rows_alike = !cfg.causal && (!mask || ms[2] == 0);
    int64_t bq = std::clamp<int64_t>((rows_alike ? 128 : 64) / G, 1, Lq);
    while (bq > 8 && B * Hk * ((Lq + bq - 1) / bq) < 4 * threads) bq = (bq + 1) / 2;
    // Long contexts: fewer rows, so that a block's scores stay within 4 MiB.
    while (bq > 1 && G * bq * Lk > (int64_t{1} << 20)) bq = (bq + 1) / 2;
    const int64_t blocks = (Lq + bq - 1) / bq, ntasks = B * Hk * blocks;
    const float ninf = -std::numeric_limits<float>::infinity();
    // A mask given as data (a causal or padding mask an export computes) that hides the last keys
    // from every row of a block: those keys are skipped, as the causal flag skips them (half of a
    // causal prefill's products and softmax). Hidden: false, or an additive value of at most
    // kHidden (-inf, or torch.finfo(float32).min as exports write it), whose weight is exactly 0
    // next to any visible key. Only where every row of the block sees some key: a row that sees
    // none keeps its defined result (uniform weights under finite masks, 0 or NaN under -inf).
    const auto visible_keys = [&](int64_t b, int64_t hk, int64_t i0, int64_t i1, int64_t n) -> int64_t {
      constexpr float kHidden = -1e30f;
      const auto seen = [&](int64_t base, int64_t j) { return keep ? mkeep[base + j * ms[3]] : madd[base + j * ms[3]] > kHidden; };
      int64_t last = -1;
      const int64_t heads = ms[1] == 0 ? 1 : G;
      for (int64_t h = 0; h < heads; h++)
        for (int64_t i = i0; i < i1; i++) {
          const int64_t base = b * ms[0] + (hk * G + h) * ms[1] + i * ms[2];
          int64_t first = 0;
          while (first < n && !seen(base, first)) first++;
          if (first == n) return n;
          int64_t j = n - 1;
          while (j > last && !seen(base, j)) j--;
          last = std::max(last, j);
        }
      return last + 1;
    };
    const auto task = [&](int64_t t) {
      // The buffers are the thread's own and kept (no page faults on the next call) up to 4 MiB each.
      thread_local std::vector<float> kept_q, kept_kt, kept_s, kept_v;
      std::vector<float> own_q, own_kt, own_s, own_v;
      const int64_t b = t / (Hk * blocks), hk = (t / blocks) % Hk, i0 = (t % blocks) * bq, i1 = std::min(Lq, i0 + bq), rows = i1 - i0;
      // Keys any row of the block may see: [0, n).
      int64_t n = std::min(Lk, W);
      if (cfg.causal) n = std::clamp<int64_t>(i1 - 1 + int64_t(cfg.offset) + 1, 0, n);
      if (mask && n > 0) n = visible_keys(b, hk, i0, i1, n);
      const size_t M = size_t(G * rows);
      if (n == 0) {
        const float none = cfg.empty_nan ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
        for (int64_t h = 0; h < G; h++) std::fill_n(yp + ((b * Hq + hk * G + h) * Lq + i0) * Dv, rows * Dv, none);
        return;
      }
      const auto buffer = [](std::vector<float>& kept, std::vector<float>& own, size_t need) -> std::vector<float>& {
        std::vector<float>& buf = need <= (size_t{1} << 20) ? kept : own;
        if (buf.size() < need) buf.resize(need);
        return buf;
      };
      std::vector<float>& qbuf = buffer(kept_q, own_q, M * size_t(D));
      std::vector<float>& scores = buffer(kept_s, own_s, M * size_t(n));
      for (int64_t h = 0; h < G; h++)
        for (int64_t i = i0; i < i1; i++) {
          const float* src = qp + b * qs[0] + (hk * G + h) * qs[1] + i * qs[2];
          float* dst = qbuf.data() + (h * rows + i - i0) * D;
          if (qs[3] == 1)  // the usual layout: a contiguous row (a loop the compiler vectorizes)
            for (int64_t d = 0; d < D; d++) dst[d] = src[d] * cfg.scale;
          else
            for (int64_t d = 0; d < D; d++) dst[d] = src[d * qs[3]] * cfg.scale;
        }
      const float* kb = kp + b * ks[0] + hk * ks[1];
      const float* vb = vp + b * vs[0] + hk * vs[1];
      if (M <= 4 && ks[3] == 1) {
        // A few rows (a short query, one or two heads a group): K read in place, once, as [n, D] rows
        // (the gather below would move as much memory as the product reads).
        gemm::nk_rows(qbuf.data(), size_t(D), kb, size_t(ks[2]), nullptr, scores.data(), size_t(n), M, size_t(D), 0, size_t(n));
      } else {
        // Kᵀ of the keys the block sees, [D, n]: the scores are then a [K, N] product (gemm::kn's
        // register tiles of 4 rows by 16 columns, no lane sums), measured faster than reading K in place
        // with gemm::nk (a lane sum per score) at 128 keys and more; the copy is 1 / M of the work.
        std::vector<float>& kt = buffer(kept_kt, own_kt, size_t(D * n));
        if (ks[3] == 1) {
          // Four keys at a time, so that each store fills four neighbouring floats of a row of Kᵀ
          // (one key at a time wrote one float per cache line).
          int64_t j = 0;
          for (; j + 4 <= n; j += 4) {
            const float *k0 = kb + j * ks[2], *k1 = k0 + ks[2], *k2 = k1 + ks[2], *k3 = k2 + ks[2];
            float* out = kt.data() + j;
            int64_t d = 0;
#if defined(__SSE2__)
            // 4 x 4 blocks transposed in registers (the scalar loop below took 6 us of a 52 us
            // task at 128 keys of 64).
            for (; d + 4 <= D; d += 4, out += 4 * n) {
              __m128 r0 = _mm_loadu_ps(k0 + d), r1 = _mm_loadu_ps(k1 + d), r2 = _mm_loadu_ps(k2 + d), r3 = _mm_loadu_ps(k3 + d);
              _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
              _mm_storeu_ps(out, r0);
              _mm_storeu_ps(out + n, r1);
              _mm_storeu_ps(out + 2 * n, r2);
              _mm_storeu_ps(out + 3 * n, r3);
            }
#endif
            for (; d < D; d++, out += n) {
              out[0] = k0[d];
              out[1] = k1[d];
              out[2] = k2[d];
              out[3] = k3[d];
            }
          }
          for (; j < n; j++) {
            const float* kr = kb + j * ks[2];
            for (int64_t d = 0; d < D; d++) kt[size_t(d * n + j)] = kr[d];
          }
        } else {  // K given transposed (a Kᵀ view swapped back): its columns are runs
          for (int64_t d = 0; d < D; d++) {
            const float* kc = kb + d * ks[3];
            float* out = kt.data() + d * n;
            for (int64_t j = 0; j < n; j++) out[j] = kc[j * ks[2]];
          }
        }
        gemm::kn(qbuf.data(), size_t(D), kt.data(), size_t(n), nullptr, scores.data(), size_t(n), M, size_t(D), 0, size_t(n));
      }
      // V's rows the block reads, [n, Dv] one after another where they lie apart (the slices of a
      // packed QKV projection: rows 3 x hidden floats apart, which map to a quarter of L1's sets and
      // were read from L2 again by every 4-row tile of the product), when enough rows read them.
      const float* vrows = vb;
      size_t ldv = size_t(vs[2]);
      if (vs[3] == 1 && vs[2] != Dv && M >= 8) {
        std::vector<float>& vc = buffer(kept_v, own_v, size_t(n * Dv));
        for (int64_t j = 0; j < n; j++) std::copy_n(vb + j * vs[2], Dv, vc.data() + j * Dv);
        vrows = vc.data();
        ldv = size_t(Dv);
      }
      for (int64_t h = 0; h < G; h++) {
        const int64_t hq = hk * G + h;
        for (int64_t i = i0; i < i1; i++) {
          float* sr = scores.data() + (h * rows + i - i0) * n;
          const int64_t lim = cfg.causal ? std::clamp<int64_t>(i + cfg.offset + 1, 0, n) : n;
          bool any = false;
          if (mask) {
            const int64_t base = b * ms[0] + hq * ms[1] + i * ms[2];
            if (keep) {
              for (int64_t j = 0; j < lim; j++) sr[j] = mkeep[base + j * ms[3]] ? sr[j] : ninf;
            } else if (ms[3] == 1) {  // a row of the mask (a loop the compiler vectorizes)
              const float* m = madd + base;
              for (int64_t j = 0; j < lim; j++) sr[j] += m[j];
            } else {
              for (int64_t j = 0; j < lim; j++) sr[j] += madd[base + j * ms[3]];
            }
          }
          for (int64_t j = 0; j < lim && !any; j++) any = sr[j] != ninf;
          // A row with no visible key: zero weights (its output row is then 0·V), or NaN ones.
          if (any) softmax_row(sr, sr, size_t(lim), false);
          std::fill(sr + (any ? lim : 0), sr + n, any || !cfg.empty_nan ? 0.0f : std::numeric_limits<float>::quiet_NaN());
        }
        gemm::kn(scores.data() + h * rows * n, size_t(n), vrows, ldv, nullptr, yp + ((b * Hq + hq) * Lq + i0) * Dv, size_t(Dv),
                 size_t(rows), size_t(n), 0, size_t(Dv));
      }
    };
    const double work = double(B) * Hq * Lq * double(Lk) * double(D + Dv);
    if (ntasks == 1 || threads == 1 || work < double(1 << 16)) {
      for (int64_t t = 0; t < ntasks; t++) task(t);
      return;
    }
    // Tasks handed out one at a time: under causal masking the later blocks see more keys.
    std::atomic<int64_t> next{0};
    parallel_for(size_t(std::min(threads, ntasks)), 1, [&](size_t, size_t) {
      for (int64_t t = next.fetch_add(1); t < ntasks; t = next.fetch_add(1)) task(t);
    });
  }

  Config cfg_;
};

}  // namespace

array fused_attention(const array& q, const array& k, const array& v, const std::optional<array>& mask, float scale, bool causal,
                      int causal_offset, bool empty_nan, mx::Stream s) {
  const std::string where = "fused_attention: ";
  if (q.ndim() != 4 || k.ndim() != 4 || v.ndim() != 4) throw std::invalid_argument(where + "q, k and v must be 4-D ([B, heads, L, D])");
  const int B = q.shape(0), Hq = q.shape(1), Lq = q.shape(2), D = q.shape(3), Hk = k.shape(1), Lk = k.shape(2);
  if (k.shape(0) != B || v.shape(0) != B) throw std::invalid_argument(where + "q, k and v must have the same batch size");
  if (k.shape(3) != D) throw std::invalid_argument(where + "q and k must have the same head size");
  if (v.shape(1) != Hk || v.shape(2) != Lk) throw std::invalid_argument(where + "v must have k's heads and length ([B, Hk, Lk, Dv])");
  if (Hk <= 0 || Hq % Hk != 0)
    throw std::invalid_argument(where + std::to_string(Hq) + " query heads do not split over " + std::to_string(Hk) + " key/value heads");
  for (const array* a : {&q, &k, &v})
    if (!mx::issubdtype(a->dtype(), mx::floating)) throw std::invalid_argument(where + "q, k and v must be floating-point");
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype()) throw std::invalid_argument(where + "q, k and v must have one dtype");
  if (!std::isfinite(scale)) throw std::invalid_argument(where + "scale must be finite");
  if (mask) {
    const auto fits = [](int n, int full) { return n == 1 || n == full; };
    if (mask->ndim() != 4 || !fits(mask->shape(0), B) || !fits(mask->shape(1), Hq) || !fits(mask->shape(2), Lq) || mask->shape(3) > Lk)
      throw std::invalid_argument(where + "the mask must be [B | 1, Hq | 1, Lq | 1, W] with W at most the keys' length");
    if (mask->dtype() != mx::bool_ && !mx::issubdtype(mask->dtype(), mx::floating))
      throw std::invalid_argument(where + "the mask must be boolean (true: attend) or floating-point (added to the scores)");
  }
  if (Lq == 0 || Lk == 0)  // no key: every row sees none
    return empty_nan ? mx::full({B, Hq, Lq, v.shape(3)}, array(std::numeric_limits<float>::quiet_NaN(), q.dtype()), s)
                     : mx::zeros({B, Hq, Lq, v.shape(3)}, q.dtype(), s);
  const Config cfg{scale, causal, causal_offset, mask.has_value(), empty_nan};
  std::optional<array> m = mask;
  if (m && m->dtype() != mx::bool_ && m->dtype() != q.dtype()) m = mx::astype(*m, q.dtype(), s);
  const bool native = !kernels_off() && s.device == mx::Device::cpu && q.dtype() == mx::float32;
  if (!native) return composed(q, k, v, m, cfg, s);
  std::vector<array> in{q, k, v};
  if (m) in.push_back(*m);
  return array({B, Hq, Lq, v.shape(3)}, mx::float32, std::make_shared<FusedAttention>(s, cfg), std::move(in));
}

}  // namespace mlxc::cpu
