// Functions this library adds to mlx-c's ABI (see spec/extensions.ts).
#include <dlfcn.h>

#include <cmath>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_set>

#include "mlxc_private.h"
#include "mlx/primitives.h"

namespace mx = mlx::core;
using mlxc::array;

namespace {

struct GraphBytes {
  double total = 0;
  double largest = 0;
  std::optional<array> largest_array;
};

/** Bytes of an array from its shape, in double: MLX's size() is a size_t product that can wrap. */
double bytes_of(const array& a) {
  double n = static_cast<double>(a.itemsize());
  for (auto d : a.shape()) n *= static_cast<double>(d);
  return n;
}

/** Walks the arrays the evaluation of `outputs` would compute (each once), summing their bytes. */
GraphBytes graph_bytes(const std::vector<array>& outputs) {
  GraphBytes g;
  std::unordered_set<std::uintptr_t> seen;
  std::vector<array> stack(outputs.begin(), outputs.end());
  while (!stack.empty()) {
    array a = std::move(stack.back());
    stack.pop_back();
    if (!seen.insert(a.id()).second) continue;
    // Computed already (or data that was never a computation): nothing new to allocate.
    if (a.status() != array::Status::unscheduled || !a.has_primitive()) continue;
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

size_t clamp(double v) {
  return v >= 1.8e19 ? static_cast<size_t>(-1) : static_cast<size_t>(v);
}

/** Evaluates within the limits (0: none); throws what MLX throws, or the budget's refusal. */
void eval_within(const std::vector<array>& outs, size_t max_array_bytes, size_t max_total_bytes) {
  if (max_array_bytes || max_total_bytes) {
    auto g = graph_bytes(outs);
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
  mx::eval(outs);
}

/**
 * One thread per stream, evaluating that stream's jobs in order. A stream is always evaluated on
 * the same thread: MLX's CUDA backend keeps per-thread state (the current context, cuDNN handles),
 * and evaluating one stream from several threads in turn crashed there.
 */
struct Job {
  std::vector<array> outputs;
  size_t max_array_bytes, max_total_bytes;
  mlxc_eval_done done;
  void* payload;
};

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
      // The arrays go before the callback: the caller may free what they depend on then.
      job.outputs.clear();
      job.done(error.empty() ? nullptr : error.c_str(), job.payload);
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

}  // extern "C"
