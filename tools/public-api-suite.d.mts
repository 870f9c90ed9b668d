/** Registers the public-API tests of the package in `packageDir` (see public-api-suite.mjs). */
export function publicApiTests(packageDir: string): void;
