// The fused CPU kernels' thread pool: a kernel run right after the pool is made or resized must
// not wait forever. A worker once read the job generation when its thread first ran, so a job
// posted before then was lost and the caller waited for the worker's check-in for ever. The
// loop runs in a child process, so that a hang is a timeout here rather than a stuck test run.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

describe('CPU thread pool', () => {
  it('kernels run at once after every resize (400 resizes, 2-4 threads)', () => {
    const core = fileURLToPath(new URL('./index.ts', import.meta.url));
    const repo = fileURLToPath(new URL('../../..', import.meta.url));
    const code = `
      const mx = await import(${JSON.stringify(core)});
      const x = mx.full([64, 4096], 0.5).eval();
      let lo = Infinity, hi = -Infinity;
      for (let i = 0; i < 400; i++) {
        mx.setCpuThreads(2 + (i % 3));
        const y = mx.ext.fusedActivation(x, null, 'tanh');
        lo = Math.min(lo, mx.min(y).item());
        hi = Math.max(hi, mx.max(y).item());
      }
      console.log(JSON.stringify({ lo, hi, want: Math.tanh(0.5) }));`;
    const r = spawnSync(process.execPath, ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', code], {
      cwd: repo,
      encoding: 'utf8',
      timeout: 90_000,
    });
    expect(r.signal, 'the loop hung (killed at the timeout)').toBeNull();
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout.trim().split('\n').at(-1)!);
    // Every element of every run was computed (a chunk left undone would keep no 0.46 there).
    expect(out.lo).toBeCloseTo(out.want, 5);
    expect(out.hi).toBeCloseTo(out.want, 5);
  }, 100_000);
  it('back-to-back jobs with more workers than cores: each job whole, late workers take nothing', () => {
    // The caller waits only for the workers that took its job; one that wakes after the job is
    // done must find it cleared (never run a finished job's loop, whose closure is gone) and
    // still take the next one. Many short jobs on 8 threads make late wake-ups common.
    const core = fileURLToPath(new URL('./index.ts', import.meta.url));
    const repo = fileURLToPath(new URL('../../..', import.meta.url));
    const code = `
      const mx = await import(${JSON.stringify(core)});
      mx.setCpuThreads(8);
      const n = 200_003;
      const xs = [0.25, -0.5, 0.75].map((v) => mx.full([n], v).eval());
      let bad = 0;
      for (let i = 0; i < 800; i++) {
        const v = [0.25, -0.5, 0.75][i % 3];
        const y = mx.ext.fusedActivation(xs[i % 3], null, 'tanh');
        const d = y.toTypedArray();
        const want = Math.fround(Math.tanh(v));
        for (let j = 0; j < n; j += 997) if (Math.abs(d[j] - want) > 1e-6) bad++;
        if (Math.abs(d[n - 1] - want) > 1e-6) bad++;
        y.dispose();
      }
      console.log(JSON.stringify({ bad }));`;
    const r = spawnSync(process.execPath, ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', code], {
      cwd: repo,
      encoding: 'utf8',
      timeout: 90_000,
    });
    expect(r.signal, 'the loop hung (killed at the timeout)').toBeNull();
    expect(r.status, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout.trim().split('\n').at(-1)!).bad).toBe(0);
  }, 100_000);
  it("OpenBLAS's workers sleep after a product instead of polling (OPENBLAS_THREAD_TIMEOUT defaults to 4)", () => {
    // OpenBLAS's default keeps its workers calling sched_yield for ~0.1 s after each call, which on
    // a 2-core machine took a core from the pool's kernels that ran next. The child multiplies once
    // (MLX's CPU matmul is OpenBLAS's sgemm) and then sleeps 200 ms: the process's CPU time over the
    // sleep is what the workers burn (about 110 ms with OpenBLAS's default, 28; about 12 with 4).
    const core = fileURLToPath(new URL('./index.ts', import.meta.url));
    const repo = fileURLToPath(new URL('../../..', import.meta.url));
    const code = `
      const mx = await import(${JSON.stringify(core)});
      const a = mx.full([512, 512], 0.5).eval();
      const b = mx.full([512, 512], 0.25).eval();
      const v = mx.matmul(a, b).toTypedArray()[0];
      const before = process.cpuUsage();
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 200);
      const u = process.cpuUsage(before);
      console.log(JSON.stringify({ v, env: process.env.OPENBLAS_THREAD_TIMEOUT, cpuMs: (u.user + u.system) / 1000 }));`;
    const child = (env: Record<string, string | undefined>) => {
      const r = spawnSync(process.execPath, ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', code], {
        cwd: repo,
        encoding: 'utf8',
        timeout: 60_000,
        env: { ...process.env, ...env },
      });
      expect(r.status, r.stderr).toBe(0);
      return JSON.parse(r.stdout.trim().split('\n').at(-1)!) as { v: number; env?: string; cpuMs: number };
    };
    const quiet = child({ OPENBLAS_THREAD_TIMEOUT: undefined });
    expect(quiet.v).toBe(64); // 512 * 0.5 * 0.25
    expect(quiet.env).toBe('4');
    expect(quiet.cpuMs, 'CPU time burnt while the process slept 200 ms').toBeLessThan(50);
    // A value the user set is theirs.
    expect(child({ OPENBLAS_THREAD_TIMEOUT: '28' }).env).toBe('28');
  }, 100_000);
});
