// Where optional packages are found from a bundled application. webpack writes, as a module's
// import.meta.url, the URL its source had where the bundle was built, and replaces
// createRequire(x) imported by name with undefined when x is not a constant: a bundle run elsewhere
// found none of the packages installed beside it (the 'mlx' backend was never registered with
// onnxruntime-node's copy of onnxruntime-common: "backend not found"). The consumer test bundles
// with webpack and esbuild; these are the parts that fail without the fix.
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { packageRequirers, requireOptional, resolvesOptional } from './packages.js';

const made: string[] = [];
const argv1 = process.argv[1];
afterEach(() => {
  process.argv[1] = argv1;
  for (const d of made.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A folder holding a script and, beside it, node_modules/<name> exporting `value`. */
function appFolder(name: string, value: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'mlx-bundled-app-'));
  made.push(dir);
  const pkg = join(dir, 'node_modules', name);
  mkdirSync(pkg, { recursive: true });
  writeFileSync(join(pkg, 'package.json'), JSON.stringify({ name, version: '1.0.0', main: 'index.js' }));
  writeFileSync(join(pkg, 'index.js'), `module.exports = { value: ${JSON.stringify(value)} };`);
  writeFileSync(join(dir, 'app.mjs'), '');
  return dir;
}

describe('packageRequirers: the script node runs is a place', () => {
  it('a package beside the script is found whatever the working folder (a bundle run from elsewhere)', () => {
    const name = 'mlx-ort-ep-beside-the-bundle';
    const dir = appFolder(name, 'beside');
    // The working folder (this package) does not hold it.
    expect(resolvesOptional(name)).toBe(false);
    process.argv[1] = join(dir, 'app.mjs');
    expect(packageRequirers()).toHaveLength(3);
    expect(resolvesOptional(name)).toBe(true);
    expect(requireOptional<{ value: string }>(name)?.value).toBe('beside');
  });

  it('a relative or missing script, or one in node_modules (a test runner, a CLI), adds no place', () => {
    const name = 'mlx-ort-ep-beside-the-runner';
    const dir = appFolder(name, 'runner');
    process.argv[1] = join(dir, 'node_modules', name, 'index.js');
    expect(packageRequirers()).toHaveLength(2);
    expect(resolvesOptional(name)).toBe(false);
    process.argv[1] = 'app.mjs';
    expect(packageRequirers()).toHaveLength(2);
    (process.argv as (string | undefined)[])[1] = undefined;
    expect(packageRequirers()).toHaveLength(2);
  });
});

describe('createRequire is never imported by name in what the library loads', () => {
  // webpack rewrites `import { createRequire } from 'node:module'` calls; the namespace form
  // (requireAt here, in @mlx/sys its own) is left to run.
  const sources = (dir: string, skip: RegExp): string[] =>
    readdirSync(dir, { recursive: true, encoding: 'utf8' })
      .filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts') && !skip.test(f))
      .map((f) => join(dir, f));
  const src = join(import.meta.dirname, '..');
  // The CLI and its demo are programs, not modules an application bundles.
  const files = [...sources(src, /^(cli[^/]*\.ts|demo\/)/), join(src, '../../sys/src/index.ts')];

  it('no module of @mlx/ort-ep (but the CLI) nor @mlx/sys does', () => {
    const named = /import\s*\{[^}]*\bcreateRequire\b[^}]*\}\s*from\s*'(node:)?module'/;
    expect(files.length).toBeGreaterThan(50);
    expect(files.filter((f) => named.test(readFileSync(f, 'utf8')))).toEqual([]);
  });
});
