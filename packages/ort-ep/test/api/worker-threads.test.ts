// Sessions in worker threads, through the public API (onnxruntime-node and 'mlx'): the main thread
// and any number of workers create and run sessions, one after another or at once, with the same
// outputs as onnxruntime's CPU provider. Each scenario runs in a child process (a hang or a crash
// there fails the test instead of the runner).
import { spawnSync } from 'node:child_process';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { expectShared, sharedPath } from '../helpers/shared.js';

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const modelDir = sharedPath('models/gpt2-tiny');

// One thread's work: a session of the model on 'mlx', three runs, the largest relative
// difference from onnxruntime's reference outputs.
const work = `
  import { createRequire } from 'node:module';
  import { join } from 'node:path';
  const { readTestCase, hostToTensor } = await import(${JSON.stringify(join('src', 'internal.ts'))});
  const ort = createRequire(join(process.cwd(), 'package.json'))('onnxruntime-node');
  export async function work(dir) {
    const ds = readTestCase(dir).datasets[0];
    const s = await ort.InferenceSession.create(join(dir, 'model.onnx'), { executionProviders: [{ name: 'mlx', device: 'cpu' }] });
    const feeds = {};
    ds.inputs.forEach((t, i) => (feeds[s.inputNames[i]] = hostToTensor(ort, t)));
    let worst = 0;
    for (let r = 0; r < 3; r++) {
      const got = (await s.run(feeds))[s.outputNames[0]].data;
      const want = ds.outputs[0].data;
      for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]) / (1e-4 + Math.abs(want[i])));
    }
    await s.release();
    return worst;
  }
`;

const child = (scenario: string) => `
  import { Worker } from 'node:worker_threads';
  import { mkdtempSync, writeFileSync } from 'node:fs';
  import { tmpdir } from 'node:os';
  import { join } from 'node:path';
  const tmp = mkdtempSync(join(tmpdir(), 'mlx-ort-workers-'));
  const workFile = join(tmp, 'work.mjs');
  writeFileSync(workFile, ${JSON.stringify(work)}.replace(${JSON.stringify(join('src', 'internal.ts'))}, join(process.cwd(), 'src', 'internal.ts')));
  const workerFile = join(tmp, 'worker.mjs');
  writeFileSync(workerFile, "import { parentPort, workerData } from 'node:worker_threads'; const { register } = await import(workerData.tsx); register(); const { work } = await import(workerData.workFile); parentPort.postMessage(await work(workerData.dir));");
  const tsx = import.meta.resolve('tsx/esm/api');
  const dir = process.env.MODEL_DIR;
  const inWorker = () => new Promise((resolve, reject) => {
    const w = new Worker(workerFile, { workerData: { workFile, dir, tsx }, execArgv: ['--conditions=source'] });
    w.once('message', resolve);
    w.once('error', reject);
  });
  const { work } = await import(workFile);
  const results = [];
  ${scenario}
  console.log(JSON.stringify(results));
`;

function run(scenario: string): number[] {
  const r = spawnSync(process.execPath, ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', child(scenario)], {
    cwd: pkg,
    encoding: 'utf8',
    timeout: 240_000,
    env: { ...process.env, MODEL_DIR: modelDir },
  });
  expect(r.signal, r.stderr).toBeNull();
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(r.stdout.trim().split('\n').at(-1)!);
}

describe('sessions in worker threads', () => {
  it('the shared model is there', () => expectShared(modelDir));

  it('the main thread, then two workers one after another, then the main thread again', () => {
    const worst = run(`
      results.push(await work(dir));
      results.push(await inWorker());
      results.push(await inWorker());
      results.push(await work(dir));
    `);
    expect(worst).toHaveLength(4);
    for (const w of worst) expect(w).toBeLessThan(1e-2);
  });

  it('three workers and the main thread at once', () => {
    const worst = run('results.push(...(await Promise.all([inWorker(), inWorker(), work(dir), inWorker()])));');
    expect(worst).toHaveLength(4);
    for (const w of worst) expect(w).toBeLessThan(1e-2);
  });
});
