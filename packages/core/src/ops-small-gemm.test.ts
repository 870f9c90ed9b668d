// The CPU products for few rows on the widest build this CPU has (AVX-512F where it has it, else
// AVX2+FMA); the cases are in test/small-gemm-cases.ts, shared with the AVX2 and portable builds' tests.
import { smallGemmSuite } from '../test/small-gemm-cases.js';

smallGemmSuite('widest');
