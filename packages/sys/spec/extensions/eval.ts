// ABI spec, this library's additions to mlx-c for a runtime over MLX (prefix mlxc_, written by
// hand in native/src/eval*.cpp and inline_eval.cpp): evaluation within a memory budget, and off
// the JS thread.
import { manual, type FnSpec } from '../dsl.js';

export const evaluation: FnSpec[] = [
  manual(
    'int mlxc_graph_bytes(size_t* total, size_t* largest, const mlx_vector_array outputs)',
    'the bytes evaluating outputs would allocate: every array not yet computed, once (siblings included), and the largest',
  ),
  manual(
    'int mlxc_eval_background(const mlx_vector_array outputs, const mlx_stream stream, size_t max_array_bytes, size_t max_total_bytes, mlxc_eval_done done, void* payload)',
    "mlxc_eval_within on a thread of this library's own, one per stream, so that a stream is always evaluated on the same thread (CUDA's per-thread state, cuDNN's handles, need that); done(error, payload) is called from that thread when it ends. The arrays are held until then",
  ),
  manual(
    'int mlxc_eval_within(const mlx_vector_array outputs, size_t max_array_bytes, size_t max_total_bytes)',
    'mlx_eval after mlxc_graph_bytes: over a limit (0: none), nothing is evaluated and the error names the largest array, its shape, dtype, bytes and primitive; a kernel error on a CPU stream is reported by this call (MLX would report it at a later enqueue)',
  ),
  manual(
    'int mlxc_inline_eval_tasks(uint64_t* res)',
    "how many tasks of MLX's CPU streams ran on the evaluating thread (mlxc_eval_within and the evaluations built on it run a CPU stream's work there instead of handing each primitive to the stream's thread): 0 where that inline mode is off (MLXC_INLINE_EVAL=0) or could not engage",
  ),
  manual(
    'int mlxc_eval_arrays(const uintptr_t* ctxs, size_t ctxs_num, size_t max_array_bytes, size_t max_total_bytes)',
    'mlxc_eval_within on a list of arrays given as the ctx addresses of their handles (no vector to build and free)',
  ),
  manual(
    'int mlxc_eval_notifier(int* fd)',
    'channel 0 (ids below 2^40): the read end of the pipe through which mlxc_eval_arrays_async reports: 16-byte records, each a uint64_t id and the uint64_t length of its error message (0: none), written by native threads without waiting for the reader (the JS thread watches the pipe in its event loop)',
  ),
  manual(
    'int mlxc_eval_channel(int* fd, uint64_t* channel)',
    "a new channel for mlxc_eval_arrays_async's reports, one per JS thread (the main thread, each worker): fd is the read end of its own pipe (records as mlxc_eval_notifier's), and an evaluation reports on the channel its id names (channel << 40 | sequence number)",
  ),
  manual(
    'int mlxc_eval_channel_close(uint64_t channel)',
    'closes a channel whose thread has ended: the write end of its pipe (the reader closes the read end) and its pending error messages; later reports on it are dropped',
  ),
  manual(
    'int mlxc_eval_take_error(void* buf, size_t cap, uint64_t id)',
    "copies (truncated to cap - 1 bytes, NUL-terminated) and forgets the error message of evaluation id, reported through mlxc_eval_notifier's pipe; empty when there is none",
  ),
  manual(
    'int mlxc_eval_arrays_async(const uintptr_t* ctxs, size_t ctxs_num, const mlx_stream stream, size_t max_array_bytes, size_t max_total_bytes, size_t max_inline_nodes, uint64_t id)',
    "mlxc_eval_background on arrays given as ctx addresses, reporting its end as `id` through mlxc_eval_notifier's pipe; on a CPU stream, a graph of at most max_inline_nodes arrays to compute (0: never), all on that stream, is queued from the calling thread instead (MLX's CPU primitives only allocate and queue work there) and a last task on the stream reports: no hop through the worker thread. There the budget is checked before anything is queued (an error then comes back from this call)",
  ),
];
