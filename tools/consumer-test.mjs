// The consumer test: the packages as a user gets them. Packs every package (`pnpm -r pack`: each
// prepack builds, the platform packages' fill lib/ from the pinned wheels), lints the tarballs
// (publint --strict, attw), installs them with npm in a folder outside the workspace, and runs
// there, with no MLX_C_LIBRARY and no path of this repository in the environment:
//   the README's "Using it" blocks (ESM, CommonJS, strict TypeScript), gpt2-tiny against its
//   reference outputs through ['mlx'] from onnxruntime-node, -common and -web in both module
//   systems, imports that load nothing native, the fallback of ['mlx', 'cpu'] without MLX, the
//   CLI, and which library the loader picks (the CUDA package is installed too: on a machine
//   without the NVIDIA driver the loader must skip it for the CPU package).
//   node tools/consumer-test.mjs [--keep]     (tools/dev test runs it; --keep leaves the folder)
// npm works from a cache in .cache/npm (offline where it holds everything). Results go to
// reports/consumer-test.json for tools/test-summary.mjs.
import { execFile, execFileSync, spawnSync } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  realpathSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const shared = join(root, '..', 'shared', 'models');
const keep = process.argv.includes('--keep');
const t0 = performance.now();
const work = realpathSync(mkdtempSync(join(tmpdir(), 'mlx-consumer-')));
const tarballs = join(work, 'tarballs');
const app = join(work, 'app');
const results = [];
const ortVersion = JSON.parse(readFileSync(join(root, 'packages/ort-ep/package.json'), 'utf8')).devDependencies['onnxruntime-node'];
const tsVersion = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).devDependencies.typescript;
const ts7Version = '7.0.2';
const esbuildVersion = '0.28.2';
const typesNode = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).devDependencies['@types/node'];

/** An environment with nothing that points at this repository or at a native library. */
function cleanEnv(extra = {}) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (/^(MLX_|LD_LIBRARY_PATH|LD_PRELOAD|NODE_PATH|NODE_OPTIONS|npm_)/.test(k)) continue;
    if (k === 'PATH') continue;
    env[k] = v;
  }
  env.PATH = (process.env.PATH ?? '')
    .split(':')
    .filter((p) => !p.startsWith(root))
    .join(':');
  env.ONNXRUNTIME_NODE_INSTALL = 'skip';
  return { ...env, ...extra };
}

function sh(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20, ...opts });
  if (r.status !== 0 || r.error) {
    const err = new Error(`${cmd} ${args.join(' ')} exited with ${r.status ?? r.error}\n${r.stdout ?? ''}\n${r.stderr ?? ''}`);
    err.stdout = r.stdout;
    err.stderr = r.stderr;
    err.status = r.status;
    throw err;
  }
  return r;
}

function shAsync(cmd, args, opts = {}) {
  return new Promise((resolve, reject) =>
    execFile(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20, ...opts }, (e, stdout, stderr) =>
      e ? reject(new Error(`${cmd} ${args.join(' ')}: ${e.message}\n${stdout}${stderr}`)) : resolve(stdout),
    ),
  );
}

/** Runs a node script in the app folder; returns stdout, stderr and status. */
function node(args, extra = {}, expectStatus = 0) {
  const r = spawnSync(process.execPath, args, { cwd: app, encoding: 'utf8', env: cleanEnv(extra), timeout: 120_000 });
  if (r.status !== expectStatus)
    throw new Error(`node ${args.join(' ')}: status ${r.status} (wanted ${expectStatus})\n${r.stdout}\n${r.stderr}`);
  return r;
}

/** node() without blocking: resolves with stdout and stderr when it exits with status 0. */
function nodeAsync(args, extra = {}) {
  return new Promise((resolve, reject) =>
    execFile(
      process.execPath,
      args,
      { cwd: app, encoding: 'utf8', env: cleanEnv(extra), timeout: 120_000, maxBuffer: 16 << 20 },
      (e, stdout, stderr) =>
        e ? reject(new Error(`node ${args.join(' ')}: ${e.message}\n${stdout}\n${stderr}`)) : resolve({ stdout, stderr }),
    ),
  );
}

function assert(cond, message) {
  if (!cond) throw new Error(message);
}

async function step(name, body) {
  const s = performance.now();
  try {
    const note = await body();
    const secs = ((performance.now() - s) / 1000).toFixed(1);
    results.push({ name, ok: true, secs });
    console.log(`ok   ${name} (${secs} s)${note ? `: ${note}` : ''}`);
  } catch (e) {
    results.push({ name, ok: false, error: String(e?.message ?? e) });
    console.log(`FAIL ${name}\n${String(e?.stack ?? e).replace(/^/gm, '     ')}`);
  }
}

/** The README's "Using it" code blocks, by the file name on their first line. */
function readmeBlocks() {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('## Using it'), readme.indexOf('\n## ', readme.indexOf('## Using it') + 5));
  const blocks = {};
  for (const m of section.matchAll(/```(?:js|ts)\n(\/\/ (index\.\w+)[^\n]*\n[\s\S]*?)```/g)) blocks[m[2]] = m[1];
  return blocks;
}

