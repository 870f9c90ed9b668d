// The grouped-query attention decode step as MLX primitives (gqa_step.h). GqaCacheWrite, one per
// cache: the past's buffer (donated) or a copy of it, with each sequence's new rows (keys rotated)
// at len - S .. len - 1 (from 0 for a first prompt). The new rows and the output are [B, heads, S,
// H], or ONNX's flat [B, S, heads * H] read through their strides (the slices of a packed QKV
// projection, with no reshape, transpose or copy in the graph). GqaAttend, per sequence and key/value head on the thread pool: the group's
// queries rotated and scaled, their scores against the keys any of them sees (each query's range:
// [max(0, position - window + 1), min(len, total, position + 1))) by the small-row product
// kernels, each row's softmax over its own range (the vectorized row kernel) and the weighted sum
// of the values. Keys past a sequence's length are never read.
#include "kernels/attention/gqa_step.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <vector>

#include "kernels/activation/math.h"
#include "kernels/common/cpu.h"
#include "kernels/common/dense.h"
#include "kernels/gemm/small_gemm.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"

namespace mlxc::cpu {
namespace {

using mx::array;

struct Config {
  /** q is one packed [B, S, (N + 2 Nkv) * H] projection (its first N * H columns the queries). */
  bool has_positions, has_rotary, interleaved, causal, from_zero, packed;
  int window, total;
  float scale;
  bool operator==(const Config& o) const {
    return has_positions == o.has_positions && has_rotary == o.has_rotary && interleaved == o.interleaved && causal == o.causal &&
           from_zero == o.from_zero && packed == o.packed && window == o.window && total == o.total && scale == o.scale;
  }
};

/**
 * The rows of a step's projections or of its output: [B, heads, S, H] in row order, or the flat
 * layout [B, S, heads * H] of ONNX's inputs, read through the strides of its first two axes (its
 * last axis contiguous: a slice of a packed QKV projection needs no copy), from column `col` on
 * (K's or V's columns of one packed QKV).
 */
struct Rows {
  float* p;
  bool flat;
  int64_t s0, s1;
  int heads, S, H;
  Rows(const array& a, int heads_, int H_, int64_t col = 0)
      : p(const_cast<float*>(a.data<float>()) + col),
        flat(a.ndim() == 3),
        s0(a.strides()[0]),
        s1(a.ndim() == 3 ? a.strides()[1] : 0),
        heads(heads_),
        S(a.ndim() == 3 ? a.shape(1) : a.shape(2)),
        H(H_) {}
  float* at(int b, int head, int i) const {
    return flat ? p + b * s0 + i * s1 + int64_t(head) * H : p + ((int64_t(b) * heads + head) * S + i) * H;
  }
};

/** A flat [B, S, X] input read in place where its last axis is contiguous; other layouts in row order (dense.h). */
array rows_input(const array& a, mx::cpu::CommandEncoder& enc) { return a.ndim() == 3 ? rows_in_place(a, enc) : row_ordered_input(a, enc); }

/** x (H floats) rotated at table row c, s (R / 2 entries each) into out; dims from R on copied. */
void rotate(const float* x, const float* c, const float* s, size_t H, size_t R, bool interleaved, float* out) {
  const size_t half = R / 2;
  if (interleaved) {
    for (size_t i = 0; i < half; i++) {
      const float x0 = x[2 * i], x1 = x[2 * i + 1];
      out[2 * i] = x0 * c[i] - x1 * s[i];
      out[2 * i + 1] = x1 * c[i] + x0 * s[i];
    }
  } else {
    for (size_t i = 0; i < half; i++) {
      const float x0 = x[i], x1 = x[i + half];
      out[i] = x0 * c[i] - x1 * s[i];
      out[i + half] = x1 * c[i] + x0 * s[i];
    }
  }
  for (size_t i = R; i < H; i++) out[i] = x[i];
}

/** past (any strides) into the row-ordered buffer dst. */
void copy_past(const array& past, float* dst) {
  const int B = past.shape(0), G = past.shape(1), C = past.shape(2), H = past.shape(3);
  const float* src = past.data<float>();
  const auto& st = past.strides();
  for (int b = 0; b < B; b++)
    for (int g = 0; g < G; g++)
      for (int c = 0; c < C; c++) {
        const float* row = src + b * st[0] + g * st[1] + c * st[2];
        float* d = dst + ((size_t(b) * G + g) * C + c) * H;
        if (st[3] == 1)
          std::memcpy(d, row, sizeof(float) * H);
        else
          for (int h = 0; h < H; h++) d[h] = row[h * st[3]];
      }
}

/** The step's lengths, starts and positions (clamped as gqa_step.h says). */
struct Steps {
  std::vector<int> len, start, qpos, rpos;
  Steps(const int32_t* lens, const int32_t* given, int B, int S, int C, bool from_zero)
      : len(B), start(B), qpos(size_t(B) * S), rpos(size_t(B) * S) {
    // qpos: where each query sits in its sequence (the mask's); rpos: its rotary position (given, or the same).
    for (int b = 0; b < B; b++) {
      // From zero (a first prompt), a sequence may be shorter than the step (its rows past its length are padding).
      len[b] = std::clamp<int>(lens[b], from_zero ? 1 : S, C);
      start[b] = from_zero ? 0 : len[b] - S;
      for (int i = 0; i < S; i++) {
        qpos[b * S + i] = start[b] + i;
        rpos[b * S + i] = given ? given[b * S + i] : start[b] + i;
      }
    }
  }
};

/** The rotary tables, or none. */
struct Rope {
  const float* cos = nullptr;
  const float* sin = nullptr;
  int rows = 0;
  size_t R = 0;
  bool interleaved = false;
  Rope(const array* c, const array* s, bool inter) : interleaved(inter) {
    if (!c) return;
    cos = c->data<float>();
    sin = s->data<float>();
    rows = c->shape(0);
    R = 2 * static_cast<size_t>(c->shape(1));
  }
  /** x (H floats) at position p into out: rotated, or copied without tables. */
  void apply(const float* x, int p, size_t H, float* out) const {
    if (!R) {
      std::memcpy(out, x, sizeof(float) * H);
      return;
    }
    const size_t r = static_cast<size_t>(std::clamp(p, 0, rows - 1)) * (R / 2);
    rotate(x, cos + r, sin + r, H, R, interleaved, out);
  }
};

/**
 * present = past with rows [start, start + S) of each sequence set to rows (rotated with tables): in
 * place when the past is donated. The rows are [B, Nkv, S, H] or flat [B, S, Nkv * H].
 */
class GqaCacheWrite : public mx::Primitive {
 public:
  GqaCacheWrite(mx::Stream s, bool has_positions, bool has_rotary, bool interleaved, bool from_zero, int64_t col)
      : mx::Primitive(s),
        has_positions_(has_positions),
        has_rotary_(has_rotary),
        interleaved_(interleaved),
        from_zero_(from_zero),
        col_(col) {}
  const char* name() const override { return "GqaCacheWrite"; }
  bool is_equivalent(const mx::Primitive& o) const override {
    if (typeid(o) != typeid(*this)) return false;
    auto& p = static_cast<const GqaCacheWrite&>(o);
    return has_positions_ == p.has_positions_ && has_rotary_ == p.has_rotary_ && interleaved_ == p.interleaved_ &&
           from_zero_ == p.from_zero_ && col_ == p.col_;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<array>& in) override { return {in[0].shape()}; }
  void eval_gpu(const std::vector<array>&, std::vector<array>&) override {
    throw std::runtime_error("GqaCacheWrite is a CPU kernel (the front end composes MLX ops on other devices)");
  }
  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    auto& out = outs[0];
    const array& past = in[0];
    // The past's own buffer when this step holds its only reference (a donated feed), else a copy.
    const bool copy = !(past.is_donatable() && row_ordered(past));
    if (copy)
      out.set_data(mx::allocator::malloc(out.nbytes()));
    else
      out.copy_shared_buffer(past);
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& a : in) enc.set_input_array(a);
    enc.set_output_array(out);
    std::vector<array> ins{array::unsafe_weak_copy(past), array::unsafe_weak_copy(rows_input(in[1], enc))};
    for (size_t i = 2; i < in.size(); i++) ins.push_back(array::unsafe_weak_copy(row_ordered_input(in[i], enc)));
    enc.dispatch([ins = std::move(ins), out = array::unsafe_weak_copy(out), copy, hp = has_positions_, hr = has_rotary_,
                  inter = interleaved_, zero = from_zero_, col = col_]() mutable {
      const array &past = ins[0], &rows = ins[1], &lens = ins[2];
      size_t next = 3;
      const array* pos = hp ? &ins[next++] : nullptr;
      const array* c = hr ? &ins[next++] : nullptr;
      const array* sn = hr ? &ins[next++] : nullptr;
      if (copy) copy_past(past, out.data<float>());
      const int B = out.shape(0), G = out.shape(1), C = out.shape(2), H = out.shape(3);
      const Rows src(rows, G, H, col);
      const int S = src.S;
      if (out.size() == 0 || S == 0) return;
      const Steps st(lens.data<int32_t>(), pos ? pos->data<int32_t>() : nullptr, B, S, C, zero);
      const Rope rope(c, sn, inter);
      float* op = out.data<float>();
      for (int b = 0; b < B; b++)
        for (int g = 0; g < G; g++)
          for (int i = 0; i < S; i++)
            rope.apply(src.at(b, g, i), st.rpos[b * S + i], H, op + ((size_t(b) * G + g) * C + st.start[b] + i) * H);
    });
  }

