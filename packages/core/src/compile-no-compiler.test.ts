// compile() where no C++ compiler answers: MLX's CPU compile needs one (it runs `g++ --version`)
// and otherwise hands the function back untraced, so a compiled function ran its JS body, building
// the graph again, on every call. compile() then captures (captureGraph): one trace per input
// signature, replayed natively. The child process finds a `g++` first on PATH that fails.
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const work = mkdtempSync(join(tmpdir(), 'mlx-core-nocxx-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const child = `
  const mx = await import('./src/index.ts');
  let traces = 0;
  const f = mx.compile((a, b) => {
    traces++;
    return mx.add(mx.multiply(mx.exp(a), b), mx.sin(a));
  });
  const seen = [];
  for (const a of [[0.5, -1, 2], [3, 0, -2], [1, 1, 1], [1, 2]]) {
    const y = f(mx.array(a), mx.array(a.map((x) => x / 2)));
    seen.push({ got: Array.from(y.toList()), want: a.map((x) => Math.exp(x) * (x / 2) + Math.sin(x)) });
  }
  mx.setCompileMode('disabled');
  let eager = 0;
  const g = mx.compile((a) => (eager++, mx.multiply(a, 2)));
  g(mx.array([1])); g(mx.array([2]));
  mx.setCompileMode('enabled');
  console.log(JSON.stringify({ available: mx.cpuCompileAvailable(), traces, eager, seen }));
`;

describe('compile() without a C++ compiler', () => {
  it('captures: one trace per input signature, the same values', () => {
    const bin = join(work, 'bin');
    mkdirSync(bin, { recursive: true });
    writeFileSync(join(bin, 'g++'), '#!/bin/sh\nexit 127\n');
    chmodSync(join(bin, 'g++'), 0o755);
    const r = spawnSync(process.execPath, ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', child], {
      cwd: pkg,
      encoding: 'utf8',
      timeout: 120_000,
      env: { ...process.env, PATH: `${bin}:${process.env.PATH}`, TMPDIR: work, MLX_DISABLE_COMPILE: undefined },
    });
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout.trim().split('\n').at(-1)!);
    expect(out.available).toBe(false);
    // Three calls of one signature and one of another: two traces (MLX alone: four).
    expect(out.traces).toBe(2);
    // Compiled while the mode is 'disabled': eager, as with a compiler.
    expect(out.eager).toBe(2);
    for (const { got, want } of out.seen) {
      expect(got.length).toBe(want.length);
      got.forEach((x: number, i: number) => expect(Math.abs(x - want[i])).toBeLessThan(1e-5 * (1 + Math.abs(want[i]))));
    }
  });
});
