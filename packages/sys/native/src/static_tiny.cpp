// The static executor's own tiny steps (static_tiny.h). Integer and bool values are gathered as
// int64 (every supported type holds exactly there), combined there and stored truncated to the
// output type: the low bits of a sum, difference or product are those of the same operation in the
// narrower two's complement type, so the result is MLX's typed kernel's, bit for bit (bool stores
// != 0, as C++'s conversion to bool does). float32 values are gathered as float32 and combined as
// MLX's scalar kernels combine them.
#include "static_tiny.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <type_traits>

namespace mx = mlx::core;

namespace mlxc {
namespace {

bool tiny_type(mx::Dtype t) {
  switch (t) {
    case mx::bool_:
    case mx::int8:
    case mx::int16:
    case mx::int32:
    case mx::int64:
    case mx::uint8:
    case mx::uint16:
    case mx::uint32:
    case mx::float32: return true;
    default: return false;
  }
}

bool tiny_array(const mx::Shape& s, mx::Dtype t) {
  size_t n = 1;
  for (auto d : s) n *= static_cast<size_t>(std::max(d, 0));
  return tiny_type(t) && n >= 1 && n <= (t == mx::float32 ? kTinyFloatElements : kTinyElements);
}

/** The multi-index of row-major position `i` of `shape`. */
void unravel(size_t i, const mx::Shape& shape, std::vector<int>& idx) {
  idx.resize(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = static_cast<int>(i % static_cast<size_t>(shape[d]));
    i /= static_cast<size_t>(shape[d]);
  }
}

/** a's elements in row-major logical order, converted to T (bool 0 or 1; static_cast otherwise). */
template <typename S, typename T>
void gather_typed(const mx::array& a, T* dst) {
  const S* p = a.data<S>();
  const size_t n = a.size();
  if (a.flags().row_contiguous) {
    for (size_t i = 0; i < n; i++) dst[i] = static_cast<T>(p[i]);
    return;
  }
  const auto& shape = a.shape();
  const auto& strides = a.strides();
  for (size_t i = 0; i < n; i++) {
    size_t j = i;
    int64_t off = 0;
    for (size_t d = shape.size(); d-- > 0;) {
      const size_t m = static_cast<size_t>(shape[d]);
      off += static_cast<int64_t>(j % m) * strides[d];
      j /= m;
    }
    dst[i] = static_cast<T>(p[off]);
  }
}

/** f(D{}) with D the C++ type of `t`, one of tiny_type's. */
template <typename F>
decltype(auto) with_type(mx::Dtype t, F&& f) {
  switch (t) {
    case mx::bool_: return f(bool{});
    case mx::int8: return f(int8_t{});
    case mx::int16: return f(int16_t{});
    case mx::int32: return f(int32_t{});
    case mx::int64: return f(int64_t{});
    case mx::uint8: return f(uint8_t{});
    case mx::uint16: return f(uint16_t{});
    case mx::uint32: return f(uint32_t{});
    default: return f(float{});  // float32 (tiny_type admits nothing else)
  }
}

template <typename T>
void gather(const mx::array& a, T* dst) {
  with_type(a.dtype(), [&](auto s) { gather_typed<decltype(s), T>(a, dst); });
}

/** src into o's fresh row-major data, converted to its type: bool is != 0 (NaN true), the others static_cast. */
template <typename D, typename T>
void scatter_typed(mx::array& o, const T* src) {
  D* p = o.data<D>();
  const size_t n = o.size();
  if constexpr (std::is_same_v<D, bool>) {
    for (size_t i = 0; i < n; i++) p[i] = src[i] != 0;
  } else {
    for (size_t i = 0; i < n; i++) p[i] = static_cast<D>(src[i]);
  }
}

template <typename T>
void scatter(mx::array& o, const T* src) {
  with_type(o.dtype(), [&](auto d) { scatter_typed<decltype(d), T>(o, src); });
}

/** Wrapping int64 arithmetic (through uint64: no signed overflow). */
inline int64_t wrap_add(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)); }
inline int64_t wrap_sub(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b)); }
inline int64_t wrap_mul(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)); }

/** The value of an int64 once stored in `t` (an integer type or bool) and read back (a reduction accumulates in its output type). */
int64_t as_type(int64_t v, mx::Dtype t) {
  return with_type(t, [v](auto d) -> int64_t {
    using D = decltype(d);
    if constexpr (std::is_same_v<D, bool>)
      return v != 0;
    else
      return static_cast<int64_t>(static_cast<D>(v));
  });
}

