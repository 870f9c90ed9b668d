// @mlx/core in worker threads: each JS thread (the main thread and every worker) loads its own
// instance of this package over one native library, so nothing process-wide may belong to one of
// them. Evaluation reports come back on a channel per thread, and error messages stay with the OS
// thread that failed. The scenarios that broke with one shared report pipe and a JS callback as
// the error handler: a worker after the main thread used MLX (hung), workers one after another
// (ERR_INVALID_FD_TYPE), several at once. Each runs in a child process.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const pkg = fileURLToPath(new URL('..', import.meta.url));
const index = fileURLToPath(new URL('./index.ts', import.meta.url));

// What each thread does: a background evaluation with a known result, and a failing call whose
// message must be its own.
const work = `
  const mx = await import(${JSON.stringify(index)});
  export async function work(tag) {
    const s = mx.newStream('cpu', { anyThread: true });
    let sum = 0;
    for (let r = 0; r < 20; r++) {
      const a = mx.withStream(s, () => mx.sum(mx.multiply(mx.arange(0, 1000, 1, 'float32'), mx.array(tag))));
      await mx.evalInBackground([a], {}, s);
      sum = a.item();
      a.dispose();
    }
    let message = '';
    try {
      mx.reshape(mx.zeros([tag + 2]), [tag + 3]);
    } catch (e) {
      message = e.message;
    }
    return { sum, message };
  }
`;

const child = (scenario: string) => `
  import { Worker } from 'node:worker_threads';
  import { writeFileSync, mkdtempSync } from 'node:fs';
  import { tmpdir } from 'node:os';
  import { join } from 'node:path';
  const dir = mkdtempSync(join(tmpdir(), 'mlx-workers-'));
  const workFile = join(dir, 'work.mjs');
  writeFileSync(workFile, ${JSON.stringify(work)});
  const workerFile = join(dir, 'worker.mjs');
  writeFileSync(workerFile, "import { parentPort, workerData } from 'node:worker_threads'; const { register } = await import(workerData.tsx); register(); const { work } = await import(workerData.workFile); parentPort.postMessage(await work(workerData.tag));");
  const tsx = import.meta.resolve('tsx/esm/api');
  const inWorker = (tag) => new Promise((resolve, reject) => {
    const w = new Worker(workerFile, { workerData: { workFile, tag, tsx }, execArgv: ['--conditions=source'] });
    w.once('message', resolve);
    w.once('error', reject);
  });
  const { work } = await import(workFile);
  const results = [];
  ${scenario}
  console.log(JSON.stringify(results));
`;

function run(scenario: string): { sum: number; message: string }[] {
  const r = spawnSync(process.execPath, ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', child(scenario)], {
    cwd: pkg,
    encoding: 'utf8',
    timeout: 120_000,
  });
  expect(r.signal, r.stderr).toBeNull();
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(r.stdout.trim().split('\n').at(-1)!);
}

const expected = (tag: number) => ({
  sum: tag * 499500,
  message: expect.stringContaining(`array of size ${tag + 2} into shape (${tag + 3})`),
});

describe('worker threads', () => {
  it('a worker after the main thread used MLX, then another after it', () => {
    const got = run(`
      results.push(await work(1));
      results.push(await inWorker(2));
      results.push(await inWorker(3));
      results.push(await work(4));
    `);
    expect(got).toEqual([1, 2, 3, 4].map(expected));
  });

  it('three workers and the main thread at once', () => {
    const got = run(`
      results.push(...(await Promise.all([inWorker(1), inWorker(2), work(3), inWorker(4)])));
    `);
    expect(got).toEqual([1, 2, 3, 4].map(expected));
  });
});
