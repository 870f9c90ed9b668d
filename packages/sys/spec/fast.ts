// ABI spec: MLX's fast functions, with mlx-c's names, argument order and conventions.
// Each entry is the C prototype; the generator derives the C++ glue, the koffi declaration
// and the TS type from it. A second argument overrides the C++ call expression.
import { op, type FnSpec } from './dsl.js';

export const fast: FnSpec[] = [
  op(
    'int mlx_fast_layer_norm(mlx_array* res, const mlx_array x, const mlx_array weight /* may be null */, const mlx_array bias /* may be null */, float eps, const mlx_stream s)',
  ),
  op('int mlx_fast_rms_norm(mlx_array* res, const mlx_array x, const mlx_array weight /* may be null */, float eps, const mlx_stream s)'),
  op(
    'int mlx_fast_rope(mlx_array* res, const mlx_array x, int dims, bool traditional, mlx_optional_float base, float scale, int offset, const mlx_array freqs /* may be null */, const mlx_stream s)',
  ),
  op(
    'int mlx_fast_rope_dynamic(mlx_array* res, const mlx_array x, int dims, bool traditional, mlx_optional_float base, float scale, const mlx_array offset, const mlx_array freqs /* may be null */, const mlx_stream s)',
  ),
  op(
    'int mlx_fast_scaled_dot_product_attention(mlx_array* res, const mlx_array queries, const mlx_array keys, const mlx_array values, float scale, const char* mask_mode, const mlx_array mask_arr /* may be null */, const mlx_array sinks /* may be null */, const mlx_stream s)',
    'mlx::core::fast::scaled_dot_product_attention($queries, $keys, $values, scale, $mask_mode, $mask_arr, $sinks, false, $s)',
  ),
];
