#!/usr/bin/env node
// Fetches the published models listed in packages/ort-ep/test/published/models.json: each wheel
// at its pinned version from PyPI (pip download, as tools/install-mlx.sh does for MLX), checked
// against its sha256, and the listed .onnx files extracted to .cache/published/<model name>.onnx.
// Prints a JSON map of model name -> path. Does nothing for a model already extracted.
//   node tools/fetch-published.mjs [--quiet]
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const manifest = JSON.parse(readFileSync(join(root, 'packages/ort-ep/test/published/models.json'), 'utf8'));
const cache = join(root, '.cache/published');
const wheels = join(cache, 'wheels');
const quiet = process.argv.includes('--quiet');
const log = (m) => quiet || console.error(`[fetch-published] ${m}`);
mkdirSync(wheels, { recursive: true });

const sha256 = (file) => createHash('sha256').update(readFileSync(file)).digest('hex');
const paths = {};
for (const p of manifest.packages) {
  const missing = p.models.filter((m) => !existsSync(join(cache, `${m.name}.onnx`)));
  for (const m of p.models) paths[m.name] = join(cache, `${m.name}.onnx`);
  const trees = (p.trees ?? []).filter((t) => !existsSync(join(cache, t.name, '.complete')));
  for (const t of p.trees ?? []) paths[t.name] = join(cache, t.name);
  if (!missing.length && !trees.length) continue;
  const whl = join(wheels, p.wheel);
  if (!existsSync(whl) || sha256(whl) !== p.sha256) {
    log(`downloading ${p.package}==${p.version} from PyPI`);
    // A platform wheel is asked for by platform (and Python version), so that pip picks the pinned
    // file whatever this machine's Python is.
    const target = [...(p.platform ? ['--platform', p.platform] : []), ...(p.python ? ['--python-version', p.python] : [])];
    execFileSync(
      'python3',
      ['-m', 'pip', 'download', '--quiet', '--no-deps', '--only-binary=:all:', ...target, '-d', wheels, `${p.package}==${p.version}`],
      {
        stdio: ['ignore', 'ignore', 'inherit'],
      },
    );
    if (!existsSync(whl)) throw new Error(`pip did not produce ${p.wheel} (found: ${readdirSync(wheels).join(', ')})`);
    const got = sha256(whl);
    if (got !== p.sha256) throw new Error(`${p.wheel}: sha256 ${got}, expected ${p.sha256}`);
  }
  const script = [
    'import sys, zipfile',
    'z = zipfile.ZipFile(sys.argv[1])',
    'for pair in sys.argv[2:]:',
    '    src, dst = pair.split("=", 1)',
    '    open(dst + ".tmp", "wb").write(z.read(src))',
  ].join('\n');
  execFileSync('python3', ['-c', script, whl, ...missing.map((m) => `${m.file}=${join(cache, `${m.name}.onnx`)}`)]);
  for (const m of missing) renameSync(join(cache, `${m.name}.onnx.tmp`), join(cache, `${m.name}.onnx`));
  // Folders of test cases (model.onnx + test_data_set_*): the members under prefix + dir, kept
  // below the tree's folder; .complete marks a finished extraction.
  const tree = [
    'import os, sys, zipfile',
    'z = zipfile.ZipFile(sys.argv[1])',
    'prefix, dest, dirs = sys.argv[2], sys.argv[3], sys.argv[4:]',
    'for n in z.namelist():',
    '    rel = n[len(prefix):]',
    '    if n.startswith(prefix) and rel.split("/")[0] in dirs and not n.endswith("/"):',
    '        out = os.path.join(dest, rel)',
    '        os.makedirs(os.path.dirname(out), exist_ok=True)',
    '        open(out, "wb").write(z.read(n))',
    'open(os.path.join(dest, ".complete"), "w").close()',
  ].join('\n');
  for (const t of trees) execFileSync('python3', ['-c', tree, whl, t.prefix, join(cache, t.name), ...t.dirs]);
  log(`extracted ${[...missing.map((m) => m.name), ...trees.map((t) => t.name)].join(', ')}`);
}
console.log(JSON.stringify(paths));
