// The transpose-matmul rewrite (src/plan/rewrite/transpose-matmul.ts): on a GPU session, MatMul and
// MatMulAdd by a constant floating-point [K, N] matrix become mlx.fused::MatMulTransposed, the
// weight stored once as [N, K] and read as a transposed view (the layout MLX's CUDA matrix-vector
// kernel reads). The rewritten graph is checked here on the CPU against onnxruntime-node on the
// original, eager and compiled, at one row (the decode-step form, bias added after the product) and
// many (the bias in addmm); the transpose itself on float32 and float16 bits.
import { describe, expect, it } from 'vitest';
import { encodeGraph, encodeModel } from '../../src/onnx/encode.js';
import { FUSED_DOMAIN } from '../../src/ops/mlx/fused.js';
import { prepareModel } from '../../src/plan/prepare.js';
import { transposeMatrix } from '../../src/plan/rewrite/transpose-matmul.js';
import { OnnxDataType } from '../../src/onnx/index.js';
import { expectSameOutputs, i64, runMlxWith, runOn } from '../helpers/ort.js';
import { seededInput as input, weightProducts } from '../helpers/rewrite-products.js';

const bytes = weightProducts;

/** The model as the rewrite leaves it, as ONNX bytes (what a GPU session would plan). */
function rewritten(): Uint8Array {
  const { model: m } = prepareModel(bytes, { rewriteTarget: { transposeWeights: true } });
  const opsets = new Map(m.opsetImports);
  opsets.set(FUSED_DOMAIN, 1);
  return encodeModel({ irVersion: m.irVersion, opsets, graph: encodeGraph(m.graph) });
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
        expectSameOutputs(await runMlxWith(rewritten(), feeds, { compiled, graphRewrites: false }), want, { rtol: 1e-5, atol: 1e-5 });
      });
});
