// A small thread pool for the fused CPU kernels, and the one thread count that it and OpenBLAS use.
// One parallel_for runs at a time: a second caller (another stream's thread) that finds the pool
// busy runs its loop on its own thread instead of waiting, so streams never block each other.
// A model's run is tens of kernels a few microseconds to a few tens apart: a worker that slept on
// the condition variable after each was woken by a futex call and a context switch per kernel (17%
// of the CPU time of a 2-thread mobilenet run). Workers (and a caller waiting for them) first spin
// a while (1 ms, MLXC_POOL_SPIN_US) on the job counter, then sleep as before. A decode step's
// products come a few hundred microseconds of host work apart (the token read, generate()'s loop,
// the next run's feeds): with 100 us the workers slept between steps, the step's first products
// paid the wake-up or ran on one thread (pool_polling), and a 7M decoder's step took 0.65-0.9 ms
// natively instead of 0.45-0.55 (2026-12-07).
#include <dlfcn.h>
#include <link.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernels/common/cpu.h"

namespace mlxc::cpu {
namespace {

/** How long a worker polls for the next job, and a caller for the workers' end, before sleeping:
 * 1 ms, or MLXC_POOL_SPIN_US (0: sleep at once, as before; read once per process). */
std::chrono::microseconds spin_time() {
  static const std::chrono::microseconds t = [] {
    const char* e = std::getenv("MLXC_POOL_SPIN_US");
    constexpr long kDefault = 1000;
    if (!e || !*e) return std::chrono::microseconds{kDefault};
    char* end = nullptr;
    const long v = std::strtol(e, &end, 10);
    return std::chrono::microseconds{end && *end == '\0' && v >= 0 && v <= 100000 ? v : kDefault};
  }();
  return t;
}

inline void relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/** Polls done() for up to spin_time(); whether it became true. */
template <class F>
bool spin_until(F done) {
  const auto spin = spin_time();
  if (spin.count() == 0) return done();
  const auto until = std::chrono::steady_clock::now() + spin;
  for (;;) {
    for (int i = 0; i < 64; i++) {
      if (done()) return true;
      relax();
    }
    if (std::chrono::steady_clock::now() >= until) return done();
    // On a machine with more runnable threads than cores, let them (our caller among them) run.
    sched_yield();
  }
}

int machine_threads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  unsigned h = std::thread::hardware_concurrency();
  return h ? static_cast<int>(h) : 1;
}

class Pool {
 public:
  ~Pool() { resize(1); }

  int size() {
    std::lock_guard<std::mutex> l(use_);
    return threads_;
  }

