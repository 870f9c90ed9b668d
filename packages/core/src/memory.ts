// MLX's memory figures and limits (bytes).
import { flushDisposed } from './lifetime.js';
import { check, fn } from './native.js';

// Each figure first frees the arrays whose dispose() is batched (lifetime.ts), so it counts them freed.
function read(f: (out: never) => number, name: string): number {
  flushDisposed();
  const out = [0];
  check(f(out as never), name);
  return Number(out[0]);
}

export const memory = {
  /** Bytes held by live arrays (resident ones included: see `resident`). */
  active: (): number => read(fn.mlx_get_active_memory, 'mlx_get_active_memory'),
  /**
   * The arena of resident arrays (`Array.fromTypedArray(..., { resident: true })`): bytes held by
   * live arrays, bytes mapped, and bytes of the mappings advised for huge pages (all 0 where
   * resident arrays are ordinary ones: off Linux, on a GPU build or stream).
   */
  resident: (): { live: number; mapped: number; huge: number } => {
    flushDisposed();
    const live = [0];
    const mapped = [0];
    const huge = [0];
    check(fn.mlxc_resident_memory(live as never, mapped as never, huge as never), 'mlxc_resident_memory');
    return { live: Number(live[0]), mapped: Number(mapped[0]), huge: Number(huge[0]) };
  },
  /**
   * The heap that holds MLX's buffers on Linux's CPU build (huge-page chunks): bytes held by live
   * buffers, bytes mapped, bytes mapped but free (part of `cache`), and bytes advised for huge pages
   * (all 0 where it does not serve: off Linux, on a GPU build, MLXC_CPU_HEAP=0).
   */
  heap: (): { live: number; mapped: number; free: number; huge: number } => {
    flushDisposed();
    const out = [[0], [0], [0], [0]];
    check(fn.mlxc_heap_memory(...(out as never as [never, never, never, never])), 'mlxc_heap_memory');
    const [live, mapped, free, huge] = out.map((o) => Number(o[0]));
    return { live, mapped, free, huge };
  },
  /** The largest `active` since start or the last resetPeak(). */
  peak: (): number => read(fn.mlx_get_peak_memory, 'mlx_get_peak_memory'),
  resetPeak: (): void => check(fn.mlx_reset_peak_memory(), 'mlx_reset_peak_memory'),
  /** Bytes freed by arrays but kept by MLX's allocator for reuse. */
  cache: (): number => read(fn.mlx_get_cache_memory, 'mlx_get_cache_memory'),
  clearCache: (): void => {
    flushDisposed();
    check(fn.mlx_clear_cache(), 'mlx_clear_cache');
  },
  limit: (): number => read(fn.mlx_get_memory_limit, 'mlx_get_memory_limit'),
  /** Sets the memory limit; returns the previous one. */
  setLimit: (bytes: number): number => read((o) => fn.mlx_set_memory_limit(o, bytes), 'mlx_set_memory_limit'),
  /** Sets the allocator cache limit; returns the previous one. */
  setCacheLimit: (bytes: number): number => read((o) => fn.mlx_set_cache_limit(o, bytes), 'mlx_set_cache_limit'),
};
