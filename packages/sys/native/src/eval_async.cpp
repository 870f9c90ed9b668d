// Evaluations on this library's own threads (spec/extensions/eval.ts): one worker thread per
// stream, and the pipe through which they report the end of an evaluation to the JS thread.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "eval.h"
#include "inline_eval.h"
#include "mlxc_private.h"
#include "mlx/scheduler.h"

namespace mx = mlx::core;
using mlxc::array;
using mlxc::eval_within;
using mlxc::graph_bytes;

namespace {

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
  /** Run instead of evaluating `outputs` (run_on_worker). */
  std::function<void()> task;
};

/**
 * The end of asynchronous evaluations, as 16-byte records (id, length of the error message, 0
 * for none) written to a pipe whose read end a JS thread watches in its event loop: a native
 * thread reports without waiting for the JS thread (a koffi callback from a native thread holds
 * that thread until the JS thread has run it, and costs a second hand-off). Messages wait in a map
 * until mlxc_eval_take_error reads them.
 *
 * One pipe per channel, one channel per JS thread (mlxc_eval_channel): the main thread and each
 * worker thread read only their own reports. An id carries its channel in its high bits
 * (id >> CHANNEL_SHIFT); channel 0 is mlxc_eval_notifier's, made on first use. A closed channel
 * (its thread ended) drops its reports.
 */
constexpr int CHANNEL_SHIFT = 40;

struct Channel {
  int rd = -1, wr = -1;
};

struct Notifier {
  std::mutex m;
  std::map<uint64_t, std::string> errors;
  std::map<uint64_t, Channel> channels;
  uint64_t next = 1;
};

Notifier& notifier() {
  // Never freed, like the workers that write to it.
  static Notifier* n = new Notifier;
  return *n;
}

/** A new pipe as channel `c` (under n.m); false when no pipe can be made. */
bool open_channel(Notifier& n, uint64_t c) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  fcntl(fds[1], F_SETFD, FD_CLOEXEC);
  n.channels[c] = Channel{fds[0], fds[1]};
  return true;
}

/** The write end of the channel of `id`, or -1 when it is closed or was never opened. */
int channel_writer(uint64_t id) {
  auto& n = notifier();
  std::lock_guard<std::mutex> lk(n.m);
  auto it = n.channels.find(id >> CHANNEL_SHIFT);
  return it == n.channels.end() ? -1 : it->second.wr;
}

