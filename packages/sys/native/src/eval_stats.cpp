// The evaluation's debug and profiling aids (see eval.h): MLXC_GRAPH_STATS prints each graph's
// primitives, MLXC_PRIM_TIMES times each primitive on its own, MLXC_EVAL_SPLIT a device's evaluation
// in its two halves.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_set>

#include "env.h"
#include "eval.h"
#include "mlxc_private.h"
#include "mlx/primitives.h"

namespace mx = mlx::core;
using mlxc::array;

namespace {

struct PrimTimes {
  std::mutex m;
  std::map<std::string, std::pair<size_t, double>> rows;  // count, seconds
  size_t evals = 0;
  ~PrimTimes() {
    if (rows.empty()) return;
    std::vector<std::pair<std::string, std::pair<size_t, double>>> sorted(rows.begin(), rows.end());
    std::stable_sort(sorted.begin(), sorted.end(), [](auto& x, auto& y) { return x.second.second > y.second.second; });
    double total = 0;
    for (auto& r : sorted) total += r.second.second;
    std::fprintf(stderr, "[mlxc prim times] %zu evaluations, %.3f ms in all (%.1f us per evaluation)\n", evals, total * 1e3,
                 evals ? total * 1e6 / static_cast<double>(evals) : 0.0);
    std::fprintf(stderr, "  %-48s %9s %12s %10s %10s %6s\n", "primitive", "count", "per eval us", "mean us", "total ms", "share");
    for (auto& [k, v] : sorted) {
      const double per_eval = evals ? v.second * 1e6 / static_cast<double>(evals) : 0.0;
      std::fprintf(stderr, "  %-48s %9zu %12.1f %10.2f %10.2f %5.1f%%\n", k.c_str(), v.first, per_eval,
                   v.second * 1e6 / static_cast<double>(v.first), v.second * 1e3, total > 0 ? 100 * v.second / total : 0.0);
    }
  }
};

/** MLXC_EVAL_SPLIT's figures: per graph size (nodes), the encoding and the waiting times (seconds). */
struct EvalSplit {
  std::mutex m;
  std::map<size_t, std::pair<std::vector<double>, std::vector<double>>> rows;
  ~EvalSplit() {
    if (rows.empty()) return;
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v.empty() ? 0.0 : v[v.size() / 2];
    };
    std::fprintf(stderr, "[mlxc eval split] per graph size: evaluations, median us to queue (async_eval), median us to wait\n");
    for (auto& [nodes, r] : rows)
      std::fprintf(stderr, "  %6zu nodes %8zu evaluations %10.1f %10.1f\n", nodes, r.first.size(), median(r.first) * 1e6,
                   median(r.second) * 1e6);
  }
};

PrimTimes& prim_times() {
  static PrimTimes t;  // printed when the process exits
  return t;
}

}  // namespace

namespace mlxc {

/**
 * MLXC_GRAPH_STATS=1 (a debug aid, read once per process): every evaluation writes one line to
 * stderr, the arrays it computes counted by primitive ("FusedLayerNorm 2, Contiguous 11, ..."),
 * then each Contiguous by what made its input and what reads it ("Contiguous: Transpose ->
 * FusedRows 4"): a Contiguous is a copy where its input is a view (Transpose, Slice, Broadcast),
 * and only a buffer share where the input is already row-contiguous. Compiled replays count
 * the replayed tape (a fused kernel is one "Compiled" node). MLXC_GRAPH_STATS=edges adds one
 * line per kind of node by what made its inputs ("(Split) -> Squeeze 4"), to find chains of views.
 * A multi-output primitive counts once per output the graph reads.
 */
bool graph_stats_edges() {
  static const bool on = [] {
    const char* e = std::getenv("MLXC_GRAPH_STATS");
    return e && std::string(e) == "edges";
  }();
  return on;
}

bool graph_stats_on() {
  static const bool on = env_on("MLXC_GRAPH_STATS");
  return on;
}

void print_graph_stats(const std::vector<array>& outputs) {
  std::map<std::string, size_t> ops, contiguous, edges;
  std::unordered_set<std::uintptr_t> seen;
  std::vector<array> stack(outputs.begin(), outputs.end());
  size_t nodes = 0;
  auto producer = [](const array& x) -> std::string {
    if (x.status() != array::Status::unscheduled || !x.has_primitive()) return "data";
    return x.primitive().name();
  };
  while (!stack.empty()) {
    array a = std::move(stack.back());
    stack.pop_back();
    if (!seen.insert(a.id()).second) continue;
    if (a.status() != array::Status::unscheduled || !a.has_primitive()) continue;
    nodes++;
    std::string name = a.primitive().name();
    ops[name]++;
    if (graph_stats_edges()) {
      std::string from;
      for (const auto& in : a.inputs()) from += (from.empty() ? "" : "+") + producer(in);
      edges["(" + from + ") -> " + name]++;
    }
    for (const auto& in : a.inputs()) {
      if (in.status() == array::Status::unscheduled && in.has_primitive() && std::string(in.primitive().name()) == "Contiguous")
        contiguous[producer(in.inputs()[0]) + " -> " + name]++;
      stack.push_back(in);
    }
  }
  std::vector<std::pair<std::string, size_t>> sorted(ops.begin(), ops.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](auto& x, auto& y) { return x.second > y.second; });
  std::ostringstream os;
  os << "[mlxc graph] " << nodes << " nodes:";
  for (size_t i = 0; i < sorted.size(); i++) os << (i ? ", " : " ") << sorted[i].first << " " << sorted[i].second;
  if (!contiguous.empty()) {
    os << " | Contiguous:";
    bool first = true;
    for (auto& [k, v] : contiguous) {
      os << (first ? " " : ", ") << k << " " << v;
      first = false;
    }
  }
  os << "\n";
  for (auto& [k, v] : edges) os << "  " << k << " " << v << "\n";
  std::fputs(os.str().c_str(), stderr);
}

