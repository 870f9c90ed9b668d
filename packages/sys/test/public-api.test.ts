// This package's public API against its committed report and its README (tools/public-api-suite.mjs).
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { publicApiTests } from '../../../tools/public-api-suite.mjs';

publicApiTests(resolve(dirname(fileURLToPath(import.meta.url)), '..'));