const published = JSON.parse(execFileSync(process.execPath, [join(root, 'tools/manifests.mjs'), '--list'], { encoding: 'utf8' })).filter(
  (p) => !p.endsWith('darwin-arm64'),
);
let packed = [];

await step('pnpm -r pack (prepack builds; platform packages from the pinned wheels)', () => {
  mkdirSync(tarballs, { recursive: true });
  const filters = published.flatMap((d) => ['--filter', `./${d}`]);
  sh('corepack', ['pnpm', '-r', ...filters, 'pack', '--pack-destination', tarballs], {
    cwd: root,
    env: { ...process.env, COREPACK_ENABLE_DOWNLOAD_PROMPT: '0' },
  });
  packed = readdirSync(tarballs).filter((f) => f.endsWith('.tgz'));
  assert(packed.length === published.length, `packed ${packed.length} tarballs for ${published.length} packages`);
  const mib = (f) => (readFileSync(join(tarballs, f)).length / 2 ** 20).toFixed(1);
  return packed.map((f) => `${f.replace(/-\d+\.\d+\.\d+.*\.tgz$/, '')} ${mib(f)} MiB`).join(', ');
});

// Linting and installing run side by side (the one is CPU-bound, the other mostly waits on files).
const linting = step('publint --strict and attw on every tarball', async () => {
  // The platform packages are linted without lib/ (the manifest and entry files are what the
  // linters check; unpacking 150 MiB of libraries in JavaScript is what would take the time).
  const lint = join(work, 'lint');
  mkdirSync(lint, { recursive: true });
  const targets = packed.map((f) => {
    if (!f.startsWith('mlx-sys-') || f.startsWith('mlx-sys-0')) return join(tarballs, f);
    const dir = join(lint, f.replace(/\.tgz$/, ''));
    mkdirSync(dir, { recursive: true });
    sh('tar', ['-xzf', join(tarballs, f), '-C', dir, '--exclude', 'package/lib']);
    sh('tar', ['-czf', join(lint, f), '-C', dir, 'package']);
    return join(lint, f);
  });
  const run = (cmd, args) => shAsync(cmd, args, { cwd: work });
  const jobs = targets.flatMap((t) => [
    () => run(join(root, 'node_modules/.bin/publint'), ['run', t, '--strict']),
    () => run(join(root, 'node_modules/.bin/attw'), [t, '--format', 'ascii', '--no-emoji', '--profile', 'node16']),
  ]);
  // Two at a time.
  const next = async () => {
    for (let j = jobs.shift(); j; j = jobs.shift()) await j();
  };
  await Promise.all([next(), next()]);
  // No `source` condition reaches users.
  for (const f of packed) {
    const manifest = execFileSync('tar', ['-xzOf', join(tarballs, f), 'package/package.json'], { encoding: 'utf8' });
    assert(!manifest.includes('"source"'), `${f}: the packed package.json has a source condition`);
  }
});

const installing = step(`npm install of the tarballs with onnxruntime-node and -web ${ortVersion}, typescript ${tsVersion}`, async () => {
  mkdirSync(app, { recursive: true });
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }, null, 2));
  await shAsync(
    'npm',
    [
      'install',
      '--ignore-scripts',
      '--no-audit',
      '--no-fund',
      '--prefer-offline',
      '--cache',
      join(root, '.cache', 'npm'),
      ...packed.map((f) => join(tarballs, f)),
      `onnxruntime-node@${ortVersion}`,
      `onnxruntime-web@${ortVersion}`,
      `typescript@${tsVersion}`,
      `@types/node@${typesNode}`,
      // The model mlx-ort demo runs.
      '@ricky0123/vad-web@0.0.31',
      // Today's TypeScript, beside the pinned one, for the declarations check.
      `ts7@npm:typescript@${ts7Version}`,
      // The bundler of the bundle step.
      `esbuild@${esbuildVersion}`,
    ],
    { cwd: app, env: cleanEnv() },
  );
  // Source maps and declaration maps point at sources that ship.
  for (const pkg of ['sys', 'core', 'kernels', 'ort-ep']) {
    const dist = join(app, 'node_modules', '@mlx', pkg, 'dist');
    for (const map of ['index.js.map', 'index.d.ts.map']) {
      const { sources } = JSON.parse(readFileSync(join(dist, map), 'utf8'));
      for (const src of sources)
        assert(existsSync(join(dist, src)), `@mlx/${pkg}/dist/${map} points at ${src}, which is not in the package`);
    }
  }
  cpSync(join(shared, 'gpt2-tiny', 'model.onnx'), join(app, 'model.onnx'));
  cpSync(join(shared, 'gpt2-tiny', 'test_data_set_0'), join(app, 'test_data_set_0'), { recursive: true });
  const commons = execFileSync('find', ['node_modules', '-path', '*/onnxruntime-common/package.json'], { cwd: app, encoding: 'utf8' })
    .trim()
    .split('\n')
    .map((p) => `${dirname(p)} ${JSON.parse(readFileSync(join(app, p), 'utf8')).version}`);
  return `onnxruntime-common copies: ${commons.join('; ')}`;
});
await Promise.all([linting, installing]);