/** r[i] = f(a[i], b[i]) over n values. */
template <typename R, typename T, typename F>
void zip(R* r, const T* a, const T* b, size_t n, F f) {
  for (size_t i = 0; i < n; i++) r[i] = f(a[i], b[i]);
}

/** A binary op over integer values (int64), into r. */
void binary_i(TinyOp op, int64_t* r, const int64_t* a, const int64_t* b, size_t n) {
  switch (op) {
    case TinyOp::add: return zip(r, a, b, n, wrap_add);
    case TinyOp::subtract: return zip(r, a, b, n, wrap_sub);
    case TinyOp::multiply: return zip(r, a, b, n, wrap_mul);
    case TinyOp::maximum: return zip(r, a, b, n, [](int64_t x, int64_t y) { return x > y ? x : y; });
    case TinyOp::minimum: return zip(r, a, b, n, [](int64_t x, int64_t y) { return x < y ? x : y; });
    case TinyOp::less: return zip(r, a, b, n, [](int64_t x, int64_t y) -> int64_t { return x < y; });
    case TinyOp::less_equal: return zip(r, a, b, n, [](int64_t x, int64_t y) -> int64_t { return x <= y; });
    case TinyOp::greater: return zip(r, a, b, n, [](int64_t x, int64_t y) -> int64_t { return x > y; });
    case TinyOp::greater_equal: return zip(r, a, b, n, [](int64_t x, int64_t y) -> int64_t { return x >= y; });
    case TinyOp::equal: return zip(r, a, b, n, [](int64_t x, int64_t y) -> int64_t { return x == y; });
    case TinyOp::not_equal: return zip(r, a, b, n, [](int64_t x, int64_t y) -> int64_t { return x != y; });
    case TinyOp::logical_and: return zip(r, a, b, n, [](int64_t x, int64_t y) -> int64_t { return x != 0 && y != 0; });
    default:  // logical_or
      return zip(r, a, b, n, [](int64_t x, int64_t y) -> int64_t { return x != 0 || y != 0; });
  }
}

/**
 * A binary op over float32 values, as MLX's scalar kernels: one correctly rounded operation;
 * maximum and minimum return a NaN first operand, and a NaN second one through the comparison;
 * comparisons and the logical ops give 0 or 1 (into `c`), the arithmetic into `r`.
 */
void binary_f(TinyOp op, float* r, int64_t* c, const float* a, const float* b, size_t n) {
  switch (op) {
    case TinyOp::add: return zip(r, a, b, n, [](float x, float y) { return x + y; });
    case TinyOp::subtract: return zip(r, a, b, n, [](float x, float y) { return x - y; });
    case TinyOp::multiply: return zip(r, a, b, n, [](float x, float y) { return x * y; });
    case TinyOp::maximum: return zip(r, a, b, n, [](float x, float y) { return std::isnan(x) ? x : (x > y ? x : y); });
    case TinyOp::minimum: return zip(r, a, b, n, [](float x, float y) { return std::isnan(x) ? x : (x < y ? x : y); });
    case TinyOp::less: return zip(c, a, b, n, [](float x, float y) -> int64_t { return x < y; });
    case TinyOp::less_equal: return zip(c, a, b, n, [](float x, float y) -> int64_t { return x <= y; });
    case TinyOp::greater: return zip(c, a, b, n, [](float x, float y) -> int64_t { return x > y; });
    case TinyOp::greater_equal: return zip(c, a, b, n, [](float x, float y) -> int64_t { return x >= y; });
    case TinyOp::equal: return zip(c, a, b, n, [](float x, float y) -> int64_t { return x == y; });
    case TinyOp::not_equal: return zip(c, a, b, n, [](float x, float y) -> int64_t { return x != y; });
    case TinyOp::logical_and: return zip(c, a, b, n, [](float x, float y) -> int64_t { return x != 0.0f && y != 0.0f; });
    default:  // logical_or
      return zip(c, a, b, n, [](float x, float y) -> int64_t { return x != 0.0f || y != 0.0f; });
  }
}

