// The static executor's own tiny integer steps (static_tiny.h). Values are read as int64 (every
// supported type holds exactly there), combined in int64 and stored truncated to the output type:
// the low bits of a sum, difference or product are those of the same operation in the narrower
// two's complement type, so the result is MLX's typed kernel's, bit for bit (bool stores != 0, as
// C++'s conversion to bool does).
#include "static_tiny.h"

#include <algorithm>
#include <cmath>
#include <string_view>

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
  return tiny_type(t) && n >= 1 && n <= kTinyElements;
}

/** Element `j` (row-major logical order) of `a`, read through its strides, as int64. */
struct Reader {
  const char* base;
  mx::Dtype dtype;
  bool contiguous;
  std::vector<int> shape;
  std::vector<int64_t> strides;  // in elements
  explicit Reader(const mx::array& a)
      : base(static_cast<const char*>(a.data<void>())),
        dtype(a.dtype()),
        contiguous(a.flags().row_contiguous),
        shape(a.shape().begin(), a.shape().end()),
        strides(a.strides().begin(), a.strides().end()) {}

  int64_t at_offset(int64_t k) const {
    switch (dtype) {
      case mx::bool_: return reinterpret_cast<const bool*>(base)[k] ? 1 : 0;
      case mx::int8: return reinterpret_cast<const int8_t*>(base)[k];
      case mx::int16: return reinterpret_cast<const int16_t*>(base)[k];
      case mx::int32: return reinterpret_cast<const int32_t*>(base)[k];
      case mx::int64: return reinterpret_cast<const int64_t*>(base)[k];
      case mx::uint8: return reinterpret_cast<const uint8_t*>(base)[k];
      case mx::uint16: return reinterpret_cast<const uint16_t*>(base)[k];
      case mx::float32:  // an integer wanted from float data: as MLX's static_cast to int64
        return static_cast<int64_t>(reinterpret_cast<const float*>(base)[k]);
      default:  // uint32 (tiny_type admits nothing else)
        return reinterpret_cast<const uint32_t*>(base)[k];
    }
  }

  /** As a float: float32 data as it is, an integer converted (static_cast, as MLX's AsType). */
  float f_at_offset(int64_t k) const {
    if (dtype == mx::float32) return reinterpret_cast<const float*>(base)[k];
    return static_cast<float>(at_offset(k));
  }

  /** The offset of the element at multi-index `idx` of `shape` (trailing axes aligned; an axis of 1 broadcasts). */
  int64_t offset_of(const std::vector<int>& idx) const {
    int64_t off = 0;
    const size_t lead = idx.size() - shape.size();
    for (size_t d = 0; d < shape.size(); d++)
      if (shape[d] != 1) off += static_cast<int64_t>(idx[lead + d]) * strides[d];
    return off;
  }

  /** The offset of row-major position `j`. */
  int64_t offset(size_t j) const {
    if (contiguous) return static_cast<int64_t>(j);
    int64_t off = 0;
    for (size_t d = shape.size(); d-- > 0;) {
      const size_t n = static_cast<size_t>(shape[d]);
      off += static_cast<int64_t>(j % n) * strides[d];
      j /= n;
    }
    return off;
  }

  int64_t operator()(size_t j) const { return at_offset(offset(j)); }
  float f(size_t j) const { return f_at_offset(offset(j)); }
};

void store(mx::array& o, size_t i, int64_t v) {
  switch (o.dtype()) {
    case mx::bool_: o.data<bool>()[i] = v != 0; break;
    case mx::int8: o.data<int8_t>()[i] = static_cast<int8_t>(v); break;
    case mx::int16: o.data<int16_t>()[i] = static_cast<int16_t>(v); break;
    case mx::int32: o.data<int32_t>()[i] = static_cast<int32_t>(v); break;
    case mx::int64: o.data<int64_t>()[i] = v; break;
    case mx::uint8: o.data<uint8_t>()[i] = static_cast<uint8_t>(v); break;
    case mx::uint16: o.data<uint16_t>()[i] = static_cast<uint16_t>(v); break;
    case mx::float32: o.data<float>()[i] = static_cast<float>(v); break;
    default: o.data<uint32_t>()[i] = static_cast<uint32_t>(v); break;
  }
}

