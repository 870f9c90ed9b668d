// ABI spec, the project's own kernels: recurrent layers (native/src/kernels/rnn/): a whole LSTM
// layer's recurrence in one primitive.
// Each takes any array on any stream: float32 on a CPU stream runs the library's own vectorized,
// multithreaded kernel (an MLX primitive); anything else gets the same computation from MLX's ops.
import { op, type FnSpec } from '../dsl.js';

export const rnn: FnSpec[] = [
  op(
    'int mlxc_lstm(mlx_vector_array* res, const mlx_array proj, const mlx_array rt, const mlx_array h0, const mlx_array c0, const mlx_array lens /* may be null */, const mlx_array peepholes /* may be null */, const int* acts, size_t acts_num, float clip, bool input_forget, int direction, const mlx_stream s)',
    'mlxc::cpu::lstm($proj, $rt, $h0, $c0, $lens, $peepholes, $acts, $clip, $input_forget, $direction, $s)',
    'a whole LSTM layer (every direction; peepholes, activations with alpha/beta, clip, input_forget) over precomputed input projections proj [T, B, D*4H], with rt = R^T [D, H, 4H]: {Y [T, D, B, H], h_T, c_T}',
  ),
];
