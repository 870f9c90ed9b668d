// The generated files (native glue, C declarations and types, koffi bindings and types, the README
// table, core's ops) must match what the generators emit from the spec today, and the check must
// notice when they do not.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const repo = fileURLToPath(new URL('../../..', import.meta.url));
const tsx = `${repo}node_modules/.bin/tsx`;
const sysScript = 'packages/sys/scripts/generate.ts';
const coreScript = 'packages/core/scripts/generate-ops.ts';

function run(script: string, ...args: string[]) {
  return spawnSync(tsx, [script, ...args], { cwd: repo, encoding: 'utf8', timeout: 60_000 });
}

const scratch = mkdtempSync(join(tmpdir(), 'mlx-generated-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe('generated files', () => {
  it('the tsx binary is where the checks expect it', () => {
    expect(existsSync(tsx)).toBe(true);
  });

  it('sys: native glue, declarations, types, bindings and the ABI table are not stale', () => {
    const r = run(sysScript, '--check');
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
  });

  it('core: generated ops are not stale', () => {
    const r = run(coreScript, '--check');
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
  });
});

// The checks run against a scratch copy (--root), so that the package's own files stay untouched
// while other test files load them.
describe('the staleness checks fail when a generated file is stale', () => {
  it('sys: an edited or a missing file is named, with the command that regenerates it', () => {
    const root = join(scratch, 'sys');
    expect(run(sysScript, '--root', root).status).toBe(0);
    expect(run(sysScript, '--check', '--root', root).status).toBe(0);

    writeFileSync(join(root, 'native/include/mlxc/types.h'), '/* edited by hand */\n');
    unlinkSync(join(root, 'src/generated/ctypes.ts'));
    const r = run(sysScript, '--check', '--root', root);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('native/include/mlxc/types.h');
    expect(r.stderr).toContain('src/generated/ctypes.ts');
    expect(r.stderr).not.toContain('bindings.ts');
    expect(r.stderr).toContain('corepack pnpm --filter @mlx/sys generate');
  });

  it('sys: glue of a group that is no longer in the spec is named in --check, and deleted when generating', () => {
    const root = join(scratch, 'sys-extra');
    expect(run(sysScript, '--root', root).status).toBe(0);
    writeFileSync(join(root, 'native/generated/gone.cpp'), '// a group that was renamed\n');
    const r = run(sysScript, '--check', '--root', root);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('native/generated/gone.cpp (no longer generated)');
    expect(run(sysScript, '--root', root).status).toBe(0);
    expect(existsSync(join(root, 'native/generated/gone.cpp'))).toBe(false);
    expect(run(sysScript, '--check', '--root', root).status).toBe(0);
  });

  it('core: an edited ops.ts is reported, with the command that regenerates it', () => {
    const root = join(scratch, 'core');
    expect(run(coreScript, '--root', root).status).toBe(0);
    expect(run(coreScript, '--check', '--root', root).status).toBe(0);

    writeFileSync(join(root, 'src/generated/ops.ts'), '// stale\n');
    const r = run(coreScript, '--check', '--root', root);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('ops.ts is stale');
    expect(r.stderr).toContain('corepack pnpm --filter @mlx/core exec tsx scripts/generate-ops.ts');
  });

  it('core: an edited ext.ts (the project kernels) is reported by name', () => {
    const root = join(scratch, 'core-ext');
    expect(run(coreScript, '--root', root).status).toBe(0);
    writeFileSync(join(root, 'src/generated/ext.ts'), '// stale\n');
    const r = run(coreScript, '--check', '--root', root);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('ext.ts is stale');
    expect(r.stderr).not.toContain('ops.ts is stale');
  });
});