void notify(uint64_t id, const std::string& error) {
  auto& n = notifier();
  int wr;
  {
    std::lock_guard<std::mutex> lk(n.m);
    auto it = n.channels.find(id >> CHANNEL_SHIFT);
    if (it == n.channels.end()) return;  // its thread has ended
    wr = it->second.wr;
    if (!error.empty()) {
      try {
        n.errors[id] = error;
      } catch (...) {
        // Out of memory for the message itself: the record still says that the evaluation failed
        // (mlxc_eval_take_error then gives an empty message).
      }
    }
    // 16 bytes, under PIPE_BUF: written whole, never interleaved with another thread's record. The
    // write happens under the lock, so that a channel being closed never has its fd reused under it.
    uint64_t rec[2] = {id, static_cast<uint64_t>(error.size())};
    const char* p = reinterpret_cast<const char*>(rec);
    size_t left = sizeof rec;
    while (left) {
      ssize_t k = write(wr, p, left);
      if (k < 0) {
        if (errno == EINTR) continue;
        return;  // EPIPE: the reader is gone (Node ignores SIGPIPE)
      }
      p += k;
      left -= static_cast<size_t>(k);
    }
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
      // Nothing may leave this thread: an exception here would end the process (std::terminate).
      try {
        if (job.task)
          job.task();
        else
          eval_within(job.outputs, job.max_array_bytes, job.max_total_bytes);
      } catch (const std::bad_alloc& e) {
        error = mlxc::alloc_message(e);
      } catch (const std::exception& e) {
        error = e.what();
        if (error.empty()) error = "evaluation failed";
      } catch (...) {
        error = "evaluation failed (an exception that is not a std::exception)";
      }
      // The arrays go before the report: the caller may free what they depend on then.
      job.outputs.clear();
      job.task = nullptr;
      if (job.done)
        job.done(error.empty() ? nullptr : error.c_str(), job.payload);
      else
        notify(job.id, error);
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

}  // namespace

void mlxc::run_on_worker(const mx::Stream& s, std::function<void()> task, uint64_t id) {
  if (channel_writer(id) < 0) throw std::runtime_error("run_on_worker: no open channel for this id (mlxc_eval_channel)");
  Job job{{}, 0, 0, nullptr, nullptr, id};
  job.task = std::move(task);
  worker_for(s).push(std::move(job));
}

extern "C" {

int mlxc_eval_background(const mlx_vector_array outputs, const mlx_stream stream, size_t max_array_bytes, size_t max_total_bytes,
                         mlxc_eval_done done, void* payload) {
  MLXC_TRY
  if (!done) throw std::invalid_argument("mlxc_eval_background: done must not be null");
  worker_for(mlxc::stream(stream)).push(Job{mlxc::vec(outputs), max_array_bytes, max_total_bytes, done, payload});
  MLXC_CATCH(1)
  return 0;
}

int mlxc_eval_notifier(int* fd) {
  MLXC_TRY
  auto& n = notifier();
  std::lock_guard<std::mutex> lk(n.m);
  auto it = n.channels.find(0);
  if (it == n.channels.end() && !open_channel(n, 0)) throw std::runtime_error("mlxc_eval_notifier: could not make the notification pipe");
  *fd = n.channels[0].rd;
  MLXC_CATCH(1)
  return 0;
}

int mlxc_eval_channel(int* fd, uint64_t* channel) {
  MLXC_TRY
  auto& n = notifier();
  std::lock_guard<std::mutex> lk(n.m);
  if (n.next >= (uint64_t{1} << (64 - CHANNEL_SHIFT))) throw std::runtime_error("mlxc_eval_channel: out of channels");
  uint64_t c = n.next++;
  if (!open_channel(n, c)) throw std::runtime_error(std::string("mlxc_eval_channel: could not make a pipe: ") + std::strerror(errno));
  *fd = n.channels[c].rd;
  *channel = c;
  MLXC_CATCH(1)
  return 0;
}

int mlxc_eval_channel_close(uint64_t channel) {
  MLXC_TRY
  auto& n = notifier();
  std::lock_guard<std::mutex> lk(n.m);
  auto it = n.channels.find(channel);
  if (it != n.channels.end()) {
    // The read end belongs to the JS side (its socket closes it); this closes the write end.
    close(it->second.wr);
    n.channels.erase(it);
  }
  for (auto e = n.errors.begin(); e != n.errors.end();) e = (e->first >> CHANNEL_SHIFT) == channel ? n.errors.erase(e) : std::next(e);
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
  auto outs = mlxc::arrays_of(ctxs, n, "mlxc_eval_arrays_async");
  auto s = mlxc::stream(stream);
  if (channel_writer(id) < 0) throw std::runtime_error("mlxc_eval_arrays_async: no open channel for this id (mlxc_eval_channel)");
  // Where the inline CPU mode works, the worker computes the whole graph on its own thread
  // (eval_within): one hop, against one per primitive to the stream's thread below.
  if (max_inline_nodes && s.device == mx::Device::cpu && !mlxc::inline_available()) {
    // A small graph all on this CPU stream: queued from this thread (MLX's CPU primitives only
    // allocate and queue their work here; the stream's thread computes), and a last task on the
    // stream reports the end. No hop through the worker thread.
    auto g = graph_bytes(outs, max_inline_nodes, s);
    if (!g.truncated && g.on_stream) {
      if (mlxc::graph_stats_on()) mlxc::print_graph_stats(outs);
      mlxc::check_budget(outs, g, max_array_bytes, max_total_bytes);
      mlxc::check_address_space(g);
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
        } catch (const std::bad_alloc& e) {
          error = mlxc::alloc_message(e);
        } catch (const std::exception& e) {
          error = e.what();
          if (error.empty()) error = "evaluation failed";
        } catch (...) {
          error = "evaluation failed (an exception that is not a std::exception)";
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

}  // extern "C"
