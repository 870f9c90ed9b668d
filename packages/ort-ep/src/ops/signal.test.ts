// Signal ops beyond the node suite, against onnxruntime-node: dft_length padding and truncation,
// complex input with onesided output refused, opset 20's negative axis input, STFT with frame_length and window
// (and of a complex signal, against the definition), windows as float64 and float16, a MelWeightMatrix as float64.
import { describe, expect, it } from 'vitest';
import { model, node, v, type AttrSpec, type ElemName } from '../../test/helpers/build.js';
import { expectNodeSameAsOrt, type NodeInput } from '../../test/helpers/single-node.js';
import { f32, i64, plain, runOn, seeded } from '../../test/helpers/ort.js';

type In = NodeInput;
const x = (name: string, dims: number[], seed = 3): In => ({
  name,
  type: 'float32',
  dims,
  tensor: f32(
    seeded(
      dims.reduce((a, b) => a * b, 1),
      seed,
    ),
    dims,
  ),
});
const int = (name: string, values: number[], dims: number[] = []): In => ({ name, type: 'int64', dims, tensor: i64(values, dims) });

const same = (
  op: string,
  opset: number,
  ins: (In | '')[],
  attrs: Record<string, AttrSpec>,
  outType: ElemName = 'float32',
  tol = { rtol: 1e-4, atol: 1e-4 },
) => expectNodeSameAsOrt(op, opset, ins, attrs, outType, tol);

describe('DFT', () => {
  it('dft_length longer than the signal zero-pads (opset 17)', async () => {
    await same('DFT', 17, [x('x', [2, 6, 1]), int('n', [9])], { axis: 1 });
  });
  it('dft_length shorter than the signal truncates, complex input, inverse (opset 17)', async () => {
    await same('DFT', 17, [x('x', [2, 8, 2]), int('n', [5])], { axis: 1, inverse: 1 });
  });
  it("onesided transform of a complex signal is refused, as the spec's shape inference does", async () => {
    const bytes = model({
      opsets: { '': 17 },
      inputs: [v('x', 'float32', [2, 7, 2])],
      outputs: [v('y', 'float32')],
      nodes: [node('DFT', ['x'], ['y'], { attrs: { axis: 1, onesided: 1 } })],
    });
    await expect(runOn('mlx', bytes, { x: f32(seeded(28), [2, 7, 2]) })).rejects.toThrow(/one-sided transform needs a real input/);
  });
  it('onesided transform of a real signal along an inner axis (opset 17)', async () => {
    await same('DFT', 17, [x('x', [2, 7, 3, 1])], { axis: 1, onesided: 1 });
  });
  it('opset 20: a negative axis input counts from the back, the complex dimension included', async () => {
    await same('DFT', 20, [x('x', [2, 4, 6, 2]), '', int('axis', [-3])], {});
  });
  it('opset 20: the default axis is the last signal axis', async () => {
    await same('DFT', 20, [x('x', [3, 5, 1])], {});
  });
});

describe('STFT', () => {
  it('real signal, two-sided, with frame_length and window', async () => {
    await same('STFT', 17, [x('s', [2, 40, 1]), int('step', [6]), x('w', [10], 7), int('len', [10])], { onesided: 0 });
  });
  // onnxruntime's CPU STFT drops the imaginary part of a complex signal, so this one is checked
  // against the definition: y[b, f, k] = sum_n w[n] x[b, f * step + n] e^(-2 pi i k n / len).
  it('complex signal, two-sided, against a direct sum', async () => {
    const [B, L, step, len] = [2, 23, 5, 8];
    const sig = seeded(B * L * 2, 3).map(Math.fround);
    const w = seeded(len, 7).map(Math.fround);
    const bytes = model({
      opsets: { '': 17 },
      inputs: [v('s', 'float32', [B, L, 2]), v('step', 'int64', []), v('w', 'float32', [len])],
      outputs: [v('y', 'float32')],
      nodes: [node('STFT', ['s', 'step', 'w'], ['y'], { attrs: { onesided: 0 } })],
    });
    const have = await runOn('mlx', bytes, { s: f32(sig, [B, L, 2]), step: i64([step], []), w: f32(w, [len]) });
    const frames = 1 + Math.floor((L - len) / step);
    expect([...have.y.dims]).toEqual([B, frames, len, 2]);
    const y = plain(have.y);
    for (let b = 0; b < B; b++)
      for (let f = 0; f < frames; f++)
        for (let k = 0; k < len; k++) {
          let [re, im] = [0, 0];
          for (let n = 0; n < len; n++) {
            const at = 2 * (b * L + f * step + n);
            const [c, s] = [Math.cos((2 * Math.PI * k * n) / len), -Math.sin((2 * Math.PI * k * n) / len)];
            re += w[n] * (sig[at] * c - sig[at + 1] * s);
            im += w[n] * (sig[at] * s + sig[at + 1] * c);
          }
          const o = 2 * ((b * frames + f) * len + k);
          expect(Math.abs(y[o] - re) + Math.abs(y[o + 1] - im)).toBeLessThan(1e-4);
        }
  });
  it('real signal, onesided, no window', async () => {
    await same('STFT', 17, [x('s', [1, 33, 1]), int('step', [4]), '', int('len', [12])], {});
  });
});

describe('windows and mel filters', () => {
  it('HannWindow as float64, symmetric', async () => {
    await same('HannWindow', 17, [int('n', [7])], { periodic: 0, output_datatype: 11 }, 'float64', { rtol: 1e-9, atol: 1e-12 });
  });
  it('BlackmanWindow as float16', async () => {
    await same('BlackmanWindow', 17, [int('n', [12])], { output_datatype: 10 }, 'float16', { rtol: 1e-3, atol: 1e-3 });
  });
  it('MelWeightMatrix as float64 with a non-zero lower edge', async () => {
    await same(
      'MelWeightMatrix',
      17,
      [int('bins', [10]), int('dft', [64]), int('rate', [16000]), x('lo', [], 0), x('hi', [], 0)].map((i, k) =>
        k === 3 ? { ...i, tensor: f32([300], []) } : k === 4 ? { ...i, tensor: f32([7000], []) } : i,
      ),
      { output_datatype: 11 },
      'float64',
      { rtol: 1e-9, atol: 1e-12 },
    );
  });
});