// Prints the library that loaded and any mapped library from the repository (there must be none).
const nativeProbe = `
process.on('exit', () => {
  const maps = require('node:fs').readFileSync('/proc/self/maps', 'utf8');
  const libs = [...new Set(maps.split('\\n').map((l) => l.split(/\\s+/)[5]).filter((p) => p && p.includes('.so')))];
  console.log('PROBE ' + JSON.stringify({ mlxc: libs.filter((p) => /libmlxc/.test(p)), repo: libs.filter((p) => p.startsWith(${JSON.stringify(root)})) }));
});`;
const probeOf = (stdout) =>
  JSON.parse(
    stdout
      .split('\n')
      .find((l) => l.startsWith('PROBE '))
      .slice(6),
  );
const expectGnu = (probe) => {
  assert(probe.repo.length === 0, `libraries of the repository were loaded: ${probe.repo.join(', ')}`);
  assert(probe.mlxc.length === 1 && probe.mlxc[0].includes('node_modules/@mlx/sys-linux-x64-gnu/lib/'), `libmlxc from ${probe.mlxc}`);
};

await step(
  'the README\'s "Using it" blocks: ESM, CommonJS, strict TypeScript; mlx({...}) typed with onnxruntime-node, -common, -web and in .cts, a wrong option refused',
  async () => {
    const blocks = readmeBlocks();
    for (const f of ['index.mjs', 'index.cjs', 'index.ts']) assert(blocks[f], `README has no ${f} block under "Using it"`);
    writeFileSync(
      join(app, 'index.mjs'),
      blocks['index.mjs'] + `import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);${nativeProbe}`,
    );
    writeFileSync(join(app, 'index.cjs'), blocks['index.cjs'] + nativeProbe);
    mkdirSync(join(app, 'ts'), { recursive: true });
    writeFileSync(join(app, 'ts', 'index.ts'), blocks['index.ts']);
    writeTypeChecks();
    // One strict tsc run (skipLibCheck off: the packages' declarations are checked too) over the
    // README's block and the type checks of the next step; the block's output then runs.
    writeFileSync(
      join(app, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          module: 'nodenext',
          moduleResolution: 'nodenext',
          target: 'es2022',
          outDir: 'out',
          skipLibCheck: false,
          types: ['node'],
        },
        include: ['ts', 'types'],
      }),
    );
    const dims = /\[\s*1,\s*4,\s*512\s*\]/;
    const check = (f, stdout, stderr) => {
      assert(dims.test(stdout), `${f} printed ${stdout}`);
      assert(!/removing requested execution provider/.test(stderr), `${f}: onnxruntime fell back: ${stderr}`);
    };
    // The JavaScript blocks run while tsc checks; then the compiled TypeScript block runs.
    const runs = ['index.mjs', 'index.cjs'].map((f) =>
      nodeAsync([f]).then(({ stdout, stderr }) => {
        check(f, stdout, stderr);
        expectGnu(probeOf(stdout));
      }),
    );
    await Promise.all([shAsync(process.execPath, [join(app, 'node_modules/typescript/bin/tsc'), '-p', '.'], { cwd: app }), ...runs]);
    const ts = node(['out/ts/index.js']);
    check('out/ts/index.js', ts.stdout, ts.stderr);
  },
);

/** Type checks: mlx({...}) in the session options of each onnxruntime package, and CommonJS types. */
function writeTypeChecks() {
  mkdirSync(join(app, 'types'), { recursive: true });
  const body = (m) => `import * as ort from '${m}';
import { mlx, type MlxExecutionProviderOption } from '@mlx/ort-ep';
const options: ort.InferenceSession.SessionOptions = { executionProviders: [mlx({ device: 'gpu', precision: 'tf32', maxSignatures: 4 }), 'cpu'] };
const one: MlxExecutionProviderOption = mlx();
// A wrong option is a type error (else tsc fails on the unused directive).
// @ts-expect-error device is 'cpu' | 'gpu'
const bad = mlx({ device: 'gpuu' });
export const all = [options, one, bad];
`;
  writeFileSync(join(app, 'types', 'node.ts'), body('onnxruntime-node'));
  writeFileSync(join(app, 'types', 'common.ts'), body('onnxruntime-common'));
  writeFileSync(join(app, 'types', 'web.ts'), body('onnxruntime-web'));
  writeFileSync(
    join(app, 'types', 'cjs.cts'),
    `import ort = require('onnxruntime-node');
import ep = require('@mlx/ort-ep');
import core = require('@mlx/core');
import kernels = require('@mlx/kernels');
import sys = require('@mlx/sys');
export const o: ort.InferenceSession.SessionOptions = { executionProviders: [ep.mlx({ device: 'cpu' })] };
export const f: [typeof core.array, typeof kernels, typeof sys.loadMlxC] = [core.array, kernels, sys.loadMlxC];
`,
  );
}

