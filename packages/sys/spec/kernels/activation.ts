// ABI spec, the project's own kernels: activations (native/src/kernels/activation/): act(x + bias)
// in one pass, a gated act(a) * b (SwiGLU, GeGLU), HardSigmoid/HardSwish, and a QuantizeLinear-DequantizeLinear pair (fake quantization).
// Each takes any array on any stream: float32 on a CPU stream runs the library's own vectorized,
// multithreaded kernel (an MLX primitive); anything else gets the same computation from MLX's ops.
import { manual, op, type FnSpec } from '../dsl.js';

export const activation: FnSpec[] = [
  op(
    'int mlxc_fused_activation(mlx_array* res, const mlx_array x, const mlx_array bias /* may be null */, const char* kind, const mlx_stream s)',
    'mlxc::cpu::activation($x, $bias, $kind, $s)',
    'act(x + bias), bias along the last axis; kind: exp, erf, tanh, sigmoid, relu, silu, gelu, gelu_tanh, identity',
  ),
  op(
    'int mlxc_gated_activation(mlx_array* res, const mlx_array a, const mlx_array b /* may be null */, const char* kind, const mlx_stream s)',
    'mlxc::cpu::gated_activation($a, $b, $kind, $s)',
    "act(a) * b in one pass (SwiGLU with silu, GeGLU with gelu; kinds as mlxc_fused_activation's); b null: a's last axis holds the two halves of one product, act(a[..., :n/2]) * a[..., n/2:]; a and b read through their strides where their last axis is contiguous (the slices of a joined product need no copy); a b of another shape or type broadcasts through MLX's ops",
  ),
  op(
    'int mlxc_hard_sigmoid(mlx_array* res, const mlx_array x, float alpha, float beta, bool swish, const mlx_stream s)',
    'mlxc::cpu::hard_sigmoid($x, $alpha, $beta, $swish, $s)',
    'clip(alpha * x + beta, 0, 1), times x where swish (HardSwish), in one pass',
  ),
  op(
    'int mlxc_fake_quantize(mlx_array* res, const mlx_array x, float scale, float zero_point, float lo, float hi, const mlx_stream s)',
    'mlxc::cpu::fake_quantize($x, $scale, $zero_point, $lo, $hi, $s)',
    'QuantizeLinear then DequantizeLinear of one scale and zero point ([lo, hi] the integer range) in one pass, float32',
  ),
  op(
    'int mlxc_greedy_argmax(mlx_array* res, const mlx_array x, const mlx_stream s)',
    'mlxc::cpu::greedy_argmax($x, $s)',
    'the index of the largest element of x flattened, NaN counted as -Infinity, the first of equal maxima (0 where all are NaN or -Infinity), an int32 scalar; one pass for float32 on a CPU stream',
  ),
  manual(
    'int mlxc_greedy_rows(void* dst, size_t rows, bool* done, const mlx_array x)',
    "mlxc_greedy_argmax of each of the last rows rows of x (its last axis the vocabulary) into dst (rows int32 ids), read where the array's data lies in host memory with no graph of its own (x evaluated first if lazy): done is false and nothing is written where x is not float32, not row-contiguous or in a GPU's memory; rows 0 or more than x holds, or an empty last axis, is an error",
  ),
];
