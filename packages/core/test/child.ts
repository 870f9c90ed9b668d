// A module script of @mlx/core run in a child process of its own (tsx, the sources), for settings
// read once per process (MLXC_* environment variables): its exit status, stdout and stderr.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** The path of src/index.ts, to import in a script: `import * as mx from ${CORE_INDEX}`. */
export const CORE_INDEX = JSON.stringify(fileURLToPath(new URL('../src/index.ts', import.meta.url)));

export function runScript(
  script: string,
  env: Record<string, string | undefined>,
): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', script], {
    cwd: fileURLToPath(new URL('..', import.meta.url)),
    env: { ...process.env, ...env, VITEST: undefined },
    encoding: 'utf8',
    timeout: 120_000,
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}
