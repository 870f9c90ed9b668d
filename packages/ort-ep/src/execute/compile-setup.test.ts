// The compiled path's process-wide set-up (compile-setup.ts): which devices fuse by default.
import { describe, expect, it } from 'vitest';
import { compileSetup, gpuFusion } from './compile-setup.js';

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

  it.skipIf(process.env.MLX_ORT_CPU_JIT === '1')('captures CPU segments without a compiler and without fusing by default', () => {
    expect(compileSetup('cpu')).toMatchObject({ traced: true, tracer: 'capture', fusion: false });
  });
});
