// LinearAttention against onnxruntime's com.microsoft CPU kernel (the ai.onnx op of opset 27 is
// covered by the node suite, which onnxruntime-node 1.30 cannot run): every update rule, per-head
// and per-channel decay, GQA, a past state and an explicit scale.
import { describe, it } from 'vitest';
import { model, node, v, type ElemName, type NodeSpec } from '../../test/helpers/build.js';
import { expectSameAsOrt, f32, seeded, type Feeds, type OrtTensor, randomF32 as rand } from '../../test/helpers/ort.js';

function run(feeds: Record<string, OrtTensor | undefined>, attrs: NodeSpec['attrs']) {
  const given = Object.fromEntries(Object.entries(feeds).filter(([, t]) => t)) as Feeds;
  const inputs = ['q', 'k', 'v', 'past', 'decay', 'beta'].map((n) => (given[n] ? n : ''));
  while (inputs.at(-1) === '') inputs.pop();
  const bytes = model({
    opsets: { '': 17, 'com.microsoft': 1 },
    inputs: Object.entries(given).map(([name, t]) => v(name, t.type as ElemName, [...t.dims])),
    outputs: [v('y', 'float32'), v('state', 'float32')],
    nodes: [node('LinearAttention', inputs, ['y', 'state'], { domain: 'com.microsoft', attrs })],
  });
  return expectSameAsOrt(bytes, given, { rtol: 1e-4, atol: 1e-5 });
}

describe('LinearAttention (com.microsoft)', () => {
  const B = 2;
  const T = 5;
  const H = 2;
  const D = 8;
  const q = rand([B, T, H * D], 1);
  const k = rand([B, T, H * D], 2, 0.5);
  const val = rand([B, T, H * D], 3);
  const decayHead = rand([B, T, H], 4, 0.5);
  const decayDim = rand([B, T, H * D], 5, 0.5);
  const beta = f32(
    seeded(B * T * H, 6).map((x) => (x + 1) / 2),
    [B, T, H],
  );
  const heads = { q_num_heads: H, kv_num_heads: H };
  it('gated_delta (the default), per-head decay', () => run({ q, k, v: val, decay: decayHead, beta }, heads));
  it('gated_delta with a past state and per-channel decay', () =>
    run({ q, k, v: val, past: rand([B, H, D, D], 7, 0.3), decay: decayDim, beta }, heads));
  it('linear, gated and delta rules', async () => {
    await run({ q, k, v: val }, { ...heads, update_rule: 'linear' });
    await run({ q, k, v: val, decay: decayDim }, { ...heads, update_rule: 'gated' });
    await run({ q, k, v: val, beta }, { ...heads, update_rule: 'delta' });
  });
  it('GQA (four query heads on two KV heads) with an explicit scale', () =>
    run({ q: rand([B, T, 4 * D], 8), k, v: val, decay: decayHead, beta }, { q_num_heads: 4, kv_num_heads: H, scale: 0.3 }));
  it('a decode step from a past state', () =>
    run(
      {
        q: rand([B, 1, H * D], 9),
        k: rand([B, 1, H * D], 10, 0.5),
        v: rand([B, 1, H * D], 11),
        past: rand([B, H, D, D], 12, 0.3),
        decay: rand([B, 1, H], 13, 0.5),
        beta: f32([0.3, 0.6, 0.9, 0.1], [B, 1, H]),
      },
      heads,
    ));
});

describe('LinearAttentionGate (com.microsoft)', () => {
  const a = rand([2, 3, 4], 20, 4);
  const dt = rand([4], 21);
  const ds = f32([-0.5, -1, -2, -0.1], [4]);
  const b = rand([2, 3, 4], 22, 3);
  const gate = (feeds: Feeds, inputs: string[], outputs: string[]) =>
    expectSameAsOrt(
      model({
        opsets: { '': 17, 'com.microsoft': 1 },
        inputs: Object.entries(feeds).map(([name, t]) => v(name, t.type as ElemName, [...t.dims])),
        outputs: outputs.map((o) => v(o, 'float32')),
        nodes: [node('LinearAttentionGate', inputs, outputs, { domain: 'com.microsoft' })],
      }),
      feeds,
      { rtol: 1e-5, atol: 1e-6 },
    );
  it('decay and beta', () => gate({ a, dt, ds, b }, ['a', 'dt', 'ds', 'b'], ['decay', 'beta']));
  it('decay alone', () => gate({ a, dt, ds }, ['a', 'dt', 'ds'], ['decay']));
});
