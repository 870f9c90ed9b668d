// device 'gpu' where the MLX library has no GPU backend (the default Linux package is MLX's CPU
// build): a specific OrtMlxError at create() naming what to install, not MLX's internal "Cannot
// make gpu stream without gpu backend".
import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { OrtMlxError } from '../../src/index.js';
import { model, node, v } from '../helpers/build.js';
import { ort } from '../helpers/ort.js';

const bytes = model({
  opsets: { '': 18 },
  nodes: [node('Relu', ['x'], ['y'])],
  inputs: [v('x', 'float32', [2])],
  outputs: [v('y', 'float32', [2])],
});

describe.skipIf(mx.gpuAvailable())('device gpu without a GPU backend', () => {
  it('create() refuses it with what to install', async () => {
    const err = await ort.InferenceSession.create(bytes, { executionProviders: [{ name: 'mlx', device: 'gpu' }] } as never).catch((e) => e);
    expect(OrtMlxError.is(err)).toBe(true);
    expect(String(err.message)).toMatch(/device 'gpu' was asked for, but the MLX library loaded .* has no GPU backend/);
    expect(String(err.message)).toMatch(process.platform === 'linux' ? /@mlx\/sys-linux-x64-cuda13/ : /./);
    expect(String(err.message)).not.toMatch(/Cannot make gpu stream/);
  });
});
