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
import { prepareModel } from '../../src/plan/prepare.js';
import { REWRITES } from '../../src/plan/rewrite/index.js';
import { expectSameAsOrt, expectSameWithRewrites, i64 } from '../helpers/ort.js';
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
