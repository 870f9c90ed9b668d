// Every model in ../shared/models matches onnxruntime's reference outputs (both data sets) within
// the tolerances of its meta.json, through the onnxruntime-common API with the 'mlx' provider.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readTestCase, type HostTensor } from '../../src/onnx/index.js';
import { hostToTensor, tensorToHost } from '../../src/internal.js';
import '../../src/index.js';
import { compareTensor } from '../conformance/compare.js';
import { expectShared, sharedPath } from '../helpers/shared.js';

const require = createRequire(import.meta.url);
const ort = require('onnxruntime-node') as typeof import('onnxruntime-node');
const modelsDir = sharedPath('models');
const models = existsSync(modelsDir) ? readdirSync(modelsDir).filter((m) => existsSync(join(modelsDir, m, 'model.onnx'))) : [];

describe('shared models through the mlx provider', () => {
  it('the models are there', () => {
    expectShared(modelsDir);
    expect(models.length).toBeGreaterThanOrEqual(9);
  });
  // The compiled path (fusion on: on the CPU each new fused kernel is built once with g++ and
  // kept in the kernel cache), three runs per data set: analysed, traced, replayed. Then the
  // eager path, one run.
  for (const [label, compiled, runs] of [
    ['compiled', true, 3],
    ['eager', false, 1],
  ] as const) {
    for (const name of models) {
      it(`${name} (${label})`, async () => {
        const dir = join(modelsDir, name);
        const meta = JSON.parse(readFileSync(join(dir, 'meta.json'), 'utf8')) as {
          rtol?: number;
          atol?: number;
          tolerance?: { rtol: number; atol: number };
        };
        const tol = { rtol: meta.rtol ?? meta.tolerance?.rtol ?? 1e-3, atol: meta.atol ?? meta.tolerance?.atol ?? 1e-4 };
        const tc = readTestCase(dir);
        const session = await ort.InferenceSession.create(join(dir, 'model.onnx'), {
          executionProviders: [{ name: 'mlx', compiled } as never],
        });
        try {
          expect(tc.datasets.length).toBeGreaterThanOrEqual(2);
          for (let r = 0; r < runs; r++) {
            for (const ds of tc.datasets) {
              const feeds: Record<string, import('onnxruntime-node').Tensor> = {};
              (ds.inputs as HostTensor[]).forEach((t, i) => (feeds[session.inputNames[i]] = hostToTensor(ort as never, t) as never));
              const out = await session.run(feeds);
              (ds.outputs as HostTensor[]).forEach((want, i) => {
                const name = session.outputNames[i];
                const c = compareTensor(tensorToHost(name, out[name]), want, tol);
                expect(c.ok ? 'ok' : `run ${r + 1}, ${name}: ${c.why}`).toBe('ok');
              });
            }
          }
        } finally {
          await session.release();
        }
      }, 300_000);
    }
  }
});
