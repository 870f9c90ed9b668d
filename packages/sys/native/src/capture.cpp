// Graph capture: a closure traced once per input signature (dtypes and shapes) and replayed from
// here on every later call, with no C++ compiler involved.
//
// MLX's own compile does the same and more (it simplifies the graph and, with fusion, builds
// kernels), but on the CPU it is only available where a C++ compiler answers (`g++ --version`):
// without one it runs the function on every call, and with one, fusion compiles C++ for every new
// kernel, seconds each. Capture traces the function with placeholder inputs (arrays with a shape,
// a dtype and no data, as compile's tracer does), keeps the tape of arrays between the outputs and
// the placeholders, and on each call builds the same arrays again over the real inputs, sharing
// the traced primitives. Arrays outside that span (constants the function closed over, already
// computed) are kept as they are. Evaluating a placeholder fails (it has neither data nor a
// primitive), so a function that reads its inputs' data cannot be captured.
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "eval.h"
#include "mlx/primitives.h"
#include "mlxc_private.h"

namespace mx = mlx::core;

namespace {

struct Trace {
  std::vector<mx::array> inputs;   // the placeholders
  std::vector<mx::array> tape;     // every array between them and the outputs, inputs before users
  std::vector<mx::array> outputs;  // as the function returned them
};

struct Key {
  std::vector<int> dtypes;
  std::vector<mx::Shape> shapes;
  bool operator==(const Key& o) const { return dtypes == o.dtypes && shapes == o.shapes; }
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = k.dtypes.size();
    for (size_t i = 0; i < k.dtypes.size(); i++) {
      h = h * 1315423911u + static_cast<size_t>(k.dtypes[i]);
      for (auto d : k.shapes[i]) h = h * 2654435761u + static_cast<size_t>(d);
      h = h * 40503u + k.shapes[i].size();
    }
    return h;
  }
};

Key key_of(const std::vector<mx::array>& xs) {
  Key k;
  k.dtypes.reserve(xs.size());
  k.shapes.reserve(xs.size());
  for (const auto& x : xs) {
    k.dtypes.push_back(static_cast<int>(x.dtype().val()));
    k.shapes.push_back(x.shape());
  }
  return k;
}

// The arrays that depend on `inputs` (the placeholders), in an order where each comes after its
// inputs. The rest are leaves the replay keeps as they are: constants the function closed over,
// computed or not (a lazy one is computed with the first replay that needs it, once).
std::vector<mx::array> tape_of(const std::vector<mx::array>& inputs, const std::vector<mx::array>& outputs) {
  std::unordered_map<std::uintptr_t, bool> depends;  // by array id; siblings share the answer
  for (const auto& in : inputs) depends[in.id()] = true;
  std::vector<mx::array> tape;
  // Iterative post-order: (array, whether its inputs were visited).
  std::vector<std::pair<mx::array, bool>> stack;
  for (const auto& o : outputs) stack.emplace_back(o, false);
  while (!stack.empty()) {
    auto [a, expanded] = stack.back();
    stack.pop_back();
    if (expanded) {
      bool dep = false;
      for (const auto& in : a.inputs()) dep = dep || depends.at(in.id());
      for (const auto& s : a.outputs()) depends[s.id()] = dep;
      if (dep) tape.push_back(a);
      continue;
    }
    if (depends.count(a.id())) continue;
    if (!a.has_primitive() || a.is_available()) {
      depends[a.id()] = false;
      continue;
    }
    stack.emplace_back(a, true);
    for (const auto& in : a.inputs())
      if (!depends.count(in.id())) stack.emplace_back(in, false);
  }
  return tape;
}

// Primitives that only give their input another shape in row-major order: a chain of them is
// one Reshape. Reshape, Flatten and Unflatten copy a layout they cannot view; ExpandDims and
// Squeeze never copy, so two of those alone stay as they are (a Reshape in their place might).
enum class ShapeOp { none, copies, view };
ShapeOp shape_op(const mx::array& a) {
  if (!a.has_primitive() || !a.siblings().empty()) return ShapeOp::none;
  const std::string_view n = a.primitive().name();
  if (n == "Reshape" || n == "Flatten" || n == "Unflatten") return ShapeOp::copies;
  if (n == "ExpandDims" || n == "Squeeze") return ShapeOp::view;
  return ShapeOp::none;
}

