// No import circle among this package's source files (tools/import-cycles.mjs; @mlx/ort-ep's
// test/layers.test.ts shows the check finds one).
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { importCycles, sourceFiles } from '../../../tools/import-cycles.mjs';

const SRC = resolve(dirname(fileURLToPath(import.meta.url)), '../src');

describe('src/ imports', () => {
  it('finds the sources', () => {
    expect(sourceFiles(SRC).length).toBeGreaterThan(3);
  });

  it('no file imports itself back through others', () => {
    expect(importCycles(SRC)).toEqual([]);
  });
});
