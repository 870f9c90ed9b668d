// The pack-matmul rewrite (src/plan/rewrite/pack-matmul.ts): on a CPU session whose CPU has AVX-512,
// MatMul and MatMulAdd by a constant float32 [K, N] matrix become mlx.fused::MatMulPacked, the weight
// packed once into panels of 32 columns. Checked against onnxruntime-node and the rewrites without
// it, eager and compiled, at one row (the panel-streaming kernel) and many (12-row tiles).
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { MlxSession } from '../../src/index.js';
import { decodeModel, undecodedBytes } from '../../src/onnx/index.js';
import { defaultRegistry } from '../../src/ops/index.js';
import { prepareModel } from '../../src/plan/prepare.js';
import { REWRITES, rewriteGraph } from '../../src/plan/rewrite/index.js';
import { FUSED_DOMAIN } from '../../src/ops/mlx/fused.js';
import { model, node, v } from '../helpers/build.js';
import { expectSameAsOrt, expectSameWithRewrites, f32, i64, runMlxWith } from '../helpers/ort.js';
import { seededInput as input, weightProducts } from '../helpers/rewrite-products.js';

const WITHOUT = (Object.keys(REWRITES) as (keyof typeof REWRITES)[]).filter((n) => n !== 'pack-matmul');
const bytes = weightProducts;

