// onnxruntime (the fallback's CPU backend) is loaded only for a model that has a fallback
// partition: loading onnxruntime-node costs about 10 ms of a create() that needs none of it. Each
// case runs in a child process, whose module cache shows whether onnxruntime-node was loaded.
import { spawnSync } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { expectShared, sharedPath } from '../helpers/shared.js';

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const modelDir = sharedPath('models/small-cnn');

const child = `
  import { createRequire } from 'node:module';
  import { join } from 'node:path';
  const ort = await import('onnxruntime-common');
  const { readTestCase } = await import('./src/internal.ts');
  await import('./src/index.ts');
  const dir = process.env.MODEL_DIR;
  const ds = readTestCase(dir).datasets[0];
  const disabledOps = JSON.parse(process.env.DISABLED);
  const s = await ort.InferenceSession.create(join(dir, 'model.onnx'), { executionProviders: [{ name: 'mlx', device: 'cpu', disabledOps }] });
  const t = ds.inputs[0];
  const out = await s.run({ [s.inputNames[0]]: new ort.Tensor('float32', t.data, t.dims) });
  const got = out[s.outputNames[0]].data;
  const want = ds.outputs[0].data;
  let worst = 0;
  for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]) / (1e-3 + Math.abs(want[i])));
  await s.release();
  const require = createRequire(import.meta.url);
  const loaded = Object.keys(require.cache).some((k) => /onnxruntime-node[\\\\/]dist/.test(k));
  console.log(JSON.stringify({ worst, loaded }));
`;

function runChild(disabledOps: string[]): { worst: number; loaded: boolean } {
  const r = spawnSync(process.execPath, ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', child], {
    cwd: pkg,
    encoding: 'utf8',
    timeout: 120_000,
    env: { ...process.env, MODEL_DIR: modelDir, DISABLED: JSON.stringify(disabledOps), MLX_ORT_FALLBACK: '' },
  });
  if (r.status !== 0) throw new Error(`child failed (${r.status}): ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').at(-1)!);
}

describe('the fallback backend loads on demand', () => {
  it('the shared model is there', () => expectShared(modelDir));

  it('a model MLX runs whole never loads onnxruntime-node', () => {
    const r = runChild([]);
    expect(r.loaded).toBe(false);
    expect(r.worst).toBeLessThan(1e-2);
  });

  it('a model with a fallback partition loads it and runs', () => {
    const r = runChild(['Relu']);
    expect(r.loaded).toBe(true);
    expect(r.worst).toBeLessThan(1e-2);
  });
});
