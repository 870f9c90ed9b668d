// ABI spec, the project's own kernels: attention (native/src/kernels/attention/): attention over whole
// sequences (fused_attention: prefill, encoders), and a grouped-query
// attention decode step over a KV cache of fixed capacity in three primitives (rotary, cache writes in
// place, attention over each sequence's own keys). Float32 on a CPU stream only: the front end
// composes MLX's ops elsewhere.
import { op, type FnSpec } from '../dsl.js';

export const attention: FnSpec[] = [
  op(
    'int mlxc_fused_attention(mlx_array* res, const mlx_array q, const mlx_array k, const mlx_array v, const mlx_array mask /* may be null */, float scale, bool causal, int causal_offset, bool empty_nan, const mlx_stream s)',
    'mlxc::cpu::fused_attention($q, $k, $v, $mask, $scale, $causal, $causal_offset, $empty_nan, $s)',
    'attention over whole sequences, the CPU kernel for float32 (MLX ops elsewhere): q [B, Hq, L, D], k [B, Hk, S, D], v [B, Hk, S, Dv] (Hq a multiple of Hk) -> softmax(scale * q·kᵀ + masks)·v [B, Hq, L, Dv]; query i sees key j <= i + causal_offset when causal, and where a boolean mask [B|1, Hq|1, L|1, W] (W <= S, keys from W masked) is true (a float mask is added); rows that see no key give zeros, or NaN with empty_nan',
  ),
  op(
    'int mlxc_gqa_step(mlx_vector_array* res, const mlx_array q, const mlx_array k /* may be null */, const mlx_array v /* may be null */, const mlx_array past_k, const mlx_array past_v, const mlx_array len, const mlx_array positions /* may be null */, const mlx_array cos /* may be null */, const mlx_array sin /* may be null */, bool interleaved, bool causal, int window, int total, float scale, bool from_zero, const mlx_stream s)',
    'mlxc::cpu::gqa_step($q, $k, $v, $past_k, $past_v, $len, $positions, $cos, $sin, $interleaved, $causal, $window, $total, $scale, $from_zero, $s)',
    "one grouped-query attention decode step, float32 on the CPU: q [B, N, S, H], k and v [B, Nkv, S, H] (or all three flat as ONNX has them, [B, S, heads * H] with a contiguous last axis: slices of a packed QKV need no copy; or k and v null and q one packed QKV [B, S, (N + 2 Nkv) * H], read at each part's columns) rotated (cos, sin [P, R/2], at positions [B, S] or start + i) and written into past_k/past_v [B, Nkv, C, H] at rows start .. start + S - 1, start = len - S (0 with from_zero: a first prompt, right-padded sequences shorter than S) (in place when donated), attention of query i over keys j < min(len, total), causal and windowed at start + i: {y (q's shape), present_k, present_v}",
  ),
];
