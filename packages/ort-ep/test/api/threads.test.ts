// onnxruntime's intraOpNumThreads session option sets the CPU threads (the fused kernels' pool and
// OpenBLAS) for the process; bad values are refused by name. The pool's workers poll for the next
// kernel a while before sleeping.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { expectShared, sharedPath } from '../helpers/shared.js';
import { model, node, v } from '../helpers/build.js';
import { f32, ort } from '../helpers/ort.js';

const bytes = model({ inputs: [v('x', 'float32', [4])], outputs: [v('y', 'float32', [4])], nodes: [node('Erf', ['x'], ['y'])] });
const create = (intraOpNumThreads?: number) =>
  ort.InferenceSession.create(bytes, { executionProviders: [{ name: 'mlx', device: 'cpu' }], intraOpNumThreads } as never);

describe('intraOpNumThreads', () => {
  it('sets the CPU threads; 0 or unset leaves them', async () => {
    const before = mx.cpuThreads();
    try {
      const s = await create(1);
      expect(mx.cpuThreads()).toBe(1);
      const feeds = { x: f32([0, 0.5, -1, 2], [4]) };
      const { y } = await s.run(feeds);
      await s.release();
      const ref = await ort.InferenceSession.create(bytes);
      const want = (await ref.run(feeds)).y.data as Float32Array;
      await ref.release();
      (y.data as Float32Array).forEach((got, i) => expect(Math.abs(got - want[i])).toBeLessThanOrEqual(2e-7));
      await (await create(0)).release();
      expect(mx.cpuThreads()).toBe(1);
      await (await create(3)).release();
      expect(mx.cpuThreads()).toBe(3);
    } finally {
      mx.setCpuThreads(before);
    }
  });
  it('refuses negative and fractional counts', async () => {
    await expect(create(-2)).rejects.toThrow(/intraOpNumThreads must be an integer from 0 to 1024, got -2/);
    await expect(create(1.5)).rejects.toThrow(/intraOpNumThreads must be an integer from 0 to 1024, got 1.5/);
  });
});

describe('the CPU pool between kernels', () => {
  it('a 2-thread worker stays awake across a run of mobilenet-v3-ish and across the host work between runs', () => {
    // A worker that slept on its condition variable after each kernel was woken for the next
    // one: about a dozen voluntary context switches per run of this model, 17% of a 2-thread
    // run's CPU time in the scheduler. Workers now poll for the next job a while (yielding the CPU
    // meanwhile) before sleeping. A child process: the pool's worker is the thread it starts.
    const dir = sharedPath('models/mobilenet-v3-ish');
    expectShared(dir);
    const src = fileURLToPath(new URL('../../src/', import.meta.url));
    const code = `
      import { readdirSync, readFileSync } from 'node:fs';
      const { MlxSession } = await import(${JSON.stringify(`${src}index.ts`)});
      const { readTestCase } = await import(${JSON.stringify(`${src}internal.ts`)});
      const tasks = () => readdirSync('/proc/self/task');
      const switches = (t) => { try { return Number(readFileSync('/proc/self/task/' + t + '/status', 'utf8').match(/^voluntary_ctxt_switches:\\s*(\\d+)/m)[1]); } catch { return 0; } };
      const ds = readTestCase(${JSON.stringify(dir)}).datasets[0];
      const before = new Set(tasks());
      const s = await MlxSession.create(${JSON.stringify(`${dir}/model.onnx`)}, { device: 'cpu', intraOpNumThreads: 2 });
      const feeds = {};
      ds.inputs.forEach((t, i) => (feeds[s.inputNames[i]] = t));
      for (let i = 0; i < 10; i++) s.runSync(feeds);
      const fresh = tasks().filter((t) => !before.has(t));
      const at = fresh.map(switches);
      const runs = 100;
      // GAP_US: host work between runs (a busy wait), as a decode loop has between its steps.
      const gap = Number(process.env.GAP_US ?? 0) / 1000;
      for (let i = 0; i < runs; i++) {
        s.runSync(feeds);
        const until = performance.now() + gap;
        while (performance.now() < until);
      }
      console.log(JSON.stringify({ perRun: Math.max(0, ...fresh.map((t, i) => (switches(t) - at[i]) / runs)) }));`;
    const run = (spin?: string, gapUs = 0) => {
      const r = spawnSync(process.execPath, ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', code], {
        encoding: 'utf8',
        env: { ...process.env, MLXC_POOL_SPIN_US: spin, GAP_US: String(gapUs) },
        timeout: 120_000,
      });
      expect(r.status, r.stderr).toBe(0);
      return JSON.parse(r.stdout.trim().split('\n').at(-1)!).perRun as number;
    };
    // Sleeping at once (MLXC_POOL_SPIN_US=0, the old pool) switches several times a run (about 7
    // quiet, 6 on a machine busy with other work); the polling pool all but never. Compared with
    // each other rather than with fixed counts, which moved with the kernels a run takes and the
    // load (a clean-clone run beside a fuzz run saw 5.96).
    const sleeping = run('0');
    const polling = run(undefined);
    expect(sleeping).toBeGreaterThan(3);
    expect(polling).toBeLessThan(Math.min(3, sleeping / 3));
    // 300 us of host work between runs, as between a decode loop's steps (the token read,
    // generate()'s loop, the next feeds): the workers are still polling when the next run comes.
    // With the earlier 100 us they slept in every gap, a switch a run at least, and the step's
    // first products paid the wake-up or ran on one thread (a 7M decode step 0.65-0.9 ms natively
    // instead of 0.45-0.55).
    const shortSpin = run('100', 300);
    const between = run(undefined, 300);
    expect(shortSpin).toBeGreaterThan(0.5);
    expect(between).toBeLessThan(shortSpin / 4);
  }, 240_000);
});
