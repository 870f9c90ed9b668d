// ABI spec: CPU layer kernels (native/src/layers/): depthwise convolution, the LSTM recurrence and
// HardSigmoid/HardSwish.
// Each takes any array on any stream: float32 on a CPU stream runs the library's own loop as an MLX
// primitive; anything else gets the same computation from MLX's ops. Their own section, so that
// other additions to the spec merge without touching it.
import { op, type FnSpec } from './dsl.js';

export const layers: FnSpec[] = [
  op(
    'int mlxc_depthwise_conv2d(mlx_array* res, const mlx_array x, const mlx_array w, const mlx_array bias /* may be null */, int stride_h, int stride_w, int pad_top, int pad_left, int pad_bottom, int pad_right, int dilation_h, int dilation_w, const mlx_stream s)',
    'mlxc::cpu::depthwise_conv2d($x, $w, $bias, $stride_h, $stride_w, $pad_top, $pad_left, $pad_bottom, $pad_right, $dilation_h, $dilation_w, $s)',
    'channels-first depthwise convolution: x [N, C, H, W], w [C*M, 1, KH, KW], bias [C*M]; MLX conv_general with groups = C off the CPU',
  ),
  op(
    'int mlxc_lstm(mlx_vector_array* res, const mlx_array proj, const mlx_array rt, const mlx_array h0, const mlx_array c0, const mlx_array lens /* may be null */, const mlx_array peepholes /* may be null */, const int* acts, size_t acts_num, float clip, bool input_forget, int direction, const mlx_stream s)',
    'mlxc::cpu::lstm($proj, $rt, $h0, $c0, $lens, $peepholes, $acts, $clip, $input_forget, $direction, $s)',
    'a whole LSTM layer (every direction; peepholes, activations with alpha/beta, clip, input_forget) over precomputed input projections proj [T, B, D*4H], with rt = R^T [D, H, 4H]: {Y [T, D, B, H], h_T, c_T}',
  ),
  op(
    'int mlxc_hard_sigmoid(mlx_array* res, const mlx_array x, float alpha, float beta, bool swish, const mlx_stream s)',
    'mlxc::cpu::hard_sigmoid($x, $alpha, $beta, $swish, $s)',
    'clip(alpha * x + beta, 0, 1), times x where swish (HardSwish), in one pass',
  ),
];
