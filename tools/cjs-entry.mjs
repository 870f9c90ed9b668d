// Writes a package's CommonJS entries next to its ESM build: dist/<entry>.cjs requires the ES
// module (require(esm), Node 20.19+), so CommonJS and ESM users share one module instance (and one
// loaded native library); dist/<entry>.d.cts gives CommonJS users the same types. Run from the
// package folder after tsc (each package's `build`), with the entry names (default: index).
import { readFileSync, writeFileSync } from 'node:fs';

const { name: pkgName, engines } = JSON.parse(readFileSync('package.json', 'utf8'));
const entries = process.argv.slice(2);
for (const name of entries.length ? entries : ['index']) {
  writeFileSync(
    `dist/${name}.cjs`,
    `'use strict';
// CommonJS entry: the ES module itself (require(esm): Node 20.19+ and 22.12+), so both module
// systems share one instance. Where Node cannot require an ES module, a clear error says so.
try {
  module.exports = require('./${name}.js');
} catch (e) {
  if (e && (e.code === 'ERR_REQUIRE_ESM')) {
    throw new Error(
      '${pkgName} from CommonJS (require) needs a Node that can require ES modules: ${engines.node} (this is Node ' +
        process.versions.node + '). Use import, or a newer Node.',
      { cause: e },
    );
  }
  throw e;
}
`,
  );
  writeFileSync(`dist/${name}.d.cts`, `export * from './${name}.js';\n`);
}