await step("gpt2-tiny against its reference outputs through ['mlx']: onnxruntime-node, -common, -web; ESM and CommonJS", async () => {
  const program = (esm) => `
    ${esm ? "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);" : ''}
    const main = async () => {
      const mods = ${esm ? "{ node: await import('onnxruntime-node'), common: await import('onnxruntime-common'), web: await import('onnxruntime-web') }" : "{ node: require('onnxruntime-node'), common: require('onnxruntime-common'), web: require('onnxruntime-web') }"};
      const ep = ${esm ? "await import('@mlx/ort-ep')" : "require('@mlx/ort-ep')"};
      const internal = ${esm ? "await import('@mlx/ort-ep/internal')" : "require('@mlx/ort-ep/internal')"};
      const data = internal.readTestCase('.').datasets[0];
      const out = {};
      for (const [label, ort] of Object.entries(mods)) {
        const s = await ort.InferenceSession.create('model.onnx', { executionProviders: ['mlx'] });
        const feeds = {};
        data.inputs.forEach((t, i) => (feeds[s.inputNames[i]] = new ort.Tensor('int64', t.data, t.dims)));
        const r = await s.run(feeds);
        const want = data.outputs[0].data;
        const got = r.logits.data;
        let worst = 0;
        for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]) - (1e-4 + 1e-3 * Math.abs(want[i])));
        out[label] = { handler: s.handler.constructor.name, n: got.length === want.length, worst };
        await s.release();
      }
      out.registrations = ep.mlxRegistrations().map((r) => r.version + ' ' + r.format + ' ' + r.path.replace(process.cwd(), '.'));
      console.log('RESULT ' + JSON.stringify(out));
    };
    main().catch((e) => { console.error(e); process.exit(1); });
    ${nativeProbe}`;
  const notes = [];
  const files = ['gpt2.mjs', 'gpt2.cjs'];
  files.forEach((f, i) => writeFileSync(join(app, f), program(i === 0)));
  const outs = await Promise.all(files.map((f) => nodeAsync([f])));
  for (const esm of [true, false]) {
    const file = esm ? 'gpt2.mjs' : 'gpt2.cjs';
    const r = outs[esm ? 0 : 1];
    const line = r.stdout.split('\n').find((l) => l.startsWith('RESULT '));
    assert(line, `${file}: ${r.stdout}${r.stderr}`);
    const out = JSON.parse(line.slice(7));
    for (const label of ['node', 'common', 'web']) {
      assert(out[label].handler === 'MlxSessionHandler', `${file} ${label}: handler ${out[label].handler}`);
      assert(out[label].n && out[label].worst <= 0, `${file} ${label}: outside rtol 1e-3 / atol 1e-4 (by ${out[label].worst})`);
    }
    expectGnu(probeOf(r.stdout));
    if (!esm) notes.push(`${out.registrations.length} registrations (${out.registrations.join('; ')})`);
  }
  return notes.join('');
});

