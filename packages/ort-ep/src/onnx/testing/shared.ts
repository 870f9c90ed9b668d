// Where the read-only shared data (../shared beside the repository) is, when this checkout has it.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** `<repo>/../shared/<sub>`, or undefined where it is not there (tests that need it skip). */
export function sharedDir(sub: string): string | undefined {
  const dir = fileURLToPath(new URL(`../../../../../../shared/${sub}`, import.meta.url));
  return existsSync(dir) ? dir : undefined;
}
