// The depthwise convolution on the AVX2 build: MLXC_CPU_KERNELS=avx2, read once per process on
// the kernels' first call (vitest runs each file in its own process).
import { depthwiseSuite } from '../test/depthwise-cases.js';

process.env.MLXC_CPU_KERNELS = 'avx2';
depthwiseSuite('AVX2 build');