// pnpm 12 and yarn 4 beside npm: each installs the tarballs in a folder of its own and runs
// gpt2-tiny through ['mlx']. pnpm refuses dependencies' install scripts unless told: koffi (the FFI
// @mlx/sys loads the library with) has one but ships its binaries built, so `allowBuilds` turns it
// off (the README's install line for pnpm); onnxruntime-node's downloads nothing here (skip).
const otherManagers = [
  {
    name: 'pnpm',
    version: JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'))
      .packageManager.replace(/^pnpm@/, '')
      .replace(/\+.*$/, ''),
    // The packages' dependencies on each other resolve to the tarballs too (overrides).
    files: (deps) => ({
      'pnpm-workspace.yaml': `allowBuilds:\n  koffi: false\n  onnxruntime-node: false\n  protobufjs: false\noverrides:\n${Object.entries(
        deps,
      )
        .filter(([n]) => n.startsWith('@mlx/'))
        .map(([n, v]) => `  '${n}': '${v}'\n`)
        .join('')}`,
    }),
    manifest: {},
    // No lockfile here: under CI=true pnpm would default to --frozen-lockfile.
    install: (v) => ['corepack', [`pnpm@${v}`, 'install', '--no-frozen-lockfile']],
    env: {},
  },
  {
    name: 'yarn',
    version: '4.18.1',
    files: () => ({ '.yarnrc.yml': 'nodeLinker: node-modules\n', 'yarn.lock': '' }),
    manifest: { resolutions: true },
    install: (v) => ['corepack', [`yarn@${v}`, 'install']],
    // Under CI=true yarn refuses to write a lockfile (immutable installs); this folder starts with none.
    env: { YARN_ENABLE_IMMUTABLE_INSTALLS: 'false' },
  },
];
await step(
  `pnpm ${otherManagers[0].version} and yarn ${otherManagers[1].version} installs of the tarballs run gpt2-tiny through ['mlx']`,
  async () => {
    const notes = [];
    await Promise.all(
      otherManagers.map(async (m) => {
        const dir = join(work, m.name);
        mkdirSync(dir, { recursive: true });
        const deps = Object.fromEntries(
          packed.map((f) => [
            JSON.parse(execFileSync('tar', ['-xOzf', join(tarballs, f), 'package/package.json'], { encoding: 'utf8' })).name,
            `file:${join(tarballs, f)}`,
          ]),
        );
        deps['onnxruntime-node'] = ortVersion;
        const mlxDeps = Object.fromEntries(Object.entries(deps).filter(([n]) => n.startsWith('@mlx/')));
        // yarn resolves every optional dependency, other platforms' too, for its lockfile: the macOS
        // package (not built on Linux; published beside the others) stands in as its manifest alone.
        if (m.manifest.resolutions) {
          const stub = join(dir, 'darwin-stub');
          mkdirSync(stub, { recursive: true });
          const {
            scripts: _s,
            files: _f,
            ...pkg
          } = JSON.parse(readFileSync(join(root, 'packages/sys/npm/darwin-arm64/package.json'), 'utf8'));
          writeFileSync(join(stub, 'package.json'), JSON.stringify(pkg, null, 2));
          const tgz = execFileSync('npm', ['pack', '--silent', '--pack-destination', dir], { cwd: stub, encoding: 'utf8', env: cleanEnv() })
            .trim()
            .split('\n')
            .at(-1);
          mlxDeps[pkg.name] = `file:${join(dir, tgz)}`;
        }
        const manifest = { name: `consumer-${m.name}`, private: true, type: 'module', dependencies: deps };
        if (m.manifest.resolutions) manifest.resolutions = mlxDeps;
        writeFileSync(join(dir, 'package.json'), JSON.stringify(manifest, null, 2));
        for (const [f, text] of Object.entries(m.files(deps))) writeFileSync(join(dir, f), text);
        const [cmd, args] = m.install(m.version);
        // corepack fetches yarn from the npm registry (its own host may be unreachable).
        const env = cleanEnv({
          COREPACK_ENABLE_DOWNLOAD_PROMPT: '0',
          COREPACK_NPM_REGISTRY: 'https://registry.npmjs.org',
          COREPACK_ENABLE_STRICT: '0',
          ...m.env,
        });
        await shAsync(cmd, args, { cwd: dir, env });
        cpSync(join(app, 'model.onnx'), join(dir, 'model.onnx'));
        cpSync(join(app, 'test_data_set_0'), join(dir, 'test_data_set_0'), { recursive: true });
        writeFileSync(
          join(dir, 'run.mjs'),
          `import * as ort from 'onnxruntime-node';
import '@mlx/ort-ep';
import { readTestCase } from '@mlx/ort-ep/internal';
const data = readTestCase('.').datasets[0];
const s = await ort.InferenceSession.create('model.onnx', { executionProviders: ['mlx'] });
const feeds = {};
data.inputs.forEach((t, i) => (feeds[s.inputNames[i]] = new ort.Tensor('int64', t.data, t.dims)));
const got = (await s.run(feeds)).logits.data;
const want = data.outputs[0].data;
let worst = 0;
for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]) - (1e-4 + 1e-3 * Math.abs(want[i])));
console.log('RESULT ' + JSON.stringify({ handler: s.handler.constructor.name, worst }));
`,
        );
        const r = spawnSync(process.execPath, ['run.mjs'], { cwd: dir, encoding: 'utf8', env: cleanEnv(), timeout: 120_000 });
        const line = r.stdout.split('\n').find((l) => l.startsWith('RESULT '));
        assert(line, `${m.name}: ${r.stdout}${r.stderr}`);
        const out = JSON.parse(line.slice(7));
        assert(out.handler === 'MlxSessionHandler' && out.worst <= 0, `${m.name}: ${line}`);
        notes.push(`${m.name} ${m.version}`);
      }),
    );
    return notes.join(', ');
  },
);

