// The CPU products for few rows on this machine's default build (AVX2+FMA where the CPU has it);
// the cases are in test/small-gemm-cases.ts, shared with the portable build's test.
import { smallGemmSuite } from '../test/small-gemm-cases.js';

smallGemmSuite('avx2');
