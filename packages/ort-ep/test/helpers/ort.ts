// Running one model two ways: onnxruntime-node's CPU provider (the reference) and the 'mlx'
// provider through onnxruntime-node's own ort object, with the same feeds.
import { createRequire } from 'node:module';
import { expect } from 'vitest';
import '../../src/index.js';
import type { TensorSpec } from './build.js';
import { exactReference } from './exact-reference.js';

const require = createRequire(import.meta.url);
export const ort = require('onnxruntime-node') as typeof import('onnxruntime-node');
// Legacy-opset warnings from the reference are expected in these tests.
ort.env.logLevel = 'error';
export type OrtTensor = import('onnxruntime-node').Tensor;
export type Feeds = Record<string, OrtTensor>;

/**
 * `{ name: 'mlx', device: 'cpu' }` for onnxruntime-node's ort object. The cast is needed for
 * types only: backend.ts augments onnxruntime-common's ESM declarations, while onnxruntime-node's
 * types re-export its CommonJS ones, which TypeScript treats as a separate module.
 */
export const mlxCpu = {
  executionProviders: [{ name: 'mlx', device: 'cpu' }],
} as unknown as import('onnxruntime-node').InferenceSession.SessionOptions;

/** 'ran' when a session of `bytes` runs `feeds` with `options`, else what create() or run() threw. */
export async function outcome(
  bytes: Uint8Array,
  feeds: Feeds,
  options?: import('onnxruntime-node').InferenceSession.SessionOptions,
): Promise<unknown> {
  try {
    const s = await ort.InferenceSession.create(bytes, options);
    try {
      await s.run(feeds);
      return 'ran';
    } finally {
      await s.release();
    }
  } catch (e) {
    return e;
  }
}

export const f32 = (data: number[], dims: number[]): OrtTensor => new ort.Tensor('float32', Float32Array.from(data), dims);
export const i64 = (data: number[], dims: number[]): OrtTensor => new ort.Tensor('int64', BigInt64Array.from(data.map(BigInt)), dims);
export const bool = (data: number[], dims: number[]): OrtTensor => new ort.Tensor('bool', Uint8Array.from(data), dims);
export const i32 = (data: number[], dims = [data.length]): OrtTensor => new ort.Tensor('int32', Int32Array.from(data), dims);