/** One input, one output, each element from the same element of the input. */
bool is_unary_elementwise(const mx::array& a) {
  if (!a.has_primitive() || !a.siblings().empty() || a.inputs().size() != 1) return false;
  static const std::unordered_set<std::string_view> names{"FusedActivation", "Exp",  "Tanh",  "Sigmoid", "Erf", "Negative", "Abs",
                                                          "Square",          "Sqrt", "Rsqrt", "Log",     "Sin", "Cos",      "AsType"};
  return names.count(a.primitive().name()) > 0;
}

bool is_transpose(const mx::array& a) {
  return a.has_primitive() && a.siblings().empty() && std::string_view(a.primitive().name()) == "Transpose";
}

/**
 * The traced graph with chains of shape-only nodes made one Reshape (a Reshape of a Flatten of
 * an Unflatten of x: a Reshape of x), and shape-only nodes that keep their input's shape dropped:
 * the same values, each a node fewer per replay. Transposes of transposes compose the same way.
 * MLX's ops make many such chains (a matmul of a
 * 3-D activation flattens and unflattens it, take squeezes its gather). The arrays in between stay
 * where something else reads them.
 */
void simplify(Trace& t) {
  std::unordered_map<std::uintptr_t, mx::array> map;
  auto get = [&](const mx::array& a) -> mx::array {
    auto it = map.find(a.id());
    return it == map.end() ? a : it->second;
  };
  std::unordered_set<std::uintptr_t> placeholders;
  for (const auto& in : t.inputs) placeholders.insert(in.id());
  // How many tape nodes (and outputs) read each traced array.
  std::unordered_map<std::uintptr_t, int> readers;
  for (const auto& a : t.tape)
    for (const auto& in : a.inputs()) readers[in.id()]++;
  for (const auto& o : t.outputs) readers[o.id()] += 2;
  bool changed = false;
  for (const auto& a : t.tape) {
    std::vector<mx::array> ins;
    ins.reserve(a.inputs().size());
    bool moved = false;
    for (const auto& in : a.inputs()) {
      ins.push_back(get(in));
      moved = moved || ins.back().id() != in.id();
    }
    const auto op = shape_op(a);
    if (op != ShapeOp::none && ins[0].dtype() == a.dtype()) {
      const auto& x = ins[0];
      if (x.shape() == a.shape()) {
        map.insert_or_assign(a.id(), x);
        changed = true;
        continue;
      }
      // A reshape of an elementwise op (read only here) of a reshape: the op goes to the first
      // input's shape, and the reshapes meet (an activation between a matmul's unflatten and the
      // next matmul's flatten: neither is left).
      const auto& u0 = a.inputs()[0];
      if (!placeholders.count(x.id()) && is_unary_elementwise(x) && readers[u0.id()] == 1 && !placeholders.count(x.inputs()[0].id()) &&
          shape_op(x.inputs()[0]) != ShapeOp::none) {
        const auto& src = x.inputs()[0].inputs()[0];
        auto u = mx::array(src.shape(), x.dtype(), x.primitive_ptr(), {src});
        map.insert_or_assign(a.id(), src.shape() == a.shape() ? u : mx::reshape(u, a.shape(), a.primitive().stream()));
        changed = true;
        continue;
      }
      const auto inner = placeholders.count(x.id()) ? ShapeOp::none : shape_op(x);
      if (inner != ShapeOp::none && (inner == ShapeOp::copies || op == ShapeOp::copies) && x.inputs()[0].dtype() == a.dtype()) {
        map.insert_or_assign(a.id(), mx::reshape(x.inputs()[0], a.shape(), a.primitive().stream()));
        changed = true;
        continue;
      }
    }
    // A Transpose of a Transpose: one Transpose, or none where they cancel (a kernel's view of its
    // output in one layout, turned back by the model).
    if (is_transpose(a) && !placeholders.count(ins[0].id()) && is_transpose(ins[0])) {
      const auto& x = ins[0];
      const auto outer = static_cast<mx::Transpose&>(a.primitive()).state();
      const auto inner = static_cast<mx::Transpose&>(x.primitive()).state();
      std::vector<int> axes(outer.size());
      bool identity = true;
      for (size_t i = 0; i < outer.size(); i++) {
        axes[i] = inner[outer[i]];
        identity = identity && axes[i] == static_cast<int>(i);
      }
      const auto& src = x.inputs()[0];
      map.insert_or_assign(a.id(), identity ? src : mx::transpose(src, axes, a.primitive().stream()));
      changed = true;
      continue;
    }
    if (!moved) continue;  // the traced array serves as it is
    if (a.siblings().empty()) {
      map.insert_or_assign(a.id(), mx::array(a.shape(), a.dtype(), a.primitive_ptr(), std::move(ins)));
    } else {
      const auto traced = a.outputs();
      std::vector<mx::Shape> shapes;
      std::vector<mx::Dtype> dtypes;
      for (const auto& o : traced) {
        shapes.push_back(o.shape());
        dtypes.push_back(o.dtype());
      }
      auto made = mx::array::make_arrays(std::move(shapes), dtypes, a.primitive_ptr(), ins);
      for (size_t i = 0; i < traced.size(); i++) map.insert_or_assign(traced[i].id(), std::move(made[i]));
    }
  }
  if (!changed) return;
  for (auto& o : t.outputs) o = get(o);
  t.tape = tape_of(t.inputs, t.outputs);
}