// An application bundled with esbuild, ESM and CommonJS, the native packages kept external (koffi's
// binary, onnxruntime-node's, the platform package holding libmlxc): a bare import registers the
// backend (sideEffects), and the CommonJS bundle, where import.meta is empty, finds the packages.
await step(`esbuild ${esbuildVersion} bundles (ESM and CommonJS) of an app, native packages external, run gpt2-tiny`, () => {
  const body = (
    esm,
  ) => `${esm ? "import * as ort from 'onnxruntime-node';\nimport '@mlx/ort-ep';\nimport { readTestCase } from '@mlx/ort-ep/internal';" : "const ort = require('onnxruntime-node');\nrequire('@mlx/ort-ep');\nconst { readTestCase } = require('@mlx/ort-ep/internal');"}
(async () => {
  const data = readTestCase('.').datasets[0];
  const s = await ort.InferenceSession.create('model.onnx', { executionProviders: ['mlx'] });
  const feeds = {};
  data.inputs.forEach((t, i) => (feeds[s.inputNames[i]] = new ort.Tensor('int64', t.data, t.dims)));
  const got = (await s.run(feeds)).logits.data;
  const want = data.outputs[0].data;
  let worst = 0;
  for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]) - (1e-4 + 1e-3 * Math.abs(want[i])));
  console.log('RESULT ' + JSON.stringify({ handler: s.handler.constructor.name, worst }));
})();
`;
  const sizes = [];
  for (const esm of [true, false]) {
    const src = join(app, esm ? 'bundle-src.mjs' : 'bundle-src.cjs');
    const out = join(app, 'bundled', esm ? 'app.mjs' : 'app.cjs');
    writeFileSync(src, body(esm));
    const esbuild = join(app, 'node_modules/esbuild/bin/esbuild');
    const args = [src, '--bundle', '--platform=node', `--format=${esm ? 'esm' : 'cjs'}`, `--outfile=${out}`, '--log-level=error'];
    for (const ext of ['onnxruntime-node', 'koffi', '@mlx/sys-*']) args.push(`--external:${ext}`);
    execFileSync(process.execPath, [esbuild, ...args], { cwd: app, env: cleanEnv() });
    // It runs in a folder of its own whose node_modules holds the external packages alone.
    const run = join(work, esm ? 'bundle-esm' : 'bundle-cjs');
    mkdirSync(join(run, 'node_modules', '@mlx'), { recursive: true });
    for (const ext of ['onnxruntime-node', 'koffi', '@mlx/sys-linux-x64-gnu'])
      symlinkSync(join(app, 'node_modules', ext), join(run, 'node_modules', ext));
    cpSync(out, join(run, esm ? 'app.mjs' : 'app.cjs'));
    cpSync(join(app, 'model.onnx'), join(run, 'model.onnx'));
    cpSync(join(app, 'test_data_set_0'), join(run, 'test_data_set_0'), { recursive: true });
    const r = spawnSync(process.execPath, [esm ? 'app.mjs' : 'app.cjs'], { cwd: run, encoding: 'utf8', env: cleanEnv(), timeout: 120_000 });
    const line = r.stdout.split('\n').find((l) => l.startsWith('RESULT '));
    assert(line, `${out}: ${r.stdout}${r.stderr}`);
    const res = JSON.parse(line.slice(7));
    assert(res.handler === 'MlxSessionHandler' && res.worst <= 0, `${out}: ${line}`);
    sizes.push(`${esm ? 'ESM' : 'CJS'} ${(statSync(out).size / 2 ** 20).toFixed(1)} MiB`);
  }
  return sizes.join(', ');
});

await step(`TypeScript ${ts7Version} with the settings its tsc --init writes (types [], esnext), skipLibCheck off`, () => {
  const dir = join(app, 'ts7');
  mkdirSync(dir, { recursive: true });
  const tsc = join(app, 'node_modules/ts7/bin/tsc');
  execFileSync(process.execPath, [tsc, '--init'], { cwd: dir, env: cleanEnv() });
  const config = readFileSync(join(dir, 'tsconfig.json'), 'utf8');
  assert(/"skipLibCheck": true/.test(config) && /"types": \[\]/.test(config), `tsc --init wrote ${config}`);
  writeFileSync(join(dir, 'tsconfig.json'), config.replace('"skipLibCheck": true', '"skipLibCheck": false'));
  writeFileSync(
    join(dir, 'index.ts'),
    `import * as ort from 'onnxruntime-node';
import { mlx, MlxSession, OrtMlxError } from '@mlx/ort-ep';
import * as internal from '@mlx/ort-ep/internal';
import * as mx from '@mlx/core';
import * as kernels from '@mlx/kernels';
import * as sys from '@mlx/sys';
export const options: ort.InferenceSession.SessionOptions = { executionProviders: [mlx({ device: 'cpu' }), 'cpu'] };
export const used = [MlxSession, OrtMlxError, internal, mx.array, kernels, sys.loadMlxC];
`,
  );
  const r = spawnSync(process.execPath, [tsc, '-p', '.', '--noEmit'], { cwd: dir, encoding: 'utf8', env: cleanEnv() });
  assert(r.status === 0, `tsc ${ts7Version}: ${r.stdout}${r.stderr}`);
  return execFileSync(process.execPath, [tsc, '--version'], { cwd: dir, encoding: 'utf8' }).trim();
});

