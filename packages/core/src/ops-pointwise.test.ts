// The 1x1 convolution and the trailing-axes mean on the widest build this CPU has (test/pointwise-cases.ts).
import { pointwiseSuite } from '../test/pointwise-cases.js';

pointwiseSuite('the widest build');
