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
#include <atomic>
#include <cstdlib>
#include <memory>
#include <optional>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <chrono>
#include <unordered_set>

#include "env.h"
#include "eval.h"
#include "inline_eval.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"
#include "mlx/scheduler.h"
#include "mlxc_private.h"
#include "static_tiny.h"

namespace mx = mlx::core;

namespace {

struct Program;

struct Trace {
  std::vector<mx::array> inputs;   // the placeholders
  std::vector<mx::array> tape;     // every array between them and the outputs, inputs before users
  std::vector<mx::array> outputs;  // as the function returned them
  /** The tape as a static program (program_of), built at the first host run; null until then. */
  std::shared_ptr<Program> program;
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

// The static executor.
//
// A host run (mlxc_capture_run_host) does not need the lazy graph a replay builds: the shapes are
// the trace's, and the results are evaluated at once, on the calling thread. Replayed, each tape
// node becomes an array holding its inputs, and mx::eval then walks that graph (a DFS with a hash
// map of use counts, a breadth-first pass to order it, events, a keep-alive task and a hash set of
// buffers per node) to find the order the tape already has. A Program is the tape flattened once:
// per step, the primitive, where each input comes from (a run's input, a constant the function
// closed over, or an earlier step's output) and whether that read is the value's last, and the
// outputs' shapes and dtypes. A run executes the steps in order, calling each primitive's eval_cpu
// on the calling thread (the InlineEval scope runs what the primitive dispatches at once), and
// drops each value at its last read: moved into the step that reads it last, it is that step's
// only reference, so a kernel can donate its buffer to its output, as it does under mx::eval.
//
// What a Program does not take, the replay and mx::eval still run: a trace on a GPU stream or on
// more than one stream, a primitive that needs MLX's own evaluation (Compiled, whose CPU kernel is
// built from its tape; distributed and I/O primitives), a run that cannot be inline (an
// asynchronous evaluation of the stream in flight), and runs under the debug aids or an
// address-space limit (eval_within's checks). MLXC_STATIC_EXEC=0 turns the executor off.

/** Where a step's input comes from. */
struct Ref {
  int32_t slot = 0;   // >= 0: a value (the run's inputs, then the steps' outputs); < 0: constant -slot - 1
  bool last = false;  // the value's last read: moved out of its slot
};

struct Step {
  std::shared_ptr<mx::Primitive> prim;
  std::vector<Ref> ins;
  std::vector<mx::Shape> shapes;  // of its outputs, whose values take the next slots
  std::vector<mx::Dtype> dtypes;
  std::vector<char> unread;  // per output: nothing reads it (a sibling the function ignores)
  mlxc::TinyStep tiny;       // computed by the executor itself (static_tiny.h), op none: by eval_cpu
};

struct Program {
  bool usable = false;
  std::optional<mx::Stream> stream;
  std::vector<mx::array> constants;
  std::vector<Step> steps;
  std::vector<Ref> results;
  size_t n_slots = 0;
};

std::atomic<uint64_t> static_runs{0};

bool static_exec_on() {
  return !mlxc::env_off("MLXC_STATIC_EXEC");  // read on each run: a test switches it
}

/**
 * Primitives the executor leaves to mx::eval: MLX's compiled kernels (named "Compiled" and their
 * tape's primitives), the distributed ones ("Sum AllReduce", "Send", ...) and Load.
 */
bool runs_alone(const mx::Primitive& p) {
  const std::string_view n = p.name();
  if (n.substr(0, 8) == "Compiled" || n == "Load" || n == "Send" || n == "Recv") return false;
  for (std::string_view d : {"AllReduce", "AllGather", "ReduceScatter", "AllToAll"})
    if (n.find(d) != std::string_view::npos) return false;
  return true;
}

/**
 * What the GPU executor needs of MLX's CUDA backend, found in libmlx at run time (the CPU build,
 * which this library is built against, has none of it): the stream's command encoder, its commit,
 * and making the device's context current on the running thread. All null where libmlx is not the
 * CUDA build, or MLXC_GPU_EXEC=0.
 */
struct CudaHooks {
  using EncoderFn = void* (*)(mx::Stream);
  using MemberFn = void (*)(void*);
  using NeedsCommitFn = bool (*)(void*);
  using DeviceFn = void* (*)(mx::Device);
  EncoderFn encoder = nullptr;
  NeedsCommitFn needs_commit = nullptr;
  MemberFn commit = nullptr;
  DeviceFn device = nullptr;
  MemberFn make_current = nullptr;
  bool ok() const { return encoder && needs_commit && commit && device && make_current; }
};

const CudaHooks& cuda_hooks() {
  static const CudaHooks h = [] {
    CudaHooks c;
    if (mlxc::env_off("MLXC_GPU_EXEC")) return c;
    c.encoder = reinterpret_cast<CudaHooks::EncoderFn>(mlxc::libmlx_symbol("_ZN3mlx4core2cu19get_command_encoderENS0_6StreamE"));
    c.needs_commit = reinterpret_cast<CudaHooks::NeedsCommitFn>(mlxc::libmlx_symbol("_ZN3mlx4core2cu14CommandEncoder12needs_commitEv"));
    c.commit = reinterpret_cast<CudaHooks::MemberFn>(mlxc::libmlx_symbol("_ZN3mlx4core2cu14CommandEncoder6commitEv"));
    c.device = reinterpret_cast<CudaHooks::DeviceFn>(mlxc::libmlx_symbol("_ZN3mlx4core2cu6deviceENS0_6DeviceE"));
    c.make_current = reinterpret_cast<CudaHooks::MemberFn>(mlxc::libmlx_symbol("_ZN3mlx4core2cu6Device12make_currentEv"));
    return c;
  }();
  return h;
}

/** Whether the executor runs programs on GPU stream `s`: MLX's CUDA build (cuda_hooks). */
bool gpu_exec_available(const mx::Stream& s) { return s.device == mx::Device::gpu && cuda_hooks().ok(); }

/**
 * The trace as a Program (not usable where the executor cannot take it). Constants not computed
 * yet are computed here, once.
 */
std::shared_ptr<Program> program_of(const Trace& t) {
  auto p = std::make_shared<Program>();
  // MLXC_STATIC_TINY=0: every step through its primitive's eval_cpu (read when a program is made).
  const bool tiny = !mlxc::env_off("MLXC_STATIC_TINY");
  std::unordered_map<std::uintptr_t, int32_t> slot;
  std::unordered_map<std::uintptr_t, int32_t> constant;
  int32_t next = 0;
  for (const auto& in : t.inputs) slot.emplace(in.id(), next++);
  auto ref_of = [&](const mx::array& a) -> Ref {
    if (auto it = slot.find(a.id()); it != slot.end()) return {it->second};
    auto [it, fresh] = constant.emplace(a.id(), static_cast<int32_t>(p->constants.size()));
    if (fresh) p->constants.push_back(a);
    return {-it->second - 1};
  };
  for (const auto& a : t.tape) {
    if (!a.has_primitive()) return p;
    auto& prim = a.primitive();
    const auto s = prim.stream();
    if ((s.device != mx::Device::cpu && !gpu_exec_available(s)) || (p->stream && *p->stream != s) || !runs_alone(prim)) return p;
    p->stream = s;
    Step st;
    st.prim = a.primitive_ptr();
    st.ins.reserve(a.inputs().size());
    for (const auto& in : a.inputs()) st.ins.push_back(ref_of(in));
    for (const auto& o : a.outputs()) {
      st.shapes.push_back(o.shape());
      st.dtypes.push_back(o.dtype());
      slot.emplace(o.id(), next++);
    }
    if (tiny && s.device == mx::Device::cpu) st.tiny = mlxc::tiny_step(prim, a.inputs(), st.shapes, st.dtypes);
    p->steps.push_back(std::move(st));
  }
  if (!p->stream) return p;  // nothing to compute: the replay serves
  for (const auto& o : t.outputs) p->results.push_back(ref_of(o));
  // Last reads: walking back, the first read of a value met is its last (a result's is after
  // every step). A step that reads a value twice moves only its later read.
  std::vector<char> read(next, 0);
  for (const auto& r : p->results)
    if (r.slot >= 0) read[r.slot] = 1;
  for (auto st = p->steps.rbegin(); st != p->steps.rend(); ++st) {
    for (auto r = st->ins.rbegin(); r != st->ins.rend(); ++r) {
      if (r->slot >= 0 && !read[r->slot]) {
        read[r->slot] = 1;
        r->last = true;
      }
    }
  }
  // Outputs nothing reads (siblings the function ignores) are dropped as soon as they are made,
  // as mx::eval drops them with their node.
  int32_t at = static_cast<int32_t>(t.inputs.size());
  for (auto& st : p->steps)
    for (size_t i = 0; i < st.shapes.size(); i++) st.unread.push_back(!read[at++]);
  p->n_slots = static_cast<size_t>(next);
  std::vector<mx::array> lazy;
  for (const auto& c : p->constants)
    if (c.status() == mx::array::Status::unscheduled) lazy.push_back(c);
  if (!lazy.empty()) mlxc::eval_within(lazy, 0, 0);
  for (auto& c : p->constants) c.wait();
  p->usable = true;
  return p;
}

/** Clears the encoder's temporaries when a run ends (mx::eval's keep-alive task drops them). */
struct DropTemporaries {
  mx::cpu::CommandEncoder& encoder;
  ~DropTemporaries() { encoder.temporaries().clear(); }
};

/**
 * The executor's loop, for both devices: `args` (moved out) become the first values; per step, its
 * inputs gathered (constants, values, each moved into the step at its last read: the step's only
 * reference, so a kernel may donate its buffer to its output, as under mx::eval), its outputs
 * made (they carry the primitive, which a kernel may ask for its stream, and no inputs: nothing to
 * detach from but the primitive), `eval(st, ins, outs)` run, and the outputs detached, marked
 * available and kept (one nothing reads dropped at once, as mx::eval drops it with its node).
 * MLXC_PRIM_TIMES=static times each step's eval (its name and `tag`) and the whole run (row
 * `run_row`). The results, as the values hold them.
 */
template <typename Eval>
std::vector<mx::array> run_steps(const Program& p, std::vector<mx::array>& args, const char* tag, const char* run_row, Eval&& eval) {
  std::vector<mx::array> slots;
  slots.reserve(p.n_slots);
  for (auto& a : args) slots.push_back(std::move(a));
  std::vector<mx::array> ins;
  std::vector<mx::array> outs;
  const bool timed = mlxc::prim_times_static();
  std::vector<std::pair<std::string, double>> times;
  const auto run_start = std::chrono::steady_clock::now();
  for (const auto& st : p.steps) {
    for (const auto& r : st.ins) {
      if (r.slot < 0)
        ins.push_back(p.constants[-r.slot - 1]);
      else if (r.last)
        ins.push_back(std::move(slots[r.slot]));
      else
        ins.push_back(slots[r.slot]);
    }
    for (size_t i = 0; i < st.shapes.size(); i++) outs.emplace_back(st.shapes[i], st.dtypes[i], st.prim, std::vector<mx::array>{});
    const auto t0 = timed ? std::chrono::steady_clock::now() : run_start;
    eval(st, ins, outs);
    if (timed)
      times.emplace_back(std::string(st.prim->name()) + (st.tiny.op != mlxc::TinyOp::none ? " (executor)" : tag) +
                             (mlxc::prim_times_mode() == 5 ? mlxc::shapes_key(outs[0], ins) : std::string()),
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    ins.clear();
    for (size_t i = 0; i < outs.size(); i++) {
      auto& o = outs[i];
      o.detach();
      o.set_status(mx::array::Status::available);
      slots.push_back(std::move(o));
      if (st.unread[i]) {
        mx::array dropped = std::move(slots.back());
      }
    }
    outs.clear();
  }
  std::vector<mx::array> res;
  res.reserve(p.results.size());
  for (const auto& r : p.results) res.push_back(r.slot < 0 ? p.constants[-r.slot - 1] : slots[r.slot]);
  static_runs.fetch_add(1, std::memory_order_relaxed);
  if (timed) {
    const double whole = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
    double steps = 0;
    for (const auto& t : times) steps += t.second;
    times.emplace_back(run_row, whole);
    times.emplace_back(std::string(run_row) + ": between steps", whole - steps);
    mlxc::record_prim_times(times);
  }
  return res;
}

/**
 * Runs `p` over `args` (its values are moved out) inside `scope` (active, on p's stream): each
 * step's kernel on this thread (the scope runs what it dispatches at once), or the executor's own
 * tiny step. The results, computed.
 */
std::vector<mx::array> execute(const Program& p, std::vector<mx::array>& args, mlxc::InlineEval& scope) {
  DropTemporaries drop{mx::cpu::get_command_encoder(*p.stream)};
  return run_steps(p, args, "", "(static run)", [&](const Step& st, std::vector<mx::array>& ins, std::vector<mx::array>& outs) {
    if (st.tiny.op != mlxc::TinyOp::none)
      mlxc::tiny_eval(st.tiny, ins, outs);
    else
      st.prim->eval_cpu(ins, outs);
    // What the primitive dispatched has run; a task's error was kept by the scope.
    scope.rethrow();
    drop.encoder.temporaries().clear();
  });
}

/**
 * Runs `p` (on a GPU stream, gpu_exec_available) over `args` (moved out): what mx::eval does for
 * each array of the graph, without building that graph and walking it. Each step's eval_gpu
 * records its kernels in the stream's command encoder (a CUDA graph, committed whenever the encoder
 * asks, as gpu::eval does), and every buffer a step read or wrote is held until the run's last
 * commit has finished on the device (gpu::eval hands them to the encoder for that): a buffer freed
 * earlier could be handed to a later kernel of the same graph while an earlier one still reads it.
 * The results are computed when this returns.
 */
std::vector<mx::array> execute_gpu(const Program& p, std::vector<mx::array>& args) {
  const auto& cu = cuda_hooks();
  const mx::Stream s = *p.stream;
  cu.make_current(cu.device(s.device));
  void* encoder = cu.encoder(s);
  std::vector<std::shared_ptr<mx::array::Data>> held;
  std::vector<mx::array> res;
  try {
    res = run_steps(p, args, " (encode)", "(static run, GPU: encoding)",
                    [&](const Step& st, std::vector<mx::array>& ins, std::vector<mx::array>& outs) {
                      st.prim->eval_gpu(ins, outs);
                      // Taken after the kernel: an input whose buffer went to an output is the output's.
                      for (const auto* xs : {&ins, &outs})
                        for (const auto& x : *xs)
                          if (x.data_shared_ptr()) held.push_back(x.data_shared_ptr());
                      if (cu.needs_commit(encoder)) cu.commit(encoder);
                    });
    // Commits what is left and waits for the device: the results are computed, the buffers free.
    mx::synchronize(s);
  } catch (...) {
    // What was recorded still runs (a kernel may read a held buffer): finish it before the buffers go.
    try {
      mx::synchronize(s);
    } catch (...) {}
    throw;
  }
  return res;
}

/** mlxc_capture's closure: the function, and its traces by input signature. */
struct Captured {
  mlxc::ClosureFn body;
  std::shared_ptr<std::unordered_map<Key, Trace, KeyHash>> traces;

  /** The trace for `real`'s signature, traced now if it is new. */
  Trace& trace_for(const std::vector<mx::array>& real) const {
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
    return it->second;
  }

  std::vector<mx::array> operator()(const std::vector<mx::array>& real) const { return replay(trace_for(real), real); }
};

/** One array of mlxc_capture_run_host's packed host buffers. */
struct HostSlot {
  mx::Dtype dtype = mx::float32;
  mx::Shape shape;
  size_t offset = 0;
  size_t nbytes = 0;
  /** Given or returned as an array (offset -1 in the descriptor), not through the host buffer. */
  bool array = false;
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
    s.array = off == -1;
    if (s.array) off = 0;
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
    s.nbytes = s.array ? 0 : static_cast<size_t>(nb);
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

/**
 * One signature's host runs of a closure (mlxc_capture_run_host, mlxc_host_program_*): the inputs
 * copied in from a host buffer, the closure applied (a captured one's trace executed as its static
 * program where it can be), the results checked against their slots, evaluated and copied out.
 */
struct HostRun {
  const mlxc::ClosureFn& fun;  // the closure handle's function: its caller keeps it alive
  const Captured* captured;    // fun itself, when it is mlxc_capture's
  mx::Stream stream;
  std::vector<HostSlot> ins;
  std::vector<HostSlot> outs;
  const char* who;
  size_t in_extent = 0;  // the bytes the host buffers must hold
  size_t out_extent = 0;
  /** A program that runs again (mlxc_host_program_*): the trace and the limit checks kept. */
  bool keep = false;
  Trace* trace = nullptr;
  /** The closure's traces, kept while a run on the worker thread reads `trace` (the closure may be freed first). */
  std::shared_ptr<void> traces;
  bool limited;  // an address-space limit (eval_within's check): the executor stays out

  HostRun(const mlxc::ClosureFn& f, mx::Stream s, std::vector<HostSlot> in, std::vector<HostSlot> out, const char* name)
      : fun(f),
        captured(f.target<Captured>()),
        stream(s),
        ins(std::move(in)),
        outs(std::move(out)),
        who(name),
        limited(mlxc::address_space_limited()) {
    for (const auto& x : ins) in_extent = std::max(in_extent, x.offset + x.nbytes);
    for (const auto& x : outs) out_extent = std::max(out_extent, x.offset + x.nbytes);
    count_arrays();
  }

  void check_results(const std::vector<mx::array>& res) const {
    if (res.size() != outs.size())
      throw std::invalid_argument(std::string(who) + ": the function returned " + std::to_string(res.size()) +
                                  " arrays, the caller expects " + std::to_string(outs.size()));
    for (size_t i = 0; i < outs.size(); i++) {
      if (res[i].dtype() != outs[i].dtype || res[i].shape() != outs[i].shape)
        throw std::invalid_argument(std::string(who) + ": result " + std::to_string(i) + " is " + describe(res[i].dtype(), res[i].shape()) +
                                    ", the caller expects " + describe(outs[i].dtype, outs[i].shape));
    }
  }

  /** The slots given or returned as arrays (mlxc_host_program_run_arrays). */
  size_t array_ins = 0;
  size_t array_outs = 0;

  void count_arrays() {
    for (const auto& x : ins) array_ins += x.array;
    for (const auto& x : outs) array_outs += x.array;
  }

  /**
   * One run. `arrays` (array_ins of them, in slot order) are the array inputs, each moved out of
   * its handle where `consume` says so (the run then holds its only reference: a kernel may write
   * its output into the input's buffer, as a KV cache updated in place); the array results are
   * appended to `results`.
   */
  void run(const void* in_data, void* out_data, std::vector<mx::array*> arrays = {}, const uint8_t* consume = nullptr,
           std::vector<mx::array>* results = nullptr) {
    finish(prepare(in_data, arrays, consume, results != nullptr), out_data, results);
  }

  /**
   * A run's arguments: the array inputs checked (before any is consumed: a refused run leaves them
   * all as they were) and taken, the host inputs copied in. Runs on the caller's thread.
   */
  std::vector<mx::array> prepare(const void* in_data, const std::vector<mx::array*>& arrays, const uint8_t* consume, bool room) {
    if (arrays.size() != array_ins || (array_outs && !room))
      throw std::invalid_argument(std::string(who) + ": the program takes " + std::to_string(array_ins) + " arrays and returns " +
                                  std::to_string(array_outs) + ", the call gives " + std::to_string(arrays.size()) +
                                  (array_outs && !room ? " and no room for the arrays returned" : ""));
    for (size_t i = 0, k = 0; i < ins.size(); i++) {
      if (!ins[i].array) continue;
      const mx::array& a = *arrays[k++];
      if (a.dtype() != ins[i].dtype || a.shape() != ins[i].shape)
        throw std::invalid_argument(std::string(who) + ": input " + std::to_string(i) + " is " + describe(a.dtype(), a.shape()) +
                                    ", the program takes " + describe(ins[i].dtype, ins[i].shape));
    }
    std::vector<mx::array> args;
    args.reserve(ins.size());
    for (size_t i = 0, k = 0; i < ins.size(); i++) {
      const auto& slot = ins[i];
      if (!slot.array) {
        args.push_back(mlxc::new_data_on(static_cast<const char*>(in_data) + slot.offset, slot.shape, slot.dtype, stream));
        continue;
      }
      mx::array* a = arrays[k];
      if (a->id() == 0)
        throw std::invalid_argument(std::string(who) + ": input " + std::to_string(i) + " was consumed by an earlier input");
      args.push_back(consume && consume[k] ? std::move(*a) : *a);
      k++;
    }
    return args;
  }

  /** Finds (or traces) the captured closure's trace for the program's input slots, and its static program. */
  void find_trace() {
    if (!captured || !keep || trace || mlxc::graph_stats_on() || (mlxc::prim_times_mode() && !mlxc::prim_times_static())) return;
    std::vector<mx::array> placeholders;
    placeholders.reserve(ins.size());
    for (const auto& x : ins) placeholders.push_back(mx::array(x.shape, x.dtype, nullptr, {}));
    Trace& t = captured->trace_for(placeholders);
    check_results(t.outputs);
    trace = &t;
    traces = captured->traces;
    if (!t.program) t.program = program_of(t);
  }

  /**
   * Whether a run may go to the stream's worker thread: the trace is known (no step of the run
   * calls back into JavaScript) and its static program runs on the program's stream.
   */
  bool runs_off_thread() const {
    // The worker evaluates `stream`: the trace's primitives must be on it, and it must be one any
    // thread may evaluate (mlxc_stream_new_any_thread).
    return captured && keep && trace && trace->program && trace->program->usable && trace->program->stream == stream &&
           mlxc::is_any_thread(stream);
  }

  /** Computes the run over `args` and writes its results (host ones to out_data, array ones to `results`). */
  void finish(std::vector<mx::array> args, void* out_data, std::vector<mx::array>* results) {
    // The static executor reads its inputs' data: a lazy array is computed first, one in flight
    // waited for.
    for (auto& x : args) {
      if (x.status() == mx::array::Status::unscheduled) mlxc::eval_within({x}, 0, 0);
      x.wait();
    }
    std::vector<mx::array> res;
    bool ran = false;
    if (captured && static_exec_on() && !mlxc::graph_stats_on() && (!mlxc::prim_times_mode() || mlxc::prim_times_static()) && !limited) {
      Trace& t = trace ? *trace : captured->trace_for(args);
      if (keep && !trace) {
        trace = &t;
        traces = captured->traces;
      }
      check_results(t.outputs);
      if (!t.program) t.program = program_of(t);
      const Program& p = *t.program;
      if (p.usable && p.stream->device == mx::Device::gpu) {
        res = execute_gpu(p, args);
        ran = true;
      } else if (p.usable) {
        mlxc::InlineEval scope(*p.stream);
        if (scope.active()) {
          res = execute(p, args, scope);
          mx::scheduler::check_error(*p.stream);
          ran = true;
        }
      }
      if (!ran) {
        res = replay(t, args);
        args.clear();
        mlxc::eval_within(res, 0, 0);
      }
    } else {
      res = fun(args);
      args.clear();
      check_results(res);
      mlxc::eval_within(res, 0, 0);
    }
    for (size_t i = 0; i < outs.size(); i++) {
      if (outs[i].array) {
        results->push_back(std::move(res[i]));
        continue;
      }
      mx::array a = res[i];
      if (!a.flags().row_contiguous) {
        a = mx::contiguous(a, false, mlxc::read_stream(a, stream));
        mlxc::eval_within({a}, 0, 0);
      }
      a.wait();
      mlxc::read_into(static_cast<char*>(out_data) + outs[i].offset, outs[i].nbytes, a);
    }
  }
};

/**
 * The checks mlxc_host_program_run_arrays and _run_async share: the buffers reach the program's
 * extents, there is room for its array results, and every array handle given holds an array (one
 * an earlier run consumed holds none: a moved-from array has no descriptor). The arrays, in order.
 */
std::vector<mx::array*> array_call(const HostRun& h, const std::string& who, size_t in_bytes, size_t out_bytes, const uintptr_t* arrays,
                                   size_t n_arrays, const void* out_arrays, size_t n_out_arrays) {
  if (in_bytes < h.in_extent || out_bytes < h.out_extent)
    throw std::invalid_argument(who + ": the buffers hold " + std::to_string(in_bytes) + " and " + std::to_string(out_bytes) +
                                " bytes, the program's inputs and results take " + std::to_string(h.in_extent) + " and " +
                                std::to_string(h.out_extent));
  if (n_out_arrays != h.array_outs || (n_out_arrays && !out_arrays))
    throw std::invalid_argument(who + ": the program returns " + std::to_string(h.array_outs) + " arrays, room for " +
                                std::to_string(out_arrays ? n_out_arrays : 0) + " given");
  if (n_arrays && !arrays) throw std::invalid_argument(who + ": null array list");
  std::vector<mx::array*> ins;
  ins.reserve(n_arrays);
  for (size_t i = 0; i < n_arrays; i++) {
    if (!arrays[i]) throw std::invalid_argument(who + ": empty array handle at " + std::to_string(i));
    auto* a = reinterpret_cast<mx::array*>(arrays[i]);
    if (a->id() == 0) throw std::invalid_argument(who + ": array " + std::to_string(i) + " was consumed by an earlier run");
    ins.push_back(a);
  }
  return ins;
}

/** A run's array results as new handles' ctx addresses (the caller frees them). */
void hand_out(std::vector<mx::array>& results, void* out_arrays) {
  auto* outs = static_cast<uintptr_t*>(out_arrays);
  for (size_t i = 0; i < results.size(); i++) outs[i] = reinterpret_cast<uintptr_t>(new mx::array(std::move(results[i])));
}

}  // namespace

extern "C" {

int mlxc_capture(mlx_closure* res, const mlx_closure fun) {
  MLXC_TRY
  mlxc::set(*res, Captured{mlxc::closure(fun), std::make_shared<std::unordered_map<Key, Trace, KeyHash>>()});
  MLXC_CATCH(1)
  return 0;
}

int mlxc_capture_run_host(const mlx_closure fun, const void* in_data, size_t in_bytes, const int64_t* in_desc, size_t in_desc_len,
                          size_t n_in, void* out_data, size_t out_bytes, const int64_t* out_desc, size_t out_desc_len, size_t n_out,
                          const mlx_stream stream) {
  MLXC_TRY
  HostRun h(mlxc::closure(fun), mlxc::stream(stream), slots_of(in_desc, in_desc_len, n_in, in_bytes, "input"),
            slots_of(out_desc, out_desc_len, n_out, out_bytes, "result"), "mlxc_capture_run_host");
  h.run(in_data, out_data);
  MLXC_CATCH(1)
  return 0;
}

int mlxc_host_program_new(void** res, const mlx_closure fun, const int64_t* in_desc, size_t in_desc_len, size_t n_in,
                          const int64_t* out_desc, size_t out_desc_len, size_t n_out, const mlx_stream stream) {
  MLXC_TRY
  auto ins = slots_of(in_desc, in_desc_len, n_in, SIZE_MAX, "input");
  auto outs = slots_of(out_desc, out_desc_len, n_out, SIZE_MAX, "result");
  auto h = std::make_unique<HostRun>(mlxc::closure(fun), mlxc::stream(stream), std::move(ins), std::move(outs), "mlxc_host_program_run");
  h->keep = true;
  *res = h.release();
  MLXC_CATCH(1)
  return 0;
}

int mlxc_host_program_run(void* program, const void* in_data, size_t in_bytes, void* out_data, size_t out_bytes) {
  MLXC_TRY
  if (!program) throw std::invalid_argument("mlxc_host_program_run: no program");
  auto& h = *static_cast<HostRun*>(program);
  if (in_bytes < h.in_extent || out_bytes < h.out_extent)
    throw std::invalid_argument("mlxc_host_program_run: the buffers hold " + std::to_string(in_bytes) + " and " +
                                std::to_string(out_bytes) + " bytes, the program's inputs and results take " + std::to_string(h.in_extent) +
                                " and " + std::to_string(h.out_extent));
  h.run(in_data, out_data);
  MLXC_CATCH(1)
  return 0;
}

int mlxc_host_program_run_arrays(void* program, const void* in_data, size_t in_bytes, const uintptr_t* arrays, size_t n_arrays,
                                 const void* consume, void* out_data, size_t out_bytes, void* out_arrays, size_t n_out_arrays) {
  MLXC_TRY
  if (!program) throw std::invalid_argument("mlxc_host_program_run_arrays: no program");
  auto& h = *static_cast<HostRun*>(program);
  auto ins = array_call(h, "mlxc_host_program_run_arrays", in_bytes, out_bytes, arrays, n_arrays, out_arrays, n_out_arrays);
  std::vector<mx::array> results;
  results.reserve(h.array_outs);
  h.run(in_data, out_data, std::move(ins), static_cast<const uint8_t*>(consume), &results);
  hand_out(results, out_arrays);
  MLXC_CATCH(1)
  return 0;
}

int mlxc_host_program_run_async(void* program, const void* in_data, size_t in_bytes, const uintptr_t* arrays, size_t n_arrays,
                                const void* consume, void* out_data, size_t out_bytes, void* out_arrays, size_t n_out_arrays, uint64_t id,
                                int* queued, void* elapsed) {
  MLXC_TRY
  *queued = 0;
  if (!program) throw std::invalid_argument("mlxc_host_program_run_async: no program");
  auto& h = *static_cast<HostRun*>(program);
  // The trace and its static program are found or made here, on the caller's thread (a new
  // signature's trace calls the function): the worker thread only executes.
  h.find_trace();
  if (!h.runs_off_thread() || !static_exec_on() || h.limited) return 0;
  auto ins = array_call(h, "mlxc_host_program_run_async", in_bytes, out_bytes, arrays, n_arrays, out_arrays, n_out_arrays);
  auto args = std::make_shared<std::vector<mx::array>>(h.prepare(in_data, ins, static_cast<const uint8_t*>(consume), true));
  HostRun* run = &h;
  mlxc::run_on_worker(
      h.stream,
      [run, args, out_data, out_arrays, elapsed, keep = h.traces] {
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<mx::array> results;
        results.reserve(run->array_outs);
        run->finish(std::move(*args), out_data, &results);
        if (elapsed)
          *static_cast<double*>(elapsed) = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        hand_out(results, out_arrays);
      },
      id);
  *queued = 1;
  MLXC_CATCH(1)
  return 0;
}

int mlxc_host_program_free(void* program) {
  delete static_cast<HostRun*>(program);
  return 0;
}

int mlxc_capture_static_runs(uint64_t* res) {
  *res = static_runs.load(std::memory_order_relaxed);
  return 0;
}

}  // extern "C"
