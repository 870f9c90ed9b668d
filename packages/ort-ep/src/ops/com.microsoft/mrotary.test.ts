// com.microsoft MRotaryEmbedding against onnxruntime-node's CPU kernel: 3-D and 4-D inputs,
// both layouts of the T/H/W sections, partial rotary dimensions, interleaved pairs and scale.
import { describe, expect, it } from 'vitest';
import { model, node, v, type NodeSpec } from '../../../test/helpers/build.js';
import { expectSameAsOrt, f32, i64, runOn, seeded, type Feeds } from '../../../test/helpers/ort.js';

const MS = 'com.microsoft';
const tol = { rtol: 1e-5, atol: 1e-6 };
const rand = (dims: number[], seed: number) =>
  f32(
    seeded(
      dims.reduce((a, b) => a * b, 1),
      seed,
    ),
    dims,
  );
const maxPos = 12;

function build(xDims: number[], half: number, attrs: NodeSpec['attrs']): Uint8Array {
  return model({
    opsets: { '': 17, [MS]: 1 },
    inputs: [v('x', 'float32', xDims), v('pos', 'int64', [3, xDims[0], xDims.length === 4 ? xDims[2] : xDims[1]])],
    outputs: [v('y', 'float32')],
    initializers: [
      { name: 'cos', type: 'float32', dims: [maxPos, half], values: Array.from({ length: maxPos * half }, (_, i) => Math.cos(i * 0.37)) },
      { name: 'sin', type: 'float32', dims: [maxPos, half], values: Array.from({ length: maxPos * half }, (_, i) => Math.sin(i * 0.37)) },
    ],
    nodes: [node('MRotaryEmbedding', ['x', 'pos', 'cos', 'sin'], ['y'], { domain: MS, attrs })],
  });
}

/** Positions [3, B, S]: the temporal stream counts up, height and width vary. */
function positions(B: number, S: number, seed: number) {
  const r = seeded(3 * B * S, seed);
  return i64(
    r.map((x, i) => (i < B * S ? i % S : Math.floor(((x + 1) / 2) * maxPos) % maxPos)),
    [3, B, S],
  );
}

describe('MRotaryEmbedding', () => {
  const B = 2;
  const S = 4;
  const N = 2;
  const H = 16;
  it('3-D input, sectioned layout over the whole head', () => {
    const feeds: Feeds = { x: rand([B, S, N * H], 1), pos: positions(B, S, 2) };
    return expectSameAsOrt(build([B, S, N * H], H / 2, { num_heads: N, mrope_section: [4, 2, 2] }), feeds, tol);
  });
  it('4-D input, interleaved pairs', () => {
    const feeds: Feeds = { x: rand([B, N, S, H], 3), pos: positions(B, S, 4) };
    return expectSameAsOrt(build([B, N, S, H], H / 2, { mrope_section: [2, 3, 3], interleaved: 1 }), feeds, tol);
  });
  it('partial rotary dimension: the tail passes through', () => {
    const feeds: Feeds = { x: rand([B, S, N * H], 5), pos: positions(B, S, 6) };
    return expectSameAsOrt(build([B, S, N * H], 4, { num_heads: N, rotary_embedding_dim: 8, mrope_section: [2, 1, 1] }), feeds, tol);
  });
  it('interleaved sections (mrope_layout 1) with a scale', () => {
    const feeds: Feeds = { x: rand([B, S, N * H], 8), pos: positions(B, S, 9) };
    return expectSameAsOrt(
      build([B, S, N * H], H / 2, { num_heads: N, mrope_section: [4, 2, 2], mrope_layout: 1, scale: 0.5 }),
      feeds,
      tol,
    );
  });
  it('a position past the cache fails naming it', async () => {
    const bad = positions(B, S, 7);
    (bad.data as BigInt64Array)[B * S + 1] = BigInt(maxPos);
    await expect(
      runOn('mlx', build([B, S, N * H], H / 2, { num_heads: N, mrope_section: [4, 2, 2] }), { x: rand([B, S, N * H], 1), pos: bad }),
    ).rejects.toThrow(/index 12 is out of range/);
  });
});