 private:
  bool has_positions_, has_rotary_, interleaved_, from_zero_;
  /** Where these rows start in a packed QKV's columns (0: rows of their own). */
  int64_t col_;
};

/**
 * y [B, N, S, H] (flat queries: [B, S, N * H]): the queries (rotated with tables) attending over the
 * keys of the present caches each sees.
 */
class GqaAttend : public mx::Primitive {
 public:
  GqaAttend(mx::Stream s, Config cfg) : mx::Primitive(s), cfg_(cfg) {}
  const char* name() const override { return "GqaAttend"; }
  bool is_equivalent(const mx::Primitive& o) const override {
    return typeid(o) == typeid(*this) && cfg_ == static_cast<const GqaAttend&>(o).cfg_;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<array>& in) override {
    if (!cfg_.packed) return {in[0].shape()};
    // Packed: the queries' N * H of the (N + 2 Nkv) * H columns.
    const int H = in[1].shape(3), G = in[1].shape(1);
    return {{in[0].shape(0), in[0].shape(1), in[0].shape(2) - 2 * G * H}};
  }
  void eval_gpu(const std::vector<array>&, std::vector<array>&) override {
    throw std::runtime_error("GqaAttend is a CPU kernel (the front end composes MLX ops on other devices)");
  }
  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    auto& y = outs[0];
    y.set_data(mx::allocator::malloc(y.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& a : in) enc.set_input_array(a);
    enc.set_output_array(y);
    std::vector<array> ins{array::unsafe_weak_copy(rows_input(in[0], enc))};
    for (size_t i = 1; i < in.size(); i++) ins.push_back(array::unsafe_weak_copy(row_ordered_input(in[i], enc)));
    enc.dispatch([ins = std::move(ins), y = array::unsafe_weak_copy(y), cfg = cfg_]() mutable { run(ins, y, cfg); });
  }

