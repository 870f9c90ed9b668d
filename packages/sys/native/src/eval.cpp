// Functions this library adds to mlx-c's ABI (see spec/extensions.ts).
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_set>

#include "inline_eval.h"
#include "mlxc_private.h"
#include "mlx/primitives.h"
#include "mlx/scheduler.h"

namespace mx = mlx::core;
using mlxc::array;

namespace {

struct GraphBytes {
  double total = 0;
  double largest = 0;
  std::optional<array> largest_array;
  /** Arrays to compute. */
  size_t nodes = 0;
  /** Whether the walk stopped at its node limit (the sums are then partial). */
  bool truncated = false;
  /** Whether every array to compute runs on `on` (when given). */
  bool on_stream = true;
};

/** Bytes of an array from its shape, in double: MLX's size() is a size_t product that can wrap. */
double bytes_of(const array& a) {
  double n = static_cast<double>(a.itemsize());
  for (auto d : a.shape()) n *= static_cast<double>(d);
  return n;
}

/**
 * Walks the arrays the evaluation of `outputs` would compute (each once), summing their bytes;
 * stops after `max_nodes` of them (0: no limit), and notes whether each runs on stream `on`.
 */
GraphBytes graph_bytes(const std::vector<array>& outputs, size_t max_nodes = 0, std::optional<mx::Stream> on = std::nullopt) {
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

std::string describe(const array& a, double bytes) {
  std::ostringstream os;
  os << "an array of shape [";
  for (size_t i = 0; i < a.shape().size(); i++) os << (i ? ", " : "") << a.shape()[i];
  os << "] " << a.dtype() << " (" << std::llround(bytes) << " bytes";
  if (a.has_primitive()) os << ", made by " << a.primitive().name();
  os << ")";
  return os.str();
}

/** The arrays of a list of mlx_array ctx addresses (none may be 0). */
std::vector<array> arrays_of(const uintptr_t* ctxs, size_t n, const char* what) {
  if (n && !ctxs) throw std::invalid_argument(std::string(what) + ": null array list");
  std::vector<array> v;
  v.reserve(n);
  for (size_t i = 0; i < n; i++) {
    if (!ctxs[i]) throw std::invalid_argument(std::string(what) + ": empty array handle at " + std::to_string(i));
    v.push_back(*reinterpret_cast<const array*>(ctxs[i]));
  }
  return v;
}

size_t clamp(double v) {
  return v >= 1.8e19 ? static_cast<size_t>(-1) : static_cast<size_t>(v);
}

/** Throws the budget's refusal when `g` is over a limit (0: none). */
void check_budget(const GraphBytes& g, size_t max_array_bytes, size_t max_total_bytes) {
  if (max_array_bytes && g.largest > static_cast<double>(max_array_bytes)) {
    throw std::runtime_error("[memory budget] evaluating would allocate " + describe(*g.largest_array, g.largest) +
                             ", over the limit of " + std::to_string(max_array_bytes) + " bytes per tensor");
  }
  if (max_total_bytes && g.total > static_cast<double>(max_total_bytes)) {
    throw std::runtime_error("[memory budget] evaluating would allocate " + std::to_string(std::llround(g.total)) +
                             " bytes in all, over the limit of " + std::to_string(max_total_bytes) + " bytes (the largest is " +
                             describe(*g.largest_array, g.largest) + ")");
  }
}

/**
 * MLXC_GRAPH_STATS=1 (a debug aid, read once per process): every evaluation writes one line to
 * stderr, the arrays it computes counted by primitive ("FusedLayerNorm 2, Contiguous 11, ..."),
 * then each Contiguous by what made its input and what reads it ("Contiguous: Transpose ->
 * FusedRows 4"): a Contiguous is a copy where its input is a view (Transpose, Slice, Broadcast),
 * and only a buffer share where the input is already row-contiguous. Compiled replays count
 * the replayed tape (a fused kernel is one "Compiled" node).
 */
bool graph_stats_on() {
  static const bool on = [] {
    const char* e = std::getenv("MLXC_GRAPH_STATS");
    return e && *e && std::string(e) != "0";
  }();
  return on;
}

void print_graph_stats(const std::vector<array>& outputs) {
  std::map<std::string, size_t> ops, contiguous;
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
  std::fputs(os.str().c_str(), stderr);
}

/**
 * MLXC_PRIM_TIMES=1 (a profiling aid, read once per process): every evaluation computes its
 * arrays one primitive at a time, in dependency order, each timed on its own (an mx::eval of that
 * one array, its inputs already computed; on the CPU with the inline mode, the kernel runs within
 * that call), and at exit a table goes to stderr: per primitive, the count, the total and mean
 * time, and the share of all. MLXC_PRIM_TIMES=shape splits each primitive by output shape. The
 * per-array evaluation adds a few microseconds per node and keeps inputs alive (no buffer
 * donation), so totals run a little above a normal evaluation; compare rows, not sums.
 */
int prim_times_mode() {
  static const int mode = [] {
    const char* e = std::getenv("MLXC_PRIM_TIMES");
    if (!e || !*e || std::string(e) == "0") return 0;
    return std::string(e) == "shape" ? 2 : 1;
  }();
  return mode;
}

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

PrimTimes& prim_times() {
  static PrimTimes t;  // printed when the process exits
  return t;
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
    if (prim_times_mode() == 2) {
      key += " [";
      for (int i = 0; i < a.ndim(); i++) key += (i ? "," : "") + std::to_string(a.shape(i));
      key += "]";
    }
    const auto t0 = std::chrono::steady_clock::now();
    mx::eval({a});
    const auto t1 = std::chrono::steady_clock::now();
    local.emplace_back(std::move(key), std::chrono::duration<double>(t1 - t0).count());
  }
  mx::eval(outs);  // anything left (none, normally)
  auto& t = prim_times();
  std::lock_guard<std::mutex> lk(t.m);
  t.evals++;
  for (auto& [k, s] : local) {
    auto& r = t.rows[k];
    r.first++;
    r.second += s;
  }
}

/** Evaluates within the limits (0: none); throws what MLX throws, or the budget's refusal. */
void eval_within(const std::vector<array>& outs, size_t max_array_bytes, size_t max_total_bytes) {
  if (graph_stats_on()) print_graph_stats(outs);
  if (max_array_bytes || max_total_bytes) check_budget(graph_bytes(outs), max_array_bytes, max_total_bytes);
  // The CPU stream the evaluation runs on: a kernel error MLX records on its thread is thrown
  // here, rather than at some later enqueue from the main thread.
  std::optional<mx::Stream> cpu_stream;
  for (const auto& o : outs) {
    if (o.status() == array::Status::unscheduled && o.has_primitive() && o.primitive().stream().device == mx::Device::cpu) {
      cpu_stream = o.primitive().stream();
      break;
    }
  }
  if (cpu_stream) {
    // Its tasks run on this thread (inline_eval.cpp): no hand-off per primitive.
    mlxc::InlineEval scope(*cpu_stream);
    if (prim_times_mode()) eval_timed(outs);
    else mx::eval(outs);
    scope.rethrow();
  } else if (prim_times_mode()) {
    eval_timed(outs);
  } else {
    mx::eval(outs);
  }
  if (cpu_stream) mx::scheduler::check_error(*cpu_stream);
}

/**
 * One thread per stream, evaluating that stream's jobs in order. A stream is always evaluated on
 * the same thread: MLX's CUDA backend keeps per-thread state (the current context, cuDNN handles),
 * and evaluating one stream from several threads in turn crashed there.
 */
struct Job {
  std::vector<array> outputs;
  size_t max_array_bytes, max_total_bytes;
  /** Reported through done(error, payload), or with done null, through the notifier as `id`. */
  mlxc_eval_done done;
  void* payload;
  uint64_t id = 0;
};

/**
 * The end of asynchronous evaluations, as 16-byte records (id, length of the error message, 0
 * for none) written to a pipe whose read end the JS thread watches in its event loop: a native
 * thread reports without waiting for the JS thread (a koffi callback from a native thread holds
 * that thread until the JS thread has run it, and costs a second hand-off). Messages wait in a map
 * until mlxc_eval_take_error reads them.
 */
struct Notifier {
  int rd = -1, wr = -1;
  std::mutex m;
  std::map<uint64_t, std::string> errors;
};

Notifier& notifier() {
  // Never freed, like the workers that write to it.
  static Notifier* n = [] {
    auto* n = new Notifier;
    int fds[2];
    if (pipe(fds) == 0) {
      fcntl(fds[0], F_SETFD, FD_CLOEXEC);
      fcntl(fds[1], F_SETFD, FD_CLOEXEC);
      n->rd = fds[0];
      n->wr = fds[1];
    }
    return n;
  }();
  return *n;
}

void notify(uint64_t id, const std::string& error) {
  auto& n = notifier();
  if (!error.empty()) {
    std::lock_guard<std::mutex> lk(n.m);
    n.errors[id] = error;
  }
  // 16 bytes, under PIPE_BUF: written whole, never interleaved with another thread's record.
  uint64_t rec[2] = {id, static_cast<uint64_t>(error.size())};
  const char* p = reinterpret_cast<const char*>(rec);
  size_t left = sizeof rec;
  while (left) {
    ssize_t k = write(n.wr, p, left);
    if (k < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += k;
    left -= static_cast<size_t>(k);
  }
}

class Worker {
 public:
  Worker() : thread_([this] { run(); }) { thread_.detach(); }
  void push(Job job) {
    {
      std::lock_guard<std::mutex> lk(m_);
      q_.push_back(std::move(job));
    }
    cv_.notify_one();
  }

 private:
  void run() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lk(m_);
        cv_.wait(lk, [this] { return !q_.empty(); });
        job = std::move(q_.front());
        q_.pop_front();
      }
      std::string error;
      try {
        eval_within(job.outputs, job.max_array_bytes, job.max_total_bytes);
      } catch (const std::exception& e) {
        error = e.what();
        if (error.empty()) error = "evaluation failed";
      }
      // The arrays go before the report: the caller may free what they depend on then.
      job.outputs.clear();
      if (job.done) job.done(error.empty() ? nullptr : error.c_str(), job.payload);
      else notify(job.id, error);
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Job> q_;
  std::thread thread_;
};

Worker& worker_for(const mx::Stream& s) {
  static std::mutex m;
  // Never freed: a detached thread may outlive static destruction (MLX leaks its scheduler too).
  static auto* workers = new std::map<std::pair<int, int>, Worker*>();
  std::lock_guard<std::mutex> lk(m);
  auto key = std::make_pair(static_cast<int>(s.device.type), s.index);
  auto it = workers->find(key);
  if (it == workers->end()) it = workers->emplace(key, new Worker()).first;
  return *it->second;
}

// CUDA's driver API, resolved at run time: MLX's CUDA build loads libcuda.so.1, the CPU build does
// not, and this library is built against the CPU build's headers. cuMemPrefetchAsync_v2 (CUDA 12.2
// and later drivers) takes the destination as a CUmemLocation.
struct CuMemLocation {
  int type;  // CU_MEM_LOCATION_TYPE_DEVICE = 1, CU_MEM_LOCATION_TYPE_HOST = 2
  int id;
};
using CuPrefetch = int (*)(unsigned long long ptr, size_t count, CuMemLocation location, unsigned int flags, void* stream);
using CuStreamSync = int (*)(void* stream);

struct CudaDriver {
  CuPrefetch prefetch = nullptr;
  CuStreamSync sync = nullptr;
};

const CudaDriver& cuda_driver() {
  static CudaDriver d = [] {
    CudaDriver r;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!lib) return r;
    r.prefetch = reinterpret_cast<CuPrefetch>(dlsym(lib, "cuMemPrefetchAsync_v2"));
    r.sync = reinterpret_cast<CuStreamSync>(dlsym(lib, "cuStreamSynchronize"));
    if (!r.prefetch || !r.sync) r = CudaDriver{};
    return r;
  }();
  return d;
}

}  // namespace