await step('importing or requiring the four packages loads nothing native; --help and --version neither', () => {
  writeFileSync(
    join(app, 'imports.mjs'),
    `await import('@mlx/sys'); await import('@mlx/core'); await import('@mlx/kernels'); const ep = await import('@mlx/ort-ep');
     const sys = await import('@mlx/sys');
     const maps = (await import('node:fs')).readFileSync('/proc/self/maps', 'utf8');
     console.log(JSON.stringify({ loaded: sys.isMlxCLoaded(), native: /koffi|libmlx/.test(maps), exports: typeof ep.mlx }));`,
  );
  const r = node(['imports.mjs']);
  assert(r.stdout.trim() === JSON.stringify({ loaded: false, native: false, exports: 'function' }), r.stdout);
  // require() of each package (CommonJS gets the ES module itself: one instance for both).
  writeFileSync(
    join(app, 'imports.cjs'),
    `const sys = require('@mlx/sys'), core = require('@mlx/core'), kernels = require('@mlx/kernels'), ep = require('@mlx/ort-ep');
     const maps = require('node:fs').readFileSync('/proc/self/maps', 'utf8');
     const before = { loaded: sys.isMlxCLoaded(), native: /koffi|libmlx/.test(maps) };
     const same = import('@mlx/core').then((m) => m.array === core.array);
     same.then((same) => console.log(JSON.stringify({ before, same, types: [typeof sys.loadMlxC, typeof core.array, typeof kernels.scaledDotProductAttention, typeof ep.mlx], sum: core.sum(core.array([1, 2, 3])).item() })));`,
  );
  const c = node(['imports.cjs']);
  assert(
    c.stdout.trim() ===
      JSON.stringify({
        before: { loaded: false, native: false },
        same: true,
        types: ['function', 'function', 'function', 'function'],
        sum: 6,
      }),
    `require(): ${c.stdout}${c.stderr}`,
  );
  // The CLI's --help and --version with a library that cannot load: they never try.
  const bin = join(app, 'node_modules/.bin/mlx-ort');
  const env = { MLX_C_LIBRARY: '/nonexistent/libmlxc.so' };
  assert(/^usage:\n {2}mlx-ort run/.test(node([bin, '--help'], env).stdout), 'mlx-ort --help');
  const version = JSON.parse(readFileSync(join(app, 'node_modules/@mlx/ort-ep/package.json'), 'utf8')).version;
  assert(node([bin, '--version'], env).stdout.trim() === version, 'mlx-ort --version');
  assert(/^ {2}mlx-ort run/.test(node([bin, 'run', '--help'], env).stdout), 'mlx-ort run --help');
});

await step("['mlx', 'cpu'] without MLX falls back with onnxruntime's warning; ['mlx'] fails naming the fix", () => {
  writeFileSync(
    join(app, 'fallback.mjs'),
    `import * as ort from 'onnxruntime-node'; import { mlx } from '@mlx/ort-ep';
     const eps = JSON.parse(process.argv[2]).map((e) => (e === 'mlx()' ? mlx() : e));
     try {
       const s = await ort.InferenceSession.create('model.onnx', { executionProviders: eps });
       console.log('HANDLER ' + s.handler.constructor.name);
     } catch (e) { console.log('ERROR ' + e.message); }`,
  );
  // MLX_C_LIBRARY is authoritative: a missing file means no MLX.
  const env = { MLX_C_LIBRARY: '/nonexistent/libmlxc.so' };
  const fb = node(['fallback.mjs', '["mlx()","cpu"]'], env);
  assert(/HANDLER (?!MlxSessionHandler)/.test(fb.stdout), `fallback: ${fb.stdout}`);
  assert(/removing requested execution provider "mlx" .*could not load the MLX C library/.test(fb.stderr), `warning: ${fb.stderr}`);
  const only = node(['fallback.mjs', '["mlx"]'], env);
  assert(/ERROR .*\[mlx\] MlxLibraryNotFoundError: could not load the MLX C library/.test(only.stdout), only.stdout);
  assert(/npm install @mlx\/sys-linux-x64-gnu/.test(only.stdout) && /MLX_C_LIBRARY/.test(only.stdout), `advice: ${only.stdout}`);
  const hint = node(['fallback.mjs', '["MLX"]']);
  assert(/'MLX' is not an execution provider name: write 'mlx'/.test(hint.stdout), hint.stdout);
});

await step('mlx-ort: check, run --inputs --compare, bad options, --compare without onnxruntime-node, bench, demo', () => {
  const bin = join(app, 'node_modules/.bin/mlx-ort');
  const check = node([bin, 'check', 'model.onnx']);
  assert(/^model\.onnx: \d+ nodes, \d+ claimed by the MLX provider, 0 not/.test(check.stdout), check.stdout);
  const run = node([bin, 'run', 'model.onnx', '--runs', '1', '--inputs', 'test_data_set_0', '--compare']);
  for (const which of ['expected', 'onnxruntime-node']) {
    const m = new RegExp(`logits: largest \\|mlx - ${which}\\| = (\\S+)`).exec(run.stdout);
    assert(m && Number(m[1]) < 1e-3, `run vs ${which}: ${run.stdout}`);
  }
  const bad = node([bin, 'run', 'model.onnx', '--device', 'gpuu'], {}, 2);
  assert(/--device must be cpu or gpu, got 'gpuu'/.test(bad.stderr), bad.stderr);
  node([bin, 'run', 'model.onnx', '--runs', 'abc'], {}, 2);
  // onnxruntime-node made unresolvable for this process only.
  writeFileSync(
    join(app, 'no-ort-node.cjs'),
    `const M = require('node:module'); const orig = M._resolveFilename;
     M._resolveFilename = function (req, ...a) { if (req === 'onnxruntime-node') { const e = new Error("Cannot find module 'onnxruntime-node'"); e.code = 'MODULE_NOT_FOUND'; throw e; } return orig.call(this, req, ...a); };`,
  );
  const missing = node(['--require', './no-ort-node.cjs', bin, 'run', 'model.onnx', '--compare'], {}, 1);
  assert(/--compare runs onnxruntime-node, which is not installed: `npm install onnxruntime-node`/.test(missing.stderr), missing.stderr);
  // mlx-ort bench from the tarballs: its worker processes run the installed dist.
  const bench = node([bin, 'bench', 'model.onnx', '--runs', '3', '--rounds', '1']);
  assert(/^\| mlx \(cpu\) \|( [\d.]+ \|){5}$/m.test(bench.stdout), `bench: ${bench.stdout}`);
  assert(/^\| onnxruntime-node \(cpu\) \|( [\d.]+ \|){4} 1\.00 \|$/m.test(bench.stdout), `bench: ${bench.stdout}`);
  // mlx-ort demo without the model package says what to install.
  writeFileSync(
    join(app, 'no-vad.cjs'),
    `const M = require('node:module'); const orig = M._resolveFilename;
     M._resolveFilename = function (req, ...a) { if (req.startsWith('@ricky0123/vad-web')) { const e = new Error("Cannot find module '" + req + "'"); e.code = 'MODULE_NOT_FOUND'; throw e; } return orig.call(this, req, ...a); };`,
  );
  const demo = node([bin, 'demo']);
  assert(/largest difference in speech probability: \S+ over \d+ frames/.test(demo.stdout), `demo: ${demo.stdout}`);
  const noVad = node(['--require', './no-vad.cjs', bin, 'demo'], {}, 1);
  assert(/which is not installed here: `npm install onnxruntime-node @ricky0123\/vad-web@0\.0\.31`/.test(noVad.stderr), noVad.stderr);
});

