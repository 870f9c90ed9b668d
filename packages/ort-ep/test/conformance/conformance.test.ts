// The checked-in list of node-suite cases that pass through the mlx backend: a listed case that
// stops passing fails the build, so the list only grows (regenerate it with the conformance script's
// --write-passing after making more cases pass).
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as mx from '@mlx/core';
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

// On a machine whose MLX has a GPU (MLX_BACKEND=cuda tools/dev setup on a CUDA machine, or Metal):
// the GPU list, on device 'gpu', both paths. Where MLX has no GPU (CI's machines) it has nothing to
// run: the list is checked there by the GPU benchmark (bench/gpu.ts, tools/gpu-run.sh check).
const gpuListed = readFileSync(new URL('./gpu-passing.txt', import.meta.url), 'utf8')
  .split('\n')
  .map((l) => l.trim())
  .filter((l) => l && !l.startsWith('#'));
if (existsSync(suite) && mx.gpuAvailable())
  describe('ONNX node suite on the GPU: listed cases keep passing', () => {
    for (const name of gpuListed) {
      it(name, async () => {
        const eager = await runCase(join(suite, name), 'mlx', { compiled: false, device: 'gpu', viaSession: true });
        expect(eager.status === 'pass' ? 'pass' : `eager ${eager.status}: ${eager.detail}`).toBe('pass');
        const compiled = await runCase(join(suite, name), 'mlx', { compiled: true, runs: 3, device: 'gpu', viaSession: true });
        expect(compiled.status === 'pass' ? 'pass' : `compiled ${compiled.status}: ${compiled.detail}`).toBe('pass');
      });
    }
  });