/** Deterministic values in [-1, 1). */
export function seeded(n: number, seed = 1): number[] {
  let s = seed >>> 0 || 1;
  return Array.from({ length: n }, () => (s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 31 - 1);
}

/** A float32 initializer of `dims` with seeded values shifted to [-1.5, 0.5) and times `scale` (seeded's minus 0.5). */
export const seededInit = (name: string, dims: number[], seed: number, scale = 0.5): TensorSpec => ({
  name,
  type: 'float32',
  dims,
  values: seeded(
    dims.reduce((a, b) => a * b, 1),
    seed,
  ).map((x) => (x - 0.5) * scale),
});

/** A float32 feed of `dims`: seeded values, minus 0.5, times 2. */
export const seededFeed = (dims: number[], seed: number): OrtTensor =>
  f32(
    seeded(
      dims.reduce((a, b) => a * b, 1),
      seed,
    ).map((x) => (x - 0.5) * 2),
    dims,
  );

/** A float32 tensor of `dims` with seeded values (seeded's) times `scale`. */
export const randomF32 = (dims: number[], seed: number, scale = 1): OrtTensor =>
  f32(
    seeded(
      dims.reduce((a, b) => a * b, 1),
      seed,
    ).map((x) => x * scale),
    dims,
  );

/**
 * The outputs of a session on one provider. On 'cpu' (the reference) onnxruntime runs
 * exactReference's model: its integer products with int8 weights taken through its exact uint8
 * kernels, the same math on every CPU (see exact-reference.ts); 'mlx' always runs `bytes` as given.
 */
export async function runOn(provider: 'cpu' | 'mlx', bytes: Uint8Array, feeds: Feeds): Promise<Record<string, OrtTensor>> {
  const ref = provider === 'cpu' ? exactReference(bytes, feeds) : { bytes, feeds, options: { executionProviders: ['mlx'] } };
  const s = await ort.InferenceSession.create(ref.bytes, ref.options);
  try {
    return await s.run(ref.feeds);
  } finally {
    await s.release();
  }
}

/**
 * The outputs of a session through mlx on the CPU with the given provider options (graphRewrites,
 * compiled, ...). A compiled session runs three times, so that the outputs are a replay's (it
 * traces on the second run).
 */
export async function runMlxWith(
  bytes: Uint8Array,
  feeds: Feeds,
  options: { compiled: boolean; graphRewrites?: boolean | string[] },
): Promise<Record<string, OrtTensor>> {
  const s = await ort.InferenceSession.create(bytes, {
    executionProviders: [{ name: 'mlx', device: 'cpu', ...options }],
  } as never);
  try {
    let out = await s.run(feeds);
    if (options.compiled) for (let i = 0; i < 2; i++) out = await s.run(feeds);
    return out;
  } finally {
    await s.release();
  }
}

/**
 * Runs `bytes` through mlx with the graph rewrites `on` and with `off`, eager and compiled (a
 * replay's outputs), and checks they agree: the same output names and dims, values within `tol`.
 */
export async function expectSameWithRewrites(
  bytes: Uint8Array,
  feeds: Feeds,
  on: boolean | string[],
  off: boolean | string[],
  tol = { rtol: 1e-5, atol: 1e-5 },
): Promise<void> {
  for (const compiled of [false, true]) {
    const have = await runMlxWith(bytes, feeds, { compiled, graphRewrites: on });
    const want = await runMlxWith(bytes, feeds, { compiled, graphRewrites: off });
    expect(Object.keys(have).sort()).toEqual(Object.keys(want).sort());
    for (const k of Object.keys(want)) {
      expect(have[k].dims).toEqual(want[k].dims);
      const [a, b] = [plain(have[k]), plain(want[k])];
      expect(a.length).toBe(b.length);
      a.forEach((x, i) =>
        expect(Math.abs(x - b[i]), `compiled ${compiled} ${k}[${i}]`).toBeLessThanOrEqual(tol.atol + tol.rtol * Math.abs(b[i])),
      );
    }
  }
}

export const plain = (t: OrtTensor): number[] => Array.from(t.data as ArrayLike<number | bigint>, Number);

/** Runs on both providers and checks every output agrees (dims, type, values within tolerance). Returns the mlx outputs. */
export async function expectSameAsOrt(
  bytes: Uint8Array,
  feeds: Feeds,
  tol = { rtol: 1e-5, atol: 1e-6 },
): Promise<Record<string, OrtTensor>> {
  const [want, have] = [await runOn('cpu', bytes, feeds), await runOn('mlx', bytes, feeds)];
  expectSameOutputs(have, want, tol);
  return have;
}

/** mlx's outputs `have` equal onnxruntime's `want`: the same names, types and dims, values within `tol`. */
export function expectSameOutputs(
  have: Record<string, OrtTensor>,
  want: Record<string, OrtTensor>,
  tol = { rtol: 1e-5, atol: 1e-6 },
): void {
  expect(Object.keys(have).sort()).toEqual(Object.keys(want).sort());
  for (const name of Object.keys(want)) {
    expect({ name, type: have[name].type, dims: [...have[name].dims] }).toEqual({
      name,
      type: want[name].type,
      dims: [...want[name].dims],
    });
    const a = plain(have[name]);
    const b = plain(want[name]);
    const bad = a.findIndex((x, i) => !(Math.abs(x - b[i]) <= tol.atol + tol.rtol * Math.abs(b[i])));
    expect(bad === -1 ? 'ok' : `${name}[${bad}]: mlx ${a[bad]} vs onnxruntime ${b[bad]}`).toBe('ok');
  }
}
