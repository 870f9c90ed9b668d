// The published packages' shared metadata, kept in one place: the root package.json's `repository`
// (the project's URL), `license` and `engines`, and the root LICENSE. Each package gets
// `repository` (with its folder), `homepage`, `bugs`, `license`, `engines`, `publishConfig`
// (public access; `exports` without the `source` condition, which only the workspace uses) and a
// copy of LICENSE.
//   node tools/manifests.mjs          write them
//   node tools/manifests.mjs --check  exit 1, listing what differs (tools/dev test runs this)
//   node tools/manifests.mjs --list   the published packages' folders, as JSON
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const check = process.argv.includes('--check');
const rootPkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const url = rootPkg.repository.url.replace(/^git\+/, '').replace(/\.git$/, '');
const license = readFileSync(join(root, 'LICENSE'), 'utf8');

/** The published packages: the four libraries and the platform packages of @mlx/sys. */
export const packageDirs = [
  'packages/sys',
  'packages/core',
  'packages/kernels',
  'packages/ort-ep',
  'packages/sys/npm/linux-x64-gnu',
  'packages/sys/npm/linux-x64-cuda13',
  'packages/sys/npm/darwin-arm64',
];

function withoutSource(exp) {
  if (Array.isArray(exp)) return exp.map(withoutSource);
  if (!exp || typeof exp !== 'object') return exp;
  return Object.fromEntries(
    Object.entries(exp)
      .filter(([k]) => k !== 'source')
      .map(([k, v]) => [k, withoutSource(v)]),
  );
}

if (process.argv.includes('--list')) {
  console.log(JSON.stringify(packageDirs));
  process.exit(0);
}
const problems = [];
for (const dir of packageDirs) {
  const file = join(root, dir, 'package.json');
  const before = readFileSync(file, 'utf8');
  const pkg = JSON.parse(before);
  const folder = relative(root, join(root, dir));
  pkg.license ??= rootPkg.license;
  pkg.repository = { type: 'git', url: `git+${url}.git`, directory: folder };
  pkg.homepage = `${url}/tree/main/${folder}#readme`;
  pkg.bugs = { url: `${url}/issues` };
  pkg.engines = { ...rootPkg.engines };
  const publish = { access: 'public' };
  if (pkg.exports && JSON.stringify(withoutSource(pkg.exports)) !== JSON.stringify(pkg.exports)) {
    publish.exports = withoutSource(pkg.exports);
  }
  pkg.publishConfig = publish;
  const after = `${JSON.stringify(pkg, null, 2)}\n`;
  const licenseFile = join(root, dir, 'LICENSE');
  const licenseOk = existsSync(licenseFile) && readFileSync(licenseFile, 'utf8') === license;
  if (check) {
    if (after !== before) problems.push(`${dir}/package.json`);
    if (!licenseOk) problems.push(`${dir}/LICENSE`);
  } else {
    if (after !== before) writeFileSync(file, after);
    if (!licenseOk) writeFileSync(licenseFile, license);
  }
}
if (problems.length) {
  console.error(`not in line with the root package.json and LICENSE (run node tools/manifests.mjs): ${problems.join(', ')}`);
  process.exit(1);
}
