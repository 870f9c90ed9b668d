// Evaluation within a memory budget, on this library's own threads, and its debug aids: what
// eval.cpp, eval_async.cpp and eval_stats.cpp share (spec/extensions/eval.ts).
#pragma once

#include <functional>

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mlx/array.h"
#include "mlx/stream.h"

namespace mlxc {

/** What evaluating a graph would allocate (graph_bytes). */
struct GraphBytes {
  /** Bytes of every array to compute, summed. */
  double total = 0;
  double largest = 0;
  std::optional<mlx::core::array> largest_array;
  /** Arrays to compute. */
  size_t nodes = 0;
  /** Whether the walk stopped at its node limit (the sums are then partial). */
  bool truncated = false;
  /** Whether every array to compute runs on `on` (when given). */
  bool on_stream = true;
};

/**
 * Walks the arrays the evaluation of `outputs` would compute (each once), summing their bytes;
 * stops after `max_nodes` of them (0: no limit), and notes whether each runs on stream `on`.
 */
GraphBytes graph_bytes(const std::vector<mlx::core::array>& outputs, size_t max_nodes = 0,
                       std::optional<mlx::core::Stream> on = std::nullopt);
/**
 * Throws the budget's refusal when the evaluation of `outputs` (walked into `g`) is over a limit
 * (0: none): an array over `max_array_bytes`, or more than `max_total_bytes` held at once (the
 * arrays computed in a topological order, each freed after its last reader, the outputs kept, as
 * MLX frees intermediates as it goes; buffers kernels reuse are not counted). That second walk is
 * made only when the sum of the arrays is over the limit (what is held at once never exceeds it),
 * and the sum stands for it where `g` stopped at its node limit.
 */
void check_budget(const std::vector<mlx::core::array>& outputs, const GraphBytes& g, size_t max_array_bytes, size_t max_total_bytes);
/**
 * Under an address-space limit (`ulimit -v`), throws an allocation failure ("[malloc] Unable to
 * allocate ...") when `g` needs more than is left of it, less a reserve for the JavaScript heap:
 * MLX itself would fail part-way, or take the room V8 needs and leave it to abort the process.
 */
void check_address_space(const GraphBytes& g);
/** Whether the process runs under an address-space limit (RLIMIT_AS). */
bool address_space_limited();
/** Evaluates within the limits (0: none); throws what MLX throws, or the budget's refusal. */
void eval_within(const std::vector<mlx::core::array>& outs, size_t max_array_bytes, size_t max_total_bytes);

/**
 * Runs `task` on stream `s`'s evaluation thread (eval_async.cpp, the thread mlxc_eval_arrays_async
 * evaluates `s` on), after the jobs queued before it, and reports its end as `id` on the id's
 * channel (mlxc_eval_channel; an exception the task throws is the report's error).
 */
void run_on_worker(const mlx::core::Stream& s, std::function<void()> task, uint64_t id);

// The debug and profiling aids (eval_stats.cpp).
/** MLXC_GRAPH_STATS is set: each evaluation prints its graph's primitives (print_graph_stats). */
bool graph_stats_on();
void print_graph_stats(const std::vector<mlx::core::array>& outputs);
/** MLXC_PRIM_TIMES: 0 off, 1 per primitive, 2 per primitive and output shape, 3 and input shapes (eval_timed), 4 static, 5 static by
 * shapes. */
int prim_times_mode();
/** MLXC_PRIM_TIMES=static: the static executor stays on and times its steps (record_prim_times). */
bool prim_times_static();
/** A row's shape suffix: " [out]", and with the inputs' modes " [out] <- [in] [in]...". */
std::string shapes_key(const mlx::core::array& out, const std::vector<mlx::core::array>& inputs);
/** Adds one evaluation's (primitive, seconds) rows to MLXC_PRIM_TIMES's table. */
void record_prim_times(std::vector<std::pair<std::string, double>>& local);
/** Evaluates `outs` array by array (dependency order), timing each primitive. */
void eval_timed(const std::vector<mlx::core::array>& outs);
/** MLXC_EVAL_SPLIT is set: device evaluations go through eval_split. */
bool eval_split_on();
/** Evaluates `outs` as async_eval then a wait, timing each half (printed per graph size at exit). */
void eval_split(const std::vector<mlx::core::array>& outs);

}  // namespace mlxc
