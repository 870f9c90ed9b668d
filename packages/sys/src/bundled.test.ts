// A bundled application: webpack writes, as this module's import.meta.url, the URL its source had
// where the bundle was built, so "this package's dependencies" may be a folder that is not there.
// The platform packages (and koffi) are then found beside the application's script, whatever the
// working folder. The consumer test runs webpack bundles so; this is the lookup alone, in a child
// process whose script is in a folder of its own (no NODE_PATH: pnpm exec sets one that reaches
// every workspace package).
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { platformPackagesForHost } from './index.js';

const repo = fileURLToPath(new URL('../../..', import.meta.url));
const indexUrl = new URL('./index.ts', import.meta.url).href;
const made: string[] = [];
afterEach(() => {
  for (const d of made.splice(0)) rmSync(d, { recursive: true, force: true });
});
const folder = () => {
  const d = mkdtempSync(join(tmpdir(), 'mlx-bundled-app-'));
  made.push(d);
  return d;
};

/** The platform-package candidate for `name` as a script at `script` sees it, run from `cwd`. */
function candidate(script: string, cwd: string, name: string): { path: string; skip?: string } | undefined {
  writeFileSync(
    script,
    `const m = await import(${JSON.stringify(indexUrl)});
     console.log('RESULT ' + JSON.stringify(m.libraryCandidates().find((c) => c.why === 'platform package ${name}') ?? null));`,
  );
  const env: Record<string, string | undefined> = { ...process.env, MLX_BACKEND: 'cuda', NODE_PATH: undefined, MLX_LIBMLX: undefined };
  const tsx = pathToFileURL(join(repo, 'node_modules/tsx/dist/loader.mjs')).href;
  const r = spawnSync(process.execPath, ['--import', tsx, script], { cwd, encoding: 'utf8', env, timeout: 60_000 });
  const line = r.stdout.split('\n').find((l) => l.startsWith('RESULT '));
  if (!line) throw new Error(`${r.stdout}${r.stderr}`);
  return JSON.parse(line.slice(7)) ?? undefined;
}

describe('platform packages beside the application script', () => {
  // The CUDA package is not a dependency of this workspace's @mlx/sys: only another place finds it.
  const cuda = platformPackagesForHost().find((p) => p.backend === 'cuda');
  it.skipIf(!cuda)('MLX_BACKEND=cuda finds the CUDA package in the folder of process.argv[1], from any working folder', () => {
    const name = cuda!.name;
    const version = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')).version;
    const elsewhere = folder();
    const app = folder();
    expect(candidate(join(app, 'app.mjs'), elsewhere, name)?.skip).toBe('not installed');
    const pkg = join(app, 'node_modules', ...name.split('/'));
    mkdirSync(pkg, { recursive: true });
    writeFileSync(join(pkg, 'package.json'), JSON.stringify({ name, version }));
    const found = candidate(join(app, 'app.mjs'), elsewhere, name);
    expect(found?.path).toBe(join(pkg, 'lib', process.platform === 'darwin' ? 'libmlxc.dylib' : 'libmlxc.so'));
    expect(found?.skip).toBeUndefined();
    // A script inside node_modules (a runner, a CLI) is not the application: not a place.
    const runner = join(app, 'node_modules', 'runner');
    mkdirSync(runner, { recursive: true });
    expect(candidate(join(runner, 'run.mjs'), elsewhere, name)?.skip).toBe('not installed');
  });
});
