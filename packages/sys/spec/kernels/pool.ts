// ABI spec, the project's own kernels: the channels-last max and average pools between and after
// channels-last convolutions, and the mean over trailing axes (native/src/kernels/pool/).
// Each takes any array on any stream: float32 on a CPU stream runs the library's own vectorized,
// multithreaded kernel (an MLX primitive); anything else gets the same computation from MLX's ops.
import { op, type FnSpec } from '../dsl.js';

export const pool: FnSpec[] = [
  op(
    'int mlxc_max_pool_channels_last(mlx_array* res, const mlx_array x, const int* kernel, size_t kernel_num, const int* strides, size_t strides_num, const int* pads_begin, size_t pads_begin_num, const int* pads_end, size_t pads_end_num, const int* dilations, size_t dilations_num, const mlx_stream s)',
    'mlxc::cpu::max_pool_channels_last($x, $kernel, $strides, $pads_begin, $pads_end, $dilations, $s)',
    'the max of each window of x [N, ...spatial, C] (padding never wins, NaN propagates), [N, ...out, C]: one pass on the thread pool for float32 on the CPU (1 or 2 spatial axes), else MLX pad + strided slices + maximum',
  ),
  op(
    'int mlxc_avg_pool_channels_last(mlx_array* res, const mlx_array x, const int* kernel, size_t kernel_num, const int* strides, size_t strides_num, const int* pads_begin, size_t pads_begin_num, const int* pads_end, size_t pads_end_num, const int* dilations, size_t dilations_num, bool ceil_mode, bool count_include_pad, const mlx_stream s)',
    'mlxc::cpu::avg_pool_channels_last($x, $kernel, $strides, $pads_begin, $pads_end, $dilations, $ceil_mode, $count_include_pad, $s)',
    "the mean of each window of x [N, ...spatial, C] (ONNX AveragePool: ceil_mode's overhang neither summed nor counted; the padding counted with count_include_pad), [N, ...out, C]: one pass on the thread pool for float32 on the CPU (1 or 2 spatial axes), else MLX pad + strided slices + add, divided by the counts",
  ),
  op(
    'int mlxc_mean_trailing(mlx_array* res, const mlx_array x, int axes, bool keepdims, const mlx_stream s)',
    'mlxc::cpu::mean_trailing($x, $axes, $keepdims, $s)',
    'the mean of x over its last `axes` axes (kept as 1 with keepdims): ReduceMean over H, W and GlobalAveragePool channels-first; one vectorized pass per row on the thread pool for float32 on the CPU, else mlx_mean',
  ),
];
