// The number of native functions that the READMEs quote, against the spec's own count
// (`functionCount`, generated from spec/): the root README's summary is typed by hand, and the ABI
// table's total here is generated (scripts/generate.ts) but only checked when the generators run.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { functionCount } from '../src/index.js';

const text = (rel: string) => readFileSync(new URL(rel, import.meta.url), 'utf8').replace(/\s+/g, ' ');

describe('native function counts in the READMEs', () => {
  it("the root README's summary", () => {
    const m = /(\d+) functions in the native ABI/.exec(text('../../../README.md'));
    expect(m, 'README.md no longer says "N functions in the native ABI": update it or this test').toBeTruthy();
    expect(Number(m![1])).toBe(functionCount);
  });

  it("this package's ABI table total", () => {
    const m = /\| \*\*total\*\* \| \*\*(\d+)\*\* \|/.exec(text('../README.md'));
    expect(m, 'packages/sys/README.md has no ABI table total').toBeTruthy();
    expect(Number(m![1])).toBe(functionCount);
  });
});
