// The fused AdamW kernel on the CPU's best build (AVX-512F or AVX2 on x86-64, the portable loop elsewhere).
import { adamwStepSuite } from '../test/adamw-step-cases.js';

adamwStepSuite('best build');
