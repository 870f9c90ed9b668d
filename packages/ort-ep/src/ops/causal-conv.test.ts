// CausalConvWithState: onnxruntime's com.microsoft kernel as the reference (the ai.onnx op of
// opset 27 is covered by the node suite, which onnxruntime-node 1.30 cannot run).
import { describe, it } from 'vitest';
import { model, node, v, type ElemName, type NodeSpec } from '../../test/helpers/build.js';
import { expectSameAsOrt, f32, seeded, type Feeds } from '../../test/helpers/ort.js';

const rand = (dims: number[], seed: number) =>
  f32(
    seeded(
      dims.reduce((a, b) => a * b, 1),
      seed,
    ),
    dims,
  );

function run(feeds: Feeds, inputs: string[], attrs: NodeSpec['attrs'] = {}) {
  const bytes = model({
    opsets: { '': 17, 'com.microsoft': 1 },
    inputs: Object.entries(feeds).map(([name, t]) => v(name, t.type as ElemName, [...t.dims])),
    outputs: [v('y', 'float32'), v('state', 'float32')],
    nodes: [node('CausalConvWithState', inputs, ['y', 'state'], { domain: 'com.microsoft', attrs })],
  });
  return expectSameAsOrt(bytes, feeds, { rtol: 1e-5, atol: 1e-6 });
}

describe('CausalConvWithState (com.microsoft)', () => {
  const x = rand([2, 4, 6], 1);
  const w = rand([4, 1, 4], 2);
  it('prompt without a past state', () => run({ x, w }, ['x', 'w']));
  it('bias, past state and silu', () =>
    run({ x, w, b: rand([4], 3), past: rand([2, 4, 3], 4) }, ['x', 'w', 'b', 'past'], { activation: 'silu' }));
  it('decode step (one new column) with a past state', () =>
    run({ x: rand([2, 4, 1], 5), w, past: rand([2, 4, 3], 6) }, ['x', 'w', '', 'past']));
});
