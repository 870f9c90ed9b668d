// The compiled path's process-wide set-up (compile-setup.ts): which devices fuse by default.
import { describe, expect, it } from 'vitest';
import { CPU_CACHE_LIMIT, compileSetup, cpuCacheLimit, gpuFusion, gpuTracer } from './compile-setup.js';

describe('compile set-up', () => {
  it("fuses on CUDA only when MLX_ORT_FUSION is '1', on Metal unless it is '0'", () => {
    expect(gpuFusion(true, undefined)).toBe(false);
    expect(gpuFusion(true, '')).toBe(false);
    expect(gpuFusion(true, '0')).toBe(false);
    expect(gpuFusion(true, '1')).toBe(true);
    expect(gpuFusion(false, undefined)).toBe(true);
    expect(gpuFusion(false, '1')).toBe(true);
    expect(gpuFusion(false, '0')).toBe(false);
  });

  it("captures CUDA segments that do not fuse unless MLX_ORT_GPU_CAPTURE is '0'; MLX's compile where they fuse and on Metal", () => {
    expect(gpuTracer(true, false, undefined)).toBe('capture');
    expect(gpuTracer(true, false, '1')).toBe('capture');
    expect(gpuTracer(true, false, '0')).toBe('compile');
    expect(gpuTracer(true, true, '1')).toBe('compile');
    expect(gpuTracer(false, false, '1')).toBe('compile');
    expect(gpuTracer(false, true, undefined)).toBe('compile');
  });

  it.skipIf(process.env.MLX_ORT_CPU_JIT === '1')('captures CPU segments without a compiler and without fusing by default', () => {
    expect(compileSetup('cpu')).toMatchObject({ traced: true, tracer: 'capture', fusion: false });
  });
});

describe("MLX's CPU buffer cache limit", () => {
  it('is raised to CPU_CACHE_LIMIT, kept where higher, or set by MLX_ORT_CPU_CACHE_MB', () => {
    expect(cpuCacheLimit(32 << 20, undefined)).toBe(CPU_CACHE_LIMIT);
    expect(cpuCacheLimit(4 * CPU_CACHE_LIMIT, undefined)).toBe(4 * CPU_CACHE_LIMIT);
    expect(cpuCacheLimit(32 << 20, '')).toBe(CPU_CACHE_LIMIT);
    expect(cpuCacheLimit(4 * CPU_CACHE_LIMIT, '64')).toBe(64 << 20);
    expect(cpuCacheLimit(32 << 20, '0')).toBe(0);
    expect(() => cpuCacheLimit(0, '1.5')).toThrow(/MLX_ORT_CPU_CACHE_MB must be a whole number of MiB/);
    expect(() => cpuCacheLimit(0, '-1')).toThrow(/MLX_ORT_CPU_CACHE_MB/);
    expect(() => cpuCacheLimit(0, 'lots')).toThrow(/MLX_ORT_CPU_CACHE_MB/);
  });
});