std::vector<mx::array> replay(const Trace& t, const std::vector<mx::array>& real) {
  std::unordered_map<std::uintptr_t, mx::array> map;
  map.reserve(t.tape.size() * 2 + real.size());
  for (size_t i = 0; i < t.inputs.size(); i++) map.insert_or_assign(t.inputs[i].id(), real[i]);
  auto get = [&](const mx::array& a) -> mx::array {
    auto it = map.find(a.id());
    return it == map.end() ? a : it->second;  // a leaf: kept as it is
  };
  for (const auto& a : t.tape) {
    std::vector<mx::array> ins;
    ins.reserve(a.inputs().size());
    for (const auto& in : a.inputs()) ins.push_back(get(in));
    if (a.siblings().empty()) {
      map.insert_or_assign(a.id(), mx::array(a.shape(), a.dtype(), a.primitive_ptr(), std::move(ins)));
    } else {
      const auto traced = a.outputs();
      std::vector<mx::Shape> shapes;
      std::vector<mx::Dtype> dtypes;
      for (const auto& o : traced) {
        shapes.push_back(o.shape());
        dtypes.push_back(o.dtype());
      }
      auto made = mx::array::make_arrays(std::move(shapes), dtypes, a.primitive_ptr(), ins);
      for (size_t i = 0; i < traced.size(); i++) map.insert_or_assign(traced[i].id(), std::move(made[i]));
    }
  }
  std::vector<mx::array> out;
  out.reserve(t.outputs.size());
  for (const auto& o : t.outputs) out.push_back(get(o));
  return out;
}

/** One array of mlxc_capture_run_host's packed host buffers. */
struct HostSlot {
  mx::Dtype dtype = mx::float32;
  mx::Shape shape;
  size_t offset = 0;
  size_t nbytes = 0;
};

/**
 * The n slots of a descriptor (per array: its mlx_dtype, ndim, byte offset, then the ndim dims),
 * each checked to lie inside a buffer of `bytes` bytes.
 */