 private:
  static void run(const std::vector<array>& in, array& y, const Config& cfg) {
    const array &q = in[0], &kc_a = in[1], &vc_a = in[2], &lens = in[3];
    size_t next = 4;
    const array* pos = cfg.has_positions ? &in[next++] : nullptr;
    const array* c = cfg.has_rotary ? &in[next++] : nullptr;
    const array* sn = cfg.has_rotary ? &in[next++] : nullptr;
    const int B = kc_a.shape(0), G = kc_a.shape(1), C = kc_a.shape(2), H = kc_a.shape(3);
    const bool flat = q.ndim() == 3;
    const int S = flat ? q.shape(1) : q.shape(2), N = flat ? q.shape(2) / H - (cfg.packed ? 2 * G : 0) : q.shape(1), per = N / G;
    if (y.size() == 0) return;
    const Steps st(lens.data<int32_t>(), pos ? pos->data<int32_t>() : nullptr, B, S, C, cfg.from_zero);
    const Rope rope(c, sn, cfg.interleaved);
    const size_t Hs = static_cast<size_t>(H);
    const Rows qrows(q, N, H), yrows(y, N, H);
    const float *kc = kc_a.data<float>(), *vc = vc_a.data<float>();
    // Per sequence and key/value head: the group's per * S query rows (rotated, times the scale) in
    // one block, their scores against the keys any of them sees with the small-row product kernels
    // (keys as [n, H] rows), each row's softmax over its own range (zeros elsewhere), then the
    // probabilities times the values' rows, into the output's rows of those heads.
    const size_t M = size_t(per) * S;
    const auto task = [&](size_t t0, size_t t1) {
      std::vector<float> qr(M * Hs), scores;
      for (size_t t = t0; t < t1; t++) {
        const int b = static_cast<int>(t / G), g = static_cast<int>(t % G);
        const float* keys = kc + (size_t(b) * G + g) * C * Hs;
        const float* vals = vc + (size_t(b) * G + g) * C * Hs;
        const int hi_all = std::min(st.len[b], cfg.total);
        std::vector<int> lo(S), hi(S);
        int lo_min = hi_all, hi_max = 0;
        for (int i = 0; i < S; i++) {
          const int p = st.qpos[b * S + i];
          hi[i] = std::max(0, cfg.causal ? std::min(hi_all, p + 1) : hi_all);
          lo[i] = std::min(hi[i], cfg.window > 0 ? std::max(0, p - cfg.window + 1) : 0);
          if (hi[i] > lo[i]) lo_min = std::min(lo_min, lo[i]), hi_max = std::max(hi_max, hi[i]);
        }
        if (hi_max <= lo_min) {  // no query sees a key: zeros
          for (int h = 0; h < per; h++)
            for (int i = 0; i < S; i++) std::fill_n(yrows.at(b, g * per + h, i), Hs, 0.0f);
          continue;
        }
        const size_t n = size_t(hi_max - lo_min);
        for (int h = 0; h < per; h++)
          for (int i = 0; i < S; i++) {
            const size_t row = size_t(h) * S + i;
            float* qo = qr.data() + row * Hs;
            rope.apply(qrows.at(b, g * per + h, i), st.rpos[b * S + i], Hs, qo);
            for (size_t d = 0; d < Hs; d++) qo[d] *= cfg.scale;
          }
        scores.resize(M * n);
        gemm::nk_rows(qr.data(), Hs, keys + size_t(lo_min) * Hs, Hs, nullptr, scores.data(), n, M, Hs, 0, n);
        for (size_t row = 0; row < M; row++) {
          const int i = static_cast<int>(row % S);
          float* sr = scores.data() + row * n;
          const size_t a = size_t(std::max(lo[i], lo_min) - lo_min), z = size_t(std::max(hi[i], lo_min) - lo_min);
          if (z > a) softmax_row(sr + a, sr + a, z - a, false);
          std::fill(sr, sr + a, 0.0f);
          std::fill(sr + std::max(a, z), sr + n, 0.0f);
        }
        const float* vb = vals + size_t(lo_min) * Hs;
        if (!flat || S == 1) {
          // The group's rows lie one head size apart: a [B, N, S, H] block, or one query's heads side by side.
          gemm::kn(scores.data(), n, vb, Hs, nullptr, yrows.at(b, g * per, 0), Hs, M, n, 0, Hs);
        } else {
          // Flat, several queries: each head's S rows one output row apart.
          for (int h = 0; h < per; h++)
            gemm::kn(scores.data() + size_t(h) * S * n, n, vb, Hs, nullptr, yrows.at(b, g * per + h, 0), size_t(N) * Hs, size_t(S), n, 0,
                     Hs);
        }
      }
    };
    const size_t tasks = size_t(B) * G;
    const size_t work = size_t(B) * N * S * size_t(std::max(1, std::min(C, cfg.total))) * Hs;
    // Under 64K multiply-adds a product (a 7M decoder's step at context 128: 32K, ~7 us a key/value
    // head on one thread) the hand-off to the pool cost more than the second thread saved: the
    // layer's attention took 18-21 us over two threads against 14-15 us on one.
    if (tasks > 1 && work >= (size_t{1} << 16) && num_threads() > 1)
      parallel_for(tasks, 1, task);
    else
      task(0, tasks);
  }

