// Inputs that onnxruntime refuses for LSTM, GRU, RNN and Conv are refused by the mlx provider
// too, with a sentence naming what is wrong (found by the fuzz run's structured cases): weights
// of the wrong directions, a sequence_lens of the wrong length or holding lengths outside
// [0, seq_length] (fed, so checked on the device), an initial state of the wrong shape, all also
// where the sequence is empty (nothing was checked then), and a Conv kernel_shape that is not
// the weight's. Each case runs on onnxruntime's CPU provider first, to show that it refuses.
import { describe, expect, it } from 'vitest';
import { model, node, v, type AttrSpec } from '../../test/helpers/build.js';
import { f32, i32, mlxCpu, outcome, randomF32, runOn, type Feeds } from '../../test/helpers/ort.js';

function rnnModel(op: string, inputs: string[], attrs: Record<string, AttrSpec>, types: Record<string, 'float32' | 'int32'>): Uint8Array {
  return model({
    opsets: { '': 14 },
    inputs: inputs.filter((n) => n).map((n) => v(n, types[n] ?? 'float32')),
    outputs: [v('y', 'float32'), v('yh', 'float32')],
    nodes: [node(op, inputs, ['y', 'yh'], { attrs, name: 'n' })],
  });
}

async function expectBothRefuse(bytes: Uint8Array, feeds: Feeds, why: RegExp): Promise<void> {
  const ref = await outcome(bytes, feeds, { executionProviders: ['cpu'] });
  expect(ref, 'onnxruntime refuses it').toBeInstanceOf(Error);
  const mine = await outcome(bytes, feeds, mlxCpu);
  expect(mine).toBeInstanceOf(Error);
  expect((mine as Error).message).toMatch(why);
}

const gatesOf: Record<string, number> = { RNN: 1, GRU: 3, LSTM: 4 };

describe('RNN family refusals', () => {
  for (const op of ['RNN', 'GRU', 'LSTM'])
    for (const seq of [0, 3]) {
      const [B, I, H] = [2, 3, 2];
      const G = gatesOf[op] * H;
      it(`${op}, seq ${seq}: W of two directions for a forward layer`, () =>
        expectBothRefuse(
          rnnModel(op, ['x', 'w', 'r'], { hidden_size: H }, {}),
          { x: randomF32([seq, B, I], 1), w: randomF32([2, G, I], 2), r: randomF32([1, G, H], 3) },
          /W has shape \[2, \d+, 3\], not \[1, \d+, 3\]/,
        ));
      it(`${op}, seq ${seq}: sequence_lens of 3 for a batch of 2`, () =>
        expectBothRefuse(
          rnnModel(op, ['x', 'w', 'r', '', 'lens'], { hidden_size: H }, { lens: 'int32' }),
          { x: randomF32([seq, B, I], 1), w: randomF32([1, G, I], 2), r: randomF32([1, G, H], 3), lens: i32([seq, seq, seq]) },
          /sequence_lens has shape \[3\], not \[2\]/,
        ));
      it(`${op}, seq ${seq}: initial_h of the wrong batch`, () =>
        expectBothRefuse(
          rnnModel(op, ['x', 'w', 'r', '', '', 'h0'], { hidden_size: H }, {}),
          { x: randomF32([seq, B, I], 1), w: randomF32([1, G, I], 2), r: randomF32([1, G, H], 3), h0: randomF32([1, B + 1, H], 4) },
          /initial_h has shape \[1, 3, 2\], not \[1, 2, 2\]/,
        ));
    }
  for (const op of ['RNN', 'GRU', 'LSTM'])
    for (const lens of [
      [4, 1],
      [-1, 2],
    ])
      it(`${op}: fed sequence_lens [${lens}] outside [0, 3]`, () => {
        const [B, I, H] = [2, 3, 2];
        const G = gatesOf[op] * H;
        return expectBothRefuse(
          rnnModel(op, ['x', 'w', 'r', '', 'lens'], { hidden_size: H }, { lens: 'int32' }),
          { x: randomF32([3, B, I], 1), w: randomF32([1, G, I], 2), r: randomF32([1, G, H], 3), lens: i32(lens) },
          /sequence_lens holds values from -?\d+ to \d+, outside \[0, 3\]/,
        );
      });
});

describe('Conv kernel_shape', () => {
  it('a kernel_shape other than the weight spatial dims is refused', () =>
    expectBothRefuse(
      model({
        opsets: { '': 17 },
        inputs: [v('x', 'float32'), v('w', 'float32')],
        outputs: [v('y', 'float32')],
        nodes: [node('Conv', ['x', 'w'], ['y'], { attrs: { kernel_shape: [3, 3], group: 2 }, name: 'n' })],
      }),
      { x: randomF32([1, 4, 5, 5], 1), w: randomF32([4, 2, 2, 2], 2) },
      /kernel_shape \[3, 3\] does not match the weight's spatial dims \[2, 2\]/,
    ));
  it('the matching kernel_shape still runs', async () => {
    const bytes = model({
      opsets: { '': 17 },
      inputs: [v('x', 'float32'), v('w', 'float32')],
      outputs: [v('y', 'float32')],
      nodes: [node('Conv', ['x', 'w'], ['y'], { attrs: { kernel_shape: [2, 2], group: 2 }, name: 'n' })],
    });
    expect(await outcome(bytes, { x: f32(Array(100).fill(1), [1, 4, 5, 5]), w: randomF32([4, 2, 2, 2], 2) }, mlxCpu)).toBe('ran');
  });
});

describe('Clip bounds', () => {
  const clipModel = () =>
    model({
      opsets: { '': 13 },
      inputs: [v('x', 'float32'), v('lo', 'float32'), v('hi', 'float32')],
      outputs: [v('y', 'float32')],
      nodes: [node('Clip', ['x', 'lo', 'hi'], ['y'], { name: 'n' })],
    });
  it('a bound of several elements is refused (it broadcast the result to its shape)', () =>
    expectBothRefuse(
      clipModel(),
      { x: f32([-0.36], [1, 1]), lo: randomF32([2, 5], 1), hi: f32([2], [1, 1]) },
      /Clip min has shape \[2, 5\], not a scalar/,
    ));
  it('a bound of shape [1] keeps the shape of a scalar X, as in onnxruntime', async () => {
    const feeds = { x: f32([-3], []), lo: f32([-1], [1]), hi: f32([1], [1]) };
    const got = await runOn('mlx', clipModel(), feeds);
    const want = await runOn('cpu', clipModel(), feeds);
    expect(got.y.dims).toEqual(want.y.dims);
    expect(Array.from(got.y.data as Float32Array)).toEqual(Array.from(want.y.data as Float32Array));
  });
});
