// The read-only shared data (ONNX node suite, real models) lives beside the repository in
// ../shared. Tests that need it fail with this message where it is missing: a suite that skips
// itself silently would let CI pass without checking anything.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** `<repo>/../shared/<sub>`. */
export function sharedPath(sub: string): string {
  return fileURLToPath(new URL(`../../../../../shared/${sub}`, import.meta.url));
}

export function missingShared(path: string): string {
  return `${path} is missing: these tests need the read-only shared data (the ONNX node suite and the real models) in a folder named shared beside the repository`;
}

/** Fails the calling test with a clear message when `path` does not exist. */
export function expectShared(path: string): void {
  if (!existsSync(path)) throw new Error(missingShared(path));
}
