// OPERATORS.md is generated from the registry: the checked-in file must match it.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { operatorsMarkdown } from '../scripts/operators.js';
import { defaultRegistry } from '../src/ops/index.js';

describe('OPERATORS.md', () => {
  it('is up to date with the registry (regenerate: node --conditions=source --import tsx scripts/operators.ts)', () => {
    expect(readFileSync(new URL('../OPERATORS.md', import.meta.url), 'utf8')).toBe(operatorsMarkdown());
  });
  it('lists every registered op', () => {
    const md = operatorsMarkdown();
    for (const e of defaultRegistry.entries()) expect(md).toContain(`| ${e.opType} |`);
  });
});
