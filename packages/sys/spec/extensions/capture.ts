// ABI spec, this library's additions to mlx-c for a runtime over MLX (prefix mlxc_, written by
// hand in native/src/capture.cpp): a closure traced once per input signature and replayed from
// native code, where MLX's compile would need a C++ compiler on the CPU.
import { manual, type FnSpec } from '../dsl.js';

export const capture: FnSpec[] = [
  manual(
    'int mlxc_capture(mlx_closure* res, const mlx_closure fun)',
    "a closure that traces fun once per input signature (dtypes and shapes) with placeholder inputs, keeps the arrays between them and the outputs, and on each call builds them again over the real inputs (sharing the traced primitives): mlx_compile's replay without its simplification and fusion, and without the C++ compiler MLX's CPU compile needs. fun must not read its inputs' data (evaluating a placeholder fails)",
  ),
  manual(
    'int mlxc_capture_run_host(const mlx_closure fun, const void* in_data, size_t in_bytes, const int64_t* in_desc, size_t in_desc_len, size_t n_in, void* out_data, size_t out_bytes, const int64_t* out_desc, size_t out_desc_len, size_t n_out, const mlx_stream stream)',
    "a whole run in one call: fun (any closure, typically mlxc_capture's) applied to n_in arrays copied from the host buffer in_data (in_bytes long; as mlxc_array_new_data_on on stream), its results evaluated (as mlxc_eval_within, no limits) and copied into the host buffer out_data (out_bytes long; as mlxc_array_read, a view made contiguous on stream first). Each descriptor holds, per array, its mlx_dtype, ndim, byte offset in its buffer and the ndim dims; a result whose dtype or shape differs from its descriptor is an error, and nothing is written then. A run of mlxc_capture's closure on a CPU stream executes the trace as a static program (each primitive evaluated in tape order on the calling thread, each intermediate dropped after its last use) instead of replaying it for mlx_eval; MLXC_STATIC_EXEC=0 turns that off. On MLX's CUDA build a trace on one GPU stream runs so too (each primitive's kernels recorded in the stream's command encoder, committed as mlx_eval does, every buffer held until the last commit has finished; the results are computed when the call returns; MLXC_GPU_EXEC=0 turns that off)",
  ),
  manual(
    'int mlxc_host_program_new(void** res, const mlx_closure fun, const int64_t* in_desc, size_t in_desc_len, size_t n_in, const int64_t* out_desc, size_t out_desc_len, size_t n_out, const mlx_stream stream)',
    "mlxc_capture_run_host's work for one signature, made once: the descriptors read and checked here, and on each mlxc_host_program_run only the buffers given (no handles to convert, no signature to look up: a captured closure's trace is found on the first run and kept). The program refers to fun without owning it: fun must outlive it. Free it with mlxc_host_program_free",
  ),
  manual(
    'int mlxc_host_program_run(void* program, const void* in_data, size_t in_bytes, void* out_data, size_t out_bytes)',
    'one run of a program from mlxc_host_program_new, as mlxc_capture_run_host with its descriptors; buffers shorter than the descriptors reach are an error',
  ),
  manual(
    'int mlxc_host_program_run_arrays(void* program, const void* in_data, size_t in_bytes, const uintptr_t* arrays, size_t arrays_num, const void* consume, void* out_data, size_t out_bytes, void* out_arrays, size_t out_arrays_num)',
    "mlxc_host_program_run for a program whose descriptors mark some inputs and results as arrays (byte offset -1): those inputs are the arrays whose ctx addresses `arrays` lists (in slot order; each must have its slot's dtype and shape, and is evaluated first if lazy), the others come from in_data; the array results are written to out_arrays (uintptr_t, new mlx_array ctx addresses the caller frees, in slot order), the others to out_data. Where consume (a uint8_t per array, or null) is non-zero the run takes the array out of its handle, which then holds none (free it; a later use is an error): the run holds the array's only reference, so a kernel may write its output into that input's buffer (a KV cache updated in place). Nothing is consumed when the inputs are refused",
  ),
  manual(
    'int mlxc_host_program_run_async(void* program, const void* in_data, size_t in_bytes, const uintptr_t* arrays, size_t arrays_num, const void* consume, void* out_data, size_t out_bytes, void* out_arrays, size_t out_arrays_num, uint64_t id, int* queued, void* elapsed)',
    "mlxc_host_program_run_arrays on the program stream's evaluation thread (the one mlxc_eval_arrays_async uses): the inputs are checked, copied or taken here, the run is queued, and its end is reported as `id` on the id's channel (mlxc_eval_channel; mlxc_eval_take_error for its error). Until then in_data may be reused but out_data, out_arrays and elapsed must stay alive and untouched; elapsed (a double, or null) gets the run's time on that thread in milliseconds, without the hand-offs. The trace and its static program are found here (a new signature's trace calls fun, on this thread). *queued is 0 when the run cannot go to that thread (fun is not mlxc_capture's, the static executor does not take its trace or is off, or the stream is not one from mlxc_stream_new_any_thread): nothing was done, run it with mlxc_host_program_run_arrays",
  ),
  manual('int mlxc_host_program_free(void* program)', 'frees a program from mlxc_host_program_new (null: nothing)'),
  manual(
    'int mlxc_capture_static_runs(uint64_t* res)',
    'how many host runs (mlxc_capture_run_host, mlxc_host_program_run) the static executor took so far (process-wide): 0 where it is off (MLXC_STATIC_EXEC=0) or took none (a GPU stream other than one of the CUDA build of MLX, or with MLXC_GPU_EXEC=0, a Compiled primitive, an asynchronous evaluation of the stream in flight, the debug aids, an address-space limit: those runs replay the trace and evaluate it with mlx_eval)',
  ),
];