await step('the loader: CUDA package skipped without a driver, MLX_BACKEND=cuda authoritative, version check', () => {
  const cuda = join(app, 'node_modules/@mlx/sys-linux-x64-cuda13');
  const files = readdirSync(join(cuda, 'lib')).sort();
  for (const f of ['libmlx.so', 'libmlxc.so']) assert(files.includes(f), `CUDA package lib/: ${files}`);
  // MLX's run-time kernel compiler reads CCCL's headers from ../include/cccl beside lib/.
  assert(existsSync(join(cuda, 'include/cccl/cuda/std/tuple')), 'CUDA package without include/cccl (NVRTC fails on the first kernel)');
  assert(existsSync(join(cuda, 'licenses/CCCL-LICENSE')), 'CUDA package without the CCCL licence');
  writeFileSync(
    join(app, 'which.mjs'),
    `import * as sys from '@mlx/sys';
     try { console.log('PATH ' + sys.loadMlxC().path); } catch (e) { console.log('ERROR ' + e.message.replace(/\\n/g, ' | ')); }`,
  );
  const auto = node(['which.mjs']);
  let driver = false;
  try {
    driver = execFileSync('ldconfig', ['-p'], { encoding: 'utf8' }).includes('libcuda.so.1');
  } catch {}
  if (!driver) {
    assert(/PATH .*node_modules\/@mlx\/sys-linux-x64-gnu\/lib\/libmlxc\.so/.test(auto.stdout), `auto: ${auto.stdout}`);
    const forced = node(['which.mjs'], { MLX_BACKEND: 'cuda' });
    const cudaFailure =
      /ERROR could not load the MLX C library\..*sys-linux-x64-cuda13\/lib\/libmlxc\.so \(platform package @mlx\/sys-linux-x64-cuda13\): .*lib\w+\.so\.\d+: cannot open shared object file/;
    assert(cudaFailure.test(forced.stdout), `cuda: ${forced.stdout}`);
    assert(!/sys-linux-x64-gnu/.test(forced.stdout.split('Fix:')[0]), `MLX_BACKEND=cuda tried the CPU package: ${forced.stdout}`);
  }
  const cpu = node(['which.mjs'], { MLX_BACKEND: 'cpu' });
  assert(/PATH .*sys-linux-x64-gnu\/lib\/libmlxc\.so/.test(cpu.stdout), `cpu: ${cpu.stdout}`);
  // A platform package of another version is refused.
  const pj = join(app, 'node_modules/@mlx/sys-linux-x64-gnu/package.json');
  const original = readFileSync(pj, 'utf8');
  try {
    writeFileSync(pj, original.replace(/"version": "[^"]+"/, '"version": "0.0.0-other"'));
    const old = node(['which.mjs'], { MLX_BACKEND: 'cpu' });
    assert(/ERROR .*@mlx\/sys-linux-x64-gnu\): version 0\.0\.0-other, but @mlx\/sys is/.test(old.stdout), `version: ${old.stdout}`);
  } finally {
    writeFileSync(pj, original);
  }
  return driver ? 'a CUDA driver is present: the CUDA package may load' : `CUDA package lib/: ${files.join(' ')}`;
});

const secs = ((performance.now() - t0) / 1000).toFixed(1);
const failed = results.filter((r) => !r.ok).length;
console.log(`consumer test: ${results.length - failed} passed, ${failed} failed (${secs} s)${keep ? `; folder ${work}` : ''}`);
mkdirSync(join(root, 'reports'), { recursive: true });
writeFileSync(
  join(root, 'reports', 'consumer-test.json'),
  JSON.stringify({ passed: results.length - failed, failed, secs: Number(secs), results }, null, 2),
);
if (!keep) rmSync(work, { recursive: true, force: true });
process.exit(failed ? 1 : 0);