extern "C" {

int mlxc_array_prefetch(bool* moved, const mlx_array arr, bool to_host) {
  MLXC_TRY
  *moved = false;
  const auto& d = cuda_driver();
  const auto& a = mlxc::arr(arr);
  if (!d.prefetch || !a.is_available() || a.nbytes() == 0) return 0;
  // Device memory (mlxc_array_new_data_on's, or a kernel's result): already on the GPU, and asking
  // for its host pointer would move it to unified memory; mlxc_array_read copies it out directly.
  if (mlxc::buffer_device(a) >= 0) return 0;
  // raw_ptr() hands out the buffer's unified (managed) pointer, first copying a GPU-only buffer
  // into one; the whole buffer moves (a view may start inside it).
  auto buf = a.buffer();
  void* p = buf.raw_ptr();
  size_t n = a.buffer_size();
  if (!p || !n) return 0;
  CuMemLocation loc{to_host ? 2 : 1, 0};
  if (d.prefetch(reinterpret_cast<unsigned long long>(p), n, loc, 0, nullptr) != 0) return 0;
  if (d.sync(nullptr) != 0) return 0;
  *moved = true;
  MLXC_CATCH(1)
  return 0;
}

int mlxc_array_meta(int* meta, const mlx_array arr, size_t meta_len) {
  MLXC_TRY
  if (meta_len < 2) throw std::invalid_argument("mlxc_array_meta: meta_len must be at least 2");
  const auto& a = mlxc::arr(arr);
  meta[0] = static_cast<int>(mlxc::to_c(a.dtype()));
  meta[1] = static_cast<int>(a.ndim());
  const size_t n = std::min(a.ndim(), meta_len - 2);
  for (size_t i = 0; i < n; i++) meta[2 + i] = a.shape()[i];
  MLXC_CATCH(1)
  return 0;
}

int mlxc_array_free_many(const uintptr_t* ctxs, size_t ctxs_num) {
  for (size_t i = 0; i < ctxs_num; i++) delete reinterpret_cast<mx::array*>(ctxs[i]);
  return 0;
}

mlx_stream mlxc_stream_new_any_thread(mlx_device dev) {
  MLXC_TRY return mlx_stream{new mx::Stream(mx::new_thread_unsafe_stream(mlxc::device(dev)))};
  MLXC_CATCH(mlx_stream{nullptr})
}

int mlxc_graph_bytes(size_t* total, size_t* largest, const mlx_vector_array outputs) {
  MLXC_TRY
  auto g = graph_bytes(mlxc::vec(outputs));
  *total = clamp(g.total);
  *largest = clamp(g.largest);
  MLXC_CATCH(1)
  return 0;
}

int mlxc_eval_within(const mlx_vector_array outputs, size_t max_array_bytes, size_t max_total_bytes) {
  MLXC_TRY eval_within(mlxc::vec(outputs), max_array_bytes, max_total_bytes); MLXC_CATCH(1)
  return 0;
}

int mlxc_eval_background(const mlx_vector_array outputs, const mlx_stream stream, size_t max_array_bytes, size_t max_total_bytes,
                         mlxc_eval_done done, void* payload) {
  MLXC_TRY
  if (!done) throw std::invalid_argument("mlxc_eval_background: done must not be null");
  worker_for(mlxc::stream(stream)).push(Job{mlxc::vec(outputs), max_array_bytes, max_total_bytes, done, payload});
  MLXC_CATCH(1)
  return 0;
}

int mlxc_eval_arrays(const uintptr_t* ctxs, size_t n, size_t max_array_bytes, size_t max_total_bytes) {
  MLXC_TRY eval_within(arrays_of(ctxs, n, "mlxc_eval_arrays"), max_array_bytes, max_total_bytes); MLXC_CATCH(1)
  return 0;
}

int mlxc_eval_notifier(int* fd) {
  MLXC_TRY
  *fd = notifier().rd;
  if (*fd < 0) throw std::runtime_error("mlxc_eval_notifier: could not make the notification pipe");
  MLXC_CATCH(1)
  return 0;
}

int mlxc_eval_take_error(void* buf_, size_t cap, uint64_t id) {
  auto* buf = static_cast<char*>(buf_);
  MLXC_TRY
  auto& n = notifier();
  std::string msg;
  {
    std::lock_guard<std::mutex> lk(n.m);
    auto it = n.errors.find(id);
    if (it != n.errors.end()) {
      msg = std::move(it->second);
      n.errors.erase(it);
    }
  }
  if (cap) {
    size_t k = std::min(cap - 1, msg.size());
    std::memcpy(buf, msg.data(), k);
    buf[k] = 0;
  }
  MLXC_CATCH(1)
  return 0;
}

int mlxc_eval_arrays_async(const uintptr_t* ctxs, size_t n, const mlx_stream stream, size_t max_array_bytes, size_t max_total_bytes,
                           size_t max_inline_nodes, uint64_t id) {
  MLXC_TRY
  auto outs = arrays_of(ctxs, n, "mlxc_eval_arrays_async");
  auto s = mlxc::stream(stream);
  if (notifier().wr < 0) throw std::runtime_error("mlxc_eval_arrays_async: no notification pipe");
  // Where the inline CPU mode works, the worker computes the whole graph on its own thread
  // (eval_within): one hop, against one per primitive to the stream's thread below.
  if (max_inline_nodes && s.device == mx::Device::cpu && !mlxc::inline_available()) {
    // A small graph all on this CPU stream: queued from this thread (MLX's CPU primitives only
    // allocate and queue their work here; the stream's thread computes), and a last task on the
    // stream reports the end. No hop through the worker thread.
    auto g = graph_bytes(outs, max_inline_nodes, s);
    if (!g.truncated && g.on_stream) {
      if (graph_stats_on()) print_graph_stats(outs);
      check_budget(g, max_array_bytes, max_total_bytes);
      mlxc::async_begin(s);
      try {
        if (g.nodes) mx::async_eval(outs);
      } catch (...) {
        mlxc::async_end(s);
        throw;
      }
      mx::scheduler::enqueue(s, [s, id] {
        mlxc::async_end(s);
        std::string error;
        try {
          mx::scheduler::check_error(s);
        } catch (const std::exception& e) {
          error = e.what();
          if (error.empty()) error = "evaluation failed";
        }
        notify(id, error);
      });
      return 0;
    }
  }
  worker_for(s).push(Job{std::move(outs), max_array_bytes, max_total_bytes, nullptr, nullptr, id});
  MLXC_CATCH(1)
  return 0;
}

int mlxc_closure_apply_arrays(void* n_out_, void* outs_, void* meta_, size_t cap, size_t meta_stride, const mlx_closure cls,
                              const uintptr_t* ins, size_t n_in) {
  MLXC_TRY
  auto* n_out = static_cast<uint64_t*>(n_out_);
  auto* outs = static_cast<uintptr_t*>(outs_);
  auto* meta = static_cast<int*>(meta_);
  if (meta_stride < 2) throw std::invalid_argument("mlxc_closure_apply_arrays: meta_stride must be at least 2");
  auto res = mlxc::closure(cls)(arrays_of(ins, n_in, "mlxc_closure_apply_arrays"));
  *n_out = res.size();
  if (res.size() > cap) return 0;  // the caller asks again with room for n_out
  for (size_t i = 0; i < res.size(); i++) {
    const auto& a = res[i];
    int* m = meta + i * meta_stride;
    m[0] = static_cast<int>(mlxc::to_c(a.dtype()));
    m[1] = static_cast<int>(a.ndim());
    const size_t nd = std::min(a.ndim(), meta_stride - 2);
    for (size_t k = 0; k < nd; k++) m[2 + k] = a.shape()[k];
  }
  for (size_t i = 0; i < res.size(); i++) outs[i] = reinterpret_cast<uintptr_t>(new array(std::move(res[i])));
  MLXC_CATCH(1)
  return 0;
}

int mlxc_array_read_any(void* dst, size_t nbytes, const mlx_array arr, const mlx_stream stream) {
  MLXC_TRY
  auto a = mlxc::arr(arr);
  if (a.status() == array::Status::unscheduled) mx::eval(a);
  a.wait();
  if (!a.flags().row_contiguous) {
    a = mx::contiguous(a, false, mlxc::stream(stream));
    mx::eval(a);
  }
  mlx_array h{&a};
  if (mlxc_array_read(dst, nbytes, h) != 0) return 1;
  MLXC_CATCH(1)
  return 0;
}

}  // extern "C"
