// ABI spec, the project's own kernels: optimizer updates (native/src/kernels/optim/): AdamW's step
// over one parameter in one pass over param, grad and the moments.
// Each takes any array on any stream: float32 on a CPU stream runs the library's own vectorized,
// multithreaded kernel (an MLX primitive); anything else gets the same computation from MLX's ops.
import { op, type FnSpec } from '../dsl.js';

export const optim: FnSpec[] = [
  op(
    'int mlxc_adamw_step(mlx_vector_array* res, const mlx_array param, const mlx_array grad, const mlx_array m /* may be null */, const mlx_array v /* may be null */, double lr, double beta1, double beta2, double eps, double weight_decay, int step, const mlx_stream s)',
    'mlxc::cpu::adamw_step($param, $grad, $m, $v, $lr, $beta1, $beta2, $eps, $weight_decay, $step, $s)',
    'one AdamW step (torch.optim.AdamW) of step number `step` (1 for the first; m and v null then): {param, m, v} updated, in one pass (in place where the moments are donated)',
  ),
];
