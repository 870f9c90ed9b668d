// The depthwise convolution on the portable build: MLXC_CPU_KERNELS=generic, read once per process on
// the kernels' first call (vitest runs each file in its own process).
import { depthwiseSuite } from '../test/depthwise-cases.js';

process.env.MLXC_CPU_KERNELS = 'generic';
depthwiseSuite('portable build');
