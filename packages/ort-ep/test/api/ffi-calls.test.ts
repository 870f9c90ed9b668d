// Native (FFI) calls per warm compiled run of a real model, through onnxruntime's InferenceSession
// with the mlx provider. Counting needs MLX_SYS_COUNT_CALLS=1 when @mlx/sys loads, so the runs
// happen in a child process. A warm run of one traced segment over host feeds is one native call
// whatever the model's size (mlxc_capture_run_host: the feeds copied in, the replay, its
// evaluation and the guard flags and results read out). With results kept on the device it takes
// the general path, bounded by 2 calls per input and output plus a constant of 8: one call of the
// compiled segment, one evaluation, one read of the stacked guard flags, one batched free of the
// run's arrays, and four switches of the default stream (the run's stream and its CPU companion,
// set and restored). The eager path makes calls per node, so its count, measured in the same
// process, shows what the bound catches if per-node calls come back.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { expectShared, sharedPath } from '../helpers/shared.js';

const pkgDir = fileURLToPath(new URL('../..', import.meta.url));
const CONSTANT = 8;

const child = (modelDir: string) => `
  import { createRequire } from 'node:module';
  import { join } from 'node:path';
  const dir = ${JSON.stringify(modelDir)};
  const { readTestCase } = await import('./src/onnx/index.ts');
  const { hostToTensor } = await import('./src/internal.ts');
  await import('./src/index.ts');
  const mx = await import('@mlx/core');
  const ort = createRequire(join(process.cwd(), 'package.json'))('onnxruntime-node');
  const ds = readTestCase(dir).datasets[0];
  const total = () => [...mx.nativeCallCounts().values()].reduce((a, b) => a + b, 0);
  const out = {};
  for (const [name, compiled, onDevice] of [['compiled', true, false], ['device', true, true], ['eager', false, false]]) {
    const s = await ort.InferenceSession.create(join(dir, 'model.onnx'), {
      // A run whose evaluation takes longer than shortEvalMs (2 ms by default; a loaded machine
      // passes it now and then) evaluates on the worker thread, the general path: the bound is
      // given room here so that the count is the one-call path's whatever the machine's load.
      executionProviders: [{ name: 'mlx', device: 'cpu', compiled, shortEvalMs: 100 }],
      ...(onDevice ? { preferredOutputLocation: 'gpu-buffer' } : {}),
    });
    const feeds = {};
    ds.inputs.forEach((t, i) => (feeds[s.inputNames[i]] = hostToTensor(ort, t)));
    // The first run analyses the signature, the second traces it: warm runs come after.
    for (let i = 0; i < 3; i++) await s.run(feeds);
    const runs = 5;
    const before = total();
    for (let i = 0; i < runs; i++) {
      const r = await s.run(feeds);
      for (const t of Object.values(r)) if (t.location === 'gpu-buffer') t.dispose();
    }
    out[name] = { perRun: (total() - before) / runs, io: s.inputNames.length + s.outputNames.length };
    await s.release();
  }
  console.log(JSON.stringify(out));`;

describe('native calls per run', () => {
  it('a warm compiled run of gpt2-tiny is one native call; with device results at most 2 per input/output plus 8', () => {
    const dir = sharedPath('models/gpt2-tiny');
    expectShared(dir);
    const r = spawnSync(process.execPath, ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', child(dir)], {
      cwd: pkgDir,
      env: { ...process.env, MLX_SYS_COUNT_CALLS: '1' },
      encoding: 'utf8',
      timeout: 120_000,
    });
    expect(r.status, r.stderr).toBe(0);
    const { compiled, device, eager } = JSON.parse(r.stdout.trim().split('\n').at(-1)!);
    expect(compiled.io).toBe(3); // input_ids, attention_mask -> logits
    expect(compiled.perRun).toBe(1);
    const bound = 2 * device.io + CONSTANT;
    expect(device.perRun).toBeGreaterThan(1);
    expect(device.perRun).toBeLessThanOrEqual(bound);
    // The eager path's per-node calls (hundreds on this model's 294 needed nodes) are far over it.
    expect(eager.perRun).toBeGreaterThan(5 * bound);
  }, 150_000);
});
