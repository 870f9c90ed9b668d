// Where one warm runSync of a model goes, split by phase (medians over N runs, microseconds):
// feed checks, building the graph (the compiled replay call apart), evaluation, collecting the
// outputs and freeing the run's arrays. Reads the session's internals; a profiling aid, never a test.
//   node --conditions=source --import tsx bench/run-phases.ts gpt2-tiny|vad|<shared model> [N]
//   (MLXC_INLINE_EVAL=0: CPU work handed to MLX's stream thread, for comparison; PHASE_THREADS=n:
//   intraOpNumThreads, default 2)
import { performance } from 'node:perf_hooks';
import { join } from 'node:path';
import { type HostTensor, MlxSession } from '../src/index.js';
import { readTestCase } from '../src/internal.js';
import * as mx from '@mlx/core';
import { driveSync, evalSync, within } from '../src/execute/driver.js';
import { collectOutputs } from '../src/execute/outputs.js';

const which = process.argv[2] ?? 'gpt2-tiny';
const N = Number(process.argv[3] ?? 2000);
async function main(): Promise<void> {
  let path: string;
  let feeds: Record<string, HostTensor>;
  if (which === 'vad') {
    path = 'node_modules/@ricky0123/vad-web/dist/silero_vad_v5.onnx';
    feeds = {
      input: { dtype: 1, dims: [1, 512], data: Float32Array.from({ length: 512 }, (_, i) => Math.sin(i / 7) * 0.3) },
      state: { dtype: 1, dims: [2, 1, 128], data: new Float32Array(256) },
      sr: { dtype: 7, dims: [], data: BigInt64Array.of(16000n) },
    };
  } else {
    const dir = which.startsWith('/') ? which : join('..', '..', '..', 'shared', 'models', which);
    path = join(dir, 'model.onnx');
    const ds = readTestCase(dir).datasets[0];
    const s0 = await MlxSession.create(path, { device: 'cpu' });
    feeds = {};
    (ds.inputs as HostTensor[]).forEach((t, i) => (feeds[s0.inputNames[i]] = t));
    s0.release();
  }
  const s: any = await MlxSession.create(path, { device: 'cpu', intraOpNumThreads: Number(process.env.PHASE_THREADS ?? 2) });
  for (let i = 0; i < 10; i++) s.runSync(feeds);
  const fetches = s.outputNames;
  let callT = 0;
  for (const sig of s.runner.programs.values())
    for (const g of sig.groups)
      if (g.kind === 'segment' && g.compiled) {
        const orig = g.compiled;
        g.compiled = Object.assign(
          (...a: any[]) => {
            const t = performance.now();
            const r = orig(...a);
            callT += performance.now() - t;
            return r;
          },
          { dispose: () => orig.dispose() },
        );
      }
  const acc: Record<string, number[]> = { check: [], build: [], eval: [], collect: [], dispose: [], total: [], call: [] };
  const c0 = mx.nativeCallCounts();
  for (let i = 0; i < N; i++) {
    const t0 = performance.now();
    s.checkRun(feeds, fetches);
    const run = s.newRun({});
    const t1 = performance.now();
    const values = driveSync(s.streams, run, s.runner.run(run, feeds, fetches)) as any[];
    const t2 = performance.now();
    evalSync(
      s.streams,
      run,
      values.filter((v: any) => v.kind === 'device').map((v: any) => v.array),
    );
    const t3 = performance.now();
    within(s.streams, () => collectOutputs(fetches, values, run, {}, s.pooledResults));
    const t4 = performance.now();
    mx.dispose([...run.arrays]);
    const t5 = performance.now();
    acc.check.push(t1 - t0);
    acc.build.push(t2 - t1);
    acc.eval.push(t3 - t2);
    acc.collect.push(t4 - t3);
    acc.dispose.push(t5 - t4);
    acc.total.push(t5 - t0);
    acc.call.push(callT);
    callT = 0;
  }
  const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
  console.log(
    which.padEnd(12),
    Object.entries(acc)
      .map(([k, v]) => `${k} ${(med(v) * 1000).toFixed(1)}`)
      .join('  '),
    '(medians, us)',
  );
  s.release();
}
main();
