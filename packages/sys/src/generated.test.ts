// The generated files (native glue, C declarations, koffi bindings, the README table, core's ops)
// must match what the generators emit from the spec today.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const repo = fileURLToPath(new URL('../../..', import.meta.url));
const tsx = `${repo}node_modules/.bin/tsx`;

function runCheck(script: string) {
  return spawnSync(tsx, [script, '--check'], { cwd: repo, encoding: 'utf8', timeout: 60_000 });
}

describe('generated files', () => {
  it('the tsx binary is where the checks expect it', () => {
    expect(existsSync(tsx)).toBe(true);
  });

  it('sys: native glue, declarations, bindings and the ABI table are not stale', () => {
    const r = runCheck('packages/sys/scripts/generate.ts');
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
  });

  it('core: generated ops are not stale', () => {
    const r = runCheck('packages/core/scripts/generate-ops.ts');
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
  });
});
