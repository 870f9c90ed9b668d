// onnxruntime's session options the provider takes: freeDimensionOverrides (by name and by
// denotation), graphOptimizationLevel 'disabled', optimizedModelFilePath and deviceId, each
// against onnxruntime-node where it has the same option.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fromBinary, toBinary } from '@bufbuild/protobuf';
import * as mx from '@mlx/core';
import { ModelProtoSchema } from 'onnx-buf';
import { afterAll, describe, expect, it } from 'vitest';
import { InvalidFeedError, MlxSession } from '../../src/index.js';
import { decodeModel } from '../../src/onnx/index.js';
import { model, node, v } from '../helpers/build.js';
import { ort } from '../helpers/ort.js';

const dir = mkdtempSync(join(tmpdir(), 'mlx-options-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const mlx = (extra: Record<string, unknown> = {}) => [{ name: 'mlx', device: 'cpu', ...extra }] as never;

/** y = x @ w + b, x [batch, 4] with dimension 0 denoted DATA_BATCH, dimension 1 named 'feat' (fixed 4 by the file? no: symbolic). */
function matmulAdd(): Uint8Array {
  const bytes = model({
    inputs: [v('x', 'float32', ['batch', 'feat'])],
    outputs: [v('y', 'float32', ['batch', 3])],
    initializers: [
      { name: 'w', type: 'float32', dims: [4, 3], values: Array.from({ length: 12 }, (_, i) => (i - 6) / 7) },
      { name: 'b', type: 'float32', dims: [3], values: [0.5, -0.25, 1] },
    ],
    nodes: [node('MatMul', ['x', 'w'], ['xw'], { name: 'mm' }), node('Add', ['xw', 'b'], ['y'], { name: 'add' })],
  });
  const m = fromBinary(ModelProtoSchema, bytes);
  const t = m.graph!.input[0].type!.value;
  if (t.case !== 'tensorType') throw new Error('unexpected');
  t.value.shape!.dim[0].denotation = 'DATA_BATCH';
  return toBinary(ModelProtoSchema, m);
}

const feeds = (batch: number) => ({
  x: new ort.Tensor(
    'float32',
    Float32Array.from({ length: batch * 4 }, (_, i) => Math.sin(i)),
    [batch, 4],
  ),
});

describe('freeDimensionOverrides', () => {
  for (const [what, overrides] of [
    ['dimension names', { batch: 2, feat: 4 }],
    ['a denotation', { DATA_BATCH: 2, feat: 4 }],
  ] as const) {
    it(`fixes the inputs' dimensions by ${what}, as onnxruntime-node does`, async () => {
      const bytes = matmulAdd();
      const theirs = await ort.InferenceSession.create(bytes, { freeDimensionOverrides: overrides });
      const ours = await ort.InferenceSession.create(bytes, { executionProviders: mlx(), freeDimensionOverrides: overrides });
      const shapeOf = (s: typeof ours) => (s.inputMetadata[0] as { shape: unknown[] }).shape;
      // Both keep the file's shape in their metadata.
      expect(shapeOf(ours)).toEqual(['batch', 'feat']);
      expect(shapeOf(ours)).toEqual(shapeOf(theirs));
      const [a, b] = [await theirs.run(feeds(2)), await ours.run(feeds(2))];
      expect(Array.from(b.y.data as Float32Array)).toEqual(Array.from(a.y.data as Float32Array).map((x) => expect.closeTo(x, 5)));
      // A feed of another batch is refused (onnxruntime-node 1.30 takes the option and does not
      // check feeds against it; the dimension is fixed, as in onnxruntime's own sessions).
      await expect(ours.run(feeds(3))).rejects.toThrow(/'x'.*dimension 0.*2.*3|'x'.*3.*2/);
      const direct = await MlxSession.create(bytes, { device: 'cpu', freeDimensionOverrides: overrides });
      expect(() => direct.runSync({ x: { dtype: 1, dims: [3, 4], data: new Float32Array(12) } })).toThrow(InvalidFeedError);
      direct.release();
      await theirs.release();
      await ours.release();
    });
  }

  it('ignores names that match no dimension (as onnxruntime does) and never reads inherited keys', async () => {
    const s = await MlxSession.create(matmulAdd(), { device: 'cpu', freeDimensionOverrides: { nosuch: 5 } });
    // batch 3 still runs: nothing was fixed.
    expect((s.runSync({ x: { dtype: 1, dims: [3, 4], data: new Float32Array(12) } }).y as { dims: number[] }).dims).toEqual([3, 3]);
    s.release();
    const bytes = model({
      inputs: [v('x', 'float32', ['constructor'])],
      outputs: [v('y', 'float32', ['constructor'])],
      nodes: [node('Relu', ['x'], ['y'])],
    });
    const t = await MlxSession.create(bytes, { device: 'cpu', freeDimensionOverrides: {} });
    expect((t.runSync({ x: { dtype: 1, dims: [5], data: new Float32Array(5) } }).y as { dims: number[] }).dims).toEqual([5]);
    t.release();
  });

  it('refuses values that are not sizes', async () => {
    await expect(MlxSession.create(matmulAdd(), { freeDimensionOverrides: { batch: -1 } })).rejects.toThrow(
      /freeDimensionOverrides: 'batch' must be a non-negative integer, got -1/,
    );
    await expect(MlxSession.create(matmulAdd(), { freeDimensionOverrides: [] as never })).rejects.toThrow(
      /freeDimensionOverrides must be an object/,
    );
  });
});

describe('optimizedModelFilePath and graphOptimizationLevel', () => {
  it('writes the planned model: fused nodes by default, the file as written when optimizations are disabled', async () => {
    const bytes = matmulAdd();
    const fused = join(dir, 'fused.onnx');
    const plain = join(dir, 'plain.onnx');
    await (await ort.InferenceSession.create(bytes, { executionProviders: mlx(), optimizedModelFilePath: fused })).release();
    await (
      await ort.InferenceSession.create(bytes, {
        executionProviders: mlx(),
        optimizedModelFilePath: plain,
        graphOptimizationLevel: 'disabled',
      })
    ).release();
    const ops = (p: string) => decodeModel(readFileSync(p)).graph.nodes.map((n) => `${n.domain}::${n.opType}`);
    // MatMul + Add is one MatMulAdd, its weight packed (MatMulPacked) where the CPU has AVX-512 or AVX2.
    expect(ops(fused)).toEqual([mx.cpuKernelsUseAvx512() || mx.cpuKernelsUseAvx2() ? 'mlx.fused::MatMulPacked' : 'mlx.fused::MatMulAdd']);
    expect(decodeModel(readFileSync(fused)).opsetImports.get('mlx.fused')).toBe(1);
    expect(ops(plain)).toEqual(['ai.onnx::MatMul', 'ai.onnx::Add']);
    // Both written models compute what the original does: the plain one on onnxruntime-node, the
    // fused one on mlx; the denotation is kept.
    const want = (await (await ort.InferenceSession.create(bytes)).run(feeds(2))).y.data as Float32Array;
    const viaOrt = (await (await ort.InferenceSession.create(readFileSync(plain))).run(feeds(2))).y.data as Float32Array;
    const viaMlx = (await (await ort.InferenceSession.create(readFileSync(fused), { executionProviders: mlx() })).run(feeds(2))).y
      .data as Float32Array;
    for (let i = 0; i < want.length; i++) {
      expect(viaOrt[i]).toBeCloseTo(want[i], 6);
      expect(viaMlx[i]).toBeCloseTo(want[i], 5);
    }
    const t = decodeModel(readFileSync(plain)).graph.inputs[0].type;
    expect(t.kind === 'tensor' && t.denotations).toEqual(['DATA_BATCH', '']);
  });

  it('says when the file cannot be written', async () => {
    await expect(MlxSession.create(matmulAdd(), { optimizedModelFilePath: join(dir, 'no', 'such', 'dir.onnx') })).rejects.toThrow(
      /optimizedModelFilePath '.*dir\.onnx' could not be written: ENOENT/,
    );
  });
});

describe('deviceId', () => {
  it('takes device 0 and refuses others with a reason', async () => {
    const s = await ort.InferenceSession.create(matmulAdd(), { executionProviders: mlx({ deviceId: 0 }) });
    await s.release();
    await expect(ort.InferenceSession.create(matmulAdd(), { executionProviders: mlx({ deviceId: 1 }) })).rejects.toThrow(
      /deviceId 1: MLX runs on one GPU per process, device 0/,
    );
    await expect(MlxSession.create(matmulAdd(), { deviceId: -1 })).rejects.toThrow(/deviceId must be a non-negative integer, got -1/);
  });
});
