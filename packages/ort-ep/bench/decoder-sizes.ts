// What the decoder benchmarks share: the Llama-shaped sizes of decode.ts (random weights, built by
// test/helpers/decoder.ts), and one variant run alone in a process of its own.
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { DecoderConfig } from '../test/helpers/decoder.js';

export const SIZES: Record<string, DecoderConfig> = {
  tiny: { kind: 'llama', layers: 2, hidden: 64, heads: 4, kvHeads: 2, ffn: 128, vocab: 512, maxPositions: 0 },
  small: { kind: 'llama', layers: 4, hidden: 256, heads: 8, kvHeads: 2, ffn: 704, vocab: 8192, maxPositions: 0 },
  // ~110M parameters: the shape the goal names (a ~100M Llama at context 1024).
  '100m': { kind: 'llama', layers: 12, hidden: 768, heads: 12, kvHeads: 4, ffn: 2048, vocab: 32000, maxPositions: 0 },
  // Qwen2.5-0.5B's shape (24 layers, 896 wide, 14 heads over 2 KV heads, SwiGLU 4864, 151936 tokens):
  // with --quant int4 its products are MatMulNBits (block 32), as its int4 exports are.
  'qwen0.5b': { kind: 'llama', layers: 24, hidden: 896, heads: 14, kvHeads: 2, ffn: 4864, vocab: 151936, maxPositions: 0 },
};

const pkg = join(dirname(fileURLToPath(import.meta.url)), '..');

/**
 * Runs `script` (a benchmark's own file) with `--worker` and `args` in a fresh process from the
 * package's folder, and returns the last JSON line it prints, or `{ error }` with its stderr's tail.
 */
export function workerResult(script: string, args: readonly string[]): Record<string, unknown> {
  const r = spawnSync(process.execPath, ['--conditions=source', '--import', 'tsx', script, '--worker', ...args], {
    cwd: pkg,
    encoding: 'utf8',
    timeout: 1_800_000,
  });
  const line = r.stdout
    .trim()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .at(-1);
  if (!line) return { error: (r.stderr || 'no output').trim().split('\n').slice(-3).join(' | ') };
  return JSON.parse(line) as Record<string, unknown>;
}
