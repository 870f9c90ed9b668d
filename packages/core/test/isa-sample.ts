// What cpu-isa.test.ts computes in each build (here and in child processes): no test framework.
import type * as mx from '../src/index.js';
import { inputs } from './numeric.js';

/** Every kernel on one input with edges and a length that leaves tails for 8 and 16 lanes. */
export function sample(m: typeof mx): number[][] {
  const base = inputs(16 * 9 + 7, -9, 9, 3);
  const data = new Float32Array([...base, Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, 0, -0, 1e-40, -1e-40, 1e-30]);
  const x = m.array(data);
  const rows = m.reshape(m.array(data.subarray(0, 151)), [1, 151]);
  const out = [
    ...['exp', 'erf', 'tanh', 'sigmoid', 'relu', 'silu', 'gelu', 'gelu_tanh'].map((k) => m.ext.fusedActivation(x, null, k)),
    m.ext.fusedSoftmax(rows, false),
    m.ext.fusedSoftmax(rows, true),
    m.ext.fusedLayerNorm(rows, null, null, 1e-5),
    m.ext.fusedRmsNorm(rows, null, 1e-6),
    m.ext.hardSigmoid(x, 0.2, 0.5, false),
    m.ext.hardSigmoid(x, 1 / 6, 0.5, true),
  ];
  return out.map((a) => Array.from(a.toTypedArray() as Float32Array));
}