/** This thread's scratch buffers (a step's values, read and made; reused from step to step). */
struct Scratch {
  std::vector<int64_t> i[4];
  std::vector<float> f[3];
  int64_t* ints(int k, size_t n) {
    if (i[k].size() < n) i[k].resize(n);
    return i[k].data();
  }
  float* floats(int k, size_t n) {
    if (f[k].size() < n) f[k].resize(n);
    return f[k].data();
  }
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

/** The row-major position in `in` (its axes aligned at the end; an axis of 1 broadcasts) of output index `idx`. */
size_t broadcast_index(const std::vector<int>& idx, const mx::Shape& in) {
  const size_t lead = idx.size() - in.size();
  size_t k = 0;
  for (size_t d = 0; d < in.size(); d++) k = k * static_cast<size_t>(in[d]) + (in[d] == 1 ? 0 : static_cast<size_t>(idx[lead + d]));
  return k;
}

}  // namespace

TinyStep tiny_step(const mx::Primitive& p, const std::vector<mx::array>& inputs, const std::vector<mx::Shape>& shapes,
                   const std::vector<mx::Dtype>& dtypes) {
  TinyStep t;
  if (shapes.size() != 1 || inputs.empty() || !tiny_array(shapes[0], dtypes[0])) return t;
  for (const auto& in : inputs)
    if (!tiny_array(in.shape(), in.dtype())) return t;
  // By name: libmlx exports the type information of few primitives (a typeid or dynamic_cast of
  // ExpandDims left libmlxc unloadable), and each of these names is one class's.
  const std::string_view id = p.name();
  const auto same_shapes = [&] {
    for (const auto& in : inputs)
      if (in.shape() != shapes[0]) return false;
    return true;
  };
  TinyOp op = TinyOp::none;
  if (inputs.size() == 2 && same_shapes() && inputs[0].dtype() == inputs[1].dtype()) {
    if (id == "Add")
      op = TinyOp::add;
    else if (id == "Subtract")
      op = TinyOp::subtract;
    else if (id == "Multiply")
      op = TinyOp::multiply;
    else if (id == "Maximum")
      op = TinyOp::maximum;
    else if (id == "Minimum")
      op = TinyOp::minimum;
    else if (id == "Less")
      op = TinyOp::less;
    else if (id == "LessEqual")
      op = TinyOp::less_equal;
    else if (id == "Greater")
      op = TinyOp::greater;
    else if (id == "GreaterEqual")
      op = TinyOp::greater_equal;
    else if (id == "Equal" || id == "NaNEqual")
      op = TinyOp::equal;  // equal_nan changes nothing on integers
    else if (id == "NotEqual")
      op = TinyOp::not_equal;
    else if (id == "LogicalAnd")
      op = TinyOp::logical_and;
    else if (id == "LogicalOr")
      op = TinyOp::logical_or;
  } else if (inputs.size() == 1 && same_shapes()) {
    if (id == "LogicalNot")
      op = TinyOp::logical_not;
    else if (id == "Negative" && inputs[0].dtype() != mx::bool_)
      op = TinyOp::negative;
    else if (id == "AsType")
      op = TinyOp::as_type;
  } else if (inputs.size() == 3 && same_shapes() && id == "Select" && inputs[0].dtype() == mx::bool_ &&
             inputs[1].dtype() == inputs[2].dtype()) {
    op = TinyOp::select;
  }
  if (op == TinyOp::none && inputs.size() == 1 && inputs[0].dtype() == dtypes[0]) {
    if (id == "Reshape" || id == "Squeeze" || id == "ExpandDims") {
      op = TinyOp::copy;  // the same elements in row-major order (MLX checks the sizes agree)
    } else if (id == "Broadcast" && inputs[0].ndim() <= static_cast<int>(shapes[0].size())) {
      op = TinyOp::copy;
      const size_t lead = shapes[0].size() - inputs[0].shape().size();
      for (size_t d = 0; d < inputs[0].shape().size(); d++)
        if (inputs[0].shape(static_cast<int>(d)) != 1 && inputs[0].shape(static_cast<int>(d)) != shapes[0][lead + d]) op = TinyOp::none;
    } else if (id == "Sum" || id == "Max" || id == "Min" || id == "And" || id == "Or") {
      auto [kind, axes] = static_cast<const mx::Reduce&>(p).state();
      const mx::Shape& s = inputs[0].shape();
      bool fits = s.size() == shapes[0].size();
      for (size_t d = 0; fits && d < s.size(); d++) {
        const bool reduced = std::find(axes.begin(), axes.end(), static_cast<int>(d)) != axes.end();
        fits = reduced ? shapes[0][d] == 1 : shapes[0][d] == s[d];
      }
      if (fits) {
        op = kind == mx::Reduce::Sum   ? TinyOp::reduce_sum
             : kind == mx::Reduce::Max ? TinyOp::reduce_max
             : kind == mx::Reduce::Min ? TinyOp::reduce_min
             : kind == mx::Reduce::And ? TinyOp::reduce_and
             : kind == mx::Reduce::Or  ? TinyOp::reduce_or
                                       : TinyOp::none;
        t.axes = axes;
      }
    }
  }
  if (op == TinyOp::none && id == "Concatenate") {
    const int axis = static_cast<const mx::Concatenate&>(p).state();
    bool fits = axis >= 0 && axis < static_cast<int>(shapes[0].size());
    int64_t along = 0;
    for (const auto& in : inputs) {
      fits = fits && in.dtype() == dtypes[0] && in.ndim() == static_cast<int>(shapes[0].size());
      for (int d = 0; fits && d < in.ndim(); d++) fits = d == axis || in.shape(d) == shapes[0][d];
      if (fits) along += in.shape(axis);
    }
    if (fits && along == shapes[0][axis]) {
      op = TinyOp::concatenate;
      t.axis = axis;
    }
  }
  // Reductions take integers only (a float sum's rounding follows the order of MLX's vector
  // accumulators); other than a sum they keep the input's type (MLX's do).
  if (op >= TinyOp::reduce_sum && (inputs[0].dtype() == mx::float32 || dtypes[0] == mx::float32)) op = TinyOp::none;
  if ((op == TinyOp::reduce_max || op == TinyOp::reduce_min || op == TinyOp::reduce_and || op == TinyOp::reduce_or) &&
      inputs[0].dtype() != dtypes[0])
    op = TinyOp::none;
  t.op = op;
  return t;
}

