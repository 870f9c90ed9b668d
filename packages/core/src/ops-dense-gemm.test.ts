// The packed-weight product on the widest build this CPU has; the cases are in test/dense-gemm-cases.ts.
import { denseGemmSuite } from '../test/dense-gemm-cases.js';

denseGemmSuite('widest');
