// The packed-weight product on the AVX2 build where the CPU has AVX2 (MLXC_CPU_KERNELS=avx2 keeps an
// AVX-512 CPU off its wider build; read once per process on the kernels' first call, and vitest runs
// each file in its own process). Without AVX2 this is the portable build again.
import { denseGemmSuite } from '../test/dense-gemm-cases.js';

process.env.MLXC_CPU_KERNELS = 'avx2';
denseGemmSuite('avx2');