/**
 * MLXC_PRIM_TIMES=1 (a profiling aid, read once per process): every evaluation computes its
 * arrays one primitive at a time, in dependency order, each timed on its own (an mx::eval of that
 * one array, its inputs already computed; on the CPU with the inline mode, the kernel runs within
 * that call), and at exit a table goes to stderr: per primitive, the count, the total and mean
 * time, and the share of all. MLXC_PRIM_TIMES=shape splits each primitive by output shape, and
 * MLXC_PRIM_TIMES=inputs by output and input shapes (a 1x1 and a 3x3 convolution apart). The
 * per-array evaluation adds a few microseconds per node and keeps inputs alive (no buffer
 * donation), so totals run a little above a normal evaluation; compare rows, not sums.
 * MLXC_PRIM_TIMES=static times a host program's runs as they are (capture.cpp's static executor,
 * which the other modes turn off): each step's kernel in place, and a row "(static run)" for each
 * run's whole time, the steps' sum and the executor's own work between them; other evaluations as
 * MLXC_PRIM_TIMES=1. MLXC_PRIM_TIMES=static-inputs does the same with each step's row split by its
 * output and input shapes, as MLXC_PRIM_TIMES=inputs does.
 */
int prim_times_mode() {
  static const int mode = [] {
    const char* e = std::getenv("MLXC_PRIM_TIMES");
    if (!e || !*e || std::string(e) == "0") return 0;
    const std::string v(e);
    return v == "shape" ? 2 : v == "inputs" ? 3 : v == "static" ? 4 : v == "static-inputs" ? 5 : 1;
  }();
  return mode;
}

bool prim_times_static() { return prim_times_mode() >= 4; }

std::string shapes_key(const array& out, const std::vector<array>& inputs) {
  auto dims = [](const array& x) {
    std::string d = "[";
    for (int i = 0; i < x.ndim(); i++) d += (i ? "," : "") + std::to_string(x.shape(i));
    return d + "]";
  };
  std::string key = " " + dims(out);
  if (prim_times_mode() == 3 || prim_times_mode() == 5) {
    key += " <-";
    for (const auto& in : inputs) key += " " + dims(in);
  }
  return key;
}

void record_prim_times(std::vector<std::pair<std::string, double>>& local) {
  auto& t = prim_times();
  std::lock_guard<std::mutex> lk(t.m);
  t.evals++;
  for (auto& [k, s] : local) {
    auto& r = t.rows[k];
    r.first++;
    r.second += s;
  }
}

/** Evaluates `outs` array by array (dependency order), timing each primitive. */
void eval_timed(const std::vector<array>& outs) {
  std::vector<array> order;
  std::unordered_set<std::uintptr_t> seen;
  // Iterative post-order: (array, inputs pushed).
  std::vector<std::pair<array, bool>> stack;
  for (const auto& o : outs) stack.emplace_back(o, false);
  while (!stack.empty()) {
    auto [a, expanded] = stack.back();
    stack.pop_back();
    if (a.status() != array::Status::unscheduled || !a.has_primitive()) continue;
    if (expanded) {
      if (seen.insert(a.id()).second) order.push_back(a);
      continue;
    }
    if (seen.count(a.id())) continue;
    stack.emplace_back(a, true);
    for (const auto& in : a.inputs()) stack.emplace_back(in, false);
  }
  std::vector<std::pair<std::string, double>> local;
  local.reserve(order.size());
  for (auto& a : order) {
    if (a.status() != array::Status::unscheduled) continue;  // a sibling output already computed
    std::string key = a.primitive().name();
    if (prim_times_mode() == 2 || prim_times_mode() == 3) key += shapes_key(a, a.inputs());
    const auto t0 = std::chrono::steady_clock::now();
    mx::eval({a});
    const auto t1 = std::chrono::steady_clock::now();
    local.emplace_back(std::move(key), std::chrono::duration<double>(t1 - t0).count());
  }
  mx::eval(outs);  // anything left (none, normally)
  record_prim_times(local);
}

/**
 * MLXC_EVAL_SPLIT=1 (a profiling aid, read once per process): each evaluation is MLX's
 * async_eval (the host builds and queues every primitive's work: on a GPU it encodes the kernels,
 * on the CPU the stream's thread computes them) then a wait for the result, each timed; at exit a
 * table goes to stderr, per graph size (nodes), of the median time of each half. On a GPU a
 * host-bound step spends its time in the first, a device-bound one in the second. It takes
 * precedence over MLXC_PRIM_TIMES and turns the CPU's inline evaluation off.
 */
bool eval_split_on() {
  static const bool on = env_on("MLXC_EVAL_SPLIT");
  return on;
}

void eval_split(const std::vector<array>& outs) {
  const size_t nodes = graph_bytes(outs).nodes;
  const auto t0 = std::chrono::steady_clock::now();
  mx::async_eval(outs);
  const auto t1 = std::chrono::steady_clock::now();
  mx::eval(outs);
  const auto t2 = std::chrono::steady_clock::now();
  static EvalSplit split;  // printed when the process exits
  std::lock_guard<std::mutex> lk(split.m);
  auto& r = split.rows[nodes];
  r.first.push_back(std::chrono::duration<double>(t1 - t0).count());
  r.second.push_back(std::chrono::duration<double>(t2 - t1).count());
}

}  // namespace mlxc
