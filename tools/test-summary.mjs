// Adds up the vitest JSON reports of every package and prints one closing line:
// "N passed, N failed, N skipped". Exits 1 when a package has no report (its tests did not run).
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
let passed = 0,
  failed = 0,
  skipped = 0,
  missing = [];
for (const pkg of readdirSync(join(root, 'packages'))) {
  const report = join(root, 'packages', pkg, 'reports', 'vitest.json');
  if (!existsSync(report)) {
    missing.push(pkg);
    continue;
  }
  const r = JSON.parse(readFileSync(report, 'utf8'));
  passed += r.numPassedTests;
  failed += r.numFailedTests;
  skipped += r.numPendingTests + (r.numTodoTests ?? 0);
  console.log(
    `@mlx/${pkg}: ${r.numPassedTests} passed, ${r.numFailedTests} failed, ${r.numPendingTests} skipped (${r.numTotalTestSuites} suites)`,
  );
}
// --consumer: tools/consumer-test.mjs's steps count as tests (its report must exist).
if (process.argv.includes('--consumer')) {
  const report = join(root, 'reports', 'consumer-test.json');
  if (!existsSync(report)) missing.push('consumer test');
  else {
    const r = JSON.parse(readFileSync(report, 'utf8'));
    passed += r.passed;
    failed += r.failed;
    console.log(`consumer test: ${r.passed} passed, ${r.failed} failed (${r.secs} s)`);
  }
}
if (missing.length) console.log(`no test report from: ${missing.join(', ')}`);
console.log(`${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed || missing.length ? 1 : 0);