describe('pack-matmul rewrite', () => {
  it('packs constant float32 weights once, drops those nothing else reads, keeps a tied one', () => {
    const packed = prepareModel(bytes, { rewriteTarget: { packDense: true } });
    // MatMul+Add -> MatMulAdd -> packed, y's MatMul, v's MatMul (the same panels), h's MatMul; z's weight is fed.
    expect(packed.rewrites).toMatchObject({ 'matmul-add': 1, 'pack-matmul': 4 });
    const inits = packed.model.graph.initializers;
    expect(inits.get('W1/dense_panels')?.dims).toEqual([2, 24, 32]);
    expect(inits.get('W2/dense_panels')?.dims).toEqual([1, 40, 32]);
    expect(inits.get('E/dense_panels')?.dims).toEqual([2, 24, 32]);
    expect(inits.has('W1')).toBe(false);
    expect(inits.has('W2')).toBe(false);
    expect(inits.has('E')).toBe(true);
    const ops = packed.model.graph.nodes.map((n) => n.opType);
    expect(ops.filter((o) => o === 'MatMulPacked')).toHaveLength(4);
    expect(ops.filter((o) => o === 'MatMul')).toHaveLength(1);
    // Without the target (another device, no AVX-512) the products stay as they were.
    expect(prepareModel(bytes).rewrites['pack-matmul']).toBeUndefined();
  });

  it("packs a model file's large weights from their bytes, at any alignment, without decoding them", async () => {
    // W [640, 520] (MatMul) and B [520, 600] (Gemm): over 1 MiB each, so decodeModel keeps their
    // raw_data bytes undecoded; the name's length moves them to each offset modulo 4.
    const [K, N1, N2] = [640, 520, 600];
    const values = (n: number, seed: number) => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.013 + seed) * 0.1);
    const W = values(K * N1, 1);
    const Bw = values(N1 * N2, 2);
    const C = values(N2, 3);
    const offsets = new Set<number>();
    for (const pad of ['', 'p', 'pp', 'ppp']) {
      const file = model({
        name: `packed-from-bytes${pad}`,
        inputs: [v('x', 'float32', [2, K])],
        outputs: [v('y', 'float32', [2, N2])],
        initializers: [
          { name: 'W', type: 'float32', dims: [K, N1], values: W },
          { name: 'B', type: 'float32', dims: [N1, N2], values: Bw },
          { name: 'C', type: 'float32', dims: [N2], values: C },
        ],
        nodes: [node('MatMul', ['x', 'W'], ['h']), node('Gemm', ['h', 'B', 'C'], ['y'])],
      });
      const ir = decodeModel(file);
      const [w, b] = ['W', 'B'].map((n) => ir.graph.initializers.get(n)!);
      const [wRaw, bRaw] = [undecodedBytes(w), undecodedBytes(b)];
      expect(wRaw && bRaw, 'large weights stay bytes after decoding').toBeTruthy();
      offsets.add(wRaw!.byteOffset % 4);
      const counts = rewriteGraph(ir.graph, true, defaultRegistry, { packDense: true });
      expect(counts).toMatchObject({ gemm: 1, 'pack-matmul': 2 });
      // Packed from the bytes: neither weight was decoded on the way.
      expect(undecodedBytes(w)).toBe(wRaw);
      expect(undecodedBytes(b)).toBe(bRaw);
      const inits = ir.graph.initializers;
      const panels = (name: string) => [...inits].find(([k]) => k.startsWith(`${name}/dense_panels`))![1].data as Float32Array;
      expect(Buffer.from(panels('W').buffer).equals(Buffer.from(mx.packDensePanels(W, K, N1).buffer))).toBe(true);
      expect(Buffer.from(panels('B').buffer).equals(Buffer.from(mx.packDensePanels(Bw, N1, N2).buffer))).toBe(true);
      if (pad === '') await expectSameAsOrt(file, { x: input([2, K], 9) }, { rtol: 1e-4, atol: 1e-5 });
    }
    expect(offsets.size, `raw_data offsets modulo 4: ${[...offsets]}`).toBeGreaterThan(1);
  });

  for (const [B, S] of [
    [1, 1],
    [2, 15],
  ])
    it(`gives onnxruntime-node's outputs and the unpacked graph's, ${B * S} row(s)`, async () => {
      const feeds = {
        x: input([B, S, 24], 5 + S),
        v: input([24], 6),
        ids: i64([0, 23, 5], [3]),
        wi: input([7, 5], 7),
      };
      await expectSameAsOrt(bytes, feeds, { rtol: 1e-5, atol: 1e-5 });
      await expectSameWithRewrites(bytes, feeds, true, WITHOUT);
    });

  it('records the panels layout it packed, and reads a graph packed in either layout (written on another CPU)', async () => {
    const split = prepareModel(bytes, { rewriteTarget: { packDense: true } })
      .model.graph.nodes.filter((n) => n.opType === 'MatMulPacked')
      .map((n) => (n.attributes.get('split_halves') as { value: number } | undefined)?.value);
    expect(split).toEqual([1, 1, 1, 1].map(() => (mx.convPanelsSplit() ? 1 : 0)));
    // A MatMulPacked node as a graph written elsewhere holds it: w [40, 45] packed in each layout
    // by its definition (panel q, row k, column j: [q][k][j], or [q][j / 16][k][j % 16] split).
    const [K, N, M] = [40, 45, 3];
    const w = Array.from({ length: K * N }, (_, i) => Math.sin(i * 0.7));
    const xs = Array.from({ length: M * K }, (_, i) => Math.cos(i * 0.3));
    const want: number[] = [];
    for (let m = 0; m < M; m++)
      for (let j = 0; j < N; j++) {
        let acc = 0;
        for (let k = 0; k < K; k++) acc += xs[m * K + k] * w[k * N + j];
        want.push(acc);
      }
    for (const layout of [0, 1]) {
      const panels = new Array<number>(2 * K * 32).fill(0);
      for (let k = 0; k < K; k++)
        for (let col = 0; col < N; col++) {
          const [q, j] = [Math.floor(col / 32), col % 32];
          panels[layout ? q * K * 32 + Math.floor(j / 16) * K * 16 + k * 16 + (j % 16) : (q * K + k) * 32 + j] = w[k * N + col];
        }
      const packedModel = model({
        inputs: [v('x', 'float32', [M, K])],
        outputs: [v('y', 'float32', [M, N])],
        nodes: [node('MatMulPacked', ['x', 'wp'], ['y'], { domain: FUSED_DOMAIN, attrs: { n: N, split_halves: layout } })],
        initializers: [{ name: 'wp', type: 'float32', dims: [2, K, 32], values: panels }],
        opsets: { '': 17, [FUSED_DOMAIN]: 1 },
      });
      for (const compiled of [false, true]) {
        const got = Array.from(
          (await runMlxWith(packedModel, { x: f32(xs, [M, K]) }, { compiled, graphRewrites: false })).y.data as Float32Array,
        );
        got.forEach((g, i) => expect(Math.abs(g - want[i]), `layout ${layout} compiled ${compiled} [${i}]`).toBeLessThanOrEqual(1e-4));
      }
    }
  });

  it('is what a CPU session on this CPU runs (AVX-512 or AVX2), and not without the rewrite', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pack-matmul-'));
    try {
      const written = (graphRewrites: boolean | string[]) => {
        const path = join(dir, `${String(graphRewrites).length}.onnx`);
        MlxSession.createSync(bytes, { device: 'cpu', graphRewrites, optimizedModelFilePath: path } as never).release();
        return Buffer.from(readFileSync(path)).toString('latin1');
      };
      expect(written(true).includes('MatMulPacked')).toBe(mx.cpuKernelsUseAvx512() || mx.cpuKernelsUseAvx2());
      expect(written(WITHOUT).includes('MatMulPacked')).toBe(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