/** A float into an output of any tiny type: static_cast as MLX's AsType (bool: v != 0, NaN true). */
void store_f(mx::array& o, size_t i, float v) {
  switch (o.dtype()) {
    case mx::float32: o.data<float>()[i] = v; break;
    case mx::bool_: o.data<bool>()[i] = v != 0.0f; break;
    case mx::int8: o.data<int8_t>()[i] = static_cast<int8_t>(v); break;
    case mx::int16: o.data<int16_t>()[i] = static_cast<int16_t>(v); break;
    case mx::int32: o.data<int32_t>()[i] = static_cast<int32_t>(v); break;
    case mx::int64: o.data<int64_t>()[i] = static_cast<int64_t>(v); break;
    case mx::uint8: o.data<uint8_t>()[i] = static_cast<uint8_t>(v); break;
    case mx::uint16: o.data<uint16_t>()[i] = static_cast<uint16_t>(v); break;
    default: o.data<uint32_t>()[i] = static_cast<uint32_t>(v); break;
  }
}

/** MLX's binary ops on float32 (maximum and minimum: a NaN first operand wins, a NaN second one too, through the comparison). */
float binary_f(TinyOp op, float a, float b) {
  switch (op) {
    case TinyOp::add: return a + b;
    case TinyOp::subtract: return a - b;
    case TinyOp::multiply: return a * b;
    case TinyOp::maximum: return std::isnan(a) ? a : (a > b ? a : b);
    default:  // minimum
      return std::isnan(a) ? a : (a < b ? a : b);
  }
}

bool compare_f(TinyOp op, float a, float b) {
  switch (op) {
    case TinyOp::less: return a < b;
    case TinyOp::less_equal: return a <= b;
    case TinyOp::greater: return a > b;
    case TinyOp::greater_equal: return a >= b;
    case TinyOp::equal: return a == b;
    case TinyOp::not_equal: return a != b;
    case TinyOp::logical_and: return a != 0.0f && b != 0.0f;
    default:  // logical_or
      return a != 0.0f || b != 0.0f;
  }
}

/** The multi-index of row-major position `i` of `shape`. */
void unravel(size_t i, const mx::Shape& shape, std::vector<int>& idx) {
  idx.resize(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = static_cast<int>(i % static_cast<size_t>(shape[d]));
    i /= static_cast<size_t>(shape[d]);
  }
}

/** Wrapping int64 arithmetic (through uint64: no signed overflow). */
int64_t wrap_add(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)); }
int64_t wrap_sub(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b)); }
int64_t wrap_mul(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)); }

int64_t binary(TinyOp op, int64_t a, int64_t b) {
  switch (op) {
    case TinyOp::add: return wrap_add(a, b);
    case TinyOp::subtract: return wrap_sub(a, b);
    case TinyOp::multiply: return wrap_mul(a, b);
    case TinyOp::maximum: return std::max(a, b);
    case TinyOp::minimum: return std::min(a, b);
    case TinyOp::less: return a < b;
    case TinyOp::less_equal: return a <= b;
    case TinyOp::greater: return a > b;
    case TinyOp::greater_equal: return a >= b;
    case TinyOp::equal: return a == b;
    case TinyOp::not_equal: return a != b;
    case TinyOp::logical_and: return a != 0 && b != 0;
    default:  // logical_or
      return a != 0 || b != 0;
  }
}

