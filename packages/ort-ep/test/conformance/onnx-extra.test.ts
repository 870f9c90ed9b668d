// The other test-case folders of the ONNX release (simple models, PyTorch-converted modules and
// PyTorch operators, from the onnx wheel pinned in test/published/models.json, fetched by
// tools/fetch-published.mjs). Every case passes through the mlx backend (eager, then compiled:
// analysed, traced, replayed), except those onnxruntime-node cannot run either: the legacy
// broadcasting of opset-6 arithmetic, AveragePool-1/BatchNormalization-6/Gemm-6 have no kernel
// in onnxruntime, and ai.onnx.preview.training's Gradient none anywhere. For those the test checks
// that onnxruntime-node really fails them, so the list cannot hide a case it runs.
import { execFileSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runCase } from './runner.js';

const root = fileURLToPath(new URL('../../../..', import.meta.url));
const paths = JSON.parse(execFileSync('node', [join(root, 'tools/fetch-published.mjs'), '--quiet'], { encoding: 'utf8' })) as Record<
  string,
  string
>;
const data = paths['onnx-backend-data'];
/** Cases that neither engine runs: onnxruntime's refusal, and ours. */
const neither = new Set([
  'test_gradient_of_add',
  'test_gradient_of_add_and_mul',
  'test_GLU',
  'test_GLU_dim',
  'test_PoissonNLLLLoss_no_reduce',
  'test_Softsign',
  'test_operator_add_broadcast',
  'test_operator_add_size1_broadcast',
  'test_operator_add_size1_right_broadcast',
  'test_operator_add_size1_singleton_broadcast',
  'test_operator_addconstant',
  'test_operator_basic',
  'test_operator_non_float_params',
  'test_operator_params',
  'test_operator_pow',
]);

process.env.MLX_ORT_FUSION = '0';
for (const suite of ['simple', 'pytorch-converted', 'pytorch-operator']) {
  describe(`ONNX ${suite} cases`, () => {
    const cases = readdirSync(join(data, suite)).sort();
    it('the folder has its cases', () => expect(cases.length).toBeGreaterThan(20));
    for (const name of cases) {
      const dir = join(data, suite, name);
      it(name, async () => {
        if (neither.has(name)) {
          const ort = await runCase(dir, 'ort');
          expect(ort.status, `onnxruntime-node runs ${name}: take it off the list`).not.toBe('pass');
          const ours = await runCase(dir, 'mlx', { compiled: false });
          expect(ours.status === 'unsupported' ? 'unsupported' : `${ours.status}: ${ours.detail}`).toBe('unsupported');
          return;
        }
        const eager = await runCase(dir, 'mlx', { compiled: false });
        expect(eager.status === 'pass' ? 'pass' : `eager ${eager.status}: ${eager.detail}`).toBe('pass');
        const compiled = await runCase(dir, 'mlx', { compiled: true, runs: 3 });
        expect(compiled.status === 'pass' ? 'pass' : `compiled ${compiled.status}: ${compiled.detail}`).toBe('pass');
      });
    }
  });
}
