// Checks in front of MLX ops whose bad arguments crash the process instead of throwing: conv
// groups of 0 (a division by zero, SIGFPE), take indices past the array (an out-of-bounds read),
// as_strided views that reach past their buffer, and signed integer division of the type's
// minimum by -1 (SIGFPE on x86). spec/ops.ts routes the generated glue through them.
#include <limits>
#include <sstream>

#include "kernels/common/cpu.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"
#include "mlxc_private.h"

namespace mx = mlx::core;
using mlxc::array;

namespace {

/**
 * The indices of a take, verified as they are computed: a copy in which each index outside
 * [-n, n) is replaced by 0, so that the gather after it never reads out of bounds, and an error
 * naming the first such index, which the evaluation then throws.
 */
class CheckIndices : public mx::UnaryPrimitive {
 public:
  /** in[0]: the indices; in[1]: the array they index, for its size along `axis` (kFlat: all of it). */
  static constexpr int kFlat = std::numeric_limits<int>::min();
  CheckIndices(mx::Stream s, int axis, std::string op) : mx::UnaryPrimitive(s), axis_(axis), op_(std::move(op)) {}
  const char* name() const override { return "CheckIndices"; }
  bool is_equivalent(const mx::Primitive& o) const override {
    auto& p = static_cast<const CheckIndices&>(o);
    return axis_ == p.axis_ && op_ == p.op_;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<array>& in) override { return {in[0].shape()}; }
  // Integer indices carry no gradient; the indexed array is an input only for its shape.
  std::vector<array> vjp(const std::vector<array>& primals, const std::vector<array>&, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    std::vector<array> out;
    for (int i : argnums) out.push_back(mx::zeros_like(primals[i], stream()));
    return out;
  }
  std::vector<array> jvp(const std::vector<array>& primals, const std::vector<array>&, const std::vector<int>&) override {
    return {mx::zeros_like(primals[0], stream())};
  }
  void eval_gpu(const std::vector<array>&, array&) override {
    throw std::runtime_error("CheckIndices runs on the CPU (the front end sanitizes indices with MLX ops on other devices)");
  }
  void eval_cpu(const std::vector<array>& in, array& out) override {
    // The front end made the input row contiguous: one flat run of data_size() elements. The size
    // of the axis is read here, not when the graph was built: a shapeless compile replays this
    // primitive over arrays of other shapes.
    const array& x = in[0];
    const array& a = in[1];
    const int64_t n = axis_ == kFlat ? static_cast<int64_t>(a.size()) : a.shape(axis_ < 0 ? axis_ + static_cast<int>(a.ndim()) : axis_);
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    enc.set_input_array(x);
    enc.set_output_array(out);
    enc.dispatch([x = array::unsafe_weak_copy(x), out = array::unsafe_weak_copy(out), n, op = op_]() mutable {
      switch (x.dtype()) {
        case mx::int8: run<int8_t>(x, out, n, op); break;
        case mx::int16: run<int16_t>(x, out, n, op); break;
        case mx::int32: run<int32_t>(x, out, n, op); break;
        case mx::int64: run<int64_t>(x, out, n, op); break;
        case mx::uint8: run<uint8_t>(x, out, n, op); break;
        case mx::uint16: run<uint16_t>(x, out, n, op); break;
        case mx::uint32: run<uint32_t>(x, out, n, op); break;
        case mx::uint64: run<uint64_t>(x, out, n, op); break;
        default: throw std::invalid_argument("[" + op + "] indices must be integers");
      }
    });
  }

