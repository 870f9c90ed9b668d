// ABI spec, this library's additions to mlx-c for a runtime over MLX (prefix mlxc_, written by
// hand in native/src/handles.cpp): fewer calls through the FFI for what the runtime does on every
// run (an array's metadata, many arrays freed, a closure applied to handles), and streams that
// another thread may evaluate.
import { manual, type FnSpec } from '../dsl.js';

export const handles: FnSpec[] = [
  manual(
    'mlx_stream mlxc_stream_new_any_thread(mlx_device dev)',
    "MLX's new_thread_unsafe_stream: arrays built on it can be evaluated from another thread (one thread at a time); mlx_stream_new_device's streams only evaluate on the thread that made them",
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
    'int mlxc_closure_apply_arrays(void* n_out, void* outs, void* meta, size_t cap, size_t meta_stride, const mlx_closure cls, const uintptr_t* ins, size_t ins_num)',
    'mlx_closure_apply on arrays given as ctx addresses, in one call: n_out (a uint64_t) is the number of results; when it is at most cap, outs[i] (uintptr_t) is a new mlx_array ctx (the caller frees it) and meta[i * meta_stride ..] (int) holds its dtype, ndim and as many dims as meta_stride - 2 allows (as mlxc_array_meta); otherwise nothing is kept and the caller asks again with room for n_out',
  ),
];
