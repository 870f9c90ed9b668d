// By default the CPU never runs a C++ compiler: the compiled path traces and replays without MLX's
// JIT fusion (which writes C++ and runs g++ for every new fused kernel, seconds each on a model's
// first runs). MLX_ORT_CPU_JIT=1 opts into it. Each case runs gpt2-tiny in a child process with an
// empty kernel cache and a `g++` first on PATH that records each call and then runs the real one,
// so the test sees whether MLX compiled anything, and the results still match onnxruntime's.
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { expectShared, sharedPath } from '../helpers/shared.js';

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const modelDir = sharedPath('models/gpt2-tiny');
const realGxx = spawnSync('sh', ['-c', 'command -v g++'], { encoding: 'utf8' }).stdout.trim();
const work = mkdtempSync(join(tmpdir(), 'mlx-ort-nocxx-'));
afterAll(() => process.env.KEEP_WORK || rmSync(work, { recursive: true, force: true }));

const child = `
  import { createRequire } from 'node:module';
  import { join } from 'node:path';
  const { readTestCase, hostToTensor } = await import('./src/internal.ts');
  const ort = createRequire(join(process.cwd(), 'package.json'))('onnxruntime-node');
  const dir = process.env.MODEL_DIR;
  const ds = readTestCase(dir).datasets[0];
  const s = await ort.InferenceSession.create(join(dir, 'model.onnx'), { executionProviders: [{ name: 'mlx', device: 'cpu' }] });
  const feeds = {};
  ds.inputs.forEach((t, i) => (feeds[s.inputNames[i]] = hostToTensor(ort, t)));
  let worst = 0;
  for (let r = 0; r < 3; r++) {
    const out = await s.run(feeds);
    const got = out[s.outputNames[0]].data;
    const want = ds.outputs[0].data;
    for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]) / (1e-4 + Math.abs(want[i])));
  }
  await s.release();
  console.log(JSON.stringify({ worst }));
`;

/** Runs the child with a recording g++ ahead of the real one; returns its result and the g++ calls. */
function runWithRecordingCompiler(name: string, env: Record<string, string>): { worst: number; calls: number } {
  const dir = join(work, name);
  const bin = join(dir, 'bin');
  mkdirSync(bin, { recursive: true });
  const log = join(dir, 'gxx-calls');
  writeFileSync(join(bin, 'g++'), `#!/bin/sh\necho "called $*" >> '${log}'\nexec '${realGxx}' "$@"\n`);
  chmodSync(join(bin, 'g++'), 0o755);
  const r = spawnSync(process.execPath, ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', child], {
    cwd: pkg,
    encoding: 'utf8',
    timeout: 240_000,
    env: {
      ...process.env,
      PATH: `${bin}:${process.env.PATH}`,
      TMPDIR: dir,
      MLX_ORT_CACHE_DIR: join(dir, 'cache'),
      MLX_ORT_FUSION: '',
      MLX_ORT_CPU_JIT: '',
      MODEL_DIR: modelDir,
      ...env,
    },
  });
  if (r.status !== 0) throw new Error(`child failed (${r.status}): ${r.stderr}`);
  const calls = existsSync(log) ? readFileSync(log, 'utf8').split('\n').filter(Boolean).length : 0;
  return { ...JSON.parse(r.stdout.trim().split('\n').at(-1)!), calls };
}

describe('no C++ compiler at run time', () => {
  it('the shared model is there', () => expectShared(modelDir));

  it('by default, compiled runs of gpt2-tiny on a cold cache never call g++ and match the reference', () => {
    const r = runWithRecordingCompiler('default', {});
    expect(r.calls).toBe(0);
    expect(r.worst).toBeLessThan(1e-2);
  });

  it.skipIf(!realGxx)('MLX_ORT_CPU_JIT=1 opts into MLX’s JIT, which calls g++ (the check above can see it)', () => {
    const r = runWithRecordingCompiler('jit', { MLX_ORT_CPU_JIT: '1' });
    expect(r.calls).toBeGreaterThan(0);
    expect(r.worst).toBeLessThan(1e-2);
  });
});
