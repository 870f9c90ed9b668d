// GroupQueryAttention's past_key and past_value shapes, checked as onnxruntime checks them. Found
// through transformers.js: it sizes the empty first past from the session's input metadata, the
// dimension named `batch_size` as the batch and any other symbol as 0, so a graph whose past is
// declared [batch, kv_heads, past, head_size] gets a past of batch 0 for a prompt of batch 1.
// onnxruntime refuses it ("Input 'past_key' dimension 0 should be batch_size, got 0"); MLX took it
// as an empty cache and ran, a result onnxruntime never gives.
import { describe, expect, it } from 'vitest';
import { MlxSession, NodeExecutionError, type HostTensor } from '../../src/index.js';
import { model, node, v, type ModelSpec } from '../helpers/build.js';
import { ort, runOn, type Feeds } from '../helpers/ort.js';

const N = 2;
const Nkv = 1;
const H = 16;
const S = 2;
const spec: ModelSpec = {
  opsets: { '': 17, 'com.microsoft': 1 },
  inputs: [
    v('q', 'float32', [1, S, N * H]),
    v('k', 'float32', [1, S, Nkv * H]),
    v('v', 'float32', [1, S, Nkv * H]),
    // Shapes left open: the run's feeds decide them, as a graph's symbolic dimensions do.
    v('pk', 'float32'),
    v('pv', 'float32'),
    v('sl', 'int32', [1]),
    v('tot', 'int32', []),
  ],
  outputs: [v('y', 'float32'), v('present_k', 'float32'), v('present_v', 'float32')],
  nodes: [
    node('GroupQueryAttention', ['q', 'k', 'v', 'pk', 'pv', 'sl', 'tot'], ['y', 'present_k', 'present_v'], {
      name: 'gqa',
      domain: 'com.microsoft',
      attrs: { num_heads: N, kv_num_heads: Nkv },
    }),
  ],
};
const wave = (n: number, phase = 0) => Array.from({ length: n }, (_, i) => Math.sin(i * 0.7 + phase));
const f32 = (dims: number[], phase: number): HostTensor => ({
  dtype: 1,
  dims,
  data: Float32Array.from(
    wave(
      dims.reduce((a, b) => a * b, 1),
      phase,
    ),
  ),
});
/** A first prompt of S tokens (seqlens_k S - 1, total S) with the given past shapes. */
const feeds = (pk: number[], pv: number[]): Record<string, HostTensor> => ({
  q: f32([1, S, N * H], 0),
  k: f32([1, S, Nkv * H], 1),
  v: f32([1, S, Nkv * H], 2),
  pk: f32(pk, 3),
  pv: f32(pv, 4),
  sl: { dtype: 6, dims: [1], data: Int32Array.of(S - 1) },
  tot: { dtype: 6, dims: [], data: Int32Array.of(S) },
});
const ortFeeds = (f: Record<string, HostTensor>): Feeds =>
  Object.fromEntries(Object.entries(f).map(([k, t]) => [k, new ort.Tensor(t.dtype === 1 ? 'float32' : 'int32', t.data as never, t.dims)]));

async function mlxRun(f: Record<string, HostTensor>, compiled: boolean): Promise<unknown> {
  try {
    const s = await MlxSession.create(model(spec), { device: 'cpu', compiled, fallback: 'none' });
    try {
      return await s.run(f);
    } finally {
      s.release();
    }
  } catch (e) {
    return e;
  }
}

describe("GroupQueryAttention past_key/past_value shapes: onnxruntime's checks and messages", () => {
  // [past_key dims, past_value dims, onnxruntime's message]
  const bad: [number[], number[], string][] = [
    // transformers.js' first past for a graph whose batch dimension is not named batch_size.
    [[0, Nkv, 0, H], [0, Nkv, 0, H], "Input 'past_key' dimension 0 should be batch_size, got 0"],
    [[2, Nkv, 0, H], [2, Nkv, 0, H], "Input 'past_key' dimension 0 should be batch_size, got 2"],
    [[1, Nkv, 0, H], [0, Nkv, 0, H], "Input 'past_value' dimension 0 should be batch_size, got 0"],
    [[1, 2, 0, H], [1, 2, 0, H], "Input 'past_key' shall have kv_num_heads"],
    [[1, Nkv, 0, H], [1, 3, 0, H], "Input 'past_value' shall have kv_num_heads"],
    [[1, Nkv, 0, 8], [1, Nkv, 0, 8], "Input 'past_key' dimension 3 should match the packed KV head dimension, got 8 expected 16"],
    [[1, Nkv, 0, H], [1, Nkv, 0, 8], "Input 'past_value' dimension 3 should match the packed KV head dimension, got 8 expected 16"],
    [[1, Nkv, H], [1, Nkv, H], "Input 'past_key' is expected to have 4 dimensions, got 3"],
    // onnxruntime's message ends in past_key's dimension 1 there ("got 1"); the text before it is matched.
    [
      [1, Nkv, 2, H],
      [1, Nkv, 3, H],
      "Input 'past_key' and 'past_value' should have same dimension 2 (max sequencelength or past sequence length)",
    ],
  ];
  for (const [pk, pv, message] of bad)
    it(`past_key [${pk}], past_value [${pv}]: "${message}"`, async () => {
      const f = feeds(pk, pv);
      const want = await runOn('cpu', model(spec), ortFeeds(f)).catch((e: Error) => e);
      expect(want, 'onnxruntime-node').toBeInstanceOf(Error);
      expect((want as Error).message).toContain(message);
      for (const compiled of [false, true]) {
        const got = await mlxRun(f, compiled);
        expect(got, String(got)).toBeInstanceOf(NodeExecutionError);
        expect((got as Error).message).toContain(message);
        expect((got as Error).message).toMatch(/node 'gqa' \(GroupQueryAttention\)/);
      }
    });

  it('an empty past of the right shape still runs as onnxruntime does', async () => {
    const f = feeds([1, Nkv, 0, H], [1, Nkv, 0, H]);
    const want = await runOn('cpu', model(spec), ortFeeds(f));
    const got = (await mlxRun(f, false)) as Record<string, HostTensor>;
    const y = got.y.data as Float32Array;
    const ref = want.y.data as Float32Array;
    expect(y.length).toBe(ref.length);
    for (let i = 0; i < y.length; i++) expect(Math.abs(y[i] - ref[i])).toBeLessThan(1e-4);
  });
});