 private:
  template <typename T>
  static void run(const array& x, array& out, int64_t n, const std::string& op) {
    const T* src = x.data<T>();
    T* dst = out.data<T>();
    const size_t len = x.size();
    size_t bad = len;
    for (size_t i = 0; i < len; i++) {
      const T v = src[i];
      bool ok;
      if constexpr (std::is_signed_v<T>)
        ok = static_cast<int64_t>(v) >= -n && static_cast<int64_t>(v) < n;
      else
        ok = static_cast<uint64_t>(v) < static_cast<uint64_t>(n);
      dst[i] = ok ? v : T(0);
      if (!ok && bad == len) bad = i;
    }
    if (bad != len) {
      std::ostringstream os;
      os << "[" << op << "] index " << +src[bad] << " is out of range for an axis of size " << n;
      if (n) os << " (valid: " << -n << " to " << n - 1 << ")";
      throw std::out_of_range(os.str());
    }
  }
  int axis_;
  std::string op_;
};

/**
 * Indices made positions in one pass, for the ONNX front end's device-side index checks: each
 * index, read as int64 (uint64 wraps, as astype does), counts from the end when negative (with
 * `negative`) and is clamped into [0, n - 1]; `n` is dims[0], or dims[j] for component j of the
 * last axis when dims has one size per component. Three outputs: the int32 positions (the indices'
 * shape), whether any index was outside [-n, n) ([0, n) without `negative`), one bool of shape [1]
 * (the shape a run's checks are concatenated in), and
 * [below, above] (int64): the smallest index under its range and the largest over it (0 where
 * none), to name the offender. The front end reports the flag itself (the run fails naming the
 * node), so the evaluation never throws here. One primitive instead of a dozen elementwise ops and
 * reductions; its only input is the indices (no gradient flows to integer indices).
 */
class BoundIndices : public mx::Primitive {
 public:
  BoundIndices(mx::Stream s, std::vector<int64_t> dims, bool negative) : mx::Primitive(s), dims_(std::move(dims)), negative_(negative) {}
  const char* name() const override { return "BoundIndices"; }
  bool is_equivalent(const mx::Primitive& o) const override {
    auto& p = static_cast<const BoundIndices&>(o);
    return dims_ == p.dims_ && negative_ == p.negative_;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<array>& in) override {
    check_shape(in[0]);
    return {in[0].shape(), {1}, {2}};
  }
  std::vector<array> vjp(const std::vector<array>& primals, const std::vector<array>&, const std::vector<int>&,
                         const std::vector<array>&) override {
    return {mx::zeros_like(primals[0], stream())};
  }
  std::vector<array> jvp(const std::vector<array>& primals, const std::vector<array>&, const std::vector<int>&) override {
    return {mx::zeros(primals[0].shape(), mx::int32, stream()), mx::zeros({1}, mx::bool_, stream()), mx::zeros({2}, mx::int64, stream())};
  }
  /** The single size every index is bounded by, or -1 when the sizes are per component. */
  int64_t single_dim() const { return dims_.size() == 1 ? dims_[0] : -1; }
  void check_shape(const array& x) const {
    if (dims_.size() > 1 && (x.ndim() == 0 || static_cast<size_t>(x.shape(-1)) != dims_.size()))
      throw std::invalid_argument("[bounded_indices] " + std::to_string(dims_.size()) + " sizes for index tuples of length " +
                                  (x.ndim() ? std::to_string(x.shape(-1)) : std::string("(a scalar)")));
  }
  void eval_gpu(const std::vector<array>&, std::vector<array>&) override {
    throw std::runtime_error("BoundIndices runs on the CPU (bounded_indices builds MLX ops on other devices)");
  }
  void eval_cpu(const std::vector<array>& in, std::vector<array>& out) override {
    const array& x = in[0];
    for (auto& o : out) o.set_data(mx::allocator::malloc(o.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    enc.set_input_array(x);
    for (auto& o : out) enc.set_output_array(o);
    enc.dispatch([x = array::unsafe_weak_copy(x), pos = array::unsafe_weak_copy(out[0]), bad = array::unsafe_weak_copy(out[1]),
                  detail = array::unsafe_weak_copy(out[2]), dims = dims_, negative = negative_]() mutable {
      switch (x.dtype()) {
        case mx::int8: run<int8_t>(x, pos, bad, detail, dims, negative); break;
        case mx::int16: run<int16_t>(x, pos, bad, detail, dims, negative); break;
        case mx::int32: run<int32_t>(x, pos, bad, detail, dims, negative); break;
        case mx::int64: run<int64_t>(x, pos, bad, detail, dims, negative); break;
        case mx::uint8: run<uint8_t>(x, pos, bad, detail, dims, negative); break;
        case mx::uint16: run<uint16_t>(x, pos, bad, detail, dims, negative); break;
        case mx::uint32: run<uint32_t>(x, pos, bad, detail, dims, negative); break;
        case mx::uint64: run<uint64_t>(x, pos, bad, detail, dims, negative); break;
        default: throw std::invalid_argument("[bounded_indices] indices must be integers");
      }
    });
  }

 private:
  template <typename T>
  static void run(const array& x, array& pos, array& bad, array& detail, const std::vector<int64_t>& dims, bool negative) {
    const T* src = x.data<T>();
    int32_t* dst = pos.data<int32_t>();
    const size_t len = x.size();
    const size_t k = dims.size();
    int64_t below = 0, above = 0;
    bool low = false, high = false;
    // Row-major order over the logical shape, whatever the strides (a transposed or broadcast view).
    const bool flat = x.flags().row_contiguous;
    const int nd = static_cast<int>(x.ndim());
    std::vector<int> at(nd, 0);
    int64_t off = 0;
    for (size_t i = 0; i < len; i++) {
      const int64_t v = static_cast<int64_t>(src[flat ? static_cast<int64_t>(i) : off]);
      const int64_t n = k == 1 ? dims[0] : dims[i % k];
      const int64_t lo = negative ? -n : 0;
      if (v < lo) {
        below = low ? std::min(below, v) : v;
        low = true;
      } else if (v >= n) {
        above = high ? std::max(above, v) : v;
        high = true;
      }
      const int64_t w = negative && v < 0 ? v + n : v;
      dst[i] = static_cast<int32_t>(std::clamp<int64_t>(w, 0, std::max<int64_t>(n - 1, 0)));
      if (!flat) {
        for (int d = nd - 1; d >= 0; d--) {
          off += x.strides()[d];
          if (++at[d] < x.shape(d)) break;
          off -= x.strides()[d] * x.shape(d);
          at[d] = 0;
        }
      }
    }
    *bad.data<bool>() = low || high;
    detail.data<int64_t>()[0] = below;
    detail.data<int64_t>()[1] = above;
  }
  std::vector<int64_t> dims_;
  bool negative_;
};

/** Whether `indices` are BoundIndices' positions, each within [0, n) by construction. */
bool bounded_within(const array& indices, int64_t n) {
  if (n <= 0 || !indices.has_primitive() || indices.dtype() != mx::int32) return false;
  auto* p = dynamic_cast<const BoundIndices*>(&indices.primitive());
  return p && p->single_dim() == n && indices.sibling_position() == 0;
}

/**
 * `indices` checked against axis `axis` of `a` (CheckIndices::kFlat: against all of `a`, flattened);
 * `n` is that size now, for the GPU path. Negative indices count from the end. Positions that
 * bounded_indices made for a size of exactly `n` pass as they are.
 */
array checked_indices(const array& indices, const array& a, int axis, int64_t n, const char* op, mx::Stream s) {
  if (!mx::issubdtype(indices.dtype(), mx::integer)) return indices;  // MLX refuses them itself
  if (indices.size() == 0) return indices;
  // Positions bounded_indices made for this very size need no second check, except in a
  // shapeless compile's trace: its replays may index an array of another size with them.
  if (!mlxc::in_shapeless_trace() && bounded_within(indices, n)) return indices;
  if (s.device != mx::Device::cpu) {
    // No CPU kernel here: out-of-range indices become 0 (memory-safe, but not reported).
    auto lo = mx::array(-n, indices.dtype());
    auto in_range = mx::issubdtype(indices.dtype(), mx::signedinteger)
                        ? mx::logical_and(mx::greater_equal(indices, lo, s), mx::less(indices, mx::array(n, indices.dtype()), s), s)
                        : mx::less(indices, mx::array(n, indices.dtype()), s);
    return mx::where(in_range, indices, mx::zeros_like(indices, s), s);
  }
  auto flat = mx::contiguous(indices, false, s);
  // stop_gradient: the indices depend on `a` only for its shape, and the gather after them must
  // not be asked for a gradient with respect to its indices.
  return mx::stop_gradient(array(flat.shape(), flat.dtype(), std::make_shared<CheckIndices>(s, axis, op), {flat, a}), s);
}

int64_t axis_size(const array& a, int axis, const char* op) {
  const int nd = static_cast<int>(a.ndim());
  if (axis < -nd || axis >= nd) {
    std::ostringstream os;
    os << "[" << op << "] axis " << axis << " is out of range for an array of " << nd << " dimensions";
    throw std::invalid_argument(os.str());
  }
  return a.shape(axis < 0 ? axis + nd : axis);
}

}  // namespace

namespace mlxc {

namespace {
thread_local int shapeless_traces = 0;
}
ShapelessTrace::ShapelessTrace() { shapeless_traces++; }
ShapelessTrace::~ShapelessTrace() { shapeless_traces--; }
bool in_shapeless_trace() { return shapeless_traces > 0; }

}  // namespace mlxc

namespace mlxc::safe {

std::vector<array> bounded_indices(const array& indices, const std::vector<int64_t>& dims, bool negative, mx::Stream s) {
  if (dims.empty()) throw std::invalid_argument("[bounded_indices] dims must hold one size, or one per index component");
  for (auto d : dims)
    if (d < 0) throw std::invalid_argument("[bounded_indices] sizes must not be negative, got " + std::to_string(d));
  if (!mx::issubdtype(indices.dtype(), mx::integer)) throw std::invalid_argument("[bounded_indices] indices must be integers");
  if (s.device == mx::Device::cpu && !mlxc::cpu::kernels_off()) {
    auto p = std::make_shared<BoundIndices>(s, dims, negative);
    p->check_shape(indices);
    return array::make_arrays({indices.shape(), {1}, {2}}, {mx::int32, mx::bool_, mx::int64}, p, {indices});
  }
  // Elsewhere (and on the CPU with MLXC_CPU_KERNELS=off) the same from MLX's ops (which cannot
  // reduce an empty array).
  if (dims.size() > 1) BoundIndices(s, dims, negative).check_shape(indices);
  if (indices.size() == 0) return {mx::astype(indices, mx::int32, s), mx::zeros({1}, mx::bool_, s), mx::zeros({2}, mx::int64, s)};
  auto i = mx::astype(indices, mx::int64, s);
  auto n = dims.size() == 1 ? array(dims[0], mx::int64) : array(dims.data(), {static_cast<int>(dims.size())}, mx::int64);
  auto zero = array(0, mx::int64);
  auto lo = negative ? mx::negative(n, s) : zero;
  auto under = mx::less(i, lo, s), over = mx::greater_equal(i, n, s);
  auto bad = mx::reshape(mx::any(mx::logical_or(under, over, s), s), {1}, s);
  auto below = mx::min(mx::where(under, i, zero, s), s), above = mx::max(mx::where(over, i, zero, s), s);
  auto wrapped = negative ? mx::where(mx::less(i, zero, s), mx::add(i, n, s), i, s) : i;
  auto top = mx::maximum(mx::subtract(n, array(1, mx::int64), s), zero, s);
  auto pos = mx::astype(mx::minimum(mx::maximum(wrapped, zero, s), top, s), mx::int32, s);
  return {pos, bad, mx::stack({below, above}, s)};
}

int groups(int g, const char* op) {
  if (g < 1) throw std::invalid_argument(std::string("[") + op + "] groups must be a positive integer, got " + std::to_string(g));
  return g;
}

array take(const array& a, const array& indices, mx::Stream s) {
  return mx::take(a, checked_indices(indices, a, CheckIndices::kFlat, static_cast<int64_t>(a.size()), "take", s), s);
}

array take(const array& a, const array& indices, int axis, mx::Stream s) {
  const int64_t n = axis_size(a, axis, "take");
  return mx::take(a, checked_indices(indices, a, axis, n, "take", s), axis, s);
}

array take_along_axis(const array& a, const array& indices, int axis, mx::Stream s) {
  const int64_t n = axis_size(a, axis, "take_along_axis");
  return mx::take_along_axis(a, checked_indices(indices, a, axis, n, "take_along_axis", s), axis, s);
}

array as_strided(const array& a, const mx::Shape& shape, const mx::Strides& strides, size_t offset, mx::Stream s) {
  if (shape.size() != strides.size())
    throw std::invalid_argument("[as_strided] shape has " + std::to_string(shape.size()) + " dimensions and strides " +
                                std::to_string(strides.size()));
  bool empty = false;
  for (auto d : shape) {
    if (d < 0) throw std::invalid_argument("[as_strided] shape must not be negative, got " + std::to_string(d));
    if (d == 0) empty = true;
  }
  if (!empty) {
    // The lowest and highest element the view reaches, in the flattened input (long double: the
    // products of int32 dimensions and int64 strides can overflow int64).
    long double lo = static_cast<long double>(offset), hi = lo;
    for (size_t i = 0; i < shape.size(); i++) {
      long double reach = static_cast<long double>(shape[i] - 1) * static_cast<long double>(strides[i]);
      if (reach < 0)
        lo += reach;
      else
        hi += reach;
    }
    if (lo < 0 || hi >= static_cast<long double>(a.size())) {
      std::ostringstream os;
      os << "[as_strided] the view reaches elements " << static_cast<double>(lo) << " to " << static_cast<double>(hi) << " of an array of "
         << a.size() << " elements";
      throw std::out_of_range(os.str());
    }
  }
  return mx::as_strided(a, shape, strides, offset, s);
}

namespace {
/** `b` with -1 replaced by 1 where `a` is its type's minimum (int32, int64): that quotient traps on x86. */
array safe_divisor(const array& a, const array& b, mx::Stream s) {
  auto t = mx::promote_types(a.dtype(), b.dtype());
  if (t != mx::int32 && t != mx::int64) return b;
  auto min = t == mx::int32 ? array(std::numeric_limits<int32_t>::min(), t) : array(std::numeric_limits<int64_t>::min(), t);
  auto bad = mx::logical_and(mx::equal(a, min, s), mx::equal(b, array(-1, t), s), s);
  return mx::where(bad, array(1, t), mx::astype(b, t, s), s);
}
}  // namespace

// min / -1 is min (two's complement wraps, as NumPy gives it); min % -1 is 0. Dividing by 1 gives both.
array floor_divide(const array& a, const array& b, mx::Stream s) { return mx::floor_divide(a, safe_divisor(a, b, s), s); }
array remainder(const array& a, const array& b, mx::Stream s) { return mx::remainder(a, safe_divisor(a, b, s), s); }

}  // namespace mlxc::safe
