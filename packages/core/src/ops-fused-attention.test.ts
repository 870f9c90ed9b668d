// The attention kernel on the widest build this CPU has; the cases are in
// test/fused-attention-cases.ts, shared with the portable build's test.
import { fusedAttentionSuite } from '../test/fused-attention-cases.js';

fusedAttentionSuite('widest');
