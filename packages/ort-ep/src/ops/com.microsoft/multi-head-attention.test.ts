// com.microsoft MultiHeadAttention against onnxruntime-node's CPU kernel: separate, packed and
// per-head K/V, bias, key padding masks, attention bias, causal masking and the KV cache.
import { describe, expect, it } from 'vitest';
import { model, node, v, type ElemName, type NodeSpec } from '../../../test/helpers/build.js';
import {
  expectSameAsOrt,
  f32,
  plain,
  runOn,
  seeded,
  type Feeds,
  type OrtTensor,
  randomF32 as rand,
  i32,
} from '../../../test/helpers/ort.js';

const MS = 'com.microsoft';
const tol = { rtol: 1e-4, atol: 1e-5 };

const INPUTS = ['q', 'k', 'v', 'bias', 'mask', 'ab', 'pk', 'pv'];

function build(feeds: Record<string, OrtTensor | undefined>, attrs: NodeSpec['attrs'], outputs = ['y']): [Uint8Array, Feeds] {
  const given = Object.fromEntries(Object.entries(feeds).filter(([, t]) => t)) as Feeds;
  const inputs = INPUTS.map((n) => (given[n] ? n : ''));
  while (inputs.at(-1) === '') inputs.pop();
  const bytes = model({
    opsets: { '': 17, [MS]: 1 },
    inputs: Object.entries(given).map(([name, t]) => v(name, t.type as ElemName, [...t.dims])),
    outputs: outputs.filter((o) => o).map((o) => v(o, 'float32')),
    nodes: [node('MultiHeadAttention', inputs, outputs, { domain: MS, attrs })],
  });
  return [bytes, given];
}

const run = (feeds: Record<string, OrtTensor | undefined>, attrs: NodeSpec['attrs'], outputs = ['y']) =>
  expectSameAsOrt(...build(feeds, attrs, outputs), tol);

/** Packed [B, L, N, k, H] split into k tensors [B, L, N·H] (onnxruntime's CPU kernel takes only these). */
function unpacked(t: OrtTensor, k: number): OrtTensor[] {
  const [B, L, N, , H] = t.dims as number[];
  const x = t.data as Float32Array;
  return Array.from({ length: k }, (_, part) => {
    const out = new Float32Array(B * L * N * H);
    for (let r = 0; r < B * L; r++)
      for (let n = 0; n < N; n++) for (let h = 0; h < H; h++) out[(r * N + n) * H + h] = x[((r * N + n) * k + part) * H + h];
    return f32(Array.from(out), [B, L, N * H]);
  });
}

/** The packed form on MLX against onnxruntime on the same values unpacked. */
async function samePacked(packed: Record<string, OrtTensor>, separate: Record<string, OrtTensor>, attrs: NodeSpec['attrs']) {
  const have = plain((await runOn('mlx', ...build(packed, attrs))).y);
  const want = plain((await runOn('cpu', ...build(separate, attrs))).y);
  expect(have.length).toBe(want.length);
  const bad = have.findIndex((x, i) => !(Math.abs(x - want[i]) <= tol.atol + tol.rtol * Math.abs(want[i])));
  expect(bad === -1 ? 'ok' : `y[${bad}]: mlx ${have[bad]} vs onnxruntime ${want[bad]}`).toBe('ok');
}

describe('MultiHeadAttention', () => {
  const B = 2;
  const S = 3;
  const L = 5;
  const N = 2;
  const H = 4;
  const D = N * H;
  const q = rand([B, S, D], 1);
  const k = rand([B, L, D], 2);
  const val = rand([B, L, D], 3);
  const bias = rand([3 * D], 4, 0.3);
  it('cross-attention with bias', () => run({ q, k, v: val, bias }, { num_heads: N }));
  it('custom scale, no bias', () => run({ q, k, v: val }, { num_heads: N, scale: 0.25 }));
  it('2-D key padding mask with a custom mask_filter_value', () =>
    run({ q, k, v: val, mask: i32([1, 1, 1, 0, 0, 1, 0, 1, 1, 1], [B, L]) }, { num_heads: N, mask_filter_value: { f: -50 } }));
  it('1-D key lengths', () => run({ q, k, v: val, mask: i32([3, 5]) }, { num_heads: N }));
  it('3-D mask', () =>
    run(
      {
        q,
        k,
        v: val,
        mask: i32(
          seeded(B * S * L, 5).map((x, i) => (i % L === 0 || x > 0 ? 1 : 0)),
          [B, S, L],
        ),
      },
      { num_heads: N },
    ));
  it('attention bias broadcast over the batch', () => run({ q, k, v: val, ab: rand([1, N, S, L], 6) }, { num_heads: N }));
  it('self-attention decode step with past and present, unidirectional', () => {
    const qs = rand([B, 1, D], 7);
    const ks = rand([B, 1, D], 8);
    const vs = rand([B, 1, D], 9);
    return run({ q: qs, k: ks, v: vs, bias, pk: rand([B, N, 4, H], 10), pv: rand([B, N, 4, H], 11) }, { num_heads: N, unidirectional: 1 }, [
      'y',
      'present_k',
      'present_v',
    ]);
  });
  it('causal prompt without past, with present outputs', () => {
    const ks = rand([B, S, D], 12);
    const vs = rand([B, S, D], 13);
    return run({ q, k: ks, v: vs }, { num_heads: N, unidirectional: 1 }, ['y', 'present_k', 'present_v']);
  });
  it('per-head [B, N, L, H] cross-attention keys and values', () =>
    run({ q, k: rand([B, N, L, H], 14), v: rand([B, N, L, H], 15) }, { num_heads: N }));
  // onnxruntime's CPU kernel does not take packed inputs: it runs the same values unpacked.
  it('packed KV', () => {
    const kv = rand([B, L, N, 2, H], 16);
    const [ku, vu] = unpacked(kv, 2);
    return samePacked({ q, k: kv }, { q, k: ku, v: vu }, { num_heads: N });
  });
  it('packed QKV', () => {
    const qkv = rand([B, S, N, 3, H], 17);
    const [qu, ku, vu] = unpacked(qkv, 3);
    return samePacked({ q: qkv }, { q: qu, k: ku, v: vu }, { num_heads: N });
  });
});

