// Shared vitest settings: workspace packages resolve to their TypeScript sources, so tests run
// without a build step (`pnpm -r test` works on a fresh clone after set-up).
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

const src = (p: string) => fileURLToPath(new URL(`./packages/${p}/src/index.ts`, import.meta.url));

export const sharedConfig = defineConfig({
  resolve: {
    alias: {
      '@mlx/sys': src('sys'),
      '@mlx/core': src('core'),
      '@mlx/kernels': src('kernels'),
    },
  },
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // koffi and MLX are process-global; one fork per file keeps native state isolated.
    pool: 'forks',
    fileParallelism: false,
    // The JSON report feeds tools/test-summary.mjs, which prints the closing totals line.
    reporters: ['default', ['json', { outputFile: 'reports/vitest.json' }]],
  },
});
