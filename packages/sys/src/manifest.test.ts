import { describe, expect, it } from 'vitest';
import { sysVersion } from './index.js';
import { ownManifestVersion } from './manifest.js';

describe('own version', () => {
  it("is read from @mlx/sys's own package.json", () => {
    expect(sysVersion()).toMatch(/^\d+\.\d+\.\d+/);
  });

  it("is null for another package's manifest (this code bundled into an application)", () => {
    expect(ownManifestVersion({ name: 'my-app', version: '0.1.0' })).toBeNull();
    expect(ownManifestVersion({ version: '0.1.0' })).toBeNull();
    expect(ownManifestVersion(null)).toBeNull();
    expect(ownManifestVersion({ name: '@mlx/sys', version: '1.2.3' })).toBe('1.2.3');
  });
});
