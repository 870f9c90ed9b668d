// ABI spec: the fused CPU kernels (native/src/cpu/). Each takes any array on any stream: float32 on
// a CPU stream runs the library's own vectorized, multithreaded kernel (an MLX primitive); anything
// else gets the same computation from MLX's ops. Their own section, so that other additions to the
// spec merge without touching it.
import { manual, op, type FnSpec } from './dsl.js';

export const cpu: FnSpec[] = [
  op(
    'int mlxc_fused_activation(mlx_array* res, const mlx_array x, const mlx_array bias /* may be null */, const char* kind, const mlx_stream s)',
    'mlxc::cpu::activation($x, $bias, $kind, $s)',
    'act(x + bias), bias along the last axis; kind: exp, erf, tanh, sigmoid, relu, silu, gelu, gelu_tanh, identity',
  ),
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
  manual(
    'int mlxc_cpu_set_threads(int n)',
    "threads of the fused kernels' pool and of OpenBLAS (openblas_set_num_threads, where loaded); n <= 0: the machine's cores",
  ),
  manual('int mlxc_cpu_threads(int* res)', "the fused kernels' thread count"),
  manual('int mlxc_cpu_has_avx2(bool* res)', 'whether the fused kernels run their AVX2+FMA build on this CPU'),
  manual(
    'int mlxc_cpu_has_avx512(bool* res)',
    'whether the fused kernels run their AVX-512F build on this CPU (it takes precedence over AVX2)',
  ),
];