// onnxruntime runs PackedMultiHeadAttention on CUDA only: the reference is its MultiHeadAttention on
// the same tokens padded, with the sequence lengths as key_padding_mask, read at the real tokens.
describe('PackedMultiHeadAttention', () => {
  const B = 2;
  const S = 4;
  const N = 2;
  const H = 4;
  const D = N * H;
  const lengths = [3, 2];
  const offsets = [0, 1, 2, 4, 5, 3, 6, 7]; // real tokens of each sequence, then the padding
  const T = 5;
  const real = offsets.slice(0, T);
  /** Padded [B, S, D] values -> packed [T, D] (the rows at the real positions). */
  const packRows = (t: OrtTensor, width: number) => {
    const x = t.data as Float32Array;
    return f32(
      real.flatMap((p) => Array.from(x.subarray(p * width, (p + 1) * width))),
      [T, width],
    );
  };
  const tokenOffset = i32(offsets, [B, S]);
  const cu = i32([0, 3, 5]);
  async function samePacked(packed: Record<string, OrtTensor>, padded: Record<string, OrtTensor>, attrs: NodeSpec['attrs']) {
    const inputs = ['q', 'k', 'v', 'bias', 'off', 'cu', 'ab'].map((n) => (packed[n] ? n : ''));
    while (inputs.at(-1) === '') inputs.pop();
    const bytes = model({
      opsets: { '': 17, [MS]: 1 },
      inputs: Object.entries(packed).map(([name, t]) => v(name, t.type as ElemName, [...t.dims])),
      outputs: [v('y', 'float32')],
      nodes: [node('PackedMultiHeadAttention', inputs, ['y'], { domain: MS, attrs })],
    });
    const have = plain((await runOn('mlx', bytes, packed)).y);
    const want = plain((await runOn('cpu', ...build({ ...padded, mask: i32(lengths) }, attrs))).y);
    const wanted = real.flatMap((p) => want.slice(p * D, (p + 1) * D));
    expect(have.length).toBe(wanted.length);
    const bad = have.findIndex((x, i) => !(Math.abs(x - wanted[i]) <= tol.atol + tol.rtol * Math.abs(wanted[i])));
    expect(bad === -1 ? 'ok' : `y[${bad}]: mlx ${have[bad]} vs onnxruntime ${wanted[bad]}`).toBe('ok');
  }
  const q = rand([B, S, D], 30);
  const k = rand([B, S, D], 31);
  const val = rand([B, S, D], 32);
  it('separate Q, K, V with bias', () => {
    const bias = rand([3 * D], 33, 0.3);
    return samePacked(
      { q: packRows(q, D), k: packRows(k, D), v: packRows(val, D), bias, off: tokenOffset, cu },
      { q, k, v: val, bias },
      { num_heads: N },
    );
  });
  it('attention_bias and a custom scale', () => {
    const ab = rand([1, N, S, S], 34);
    return samePacked(
      { q: packRows(q, D), k: packRows(k, D), v: packRows(val, D), off: tokenOffset, cu, ab },
      { q, k, v: val, ab },
      { num_heads: N, scale: 0.4 },
    );
  });
  it('packed QKV [T, N, 3, H]', () => {
    const qkv = rand([T, N, 3, H], 35);
    // The same values as separate padded Q, K, V.
    const x = qkv.data as Float32Array;
    const padded = (part: number) => {
      const out = new Float32Array(B * S * D);
      real.forEach((p, t) => {
        for (let n = 0; n < N; n++) for (let h = 0; h < H; h++) out[p * D + n * H + h] = x[((t * N + n) * 3 + part) * H + h];
      });
      return f32(Array.from(out), [B, S, D]);
    };
    return samePacked({ q: qkv, off: tokenOffset, cu }, { q: padded(0), k: padded(1), v: padded(2) }, { num_heads: N });
  });
});