std::vector<HostSlot> slots_of(const int64_t* desc, size_t len, size_t n, size_t bytes, const char* what) {
  std::vector<HostSlot> slots(n);
  size_t at = 0;
  auto next = [&]() -> int64_t {
    if (!desc || at >= len) throw std::invalid_argument(std::string("mlxc_capture_run_host: the ") + what + " descriptor is short");
    return desc[at++];
  };
  for (size_t i = 0; i < n; i++) {
    auto& s = slots[i];
    int64_t dt = next();
    if (dt < 0 || dt > static_cast<int64_t>(MLX_COMPLEX64))
      throw std::invalid_argument(std::string("mlxc_capture_run_host: ") + what + " " + std::to_string(i) + " has no dtype");
    s.dtype = mlxc::dtype(static_cast<mlx_dtype>(dt));
    int64_t ndim = next();
    int64_t off = next();
    if (ndim < 0 || ndim > 64 || off < 0)
      throw std::invalid_argument(std::string("mlxc_capture_run_host: ") + what + " " + std::to_string(i) + " has a bad rank or offset");
    double count = 1;
    for (int64_t d = 0; d < ndim; d++) {
      int64_t v = next();
      if (v < 0 || v > INT32_MAX)
        throw std::invalid_argument(std::string("mlxc_capture_run_host: ") + what + " " + std::to_string(i) + " has a bad dimension");
      s.shape.push_back(static_cast<int>(v));
      count *= static_cast<double>(v);
    }
    double nb = count * static_cast<double>(mx::size_of(s.dtype));
    if (static_cast<double>(off) + nb > static_cast<double>(bytes))
      throw std::invalid_argument(std::string("mlxc_capture_run_host: ") + what + " " + std::to_string(i) + " lies outside its buffer");
    s.offset = static_cast<size_t>(off);
    s.nbytes = static_cast<size_t>(nb);
  }
  return slots;
}

std::string describe(mx::Dtype dt, const mx::Shape& shape) {
  std::ostringstream os;
  os << dt << " [";
  for (size_t i = 0; i < shape.size(); i++) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

}  // namespace

extern "C" {

int mlxc_capture(mlx_closure* res, const mlx_closure fun) {
  MLXC_TRY
  auto body = mlxc::closure(fun);
  auto traces = std::make_shared<std::unordered_map<Key, Trace, KeyHash>>();
  mlxc::set(*res, [body, traces](const std::vector<mx::array>& real) -> std::vector<mx::array> {
    auto key = key_of(real);
    auto it = traces->find(key);
    if (it == traces->end()) {
      Trace t;
      t.inputs.reserve(real.size());
      for (const auto& x : real) t.inputs.push_back(mx::array(x.shape(), x.dtype(), nullptr, {}));
      t.outputs = body(t.inputs);
      t.tape = tape_of(t.inputs, t.outputs);
      simplify(t);
      it = traces->emplace(std::move(key), std::move(t)).first;
    }
    return replay(it->second, real);
  });
  MLXC_CATCH(1)
  return 0;
}

int mlxc_capture_run_host(const mlx_closure fun, const void* in_data, size_t in_bytes, const int64_t* in_desc, size_t in_desc_len,
                          size_t n_in, void* out_data, size_t out_bytes, const int64_t* out_desc, size_t out_desc_len, size_t n_out,
                          const mlx_stream stream) {
  MLXC_TRY
  const auto& body = mlxc::closure(fun);
  auto s = mlxc::stream(stream);
  auto ins = slots_of(in_desc, in_desc_len, n_in, in_bytes, "input");
  auto outs = slots_of(out_desc, out_desc_len, n_out, out_bytes, "result");
  std::vector<mx::array> args;
  args.reserve(n_in);
  for (const auto& slot : ins)
    args.push_back(mlxc::new_data_on(static_cast<const char*>(in_data) + slot.offset, slot.shape, slot.dtype, s));
  auto res = body(args);
  args.clear();
  if (res.size() != n_out)
    throw std::invalid_argument("mlxc_capture_run_host: the function returned " + std::to_string(res.size()) +
                                " arrays, the caller expects " + std::to_string(n_out));
  for (size_t i = 0; i < n_out; i++) {
    if (res[i].dtype() != outs[i].dtype || res[i].shape() != outs[i].shape)
      throw std::invalid_argument("mlxc_capture_run_host: result " + std::to_string(i) + " is " + describe(res[i].dtype(), res[i].shape()) +
                                  ", the caller expects " + describe(outs[i].dtype, outs[i].shape));
  }
  mlxc::eval_within(res, 0, 0);
  for (size_t i = 0; i < n_out; i++) {
    mx::array a = res[i];
    if (!a.flags().row_contiguous) {
      a = mx::contiguous(a, false, s);
      mlxc::eval_within({a}, 0, 0);
    }
    a.wait();
    mlxc::read_into(static_cast<char*>(out_data) + outs[i].offset, outs[i].nbytes, a);
  }
  MLXC_CATCH(1)
  return 0;
}

}  // extern "C"
