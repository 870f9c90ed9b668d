// The public-API test every package runs (packages/*/test/public-api.test.ts): the committed
// api-report.md is the code's, the README's generated index is current, and every runtime export
// is named in the README. When one fails, the surface changed: run `node tools/api-report.mjs`,
// review the report's diff, document new names, and add a changeset.
import { describe, expect, it } from 'vitest';
import { checkPackage } from './api-report.mjs';

export function publicApiTests(packageDir) {
  describe('public API', () => {
    const r = checkPackage(packageDir);

    it('has entry points with runtime exports', () => {
      expect(r.api.entries.length).toBeGreaterThan(0);
      expect(r.api.entries[0].exports.some((x) => x.runtime)).toBe(true);
    });

    it('api-report.md is the report of the code (node tools/api-report.mjs rewrites it)', () => {
      expect(r.committed).toBe(r.report);
    });

    it("the README's generated index is current", () => {
      expect(r.readme).toBe(r.readmeExpected);
    });

    it('every runtime export is named in the README', () => {
      expect(r.missing).toEqual([]);
    });
  });
}
