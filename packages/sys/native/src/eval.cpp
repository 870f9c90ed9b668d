// Evaluation within a memory budget (spec/extensions/eval.ts): what a graph would allocate, the
// refusal when that is over a limit, and the evaluation itself, whose CPU stream work runs on the
// calling thread (inline_eval.cpp). The evaluations on this library's own threads are in
// eval_async.cpp, the debug aids in eval_stats.cpp.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "eval.h"
#include "mlx/memory.h"
#include "inline_eval.h"
#include "mlxc_private.h"
#include "mlx/primitives.h"
#include "mlx/scheduler.h"

namespace mx = mlx::core;
using mlxc::array;

namespace {

/** Bytes of an array from its shape, in double: MLX's size() is a size_t product that can wrap. */
double bytes_of(const array& a) {
  double n = static_cast<double>(a.itemsize());
  for (auto d : a.shape()) n *= static_cast<double>(d);
  return n;
}

std::string describe(const array& a, double bytes) {
  std::ostringstream os;
  os << "an array of shape [";
  for (size_t i = 0; i < a.shape().size(); i++) os << (i ? ", " : "") << a.shape()[i];
  os << "] " << a.dtype() << " (" << std::llround(bytes) << " bytes";
  if (a.has_primitive()) os << ", made by " << a.primitive().name();
  os << ")";
  return os.str();
}

size_t clamp(double v) { return v >= 1.8e19 ? static_cast<size_t>(-1) : static_cast<size_t>(v); }

/** The process's address-space limit (RLIMIT_AS, `ulimit -v`) in bytes; 0 when there is none. */
double address_space_limit() {
  struct rlimit rl{};
  if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 0;
  return static_cast<double>(rl.rlim_cur);
}

/** The process's mapped address space (VmSize) in bytes; 0 when unknown. */
double address_space_used() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long pages = 0;
  int n = std::fscanf(f, "%lu", &pages);
  std::fclose(f);
  return n == 1 ? static_cast<double>(pages) * static_cast<double>(sysconf(_SC_PAGESIZE)) : 0;
}

/**
 * Room kept free under an address-space limit for everything that is not an array: V8's heap
 * grows into it, and V8 cannot survive a failed reservation of its own (it aborts the process).
 */
constexpr double kAddressReserve = 512.0 * (1 << 20);

/**
 * The most bytes held at once when the arrays `outputs` need are computed in a topological order
 * (depth first), each freed after its last reader; `outputs` themselves are kept. Arrays computed
 * already, or that are data, take nothing new. `fallback` where the graph is too large to walk.
 */
double peak_bytes(const std::vector<array>& outputs, double fallback) {
  struct Node {
    array a;
    bool expanded = false;
  };
  std::unordered_map<std::uintptr_t, int> readers;  // of each array to compute, by id
  std::unordered_set<std::uintptr_t> done;          // primitives (by their first output's id) placed in the order
  std::vector<array> order;                         // one array per primitive, inputs before readers
  std::vector<Node> stack;
  auto computes = [](const array& x) { return x.status() == array::Status::unscheduled && x.has_primitive(); };
  for (const auto& o : outputs)
    if (computes(o)) stack.push_back({o});
  size_t steps = 0;
  while (!stack.empty()) {
    if (++steps > 50'000'000) return fallback;
    auto& top = stack.back();
    const auto key = top.a.outputs().empty() ? top.a.id() : top.a.outputs()[0].id();
    if (done.count(key)) {
      stack.pop_back();
      continue;
    }
    if (!top.expanded) {
      top.expanded = true;
      const auto ins = top.a.inputs();
      for (const auto& in : ins)
        if (computes(in)) readers[in.id()]++;
      // Pushed last to first, so that the inputs are computed first to last (an op's first input
      // is mostly the deep one: the chain), as MLX's own depth-first order does.
      for (auto in = ins.rbegin(); in != ins.rend(); ++in) {
        if (!computes(*in)) continue;
        const auto k = in->outputs().empty() ? in->id() : in->outputs()[0].id();
        if (!done.count(k)) stack.push_back({*in});
      }
      continue;
    }
    done.insert(key);
    order.push_back(std::move(top.a));
    stack.pop_back();
  }
  std::unordered_set<std::uintptr_t> kept;
  for (const auto& o : outputs) kept.insert(o.id());
  double live = 0;
  double peak = 0;
  for (const auto& a : order) {
    const auto outs = a.outputs().empty() ? std::vector<array>{a} : a.outputs();
    for (const auto& o : outs) live += bytes_of(o);
    peak = std::max(peak, live);
    // Outputs nothing reads (an ignored sibling) go at once.
    for (const auto& o : outs)
      if (!kept.count(o.id()) && !readers.count(o.id())) live -= bytes_of(o);
    for (const auto& in : a.inputs()) {
      auto it = readers.find(in.id());
      if (it == readers.end()) continue;
      if (--it->second == 0 && !kept.count(in.id())) live -= bytes_of(in);
    }
  }
  return peak;
}

}  // namespace

