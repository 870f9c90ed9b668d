// Synchronous CPU evaluation on the calling thread (inline_eval.cpp).
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <vector>

#include "mlx/array.h"

#include "mlx/stream.h"

namespace mlxc {

/**
 * While alive, work MLX queues for CPU stream `s` from this thread runs at once on this thread
 * (when the inline mode is available and on; otherwise it does nothing). Nothing else may be
 * queued on `s` meanwhile. Call rethrow() after the evaluation: a task's error is kept, as the
 * stream thread keeps it, and thrown there.
 */
class InlineEval {
 public:
  explicit InlineEval(const mlx::core::Stream& s);
  ~InlineEval();
  InlineEval(const InlineEval&) = delete;
  InlineEval& operator=(const InlineEval&) = delete;

  bool active() const { return active_; }
  const mlx::core::Stream& stream() const { return stream_; }
  /** Runs one task, keeping its error if it is the first. */
  void run(const std::function<void()>& task);
  /** Keeps an error (the first one wins). */
  void fail(std::exception_ptr e) {
    if (!error_) error_ = std::move(e);
  }
  void rethrow();

 private:
  mlx::core::Stream stream_;
  bool active_ = false;
  std::exception_ptr error_;
};

/** Whether the inline mode works here and is on (MLXC_INLINE_EVAL is not 0). */
bool inline_available();

/** Tasks run inline so far (process-wide): 0 where the inline mode never engaged. */
uint64_t inline_tasks();

/** The stream of the first output still to compute, when it is a CPU stream. */
std::optional<mlx::core::Stream> cpu_stream_of(const std::vector<mlx::core::array>& outs);

/**
 * An asynchronous evaluation queued on CPU stream `s` from this library (async_begin before it is
 * queued, async_end from a last task on the stream): while one is in flight, InlineEval scopes on
 * `s` stay inactive, so a synchronous evaluation queues behind it as MLX orders it.
 */
void async_begin(const mlx::core::Stream& s);
void async_end(const mlx::core::Stream& s);

}  // namespace mlxc