void tiny_eval(const TinyStep& t, const std::vector<mx::array>& ins, std::vector<mx::array>& outs) {
  mx::array& o = outs[0];
  o.set_data(mx::allocator::malloc(o.nbytes()));
  const size_t n = o.size();
  Scratch& sc = scratch();
  const bool fin = ins[0].dtype() == mx::float32;
  switch (t.op) {
    case TinyOp::logical_not:
    case TinyOp::negative:
    case TinyOp::as_type: {
      if (fin) {
        float* a = sc.floats(0, n);
        gather(ins[0], a);
        if (t.op == TinyOp::logical_not) {
          int64_t* r = sc.ints(0, n);
          for (size_t i = 0; i < n; i++) r[i] = a[i] == 0.0f;
          return scatter(o, r);
        }
        if (t.op == TinyOp::negative)
          for (size_t i = 0; i < n; i++) a[i] = -a[i];
        return scatter(o, a);
      }
      int64_t* a = sc.ints(0, n);
      gather(ins[0], a);
      if (t.op == TinyOp::logical_not)
        for (size_t i = 0; i < n; i++) a[i] = a[i] == 0;
      else if (t.op == TinyOp::negative)
        for (size_t i = 0; i < n; i++) a[i] = wrap_sub(0, a[i]);
      return scatter(o, a);
    }
    case TinyOp::select: {
      int64_t* c = sc.ints(0, n);
      gather(ins[0], c);
      if (ins[1].dtype() == mx::float32) {
        float *a = sc.floats(0, n), *b = sc.floats(1, n);
        gather(ins[1], a);
        gather(ins[2], b);
        for (size_t i = 0; i < n; i++) a[i] = c[i] ? a[i] : b[i];
        return scatter(o, a);
      }
      int64_t *a = sc.ints(1, n), *b = sc.ints(2, n);
      gather(ins[1], a);
      gather(ins[2], b);
      for (size_t i = 0; i < n; i++) a[i] = c[i] ? a[i] : b[i];
      return scatter(o, a);
    }
    case TinyOp::copy:
    case TinyOp::concatenate: {
      // Every input gathered in its own order, then each output position's source picked: the
      // same position (a reshape), its broadcast one, or its place in the input along the axis.
      const bool whole = t.op == TinyOp::copy && ins[0].size() == n;
      size_t total = 0;
      for (const auto& in : ins) total += in.size();
      float* vf = fin ? sc.floats(0, total) : nullptr;
      int64_t* vi = fin ? nullptr : sc.ints(0, total);
      std::vector<size_t> start(ins.size());
      for (size_t k = 0, at = 0; k < ins.size(); at += ins[k].size(), k++) {
        start[k] = at;
        if (fin)
          gather(ins[k], vf + at);
        else
          gather(ins[k], vi + at);
      }
      if (whole) return fin ? scatter(o, vf) : scatter(o, vi);
      float* rf = fin ? sc.floats(1, n) : nullptr;
      int64_t* ri = fin ? nullptr : sc.ints(1, n);
      std::vector<int> idx;
      for (size_t i = 0; i < n; i++) {
        unravel(i, o.shape(), idx);
        size_t k = 0;
        if (t.op == TinyOp::concatenate)
          while (idx[t.axis] >= ins[k].shape(t.axis)) idx[t.axis] -= ins[k++].shape(t.axis);
        const size_t from = start[k] + broadcast_index(idx, ins[k].shape());
        if (fin)
          rf[i] = vf[from];
        else
          ri[i] = vi[from];
      }
      return fin ? scatter(o, rf) : scatter(o, ri);
    }
    case TinyOp::reduce_sum:
    case TinyOp::reduce_max:
    case TinyOp::reduce_min:
    case TinyOp::reduce_and:
    case TinyOp::reduce_or: {
      // Integer inputs only (tiny_step), gathered in row-major order, each cast to the output
      // type first (as MLX's reductions do). Trailing axes reduced: runs of `seg` values, one
      // output each; otherwise each value's output position by its index.
      const mx::Dtype ot = o.dtype();
      const mx::Shape& s = ins[0].shape();
      const size_t total = ins[0].size();
      int64_t* v = sc.ints(0, total);
      gather(ins[0], v);
      for (size_t j = 0; j < total; j++) v[j] = as_type(v[j], ot);
      const auto combine = [&](int64_t r, int64_t x) -> int64_t {
        switch (t.op) {
          case TinyOp::reduce_sum: return as_type(wrap_add(r, x), ot);
          case TinyOp::reduce_max: return r > x ? r : x;
          case TinyOp::reduce_min: return r < x ? r : x;
          case TinyOp::reduce_and: return r != 0 && x != 0;
          default: return r != 0 || x != 0;
        }
      };
      const auto reduced = [&](size_t d) { return std::find(t.axes.begin(), t.axes.end(), static_cast<int>(d)) != t.axes.end(); };
      size_t last_kept = 0;  // one past the last kept axis of more than one element
      for (size_t d = 0; d < s.size(); d++)
        if (!reduced(d) && s[d] > 1) last_kept = d + 1;
      bool runs = true;
      for (size_t d = 0; d < last_kept; d++)
        if (reduced(d) && s[d] > 1) runs = false;
      int64_t* r = sc.ints(1, n);
      if (runs) {
        const size_t seg = total / n;
        for (size_t i = 0; i < n; i++) {
          int64_t acc = v[i * seg];
          for (size_t j = 1; j < seg; j++) acc = combine(acc, v[i * seg + j]);
          r[i] = acc;
        }
        return scatter(o, r);
      }
      std::vector<char> seen(n, 0);
      std::vector<int> idx;
      for (size_t j = 0; j < total; j++) {
        unravel(j, s, idx);
        size_t oi = 0;
        for (size_t d = 0; d < idx.size(); d++) {
          const size_t od = static_cast<size_t>(o.shape(static_cast<int>(d)));
          oi = oi * od + (od == 1 ? 0 : static_cast<size_t>(idx[d]));
        }
        r[oi] = seen[oi] ? combine(r[oi], v[j]) : v[j];
        seen[oi] = 1;
      }
      return scatter(o, r);
    }
    default: {
      if (fin) {
        float *a = sc.floats(0, n), *b = sc.floats(1, n), *r = sc.floats(2, n);
        int64_t* c = sc.ints(0, n);
        gather(ins[0], a);
        gather(ins[1], b);
        const bool arith = t.op == TinyOp::add || t.op == TinyOp::subtract || t.op == TinyOp::multiply || t.op == TinyOp::maximum ||
                           t.op == TinyOp::minimum;
        binary_f(t.op, r, c, a, b, n);
        return arith ? scatter(o, r) : scatter(o, c);
      }
      int64_t *a = sc.ints(0, n), *b = sc.ints(1, n), *r = sc.ints(2, n);
      gather(ins[0], a);
      gather(ins[1], b);
      binary_i(t.op, r, a, b, n);
      return scatter(o, r);
    }
  }
}

}  // namespace mlxc
