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
import { model, node, v, type TensorSpec } from '../helpers/build.js';
import { expectSameAsOrt, expectSameWithRewrites, f32, i64, seeded } from '../helpers/ort.js';

const WITHOUT = (Object.keys(REWRITES) as (keyof typeof REWRITES)[]).filter((n) => n !== 'pack-matmul');
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

// x [B, S, 24] -> Linear(24, 40) + bias -> MatMul(40, 7); v [24] by the same first weight; ids
// gathered from an embedding that a MatMul also reads (a tied head: kept beside its panels); a
// MatMul by a graph input stays as written.
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
