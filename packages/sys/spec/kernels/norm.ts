// ABI spec, the project's own kernels: row normalisations over the last axis
// (native/src/kernels/norm/): softmax, log-softmax, layer norm, RMS norm.
// Each takes any array on any stream: float32 on a CPU stream runs the library's own vectorized,
// multithreaded kernel (an MLX primitive); anything else gets the same computation from MLX's ops.
import { op, type FnSpec } from '../dsl.js';

export const norm: FnSpec[] = [
  op(
    'int mlxc_fused_softmax(mlx_array* res, const mlx_array x, bool log, const mlx_stream s)',
    'mlxc::cpu::softmax($x, $log, $s)',
    'softmax or log-softmax over the last axis',
  ),
  op(
    'int mlxc_fused_layer_norm(mlx_array* res, const mlx_array x, const mlx_array weight /* may be null */, const mlx_array bias /* may be null */, float eps, const mlx_stream s)',
    'mlxc::cpu::layer_norm($x, $weight, $bias, $eps, $s)',
    'layer normalisation over the last axis (mlx_fast_layer_norm off the CPU)',
  ),
  op(
    'int mlxc_fused_rms_norm(mlx_array* res, const mlx_array x, const mlx_array weight /* may be null */, float eps, const mlx_stream s)',
    'mlxc::cpu::rms_norm($x, $weight, $eps, $s)',
    'RMS normalisation over the last axis (mlx_fast_rms_norm off the CPU)',
  ),
];
