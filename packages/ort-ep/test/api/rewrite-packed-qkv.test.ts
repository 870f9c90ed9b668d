// The packed-qkv rewrite (src/plan/rewrite/packed-qkv.ts): a GroupQueryAttention fed the three
// parts of sibling-matmul's joined Q/K/V product takes that product as its packed QKV (key and
// value empty) and the split goes. On a Llama-shaped decoder (the test helper's, GroupQueryAttention
// with rotary), a prompt and a decode step against onnxruntime-node and against the rewrites
// without it; not where a part is read elsewhere.
import { describe, expect, it } from 'vitest';
import { prepareModel } from '../../src/plan/prepare.js';
import { REWRITES } from '../../src/plan/rewrite/index.js';
import { buildDecoder, type DecoderConfig } from '../helpers/decoder.js';
import { expectSameAsOrt, expectSameWithRewrites, f32, i64 } from '../helpers/ort.js';
import { model, node, v } from '../helpers/build.js';
import { seededInit } from '../helpers/ort.js';

const config: DecoderConfig = { kind: 'llama', layers: 2, hidden: 64, heads: 4, kvHeads: 2, ffn: 96, vocab: 128, maxPositions: 64 };
const bytes = buildDecoder(config);
const WITHOUT = (Object.keys(REWRITES) as (keyof typeof REWRITES)[]).filter((n) => n !== 'packed-qkv');
const H = config.hidden / config.heads;

/** A prompt of `S` tokens after `past` cached ones (random past rows), every token visible. */
function feeds(S: number, past: number) {
  const f: Record<string, ReturnType<typeof f32>> = {
    input_ids: i64(
      Array.from({ length: S }, (_, i) => (i * 37 + 5) % config.vocab),
      [1, S],
    ),
    attention_mask: i64(new Array(past + S).fill(1), [1, past + S]),
  };
  for (let l = 0; l < config.layers; l++)
    for (const kv of ['key', 'value'])
      f[`past_key_values.${l}.${kv}`] = f32(
        Array.from({ length: config.kvHeads! * past * H }, (_, i) => Math.sin(i * 0.37 + l)),
        [1, config.kvHeads!, past, H],
      );
  return f;
}

describe('packed-qkv rewrite', () => {
  it("hands each layer's joined Q/K/V product to GroupQueryAttention whole", () => {
    const p = prepareModel(bytes);
    expect(p.rewrites).toMatchObject({ 'sibling-matmul': 4, 'packed-qkv': 2 });
    const gqa = p.model.graph.nodes.filter((n) => n.opType === 'GroupQueryAttention');
    expect(gqa).toHaveLength(2);
    for (const n of gqa) expect(n.inputs.slice(1, 3)).toEqual(['', '']);
    // The gate/up split is the gated activation's on a CPU session; no SplitLast of three parts is left.
    expect(p.model.graph.nodes.filter((n) => n.opType === 'SplitLast' && n.outputs.length === 3)).toHaveLength(0);
  });

  it('leaves the split where a part is read elsewhere', () => {
    const m = model({
      opsets: { '': 17, 'com.microsoft': 1 },
      inputs: [v('x', 'float32', [1, 3, 16]), v('seqlens', 'int32', [1]), v('total', 'int32', [])],
      outputs: [v('y', 'float32'), v('k', 'float32')],
      initializers: [seededInit('Wq', [16, 16], 1), seededInit('Wk', [16, 8], 2), seededInit('Wv', [16, 8], 3)],
      nodes: [
        node('MatMul', ['x', 'Wq'], ['q']),
        node('MatMul', ['x', 'Wk'], ['k']),
        node('MatMul', ['x', 'Wv'], ['val']),
        node('GroupQueryAttention', ['q', 'k', 'val', '', '', 'seqlens', 'total'], ['y'], {
          domain: 'com.microsoft',
          attrs: { num_heads: 2, kv_num_heads: 1 },
        }),
      ],
    });
    const p = prepareModel(m);
    expect(p.rewrites['sibling-matmul']).toBe(1);
    expect(p.rewrites['packed-qkv']).toBeUndefined();
  });

  for (const [S, past] of [
    [5, 0],
    [1, 6],
  ])
    it(`gives onnxruntime-node's outputs and those without it: ${S} new token(s) after ${past}`, async () => {
      const f = feeds(S, past);
      await expectSameAsOrt(bytes, f, { rtol: 1e-4, atol: 1e-5 });
      await expectSameWithRewrites(bytes, f, true, WITHOUT);
    });
});
