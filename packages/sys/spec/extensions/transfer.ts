// ABI spec, this library's additions to mlx-c for a runtime over MLX (prefix mlxc_, written by
// hand in native/src/transfer.cpp and prefetch.cpp): data in and out of arrays, and host memory for
// it, straight into and out of device memory on MLX's CUDA build.
import { manual, type FnSpec } from '../dsl.js';

export const transfer: FnSpec[] = [
  manual(
    'int mlxc_array_new_data_on(mlx_array* res, const void* data, const int* shape, int dim, mlx_dtype dtype, const mlx_stream stream)',
    "mlx_array_new_data for the device that evaluates on stream: on MLX's CUDA build and a GPU stream, large data (256 KiB and more) is copied into device memory by the copy engine, through pinned staging buffers, instead of into unified memory that kernels then fault in page by page; elsewhere the data is copied on the host. MLXC_TRANSFER=staged (the default), pageable, pinned or unified (MLX's own path) picks how",
  ),
  manual(
    'int mlxc_array_new_resident(mlx_array* res, const void* data, const int* shape, int dim, mlx_dtype dtype, const mlx_stream stream)',
    "mlxc_array_new_data_on for data kept for a long time (a model's weights): on Linux, on MLX's CPU build and a CPU stream, the copy goes into an arena of 2 MiB-aligned mappings shared by the process's resident arrays and advised MADV_HUGEPAGE (the first 128 MiB a process holds there; MLXC_HUGEPAGES=<MiB> another budget, 0 none; an invalid value is an error), so that a step reading every weight walks few page tables; a mapping is returned to the system when its last array is freed. Elsewhere the same as mlxc_array_new_data_on",
  ),
  manual(
    'int mlxc_resident_memory(size_t* live, size_t* mapped, size_t* huge)',
    "mlxc_array_new_resident's arena: bytes held by live arrays, bytes mapped, and bytes of the mappings advised for huge pages",
  ),
  manual(
    'int mlxc_heap_memory(size_t* live, size_t* mapped, size_t* free, size_t* huge)',
    "the heap that serves MLX's buffers on Linux's CPU build (chunks of 2 MiB-aligned mappings advised MADV_HUGEPAGE, the first 32 MiB a process maps; MLXC_HEAP_HUGEPAGES=<MiB> another budget, 0 none; MLXC_CPU_HEAP=0 leaves MLX's allocator alone): bytes held by live buffers, bytes mapped, bytes mapped but free (counted by mlx_get_cache_memory, given back by mlx_clear_cache and beyond mlx_set_cache_limit), and bytes advised for huge pages; all 0 where the heap does not serve",
  ),
  manual(
    'int mlxc_array_read(void* dst, size_t nbytes, const mlx_array arr)',
    "copies a row-contiguous array's nbytes bytes into dst, evaluating it first (as mlxc_eval_within: a CPU stream's work on the calling thread) or waiting for it: device memory on MLX's CUDA build by the copy engine (see mlxc_array_new_data_on), anything else with memcpy from its host pointer",
  ),
  manual(
    'int mlxc_array_read_any(void* dst, size_t nbytes, const mlx_array arr, const mlx_stream stream)',
    'mlxc_array_read of any array: evaluates it and, when it is not row-contiguous (a transpose, a broadcast), copies it contiguous on stream first',
  ),
  manual(
    'int mlxc_host_alloc(void** res, bool* pinned, size_t nbytes)',
    "host memory for feeds and results, its pages populated up front: page-locked (cuMemHostAlloc, portable) on MLX's CUDA build, so that mlxc_array_read into it and mlxc_array_new_data_on from it go straight through the copy engine with no staging; page-aligned ordinary memory elsewhere (pinned is false). Free it with mlxc_host_free",
  ),
  manual(
    'int mlxc_host_populate(void* ptr, size_t nbytes)',
    "populates the whole pages of the caller's fresh host memory [ptr, ptr + nbytes) up front (MADV_POPULATE_WRITE on Linux, over several threads; ranges under 1 MiB and other systems: nothing), leaving its contents as they are: a large buffer about to be written (a model file read into it) then takes no page fault per page",
  ),
  manual('int mlxc_host_free(void* ptr)', 'frees memory of mlxc_host_alloc; a pointer it did not return is an error (nothing is freed)'),
  manual(
    'int mlxc_array_device_index(int* res, const mlx_array arr)',
    "the CUDA device whose memory holds the array's buffer, -1 for unified or host memory (always -1 without CUDA)",
  ),
  manual(
    'int mlxc_array_prefetch(bool* moved, const mlx_array arr, bool to_host)',
    "on MLX's CUDA build, migrates an evaluated array's unified memory to the host or the GPU in one transfer (the driver's cuMemPrefetchAsync) instead of page by page on first touch; moved is false where there is no CUDA (a no-op)",
  ),
];
