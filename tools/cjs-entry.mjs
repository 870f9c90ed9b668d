// Writes a package's CommonJS entry next to its ESM build: dist/index.cjs requires the ES module
// (require(esm), Node 20.19+), so CommonJS and ESM users share one module instance (and one loaded
// native library); dist/index.d.cts gives CommonJS users the same types. Run from the package folder
// after tsc (each package's `build`).
import { writeFileSync } from 'node:fs';

writeFileSync(
  'dist/index.cjs',
  `'use strict';\n// CommonJS entry: the ES module itself (require(esm), Node 20.19+), so both module systems share one instance.\nmodule.exports = require('./index.js');\n`,
);
writeFileSync('dist/index.d.cts', `export * from './index.js';\n`);
