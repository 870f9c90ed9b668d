// The CommonJS entry (tools/cjs-entry.mjs writes dist/index.cjs) requires the ES module. A Node
// that cannot require ES modules (before 20.19 and 22.12; here: require(esm) turned off) gets an
// error naming the versions that can, not a bare ERR_REQUIRE_ESM. Needs the build (tools/dev test
// builds before it tests).
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const pkg = fileURLToPath(new URL('..', import.meta.url));
const engines = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { engines: { node: string } }).engines
  .node;
const requireEntry = (flags: string[]) =>
  spawnSync(process.execPath, [...flags, '-e', "console.log(typeof require('./dist/index.cjs').loadMlxC)"], {
    cwd: pkg,
    encoding: 'utf8',
  });

describe('the CommonJS entry', () => {
  it('requires the ES module where Node can', () => {
    const r = requireEntry([]);
    expect(r.stderr).toBe('');
    expect(r.stdout.trim()).toBe('function');
  });

  it('names the Node versions that can, where Node cannot require an ES module', () => {
    const r = requireEntry(['--no-experimental-require-module']);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain(`@mlx/sys from CommonJS (require) needs a Node that can require ES modules: ${engines}`);
  });
});
