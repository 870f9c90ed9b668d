// ABI spec: the channels-last convolution as one product on the CPU (native/src/cpu/conv_gemm.*):
// a weight packed once into panels of 32 output channels, and the convolution that reads it with
// the im2col rows packed per block on the thread pool, bias, residual and clamp in its store; and
// the channels-last max and average pools between and after such convolutions.
// Any other device or dtype gets MLX's conv_general on the unpacked weight. Its own section, so
// that other additions to the spec merge without touching it.
import { op, type FnSpec } from './dsl.js';

export const conv: FnSpec[] = [
  op(
    'int mlxc_conv_pack_weight(mlx_array* res, const mlx_array w, const mlx_stream s)',
    'mlxc::cpu::conv_pack_weight($w, $s)',
    'w [O, ...kernel, C] -> [ceil(O / 32), ...kernel, C, 32], zeros past O: the weight layout of mlxc_conv_gemm',
  ),
  op(
    'int mlxc_conv_gemm(mlx_array* res, const mlx_array x, const mlx_array w_packed, int out_channels, const mlx_array bias /* may be null */, const mlx_array residual /* may be null */, const int* strides, size_t strides_num, const int* pads_begin, size_t pads_begin_num, const int* pads_end, size_t pads_end_num, const int* dilations, size_t dilations_num, float lo, float hi, const mlx_stream s)',
    'mlxc::cpu::conv_gemm($x, $w_packed, $out_channels, $bias, $residual, $strides, $pads_begin, $pads_end, $dilations, $lo, $hi, $s)',
    'clamp(conv(x, w) + bias + residual, lo, hi) channels-last (x [N, ...spatial, C], 1 or 2 spatial axes) with the weight from mlxc_conv_pack_weight; grouped when the weight holds C / g channels (each group padded to whole panels before packing); the CPU kernel for float32, else mlx_conv_general',
  ),
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
];
