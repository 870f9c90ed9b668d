'use strict';
// The folder of this platform package's native libraries; @mlx/sys finds lib/libmlxc.so on its own.
const { join } = require('node:path');

exports.libraryDir = join(__dirname, 'lib');
exports.libraryPath = join(__dirname, 'lib', 'libmlxc.so');
