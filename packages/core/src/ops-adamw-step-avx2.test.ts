// The fused AdamW kernel on the AVX2 build: MLXC_CPU_KERNELS=avx2, read once per process on the
// kernels' first call (vitest runs each file in its own process; on a CPU without AVX2 this is the
// portable loop again).
import { adamwStepSuite } from '../test/adamw-step-cases.js';

process.env.MLXC_CPU_KERNELS = 'avx2';
adamwStepSuite('avx2');
