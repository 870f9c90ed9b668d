// Facts about the loaded MLX build.
import { check, fn } from './native.js';

let cached: string | undefined;

/** MLX's version string, e.g. '0.32.4' (of the libmlx the native library was built against). */
export function version(): string {
  if (cached === undefined) {
    const s = { ctx: null };
    check(fn.mlx_version(s), 'mlx_version');
    cached = fn.mlx_string_data(s) as string;
    fn.mlx_string_free(s);
  }
  return cached;
}