  Config cfg_;
};

}  // namespace

std::vector<array> gqa_step(const array& q, const std::optional<array>& k, const std::optional<array>& v, const array& past_k,
                            const array& past_v, const array& len, const std::optional<array>& positions, const std::optional<array>& cos,
                            const std::optional<array>& sin, bool interleaved, bool causal, int window, int total, float scale,
                            bool from_zero, mx::Stream s) {
  const std::string where = "gqa_step: ";
  if (past_k.ndim() != 4 || past_v.ndim() != 4) throw std::invalid_argument(where + "the pasts must be 4-D ([B, Nkv, C, H])");
  if (k.has_value() != v.has_value()) throw std::invalid_argument(where + "k and v come together (both null: q is one packed QKV)");
  const bool packed = !k;
  const bool flat = q.ndim() == 3;
  if (packed && !flat) throw std::invalid_argument(where + "a packed QKV (k and v null) must be 3-D ([B, S, (N + 2 Nkv) * H])");
  if (!packed && (flat ? (k->ndim() != 3 || v->ndim() != 3) : (q.ndim() != 4 || k->ndim() != 4 || v->ndim() != 4)))
    throw std::invalid_argument(where + "q, k and v must be 4-D ([B, heads, S, H]) or all 3-D ([B, S, heads * H])");
  const int H = past_k.shape(3), G = past_k.shape(1);
  if (H <= 0) throw std::invalid_argument(where + "the head size must be positive");
  if (flat && q.shape(2) % H != 0)
    throw std::invalid_argument(where + "q's last axis (" + std::to_string(q.shape(2)) + ") is not a multiple of the head size " +
                                std::to_string(H));
  const int B = q.shape(0), S = flat ? q.shape(1) : q.shape(2);
  const int N = flat ? q.shape(2) / H - (packed ? 2 * G : 0) : q.shape(1);
  if (packed && N <= 0)
    throw std::invalid_argument(where + "a packed QKV's last axis (" + std::to_string(q.shape(2)) + ") must hold (N + 2 * " +
                                std::to_string(G) + ") heads of " + std::to_string(H) + ", N at least 1");
  if (G <= 0 || N % G != 0)
    throw std::invalid_argument(where + std::to_string(N) + " query heads do not split over " + std::to_string(G) + " key/value heads");
  if (!flat && q.shape(3) != H)
    throw std::invalid_argument(where + "the pasts must be [B, Nkv, C, H] with C at least S, alike, H q's head size");
  if (!packed && !flat && (k->shape() != mx::Shape{B, G, S, H} || v->shape() != k->shape()))
    throw std::invalid_argument(where + "k and v must be [B, Nkv, S, H] as q's [B, N, S, H]");
  if (!packed && flat && (k->shape() != mx::Shape{B, S, G * H} || v->shape() != k->shape()))
    throw std::invalid_argument(where + "k and v must be [B, S, Nkv * H] as q's [B, S, N * H], Nkv and H the pasts'");
  if (past_k.shape(0) != B || past_v.shape() != past_k.shape() || past_k.shape(2) < S)
    throw std::invalid_argument(where + "the pasts must be [B, Nkv, C, H] with C at least S, alike");
  if (len.ndim() != 1 || len.shape(0) != B || len.dtype() != mx::int32) throw std::invalid_argument(where + "len must be int32 [B]");
  if (positions && (positions->shape() != mx::Shape{B, S} || positions->dtype() != mx::int32))
    throw std::invalid_argument(where + "positions must be int32 [B, S]");
  if (cos.has_value() != sin.has_value()) throw std::invalid_argument(where + "cos and sin come together");
  if (cos && (cos->ndim() != 2 || sin->shape() != cos->shape() || 2 * cos->shape(1) > H || cos->shape(0) < 1))
    throw std::invalid_argument(where + "cos and sin must be [P, R / 2] alike with R at most the head size");
  if (total < 1) throw std::invalid_argument(where + "total must be positive");
  for (const array* a : {&q, &past_k, &past_v})
    if (a->dtype() != mx::float32) throw std::invalid_argument(where + "float32 only");
  if (!packed && (k->dtype() != mx::float32 || v->dtype() != mx::float32)) throw std::invalid_argument(where + "float32 only");
  if (cos && (cos->dtype() != mx::float32 || sin->dtype() != mx::float32))
    throw std::invalid_argument(where + "float32 rotary tables only");
  if (s.device != mx::Device::cpu) throw std::invalid_argument(where + "a CPU kernel");
  // Three single-output primitives (an MLX primitive of several outputs holds its inputs once per
  // output, so no cache buffer could be donated to it): the two cache writes, then attention. A
  // packed QKV is read by all three, each at its own columns.
  const auto write = [&](const array& past, const array& rows, bool rotary, int64_t col) {
    std::vector<array> in{past, rows, len};
    if (positions) in.push_back(*positions);
    if (rotary) {
      in.push_back(*cos);
      in.push_back(*sin);
    }
    return array(past.shape(), mx::float32, std::make_shared<GqaCacheWrite>(s, positions.has_value(), rotary, interleaved, from_zero, col),
                 std::move(in));
  };
  array present_k = write(past_k, packed ? q : *k, cos.has_value(), packed ? int64_t(N) * H : 0);
  array present_v = write(past_v, packed ? q : *v, false, packed ? int64_t(N + G) * H : 0);
  Config cfg{positions.has_value(), cos.has_value(), interleaved, causal, from_zero, packed, window, total, scale};
  std::vector<array> in{q, present_k, present_v, len};
  if (positions) in.push_back(*positions);
  if (cos) {
    in.push_back(*cos);
    in.push_back(*sin);
  }
  mx::Shape yshape = q.shape();
  if (packed) yshape.back() = N * H;
  array y(std::move(yshape), mx::float32, std::make_shared<GqaAttend>(s, cfg), std::move(in));
  return {y, present_k, present_v};
}

}  // namespace mlxc::cpu
