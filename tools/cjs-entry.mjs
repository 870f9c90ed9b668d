// Writes a package's CommonJS entries next to its ESM build: dist/<entry>.cjs requires the ES
// module (require(esm), Node 20.19+), so CommonJS and ESM users share one module instance (and one
// loaded native library); dist/<entry>.d.cts gives CommonJS users the same types. Run from the
// package folder after tsc (each package's `build`), with the entry names (default: index).
import { writeFileSync } from 'node:fs';

const entries = process.argv.slice(2);
for (const name of entries.length ? entries : ['index']) {
  writeFileSync(
    `dist/${name}.cjs`,
    `'use strict';\n// CommonJS entry: the ES module itself (require(esm), Node 20.19+), so both module systems share one instance.\nmodule.exports = require('./${name}.js');\n`,
  );
  writeFileSync(`dist/${name}.d.cts`, `export * from './${name}.js';\n`);
}
