// The published models of test/published/models.json on every engine, through the models
// benchmark: writes each as a folder in the shared layout (model.onnx and test_data_set_0 with the
// test's seeded feeds) under .cache/published/bench/, then runs bench/models.ts on those folders
// (each engine alone in its own process, alternated, several rounds).
//   tools/dev bench published [--filter regex] [models.ts options: --rounds, --runs, --engines]
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { encodeTensorBytes } from '../src/onnx/encode.js';
import { fetchPublished, publishedFeeds, publishedModels } from '../test/helpers/published.js';

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const fi = args.indexOf('--filter');
const filter = new RegExp(fi >= 0 ? args[fi + 1] : '.');
const rest = fi >= 0 ? [...args.slice(0, fi), ...args.slice(fi + 2)] : args;
const paths = fetchPublished();
const base = join(here, '../../../.cache/published/bench');
const dirs: string[] = [];
for (const m of publishedModels.filter((m) => filter.test(m.name))) {
  if (m.outputs) continue; // a model whose outputs onnxruntime-node cannot all return
  const dir = join(base, m.name);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(join(dir, 'test_data_set_0'), { recursive: true });
  symlinkSync(paths[m.name], join(dir, 'model.onnx'));
  publishedFeeds(m).forEach((t, i) => writeFileSync(join(dir, 'test_data_set_0', `input_${i}.pb`), encodeTensorBytes(t)));
  if (existsSync(join(dir, 'model.onnx'))) dirs.push(dir);
}
const r = spawnSync(
  process.execPath,
  [
    '--conditions=source',
    '--import',
    'tsx',
    join(here, 'models.ts'),
    // Only these folders (models.ts filters the shared models and extra folders by name alike).
    '--filter',
    `^(${dirs.map((d) => d.split('/').at(-1)).join('|')})$`,
    '--models',
    dirs.join(','),
    ...rest,
  ],
  { stdio: 'inherit' },
);
process.exit(r.status ?? 1);
