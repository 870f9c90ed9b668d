// What the README says about the generated functions, against the generator's output: the number
// of MLX ops (`generatedOpCount` in src/generated/ops.ts) and the project's kernels of the `ext`
// namespace (src/generated/ext.ts), both written by scripts/generate-ops.ts from the spec.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { extOps } from '../src/generated/ext.js';
import { generatedOpCount } from '../src/generated/ops.js';

const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8').replace(/\s+/g, ' ');

describe('README counts', () => {
  it('the number of generated ops', () => {
    const m = /\((\d+), `generatedOpCount`\)/.exec(readme);
    expect(m, 'packages/core/README.md no longer says "(N, `generatedOpCount`)": update it or this test').toBeTruthy();
    expect(Number(m![1])).toBe(generatedOpCount);
  });

  it('every kernel of the ext namespace is in its table', () => {
    expect(Object.keys(extOps).filter((name) => !readme.includes(`\`${name}(`))).toEqual([]);
  });
});
