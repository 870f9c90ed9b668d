import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { version } from './index.js';

describe('version', () => {
  it('is the version of the pinned MLX wheel the library was built against', () => {
    const pinned = JSON.parse(readFileSync(new URL('../../sys/mlx-wheel.json', import.meta.url), 'utf8')).version as string;
    expect(version()).toBe(pinned);
  });
});
