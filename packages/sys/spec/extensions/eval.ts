// ABI spec: functions of this library that mlx-c does not have (prefix mlxc_), written by hand in
// native/src/extensions.cpp. They exist for what a runtime over MLX needs from native code that the
// C API does not give: streams another thread may evaluate, and evaluation within a memory budget.
import { manual, type FnSpec } from './dsl.js';

export const extensions: FnSpec[] = [
  manual(
    'mlx_stream mlxc_stream_new_any_thread(mlx_device dev)',
    "MLX's new_thread_unsafe_stream: arrays built on it can be evaluated from another thread (one thread at a time); mlx_stream_new_device's streams only evaluate on the thread that made them",
  ),
  manual(
    'int mlxc_array_prefetch(bool* moved, const mlx_array arr, bool to_host)',
    "on MLX's CUDA build, migrates an evaluated array's unified memory to the host or the GPU in one transfer (the driver's cuMemPrefetchAsync) instead of page by page on first touch; moved is false where there is no CUDA (a no-op)",
  ),
  manual(
    'int mlxc_array_meta(int* meta, const mlx_array arr, size_t meta_len)',
    "an array's dtype, ndim and shape in one call: meta[0] = dtype, meta[1] = ndim, meta[2..] = the dims, as many as meta_len - 2 allows (the caller reads the shape through mlx_array_shape when ndim is larger)",
  ),
  manual(
    'int mlxc_array_free_many(const uintptr_t* ctxs, size_t ctxs_num)',
    'frees many arrays in one call: each entry is the ctx of an mlx_array (0 is skipped), as mlx_array_free would',
  ),
  manual(
    'int mlxc_array_new_data_on(mlx_array* res, const void* data, const int* shape, int dim, mlx_dtype dtype, const mlx_stream stream)',
    "mlx_array_new_data for the device that evaluates on stream: on MLX's CUDA build and a GPU stream, large data (256 KiB and more) is copied into device memory by the copy engine, through pinned staging buffers, instead of into unified memory that kernels then fault in page by page; elsewhere the data is copied on the host. MLXC_TRANSFER=staged (the default), pageable, pinned or unified (MLX's own path) picks how",
  ),
  manual(
    'int mlxc_array_read(void* dst, size_t nbytes, const mlx_array arr)',
    "copies a row-contiguous array's nbytes bytes into dst, evaluating (or waiting for) it first: device memory on MLX's CUDA build by the copy engine (see mlxc_array_new_data_on), anything else with memcpy from its host pointer",
  ),
  manual(
    'int mlxc_host_alloc(void** res, bool* pinned, size_t nbytes)',
    "host memory for feeds and results, its pages populated up front: page-locked (cuMemHostAlloc, portable) on MLX's CUDA build, so that mlxc_array_read into it and mlxc_array_new_data_on from it go straight through the copy engine with no staging; page-aligned ordinary memory elsewhere (pinned is false). Free it with mlxc_host_free",
  ),
  manual('int mlxc_host_free(void* ptr)', 'frees memory of mlxc_host_alloc; a pointer it did not return is an error (nothing is freed)'),
  manual(
    'int mlxc_array_device_index(int* res, const mlx_array arr)',
    "the CUDA device whose memory holds the array's buffer, -1 for unified or host memory (always -1 without CUDA)",
  ),
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
    'the read end of the pipe through which mlxc_eval_arrays_async reports: 16-byte records, each a uint64_t id and the uint64_t length of its error message (0: none), written by native threads without waiting for the reader (the JS thread watches the pipe in its event loop)',
  ),
  manual(
    'int mlxc_eval_take_error(void* buf, size_t cap, uint64_t id)',
    "copies (truncated to cap - 1 bytes, NUL-terminated) and forgets the error message of evaluation id, reported through mlxc_eval_notifier's pipe; empty when there is none",
  ),
  manual(
    'int mlxc_eval_arrays_async(const uintptr_t* ctxs, size_t ctxs_num, const mlx_stream stream, size_t max_array_bytes, size_t max_total_bytes, size_t max_inline_nodes, uint64_t id)',
    "mlxc_eval_background on arrays given as ctx addresses, reporting its end as `id` through mlxc_eval_notifier's pipe; on a CPU stream, a graph of at most max_inline_nodes arrays to compute (0: never), all on that stream, is queued from the calling thread instead (MLX's CPU primitives only allocate and queue work there) and a last task on the stream reports: no hop through the worker thread. There the budget is checked before anything is queued (an error then comes back from this call)",
  ),
  manual(
    'int mlxc_closure_apply_arrays(void* n_out, void* outs, void* meta, size_t cap, size_t meta_stride, const mlx_closure cls, const uintptr_t* ins, size_t ins_num)',
    'mlx_closure_apply on arrays given as ctx addresses, in one call: n_out (a uint64_t) is the number of results; when it is at most cap, outs[i] (uintptr_t) is a new mlx_array ctx (the caller frees it) and meta[i * meta_stride ..] (int) holds its dtype, ndim and as many dims as meta_stride - 2 allows (as mlxc_array_meta); otherwise nothing is kept and the caller asks again with room for n_out',
  ),
  manual(
    'int mlxc_array_read_any(void* dst, size_t nbytes, const mlx_array arr, const mlx_stream stream)',
    'mlxc_array_read of any array: evaluates it and, when it is not row-contiguous (a transpose, a broadcast), copies it contiguous on stream first',
  ),
];
