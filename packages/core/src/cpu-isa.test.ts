// The fused CPU kernels' builds (native/src/kernels/activation/math_*.cpp): the widest one this CPU runs is the one
// dispatched to, and every build computes the same values. MLXC_CPU_KERNELS is read once per
// process, so the narrower builds run in child processes (avx2: AVX2+FMA even on an AVX-512
// machine; generic: the portable loops) on the same inputs, edge values and vector tails included.
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';
import { sample } from '../test/isa-sample.js';

const flags = existsSync('/proc/cpuinfo')
  ? (readFileSync('/proc/cpuinfo', 'utf8')
      .match(/^flags\s*:(.*)$/m)?.[1]
      .split(/\s+/) ?? [])
  : null;
const forced = process.env.MLXC_CPU_KERNELS;

describe('fused CPU kernel builds', () => {
  it.skipIf(flags === null || forced !== undefined)('the widest build the CPU has is dispatched to', () => {
    const has = (f: string) => flags!.includes(f);
    expect(mx.cpuKernelsUseAvx512()).toBe(has('avx512f') && has('fma'));
    expect(mx.cpuKernelsUseAvx2()).toBe(has('avx2') && has('fma'));
  });

  it('AVX-512, AVX2 and the portable build agree', () => {
    const here = sample(mx);
    const helper = fileURLToPath(new URL('../test/isa-sample.ts', import.meta.url));
    const index = fileURLToPath(new URL('./index.ts', import.meta.url));
    const script = `import * as m from ${JSON.stringify(index)}; import { sample } from ${JSON.stringify(helper)}; console.log(JSON.stringify(sample(m).map((a) => a.map(String))));`;
    for (const build of ['avx2', 'generic']) {
      const r = spawnSync(process.execPath, ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', script], {
        env: { ...process.env, MLXC_CPU_KERNELS: build, VITEST: undefined },
        encoding: 'utf8',
      });
      expect(r.status, r.stderr).toBe(0);
      const line = r.stdout.trim().split('\n').at(-1)!;
      const there = (JSON.parse(line) as string[][]).map((a) => a.map(Number));
      here.forEach((a, k) =>
        a.forEach((v, i) => {
          const w = there[k][i];
          const tag = `${build} kernel ${k}[${i}]: ${v} vs ${w}`;
          if (Number.isNaN(v)) expect(Number.isNaN(w), tag).toBe(true);
          else if (!Number.isFinite(v)) expect(w, tag).toBe(v);
          // The portable build has no FMA: its deep tails (GELU near -9) differ by a few ulps more.
          else expect(Math.abs(v - w), tag).toBeLessThanOrEqual((build === 'avx2' ? 2e-6 : 2e-5) * Math.abs(v) + 1e-30);
        }),
      );
    }
  });

  it('an unknown MLXC_CPU_KERNELS value is reported and ignored, not taken silently', () => {
    const index = fileURLToPath(new URL('./index.ts', import.meta.url));
    const script = `import * as m from ${JSON.stringify(index)}; console.log(JSON.stringify([m.cpuKernelsUseAvx2(), m.cpuKernelsUseAvx512()]));`;
    const run = (value: string | undefined) =>
      spawnSync(process.execPath, ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', script], {
        env: { ...process.env, MLXC_CPU_KERNELS: value, VITEST: undefined },
        encoding: 'utf8',
      });
    const typo = run('portable');
    expect(typo.status, typo.stderr).toBe(0);
    expect(typo.stderr).toContain("MLXC_CPU_KERNELS='portable' is not one of off, generic, avx2: ignored");
    // The widest build runs, as with the variable unset.
    const unset = run(undefined);
    expect(typo.stdout.trim().split('\n').at(-1)).toBe(unset.stdout.trim().split('\n').at(-1));
    expect(unset.stderr).not.toContain('MLXC_CPU_KERNELS');
    // The known values stay silent.
    expect(run('generic').stderr).not.toContain('MLXC_CPU_KERNELS');
  });
});
