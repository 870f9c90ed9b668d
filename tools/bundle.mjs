// Builds a package's JavaScript as one file per entry point (dist/<entry>.js), the code the
// entries share in dist/chunks/, from src/ with esbuild; tsc writes only the declarations.
// Run from the package folder (each package's `build`), with the entry names (default: index).
//
// Why: Node loads an ES module per file, and a tree of a few hundred small modules costs more to
// find, read and link than their code costs to compile: `import '@mlx/ort-ep'` loaded 262 files.
// Each package is bundled on its own, its dependencies kept external (bare imports stay imports),
// so two packages never hold two copies of one module's state (the loaded native library above
// all), and an application that imports @mlx/core beside @mlx/ort-ep shares one instance.
//
// Entries keep their place under dist/ (src/demo/vad.ts -> dist/demo/vad.js), so the paths they
// compute from import.meta.url stay right; code that is not an entry's own goes to a chunk, where
// import.meta.url names the chunk: modules that compute paths from it must be entries themselves.
import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { build } from 'esbuild';

// What an earlier build left (a tree of per-module files, old chunks) goes first: tsc, which runs
// before this, writes declarations only.
for (const f of readdirSync('dist', { recursive: true, encoding: 'utf8' })) {
  if (/\.(js|cjs|js\.map)$/.test(f)) rmSync(join('dist', f));
}
const entries = process.argv.slice(2);
const result = await build({
  entryPoints: (entries.length ? entries : ['index']).map((e) => `src/${e}.ts`),
  outdir: 'dist',
  outbase: 'src',
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20.19',
  // Every bare import (the other @mlx packages, onnxruntime, koffi...) stays an import.
  packages: 'external',
  chunkNames: 'chunks/[name]-[hash]',
  sourcemap: 'linked',
  // The sources ship in the package (files: src): the maps point at them.
  sourcesContent: false,
  // The `source` condition is the workspace's (tests run the TypeScript); a bundle resolves the
  // package's own relative imports only, so conditions do not matter beyond Node's defaults.
  logLevel: 'warning',
  metafile: true,
});
if (result.errors.length) process.exit(1);
const files = Object.keys(result.metafile.outputs).filter((f) => f.endsWith('.js'));
console.log(`bundled ${files.length} files: ${files.map((f) => f.replace(/^dist\//, '')).join(', ')}`);
