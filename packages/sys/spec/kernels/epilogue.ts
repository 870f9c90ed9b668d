// ABI spec: the convolution epilogue (native/src/cpu/epilogue.cpp): bias, residual add and a clamp
// in one pass after a convolution, on the CPU's thread pool; MLX's ops elsewhere. Its own section,
// so that other additions to the spec merge without touching it.
import { op, type FnSpec } from './dsl.js';

export const epilogue: FnSpec[] = [
  op(
    'int mlxc_conv_epilogue(mlx_array* res, const mlx_array y, const mlx_array bias /* may be null */, const mlx_array residual /* may be null */, float lo, float hi, bool channels_last, const mlx_stream s)',
    'mlxc::cpu::conv_epilogue($y, $bias, $residual, $lo, $hi, $channels_last, $s)',
    'clamp(y + bias + residual, lo, hi) as [N, C, ...spatial]: y channels-last ([N, ...spatial, C], moved to channels-first) or channels-first; bias per channel; NaN stays NaN',
  ),
];
