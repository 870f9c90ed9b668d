import { defineConfig, mergeConfig } from 'vitest/config';
import { sharedConfig } from '../../vitest.shared.js';

// The op, API, conformance and model tests measure MLX itself: a node MLX refuses must fail
// there, not pass through onnxruntime. Fallback tests ask for fallback: 'cpu' explicitly.
export default mergeConfig(sharedConfig, defineConfig({ test: { env: { MLX_ORT_FALLBACK: 'none' } } }));
