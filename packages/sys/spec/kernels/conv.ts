// ABI spec, the project's own kernels: convolutions (native/src/kernels/conv/). The channels-last
// convolution as one product on the CPU: a weight packed once into panels of 32 output channels,
// and the convolution that reads it with the im2col rows packed per block on the thread pool, bias,
// residual and clamp in its store (any other device or dtype gets MLX's conv_general on the
// unpacked weight); the convolution epilogue (bias, residual add and a clamp in one pass after a
// convolution); and the channels-first depthwise convolution.
// Each takes any array on any stream: float32 on a CPU stream runs the library's own vectorized,
// multithreaded kernel (an MLX primitive); anything else gets the same computation from MLX's ops.
import { manual, op, type FnSpec } from '../dsl.js';

export const conv: FnSpec[] = [
  op(
    'int mlxc_conv_pack_weight(mlx_array* res, const mlx_array w, const mlx_stream s)',
    'mlxc::cpu::conv_pack_weight($w, $s)',
    'w [O, ...kernel, C] -> [ceil(O / 32), ...kernel, C, 32], zeros past O: the weight layout of mlxc_conv_gemm (with mlxc_conv_split_halves, each panel holds its first 16 channels [...kernel, C, 16], then the other 16)',
  ),
  manual(
    'int mlxc_conv_pack_host(void* dst, const void* src, size_t o, size_t c, size_t s, size_t group)',
    "an ONNX convolution weight [o, c, ...kernel] (s taps, group groups of o / group output channels, c input channels each) in host memory packed into mlxc_conv_gemm's panels, [group * ceil(o / group / 32), ...kernel, c, 32], each group's in turn, halves apart as mlxc_conv_split_halves says; threaded; src float32 bytes at any alignment, dst zero-filled by the caller (zeros past each group's channels) and its pages populated here; o not a multiple of group is an error",
  ),
  manual(
    'int mlxc_conv_split_halves(bool* res)',
    "whether mlxc_conv_pack_weight's panels hold their two halves of 16 channels one after another (the AVX2 build's layout; fixed for the process)",
  ),
  op(
    'int mlxc_conv_gemm(mlx_array* res, const mlx_array x, const mlx_array w_packed, int out_channels, const mlx_array bias /* may be null */, const mlx_array residual /* may be null */, const int* strides, size_t strides_num, const int* pads_begin, size_t pads_begin_num, const int* pads_end, size_t pads_end_num, const int* dilations, size_t dilations_num, float lo, float hi, const mlx_stream s)',
    'mlxc::cpu::conv_gemm($x, $w_packed, $out_channels, $bias, $residual, $strides, $pads_begin, $pads_end, $dilations, $lo, $hi, $s)',
    'clamp(conv(x, w) + bias + residual, lo, hi) channels-last (x [N, ...spatial, C], 1 or 2 spatial axes) with the weight from mlxc_conv_pack_weight; grouped when the weight holds C / g channels (each group padded to whole panels before packing); the CPU kernel for float32 (a 3x3 window with unit strides and dilations, one group, 16 or more channels in and out and 32 or more tiles of 2x2 outputs by the Winograd F(2x2, 3x3) algorithm, its transformed weight kept by the primitive for the next evaluation; an infinity or NaN in x or w, or MLXC_WINOGRAD=0, takes the direct product), else mlx_conv_general',
  ),
  op(
    'int mlxc_conv_epilogue(mlx_array* res, const mlx_array y, const mlx_array bias /* may be null */, const mlx_array residual /* may be null */, float lo, float hi, bool channels_last, const mlx_stream s)',
    'mlxc::cpu::conv_epilogue($y, $bias, $residual, $lo, $hi, $channels_last, $s)',
    'clamp(y + bias + residual, lo, hi) as [N, C, ...spatial]: y channels-last ([N, ...spatial, C], moved to channels-first) or channels-first; bias per channel; NaN stays NaN',
  ),
  op(
    'int mlxc_conv_epilogue_act(mlx_array* res, const mlx_array y, const mlx_array bias /* may be null */, const mlx_array residual /* may be null */, float lo, float hi, int act, float alpha, float beta, bool channels_last, const mlx_stream s)',
    'mlxc::cpu::conv_epilogue_act($y, $bias, $residual, $lo, $hi, $act, $alpha, $beta, $channels_last, $s)',
    'mlxc_conv_epilogue, then act on each clamped value in the same pass: 0 none, 1 HardSigmoid clamp(v * alpha + beta, 0, 1), 2 HardSwish v times it (the Conv + HardSwish of MobileNetV3); NaN stays NaN',
  ),
  op(
    'int mlxc_pointwise_conv(mlx_array* res, const mlx_array x, const mlx_array w, const mlx_array bias /* may be null */, const mlx_array residual /* may be null */, float lo, float hi, int act, float alpha, float beta, const mlx_stream s)',
    'mlxc::cpu::pointwise_conv($x, $w, $bias, $residual, $lo, $hi, $act, $alpha, $beta, $s)',
    'the 1x1 convolution channels-first, act(clamp(w x + bias + residual, lo, hi)) per image: x [N, C, ...spatial], w [O, C], bias [O], residual [N, O, ...spatial] (one that broadcasts: MLX ops after the product), act as mlxc_conv_epilogue_act; register tiles on the thread pool for float32 on the CPU, else mlx_matmul and the epilogue',
  ),
  op(
    'int mlxc_small_conv(mlx_array* res, const mlx_array x, const mlx_array w, const mlx_array bias /* may be null */, const int* strides, size_t strides_num, const int* pads_begin, size_t pads_begin_num, const int* pads_end, size_t pads_end_num, const int* dilations, size_t dilations_num, float lo, float hi, const mlx_stream s)',
    'mlxc::cpu::small_conv($x, $w, $bias, $strides, $pads_begin, $pads_end, $dilations, $lo, $hi, $s)',
    'clamp(conv(x, w) + bias, lo, hi) channels-first with one group, for few output positions: x [N, C, ...spatial] (1 or 2 spatial axes), w [O, C, ...kernel] read in place, bias [O]; the im2col rows of 4 positions at a time times the weight rows by the small-row product kernels for float32 on the CPU, else mlx_conv_general between channels-last moves',
  ),
  op(
    'int mlxc_depthwise_conv2d(mlx_array* res, const mlx_array x, const mlx_array w, const mlx_array bias /* may be null */, int stride_h, int stride_w, int pad_top, int pad_left, int pad_bottom, int pad_right, int dilation_h, int dilation_w, const mlx_stream s)',
    'mlxc::cpu::depthwise_conv2d($x, $w, $bias, $stride_h, $stride_w, $pad_top, $pad_left, $pad_bottom, $pad_right, $dilation_h, $dilation_w, $s)',
    'channels-first depthwise convolution: x [N, C, H, W], w [C*M, 1, KH, KW], bias [C*M]; MLX conv_general with groups = C off the CPU',
  ),
  op(
    'int mlxc_depthwise_conv2d_act(mlx_array* res, const mlx_array x, const mlx_array w, const mlx_array bias /* may be null */, int stride_h, int stride_w, int pad_top, int pad_left, int pad_bottom, int pad_right, int dilation_h, int dilation_w, float lo, float hi, int act, float alpha, float beta, const mlx_stream s)',
    'mlxc::cpu::depthwise_conv2d_act($x, $w, $bias, $stride_h, $stride_w, $pad_top, $pad_left, $pad_bottom, $pad_right, $dilation_h, $dilation_w, $lo, $hi, $act, $alpha, $beta, $s)',
    'mlxc_depthwise_conv2d, then clamp to [lo, hi] and act (0 none, 1 HardSigmoid, 2 HardSwish with alpha and beta) on each output in the same pass; NaN stays NaN',
  ),
];
