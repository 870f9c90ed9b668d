// The attention kernel on the portable build: MLXC_CPU_KERNELS=generic, read once per process on the
// kernels' first call (vitest runs each file in its own process).
import { fusedAttentionSuite } from '../test/fused-attention-cases.js';

process.env.MLXC_CPU_KERNELS = 'generic';
fusedAttentionSuite('portable');
