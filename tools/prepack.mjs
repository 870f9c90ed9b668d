// `prepack` of the four library packages: builds the package (and what it depends on) through
// turbo, whose cache turns an unchanged build into a replay, so `pnpm -r pack` and `pnpm publish`
// never pack a missing or stale dist/. turbo looks for pnpm on PATH: a shim that runs the
// corepack-pinned pnpm is put first (the same one tools/dev makes).
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { delimiter, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const { name } = JSON.parse(readFileSync('package.json', 'utf8'));
const shims = join(root, '.mlx', 'bin');
if (!existsSync(join(shims, 'pnpm'))) {
  mkdirSync(shims, { recursive: true });
  writeFileSync(join(shims, 'pnpm'), '#!/usr/bin/env bash\nexec corepack pnpm "$@"\n');
  chmodSync(join(shims, 'pnpm'), 0o755);
}
const r = spawnSync(join(root, 'node_modules', '.bin', 'turbo'), ['run', 'build', `--filter=${name}`, '--output-logs=errors-only'], {
  cwd: root,
  stdio: 'inherit',
  env: {
    ...process.env,
    PATH: `${shims}${delimiter}${process.env.PATH}`,
    TURBO_TELEMETRY_DISABLED: '1',
    COREPACK_ENABLE_DOWNLOAD_PROMPT: '0',
  },
});
process.exit(r.status ?? 1);
