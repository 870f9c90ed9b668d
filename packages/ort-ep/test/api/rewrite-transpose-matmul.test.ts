// The transpose-matmul rewrite (src/plan/rewrite/transpose-matmul.ts): on a GPU session, MatMul and
// MatMulAdd by a constant floating-point [K, N] matrix become mlx.fused::MatMulTransposed, the
// weight stored once as [N, K] and read as a transposed view (the layout MLX's CUDA matrix-vector
// kernel reads). The rewritten graph is checked here on the CPU against onnxruntime-node on the
// original, eager and compiled, at one row (the decode-step form, bias added after the product) and
// many (the bias in addmm), float32 and float16.
import * as ort from 'onnxruntime-node';
import { describe, expect, it } from 'vitest';
import { encodeGraph, encodeModel } from '../../src/onnx/encode.js';
import { FUSED_DOMAIN } from '../../src/ops/mlx/fused.js';
import { prepareModel } from '../../src/plan/prepare.js';
import { transposeMatrix } from '../../src/plan/rewrite/transpose-matmul.js';
import { OnnxDataType } from '../../src/onnx/index.js';
import { model, node, v, type TensorSpec } from '../helpers/build.js';
import { expectSameOutputs, f32, i64, runOn, seeded, type Feeds } from '../helpers/ort.js';

const size = (dims: number[]) => dims.reduce((a, b) => a * b, 1);
const init = (name: string, dims: number[], seed: number): TensorSpec => ({
  name,
  type: 'float32',
  dims,
  values: seeded(size(dims), seed).map((x) => x - 0.5),
});
const input = (dims: number[], seed: number) =>
  f32(
    seeded(size(dims), seed).map((x) => (x - 0.5) * 2),
    dims,
  );

// x [B, S, 24] -> Linear(24, 40) + bias -> MatMul(40, 7); v [24] by the same first weight; an
// embedding that a MatMul also reads (kept beside its transpose); a MatMul by a graph input stays.
const bytes = model({
  inputs: [v('x', 'float32', ['B', 'S', 24]), v('v', 'float32', [24]), v('ids', 'int64', [3]), v('wi', 'float32', [7, 5])],
  outputs: ['y', 'u', 'e', 'h', 'z'].map((n) => v(n, 'float32')),
  nodes: [
    node('MatMul', ['x', 'W1'], ['p']),
    node('Add', ['p', 'b1'], ['a']),
    node('MatMul', ['a', 'W2'], ['y']),
    node('MatMul', ['v', 'W1'], ['u']),
    node('Gather', ['E', 'ids'], ['e']),
    node('MatMul', ['x', 'E'], ['h']),
    node('MatMul', ['y', 'wi'], ['z']),
  ],
  initializers: [init('W1', [24, 40], 1), init('b1', [40], 2), init('W2', [40, 7], 3), init('E', [24, 33], 4)],
  opsets: { '': 17 },
});

/** The model as the rewrite leaves it, as ONNX bytes (what a GPU session would plan). */
function rewritten(): Uint8Array {
  const { model: m } = prepareModel(bytes, { rewriteTarget: { transposeWeights: true } });
  const opsets = new Map(m.opsetImports);
  opsets.set(FUSED_DOMAIN, 1);
  return encodeModel({ irVersion: m.irVersion, opsets, graph: encodeGraph(m.graph) });
}

async function runMlx(b: Uint8Array, feeds: Feeds, compiled: boolean): Promise<Record<string, ort.Tensor>> {
  const s = await ort.InferenceSession.create(b, {
    executionProviders: [{ name: 'mlx', device: 'cpu', compiled, graphRewrites: false }],
  } as never);
  try {
    let out = await s.run(feeds);
    if (compiled) for (let i = 0; i < 2; i++) out = await s.run(feeds);
    return out;
  } finally {
    await s.release();
  }
}

describe('transpose-matmul rewrite', () => {
  it('transposes [K, N] into [N, K] exactly, float32 and float16 bits', () => {
    const w = { dtype: OnnxDataType.FLOAT, dims: [3, 37], data: Float32Array.from({ length: 111 }, (_, i) => i) };
    const t = transposeMatrix(w);
    expect(t.dims).toEqual([37, 3]);
    for (let r = 0; r < 3; r++) for (let c = 0; c < 37; c++) expect(t.data[c * 3 + r]).toBe(r * 37 + c);
    const h = transposeMatrix({ dtype: OnnxDataType.FLOAT16, dims: [40, 2], data: Uint16Array.from({ length: 80 }, (_, i) => i) });
    expect(h.data).toBeInstanceOf(Uint16Array);
    expect(Array.from(h.data as Uint16Array).slice(0, 4)).toEqual([0, 2, 4, 6]);
  });

  it('stores constant weights transposed once, drops those nothing else reads, keeps a tied one', () => {
    const prepared = prepareModel(bytes, { rewriteTarget: { transposeWeights: true } });
    expect(prepared.rewrites).toMatchObject({ 'matmul-add': 1, 'transpose-matmul': 4 });
    const inits = prepared.model.graph.initializers;
    expect(inits.get('W1/transposed')?.dims).toEqual([40, 24]);
    expect(inits.get('W2/transposed')?.dims).toEqual([7, 40]);
    expect(inits.get('E/transposed')?.dims).toEqual([33, 24]);
    expect(inits.has('W1')).toBe(false);
    expect(inits.has('E')).toBe(true);
    const ops = prepared.model.graph.nodes.map((n) => n.opType);
    expect(ops.filter((o) => o === 'MatMulTransposed')).toHaveLength(4);
    expect(ops.filter((o) => o === 'MatMul')).toHaveLength(1);
    // Not without the target (a CPU session).
    expect(prepareModel(bytes).rewrites['transpose-matmul']).toBeUndefined();
  });

  for (const [B, S] of [
    [1, 1],
    [2, 15],
  ])
    for (const compiled of [false, true])
      it(`gives onnxruntime-node's outputs, ${B * S} row(s), ${compiled ? 'compiled' : 'eager'}`, async () => {
        const feeds = { x: input([B, S, 24], 5 + S), v: input([24], 6), ids: i64([0, 23, 5], [3]), wi: input([7, 5], 7) };
        const want = await runOn('cpu', bytes, feeds);
        expectSameOutputs(await runMlx(rewritten(), feeds, compiled), want, { rtol: 1e-5, atol: 1e-5 });
      });
});
