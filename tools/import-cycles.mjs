// Import circles between the files of a source folder: every relative import (and re-export) of
// every non-test .ts file, `import type` included, since a circle of types still ties the files'
// meanings together. Tarjan's strongly connected components; each circle is reported as the files
// in it. Used by each package's tests (test/imports.test.ts, ort-ep's test/layers.test.ts).
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

export function sourceFiles(dir) {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) return sourceFiles(p);
    return /\.ts$/.test(name) && !/\.test\.ts$/.test(name) && !/\.d\.ts$/.test(name) ? [p] : [];
  });
}

/** The files `file` imports or re-exports from, by relative specifier ('./x.js' is ./x.ts). */
export function importsOf(file) {
  const text = readFileSync(file, 'utf8').replace(/\/\*[\s\S]*?\*\/|(^|[^:'"`])\/\/.*$/gm, '$1');
  const specs = [...text.matchAll(/(?:from\s+|import\s*\(\s*|import\s+)'(\.[^']*)'/g)].map((m) => m[1]);
  return specs.map((s) => {
    const abs = resolve(dirname(file), s);
    for (const c of [abs.replace(/\.js$/, '.ts'), abs, `${abs}.ts`, join(abs, 'index.ts')])
      if (existsSync(c) && statSync(c).isFile()) return c;
    return abs;
  });
}

/** Every circle of imports among the files under `dir`, as lists of paths relative to it. */
export function importCycles(folder) {
  const dir = resolve(folder);
  const files = sourceFiles(dir);
  const known = new Set(files);
  const edges = new Map(files.map((f) => [f, importsOf(f).filter((t) => known.has(t))]));
  let index = 0;
  const idx = new Map();
  const low = new Map();
  const stack = [];
  const onStack = new Set();
  const cycles = [];
  const visit = (v) => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    onStack.add(v);
    for (const w of edges.get(v)) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v), low.get(w)));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)));
    }
    if (low.get(v) === idx.get(v)) {
      const scc = [];
      let w;
      do {
        w = stack.pop();
        onStack.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1 || edges.get(v).includes(v)) cycles.push(scc.map((f) => relative(dir, f)).sort());
    }
  };
  for (const f of files) if (!idx.has(f)) visit(f);
  return cycles;
}
