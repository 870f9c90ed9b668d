import { describe, expect, it } from 'vitest';
import { glibcTooOld, glibcVersion, versionAtLeast } from './libc.js';
import { GLIBC_FLOOR, libraryCandidates, platformPackages } from './index.js';

describe('glibc', () => {
  it("reads the same version as Node's diagnostic report", () => {
    const header = (process.report.getReport() as { header?: { glibcVersionRuntime?: string } }).header;
    expect(glibcVersion()).toBe(header?.glibcVersionRuntime ?? null);
  });

  it('compares versions numerically', () => {
    expect(versionAtLeast('2.35', '2.35')).toBe(true);
    expect(versionAtLeast('2.4', '2.35')).toBe(false);
    expect(versionAtLeast('2.100', '2.35')).toBe(true);
    expect(versionAtLeast('3.0', '2.35')).toBe(true);
    expect(versionAtLeast('2.34', '2.35')).toBe(false);
  });

  it('names both versions when the system glibc is older than a package needs', () => {
    expect(glibcTooOld('2.35', '2.36')).toBeUndefined();
    expect(glibcTooOld('2.35', null)).toBeUndefined();
    const why = glibcTooOld('2.35', '2.34');
    expect(why).toMatch(/needs glibc 2\.35 or newer.*this system has glibc 2\.34/);
  });

  it('declares the floor on every Linux package', () => {
    for (const p of platformPackages.filter((q) => q.os === 'linux')) expect(p.glibc).toBe(GLIBC_FLOOR);
    // this machine has a new enough glibc: no candidate is skipped for it
    for (const c of libraryCandidates()) expect(c.skip ?? '').not.toMatch(/glibc/);
  });
});
