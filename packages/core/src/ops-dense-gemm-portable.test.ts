// The packed-weight product on the portable build: MLXC_CPU_KERNELS=generic, read once per process on
// the kernels' first call (vitest runs each file in its own process).
import { denseGemmSuite } from '../test/dense-gemm-cases.js';

process.env.MLXC_CPU_KERNELS = 'generic';
denseGemmSuite('portable');
