// The CPU products for few rows on the AVX2 build: MLXC_CPU_KERNELS=avx2, read once per process on
// the kernels' first call (vitest runs each file in its own process).
import { smallGemmSuite } from '../test/small-gemm-cases.js';

process.env.MLXC_CPU_KERNELS = 'avx2';
smallGemmSuite('avx2');
