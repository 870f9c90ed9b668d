// The checked-in list of node-suite cases that pass through the mlx backend: a listed case that
// stops passing fails the build, so the list only grows (regenerate it with the conformance script's
// --write-passing after making more cases pass).
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { expectShared, sharedPath } from '../helpers/shared.js';
import { runCase } from './runner.js';

const suite = sharedPath('onnx-node-tests/v1.22.0');
const listed = readFileSync(new URL('./passing.txt', import.meta.url), 'utf8')
  .split('\n')
  .map((l) => l.trim())
  .filter((l) => l && !l.startsWith('#'));

describe('ONNX node suite: listed cases keep passing', () => {
  it('the suite is there and the list is not empty', () => {
    expectShared(suite);
    expect(listed.length).toBeGreaterThan(0);
  });
  if (!existsSync(suite)) return;
  // Both paths: eager (one run) and compiled (first run analysed, second traced, third replayed).
  // Fusion is off here: on the CPU each fused kernel is built with g++, which the shared-model
  // tests exercise instead.
  process.env.MLX_ORT_FUSION = '0';
  for (const name of listed) {
    it(name, async () => {
      const eager = await runCase(join(suite, name), 'mlx', { compiled: false });
      expect(eager.status === 'pass' ? 'pass' : `eager ${eager.status}: ${eager.detail}`).toBe('pass');
      const compiled = await runCase(join(suite, name), 'mlx', { compiled: true, runs: 3 });
      expect(compiled.status === 'pass' ? 'pass' : `compiled ${compiled.status}: ${compiled.detail}`).toBe('pass');
    });
  }
});
