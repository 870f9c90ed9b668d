// The 1x1 convolution and the trailing-axes mean on the AVX2 build: MLXC_CPU_KERNELS=avx2, read once
// per process on the kernels' first call (vitest runs each file in its own process).
import { pointwiseSuite } from '../test/pointwise-cases.js';

process.env.MLXC_CPU_KERNELS = 'avx2';
pointwiseSuite('AVX2 build');
