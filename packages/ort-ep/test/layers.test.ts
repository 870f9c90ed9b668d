// The folders of src/ form layers: each imports only the layers below it (README, "How a model
// flows through the code"). This reads every import of every non-test source file and fails on
// one that points up or sideways across layers, so a folder cycle cannot come back unnoticed.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { describe, expect, it } from 'vitest';
import { importCycles } from '../../../tools/import-cycles.mjs';

const SRC = resolve(dirname(fileURLToPath(import.meta.url)), '../src');

/** Lowest first. Entries of one rank may not import each other. */
const LAYERS: string[][] = [
  ['errors.ts'],
  ['onnx'],
  ['runtime'],
  ['registry'],
  ['ops'],
  ['plan'],
  ['execute'],
  ['grad.ts'],
  ['train.ts', 'save-model.ts'],
  ['session.ts', 'check.ts'],
  ['backend'],
  ['prefix-cache.ts', 'whisper.ts', 'sampler.ts', 'lora.ts'],
  ['sampler-device.ts'],
  ['generate.ts'],
  ['generate-speculative.ts'],
  ['generate-batch.ts'],
  ['generate-seq2seq.ts'],
  ['generate-serve.ts'],
  ['demo', 'cli-inputs.ts'],
  ['cli-bench.ts', 'bisect.ts', 'profile-summary.ts', 'cli-generate.ts'],
  ['cli.ts'],
  ['index.ts', 'internal.ts'],
];

function rankOf(top: string): number {
  const r = LAYERS.findIndex((names) => names.includes(top));
  if (r < 0) throw new Error(`src/${top} is in no layer: add it to LAYERS in test/layers.test.ts (and to the README)`);
  return r;
}

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) return sources(p);
    return /\.ts$/.test(name) && !/\.test\.ts$/.test(name) && !/\.d\.ts$/.test(name) ? [p] : [];
  });
}

/** The first path segment under src/ of a file: its folder, or the file itself at the top. */
const topOf = (file: string) => relative(SRC, file).split(sep)[0].replace(/\.js$/, '.ts');

function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const specs = [...text.matchAll(/(?:from\s+|import\s*\(\s*|import\s+)'(\.[^']*)'/g)].map((m) => m[1]);
  return specs.map((s) => resolve(dirname(file), s));
}

describe('src/ layers', () => {
  const files = sources(SRC);

  it('finds the sources', () => {
    expect(files.length).toBeGreaterThan(50);
  });

  it('every import points to a lower layer or within its own folder', () => {
    const bad: string[] = [];
    for (const file of files) {
      const from = topOf(file);
      for (const target of importsOf(file)) {
        if (!target.startsWith(SRC + sep)) {
          bad.push(`${relative(SRC, file)} imports ${relative(SRC, target)}, outside src/`);
          continue;
        }
        const to = topOf(target);
        if (to === from) continue;
        if (rankOf(to) >= rankOf(from)) bad.push(`${relative(SRC, file)} (${from}) imports ${relative(SRC, target)} (${to})`);
      }
    }
    expect(bad).toEqual([]);
  });

  it('the check itself catches an upward import', () => {
    // ops importing execute would be a cycle (execute imports ops through plan).
    expect(rankOf('execute')).toBeGreaterThan(rankOf('ops'));
    expect(rankOf('ops')).toBeGreaterThan(rankOf('registry'));
    expect(() => rankOf('nowhere')).toThrow(/no layer/);
  });
});

describe('src/ files', () => {
  it('no file imports itself back through others (no import circle, types included)', () => {
    expect(importCycles(SRC)).toEqual([]);
  });

  it('the circle check finds a circle of three files and a file importing itself', () => {
    const dir = mkdtempSync(join(tmpdir(), 'cycles-'));
    try {
      writeFileSync(join(dir, 'a.ts'), "import { b } from './b.js';\nexport const a = 1;\n");
      writeFileSync(join(dir, 'b.ts'), "import type { C } from './sub/c.js';\nexport const b = 1;\n");
      writeFileSync(join(dir, 'd.ts'), "export { d } from './d.js';\n");
      writeFileSync(join(dir, 'e.ts'), "// import { a } from './a.js';\nexport const e = 1;\n");
      mkdirSync(join(dir, 'sub'));
      writeFileSync(join(dir, 'sub', 'c.ts'), "import { a } from '../a.js';\nexport type C = number;\n");
      expect(importCycles(dir).sort()).toEqual([['a.ts', 'b.ts', join('sub', 'c.ts')], ['d.ts']]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
