// ops-conv-gemm.test.ts's cases on the AVX2 build where the CPU has AVX2 (MLXC_CPU_KERNELS=avx2
// keeps an AVX-512 CPU off its wider build; read once per process on the kernels' first call, and
// vitest runs each file in its own process, so the variable is set before the cases load).
process.env.MLXC_CPU_KERNELS = 'avx2';
await import('./ops-conv-gemm.test.js');