  void resize(int n) {
    std::lock_guard<std::mutex> l(use_);
    {
      std::lock_guard<std::mutex> g(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
    stop_ = false;
    threads_ = std::max(1, n);
    // Each worker starts from the generation at its creation (use_ is held: no run() can bump it
    // now). Reading generation_ when the thread first runs lost a job that run() posted before
    // then: the worker waited for the next generation and run() for its check-in, forever.
    const size_t gen = generation_;
    for (int i = 1; i < threads_; i++) workers_.emplace_back([this, gen] { work(gen); });
  }

  /** Whether a worker polls for the next job now (one posted reaches it without a wake-up). */
  bool polling() const { return polling_.load(std::memory_order_relaxed) > 0; }

  void run(size_t n, size_t grain, const std::function<void(size_t, size_t)>& f) {
    if (n == 0) return;
    grain = std::max<size_t>(grain, 1);
    std::unique_lock<std::mutex> busy(use_, std::try_to_lock);
    size_t chunks = std::min<size_t>((n + grain - 1) / grain, static_cast<size_t>(threads_) * 4);
    if (!busy.owns_lock() || threads_ == 1 || chunks <= 1) {
      f(0, n);
      return;
    }
    Job job{&f, n, (n + chunks - 1) / chunks};
    {
      std::lock_guard<std::mutex> g(m_);
      job_ = job;
      next_.store(0);
      generation_++;
    }
    cv_.notify_all();
    steal(job);
    // Waits only for the workers that took this job (under m_, as they take it), not for every
    // worker to wake: on a loaded machine a worker can stay descheduled for a time slice, and the
    // caller, which has run every chunk itself by then, would wait for it. The job is cleared
    // before returning, so a worker that wakes later takes nothing (f lives on our stack).
    spin_until([this] { return active_.load(std::memory_order_acquire) == 0; });
    std::unique_lock<std::mutex> g(m_);
    done_.wait(g, [this] { return active_ == 0; });
    job_ = Job{};
  }

 private:
  struct Job {
    const std::function<void(size_t, size_t)>* f = nullptr;
    size_t n = 0, chunk = 1;
  };

  /** Takes chunks of `job` until none is left. */
  void steal(const Job& job) {
    for (;;) {
      size_t begin = next_.fetch_add(job.chunk);
      if (begin >= job.n) break;
      (*job.f)(begin, std::min(job.n, begin + job.chunk));
    }
  }

  void work(size_t seen) {
    for (;;) {
      Job job;
      polling_.fetch_add(1, std::memory_order_relaxed);
      spin_until([&] { return generation_.load(std::memory_order_acquire) != seen || stop_.load(std::memory_order_relaxed); });
      polling_.fetch_sub(1, std::memory_order_relaxed);
      {
        // The caller posts a job under m_: a worker that saw it by polling finds m_ still held
        // for an instant, and blocking on it would sleep and wake after all. Poll it too.
        std::unique_lock<std::mutex> g(m_, std::defer_lock);
        if (!spin_until([&] { return g.try_lock(); })) g.lock();
        cv_.wait(g, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
        if (!job.f) continue;  // its run() has returned already
        active_++;
      }
      steal(job);
      std::lock_guard<std::mutex> g(m_);
      if (--active_ == 0) done_.notify_all();
    }
  }

  std::mutex use_;  // held for the length of one run(), and by resize()
  std::mutex m_;
  std::condition_variable cv_, done_;
  std::vector<std::thread> workers_;
  int threads_ = 1;
  // Written under m_; atomic so that the spinning threads may poll them without it.
  std::atomic<bool> stop_{false};
  Job job_;
  std::atomic<size_t> active_{0}, generation_{0};  // active_: workers inside the current job
  std::atomic<size_t> next_{0};
  std::atomic<int> polling_{0};  // workers in their polling phase (awake, not yet asleep on cv_)
};

Pool& pool() {
  static Pool* p = [] {
    auto* q = new Pool();  // never destroyed: workers must not be joined during static destruction
    q->resize(machine_threads());
    return q;
  }();
  return *p;
}

/** openblas_set_num_threads in whichever loaded library has it (MLX's BLAS is OpenBLAS after setup). */
void set_blas_threads(int n) {
  using SetFn = void (*)(int);
  static SetFn fn = [] {
    SetFn found = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
    if (found) return found;
    std::vector<std::string> paths;
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* data) {
          if (info->dlpi_name && *info->dlpi_name) static_cast<std::vector<std::string>*>(data)->push_back(info->dlpi_name);
          return 0;
        },
        &paths);
    for (const auto& p : paths) {
      void* h = dlopen(p.c_str(), RTLD_LAZY | RTLD_NOLOAD);
      if (!h) continue;
      found = reinterpret_cast<SetFn>(dlsym(h, "openblas_set_num_threads"));
      dlclose(h);
      if (found) return found;
    }
    return static_cast<SetFn>(nullptr);
  }();
  if (fn) fn(n);
}

}  // namespace

void parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& f) { pool().run(n, grain, f); }

void parallel_for_unless(bool serial, size_t n, size_t grain, const std::function<void(size_t, size_t)>& f) {
  if (serial)
    f(0, n);
  else
    parallel_for(n, grain, f);
}

void set_num_threads(int n) {
  int t = n > 0 ? n : machine_threads();
  pool().resize(t);
  set_blas_threads(t);
}

int num_threads() { return pool().size(); }

bool pool_polling() { return pool().polling(); }

}  // namespace mlxc::cpu
