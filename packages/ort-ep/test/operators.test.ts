// OPERATORS.md is generated from the registry: the checked-in file must match the generator, and,
// read back independently of the generator, it must list every entry in its domain with its opset
// range and a file that exists and defines the op.
import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { operatorsMarkdown } from '../scripts/operators.js';
import { defaultRegistry } from '../src/ops/index.js';

const text = readFileSync(new URL('../OPERATORS.md', import.meta.url), 'utf8');

/** The tables of the checked-in file: domain -> op -> { opsets, files }. */
function readTables(md: string): Map<string, Map<string, { opsets: string[]; files: string[] }>> {
  const out = new Map<string, Map<string, { opsets: string[]; files: string[] }>>();
  let domain = '';
  for (const line of md.split('\n')) {
    const h = /^## (\S+) \(/.exec(line);
    if (h) out.set((domain = h[1]), new Map());
    const row = /^\| (\w+) \| ([^|]+) \| ([^|]+) \|/.exec(line);
    if (row && domain && row[1] !== 'op') {
      const files = [...row[3].matchAll(/\]\(([^)]+)\)/g)].map((m) => m[1]);
      out.get(domain)!.set(row[1], { opsets: row[2].split(',').map((s) => s.trim()), files });
    }
  }
  return out;
}

describe('OPERATORS.md', () => {
  it('is up to date with the registry (regenerate: pnpm --filter @mlx/ort-ep operators)', () => {
    expect(text).toBe(operatorsMarkdown());
  });

  it('lists every entry under its domain with its opsets and an existing file that holds the op', () => {
    const tables = readTables(text);
    const entries = defaultRegistry.entries();
    expect(entries.length).toBeGreaterThan(200);
    for (const e of entries) {
      const row = tables.get(e.domain)?.get(e.opType);
      const range = e.until ? `${e.since}-${e.until}` : `${e.since}+`;
      expect([e.domain, e.opType, row?.opsets.includes(range)]).toEqual([e.domain, e.opType, true]);
      expect(row!.files.length).toBeGreaterThan(0);
      const defined = row!.files.some((f) => {
        const path = new URL(`../${f}`, import.meta.url);
        return existsSync(path) && readFileSync(path, 'utf8').includes(`'${e.opType}'`);
      });
      expect([e.opType, row!.files, defined]).toEqual([e.opType, row!.files, true]);
    }
    const listed = [...tables.values()].reduce((n, ops) => n + ops.size, 0);
    expect(listed).toBe(new Set(entries.map((e) => `${e.domain}::${e.opType}`)).size);
  });
});