namespace mlxc {

GraphBytes graph_bytes(const std::vector<array>& outputs, size_t max_nodes, std::optional<mx::Stream> on) {
  GraphBytes g;
  std::unordered_set<std::uintptr_t> seen;
  std::vector<array> stack(outputs.begin(), outputs.end());
  while (!stack.empty()) {
    array a = std::move(stack.back());
    stack.pop_back();
    if (!seen.insert(a.id()).second) continue;
    // Computed already (or data that was never a computation): nothing new to allocate.
    if (a.status() != array::Status::unscheduled || !a.has_primitive()) continue;
    if (max_nodes && g.nodes >= max_nodes) {
      g.truncated = true;
      return g;
    }
    g.nodes++;
    if (on && a.primitive().stream() != *on) g.on_stream = false;
    auto count = [&](const array& x) {
      double b = bytes_of(x);
      g.total += b;
      if (b > g.largest) {
        g.largest = b;
        g.largest_array = x;
      }
    };
    count(a);
    for (const auto& s : a.siblings()) {
      if (seen.insert(s.id()).second) count(s);
    }
    for (const auto& in : a.inputs()) stack.push_back(in);
  }
  return g;
}

void check_budget(const std::vector<array>& outputs, const GraphBytes& g, size_t max_array_bytes, size_t max_total_bytes) {
  if (max_array_bytes && g.largest > static_cast<double>(max_array_bytes)) {
    throw std::runtime_error("[memory budget] evaluating would allocate " + describe(*g.largest_array, g.largest) + ", over the limit of " +
                             std::to_string(max_array_bytes) + " bytes per tensor");
  }
  if (!max_total_bytes || g.total <= static_cast<double>(max_total_bytes)) return;
  const double peak = g.truncated ? g.total : peak_bytes(outputs, g.total);
  if (peak > static_cast<double>(max_total_bytes)) {
    throw std::runtime_error("[memory budget] evaluating would hold " + std::to_string(std::llround(peak)) +
                             " bytes at once, over the limit of " + std::to_string(max_total_bytes) + " bytes (the largest is " +
                             describe(*g.largest_array, g.largest) + ")");
  }
}

void check_address_space(const GraphBytes& g) {
  double limit = address_space_limit();
  if (!limit || !g.total) return;
  double used = address_space_used();
  double room = limit - used - kAddressReserve;
  if (g.total > room && mlxc::cache_memory() > 0) {
    // Buffers MLX keeps for reuse (its cache, the heap's idle chunks) hold address space too: give them back first.
    mlxc::clear_cache();
    used = address_space_used();
    room = limit - used - kAddressReserve;
  }
  if (g.total > room) {
    throw std::runtime_error("[malloc] Unable to allocate " + std::to_string(std::llround(g.total)) +
                             " bytes: evaluating needs them (the largest is " + describe(*g.largest_array, g.largest) + "), and " +
                             std::to_string(std::llround(std::max(0.0, limit - used))) +
                             " bytes are left under the address-space limit (ulimit -v) of " + std::to_string(std::llround(limit)) +
                             " bytes, " + std::to_string(std::llround(kAddressReserve)) + " of which are kept for the JavaScript heap");
  }
}

bool address_space_limited() { return address_space_limit() > 0; }

void eval_within(const std::vector<array>& outs, size_t max_array_bytes, size_t max_total_bytes) {
  if (graph_stats_on()) print_graph_stats(outs);
  if (max_array_bytes || max_total_bytes || address_space_limited()) {
    auto g = graph_bytes(outs);
    check_budget(outs, g, max_array_bytes, max_total_bytes);
    check_address_space(g);
  }
  // The CPU stream the evaluation runs on: a kernel error MLX records on its thread is thrown
  // here, rather than at some later enqueue from the main thread.
  std::optional<mx::Stream> cpu_stream;
  for (const auto& o : outs) {
    if (o.status() == array::Status::unscheduled && o.has_primitive() && o.primitive().stream().device == mx::Device::cpu) {
      cpu_stream = o.primitive().stream();
      break;
    }
  }
  if (eval_split_on()) {
    // A profiling aid: queued, then waited for (on the CPU, by the stream's own thread).
    eval_split(outs);
  } else if (cpu_stream) {
    // Its tasks run on this thread (inline_eval.cpp): no hand-off per primitive.
    mlxc::InlineEval scope(*cpu_stream);
    if (prim_times_mode())
      eval_timed(outs);
    else
      mx::eval(outs);
    scope.rethrow();
  } else if (prim_times_mode()) {
    eval_timed(outs);
  } else {
    mx::eval(outs);
  }
  if (cpu_stream) mx::scheduler::check_error(*cpu_stream);
}

}  // namespace mlxc

extern "C" {

int mlxc_graph_bytes(size_t* total, size_t* largest, const mlx_vector_array outputs) {
  MLXC_TRY
  auto g = mlxc::graph_bytes(mlxc::vec(outputs));
  *total = clamp(g.total);
  *largest = clamp(g.largest);
  MLXC_CATCH(1)
  return 0;
}

int mlxc_eval_within(const mlx_vector_array outputs, size_t max_array_bytes, size_t max_total_bytes) {
  MLXC_TRY
  mlxc::eval_within(mlxc::vec(outputs), max_array_bytes, max_total_bytes);
  MLXC_CATCH(1)
  return 0;
}

int mlxc_eval_arrays(const uintptr_t* ctxs, size_t n, size_t max_array_bytes, size_t max_total_bytes) {
  MLXC_TRY
  mlxc::eval_within(mlxc::arrays_of(ctxs, n, "mlxc_eval_arrays"), max_array_bytes, max_total_bytes);
  MLXC_CATCH(1)
  return 0;
}

}  // extern "C"