/** The value of an int64 once stored in `t` and read back (a reduction accumulates in its output type). */
int64_t as_type(int64_t v, mx::Dtype t) {
  switch (t) {
    case mx::bool_: return v != 0;
    case mx::int8: return static_cast<int8_t>(v);
    case mx::int16: return static_cast<int16_t>(v);
    case mx::int32: return static_cast<int32_t>(v);
    case mx::uint8: return static_cast<uint8_t>(v);
    case mx::uint16: return static_cast<uint16_t>(v);
    case mx::uint32: return static_cast<uint32_t>(v);
    default: return v;
  }
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
  const bool fin = ins[0].dtype() == mx::float32;
  switch (t.op) {
    case TinyOp::logical_not: {
      const Reader a(ins[0]);
      for (size_t i = 0; i < n; i++) store(o, i, fin ? a.f(i) == 0.0f : a(i) == 0);
      return;
    }
    case TinyOp::negative: {
      const Reader a(ins[0]);
      for (size_t i = 0; i < n; i++)
        if (fin)
          store_f(o, i, -a.f(i));
        else
          store(o, i, wrap_sub(0, a(i)));
      return;
    }
    case TinyOp::as_type: {
      const Reader a(ins[0]);
      for (size_t i = 0; i < n; i++)
        if (fin)
          store_f(o, i, a.f(i));
        else
          store(o, i, a(i));
      return;
    }
    case TinyOp::select: {
      const Reader c(ins[0]), a(ins[1]), b(ins[2]);
      const bool f = ins[1].dtype() == mx::float32;
      for (size_t i = 0; i < n; i++)
        if (f)
          store_f(o, i, c(i) ? a.f(i) : b.f(i));
        else
          store(o, i, c(i) ? a(i) : b(i));
      return;
    }
    case TinyOp::copy: {
      const Reader a(ins[0]);
      const bool whole = ins[0].size() == n;
      std::vector<int> idx;
      for (size_t i = 0; i < n; i++) {
        // A broadcast reads each output position's input one, its axes of 1 held at 0.
        int64_t k = 0;
        if (whole) {
          k = a.offset(i);
        } else {
          unravel(i, o.shape(), idx);
          k = a.offset_of(idx);
        }
        if (fin)
          store_f(o, i, a.f_at_offset(k));
        else
          store(o, i, a.at_offset(k));
      }
      return;
    }
    case TinyOp::concatenate: {
      std::vector<int> idx;
      const int axis = t.axis;
      for (size_t i = 0; i < n; i++) {
        unravel(i, o.shape(), idx);
        size_t k = 0;
        while (idx[axis] >= ins[k].shape(axis)) idx[axis] -= ins[k++].shape(axis);
        const Reader a(ins[k]);
        if (fin)
          store_f(o, i, a.f_at_offset(a.offset_of(idx)));
        else
          store(o, i, a.at_offset(a.offset_of(idx)));
      }
      return;
    }
    case TinyOp::reduce_sum:
    case TinyOp::reduce_max:
    case TinyOp::reduce_min:
    case TinyOp::reduce_and:
    case TinyOp::reduce_or: {
      // Integer inputs only (tiny_step). Trailing axes reduced over a row-major input: runs of
      // `seg` elements, one output each; otherwise each element's output position by its index.
      const Reader a(ins[0]);
      const mx::Dtype ot = o.dtype();
      const mx::Shape& s = ins[0].shape();
      const size_t total = ins[0].size();
      const size_t seg = total / n;
      bool runs = a.contiguous;
      const auto reduced = [&](size_t d) { return std::find(t.axes.begin(), t.axes.end(), static_cast<int>(d)) != t.axes.end(); };
      size_t last_kept = 0;  // one past the last kept axis of more than one element
      for (size_t d = 0; d < s.size(); d++)
        if (!reduced(d) && s[d] > 1) last_kept = d + 1;
      for (size_t d = 0; d < last_kept; d++)
        if (reduced(d) && s[d] > 1) runs = false;
      auto combine = [&](int64_t r, int64_t v) -> int64_t {
        switch (t.op) {
          case TinyOp::reduce_sum: return as_type(wrap_add(r, v), ot);
          case TinyOp::reduce_max: return std::max(r, v);
          case TinyOp::reduce_min: return std::min(r, v);
          case TinyOp::reduce_and: return r != 0 && v != 0;
          default: return r != 0 || v != 0;
        }
      };
      if (runs) {
        for (size_t i = 0; i < n; i++) {
          int64_t r = as_type(a.at_offset(static_cast<int64_t>(i * seg)), ot);
          for (size_t j = 1; j < seg; j++) r = combine(r, as_type(a.at_offset(static_cast<int64_t>(i * seg + j)), ot));
          store(o, i, r);
        }
        return;
      }
      std::vector<int64_t> acc(n);
      std::vector<char> seen(n, 0);
      std::vector<int> idx;
      for (size_t j = 0; j < total; j++) {
        unravel(j, s, idx);
        size_t oi = 0;
        for (size_t d = 0; d < idx.size(); d++) {
          const size_t od = static_cast<size_t>(o.shape(static_cast<int>(d)));
          oi = oi * od + (od == 1 ? 0 : static_cast<size_t>(idx[d]));
        }
        const int64_t v = as_type(a(j), ot);
        acc[oi] = seen[oi] ? combine(acc[oi], v) : v;
        seen[oi] = 1;
      }
      for (size_t i = 0; i < n; i++) store(o, i, acc[i]);
      return;
    }
    default: {
      const Reader a(ins[0]), b(ins[1]);
      const bool arith =
          t.op == TinyOp::add || t.op == TinyOp::subtract || t.op == TinyOp::multiply || t.op == TinyOp::maximum || t.op == TinyOp::minimum;
      for (size_t i = 0; i < n; i++) {
        if (!fin)
          store(o, i, binary(t.op, a(i), b(i)));
        else if (arith)
          store_f(o, i, binary_f(t.op, a.f(i), b.f(i)));
        else
          store(o, i, compare_f(t.op, a.f(i), b.f(i)));
      }
      return;
    }
  }
}

}  // namespace mlxc
