// ABI spec, the project's own kernels: matrix products for few rows (native/src/kernels/gemm/),
// LLM decoding's shapes. Each takes any arrays on any stream: float32 on a CPU stream with few rows
// (4 for float32 weights, 16 for 4-bit ones) runs the library's own vectorized, multithreaded
// kernel (an MLX primitive that reads the weights in place); anything else gets MLX's op.
import { manual, op, type FnSpec } from '../dsl.js';

export const gemm: FnSpec[] = [
  op(
    'int mlxc_small_matmul(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_array bias /* may be null */, const mlx_stream s)',
    'mlxc::cpu::small_matmul($a, $b, $bias, $s)',
    "a @ b (+ bias along the last axis), numpy's matmul rules; the CPU kernel for float32 with at most 4 rows (b [K, N] or a transposed view), else mlx_matmul (addmm with a bias)",
  ),
  op(
    'int mlxc_small_quantized_matmul(mlx_array* res, const mlx_array x, const mlx_array w, const mlx_array scales, const mlx_array biases, bool transpose, int group_size, int bits, const mlx_stream s)',
    'mlxc::cpu::small_quantized_matmul($x, $w, $scales, $biases, $transpose, $group_size, $bits, $s)',
    'mlx_quantized_matmul in affine mode; the CPU kernel for float32 x with at most 16 rows, transpose, 4 bits, groups of 32/64/128; more rows on the CPU: dequantize + matmul',
  ),
  op(
    'int mlxc_dense_pack_weight(mlx_array* res, const mlx_array w, const mlx_stream s)',
    'mlxc::cpu::dense_pack_weight($w, $s)',
    'w [K, N] -> [ceil(N / 32), K, 32], zeros past N: the weight layout of mlxc_dense_gemm (packed once, for a constant weight; in the AVX2 build, as mlxc_conv_split_halves says, each panel holds its first 16 columns [K, 16], then the other 16)',
  ),
  manual(
    'int mlxc_dense_pack_host(void* dst, const void* src, size_t k, size_t n)',
    "dense_pack_weight on host memory, threaded: src float32 [k, n] (at any byte alignment) -> dst float32 [ceil(n / 32), k, 32], zeros past n (the caller owns both buffers and their sizes; dst's pages are populated up front)",
  ),
  manual(
    'int mlxc_transpose_host(void* dst, const void* src, size_t k, size_t n, size_t elem_size)',
    'a [k, n] matrix of 2- or 4-byte elements on host memory -> its transpose [n, k] in dst, threaded, in cache-sized tiles (a constant weight stored transposed once; the caller owns both buffers and their sizes)',
  ),
  op(
    'int mlxc_dense_gemm(mlx_array* res, const mlx_array x, const mlx_array w_packed, int n, const mlx_array bias /* may be null */, const mlx_stream s)',
    'mlxc::cpu::dense_gemm($x, $w_packed, $n, $bias, $s)',
    'x [..., K] @ w (+ bias [n]) with w_packed from mlxc_dense_pack_weight of a [K, n] weight: the CPU kernel for float32 at any row count (panels streamed once for few rows, 12-row tiles otherwise), else mlx_matmul on the unpacked weight',
  ),
  op(
    'int mlxc_dense_gemm_act(mlx_array* res, const mlx_array x, const mlx_array w_packed, int n, const mlx_array bias /* may be null */, const char* kind, const mlx_array residual /* may be null */, const mlx_stream s)',
    'mlxc::cpu::dense_gemm_act($x, $w_packed, $n, $bias, $kind, $residual, $s)',
    "mlxc_dense_gemm, then the activation kind of mlxc_fused_activation (gelu, gelu_tanh, relu, silu, sigmoid, tanh, erf, exp, identity) on each result, then residual added (a skip connection; may be null): the CPU kernel applies both to each block of the output as soon as the block is complete, while it is in cache, instead of in passes of their own; a residual of another shape (it broadcasts) or type is added by mlx_add after the product, as everything off the kernel is MLX's ops. An unknown kind is an error",
  ),
];
